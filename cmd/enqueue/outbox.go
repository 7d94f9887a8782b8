package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// outboxUsage lists the outbox subcommands.
const outboxUsage = `usage: enqueue outbox <subcommand> [flags]

subcommands:
  check    list a table's outbox rows with their status, read-only (exit 1 on poisoned or stale
           rows and old fences): -table T [-pk P] [-older-than 1h]
  purge    delete the stale rows and old fences check reports; a dry run unless -yes:
           -table T [-pk P] [-older-than 1h] [-yes]

Run 'enqueue outbox <subcommand> -h' for its flags.
`

// runOutbox runs one outbox subcommand and returns its name for error
// messages ("outbox check").
func (m *Main) runOutbox(ctx context.Context, args []string) (string, error) {
	return m.runGroup(ctx, "outbox", outboxUsage, map[string]func(context.Context, []string) error{
		"check": m.outboxCheck, "purge": m.outboxPurge,
	}, args)
}

// The statuses of an outbox row (see classify).
const (
	statusWaiting  = "waiting"   // committed, younger than -older-than: its job has not finished yet
	statusStale    = "stale"     // committed, older: its job is lost, or still retrying or continuing
	statusPoisoned = "poisoned"  // its job's operation has a poisoned record
	statusFence    = "fence"     // a dropped job's fence
	statusOldFence = "old-fence" // a fence older than -older-than: the worker did not remove it
)

// defaultOutboxAge is -older-than's default: the longest commit window
// (jobs.MaxOutboxWindow). A job waits at most its window for its row; a
// committed row older than this belongs to a job that has been runnable
// for a while.
const defaultOutboxAge = jobs.MaxOutboxWindow

// Bounds of -older-than: check may look at any age from a minute; purge
// deletes what is older, and a committed row's job may still be waiting
// its turn, so it refuses less than the longest window.
const (
	minCheckAge = time.Minute
	minPurgeAge = jobs.MaxOutboxWindow
)

// outboxFlags are the flags check and purge share.
type outboxFlags struct {
	c         common
	table, pk string
	older     time.Duration
}

// flagSet returns the flag set of an outbox subcommand with the shared
// flags registered.
func (o *outboxFlags) flagSet(m *Main, name, line, about string) *flag.FlagSet {
	fs := m.newFlagSet(name, line, about, &o.c)
	fs.StringVar(&o.table, "table", "", "the application's table whose outbox rows to read (required)")
	fs.StringVar(&o.pk, "pk", "", "only the rows of this partition (a partition query; without it the service reads the whole table)")
	cli.DurationVar(fs, &o.older, "older-than", defaultOutboxAge, "age past which a committed row is stale and a fence old: a Go duration (90m) or days (2d);\n"+
		"above the longest job (continuations included) and the workers' -outbox-hold")
	return fs
}

// parse parses args and checks the shared flags; minAge is the least
// -older-than the subcommand accepts, and why says why.
func (o *outboxFlags) parse(m *Main, fs *flag.FlagSet, args []string, minAge time.Duration, why string) error {
	if err := m.parseNoArgs(fs, &o.c, args); err != nil {
		return err
	}
	if err := checkTableFlag(o.table); err != nil {
		return err
	}
	if visited(fs)["pk"] {
		if err := storeadapter.ValidateKey("pk", o.pk); err != nil {
			return usagef("-pk: %v", err)
		}
	}
	if d := o.older; d < minAge {
		return usagef("-older-than: must be at least %v (%s), got %v", minAge, why, d)
	}
	return nil
}

// where names the rows read: "Employees" or "Employees partition Sales".
func (o *outboxFlags) where() string {
	if o.pk == "" {
		return o.table
	}
	return o.table + " partition " + o.pk
}

// outboxRow is one outbox row as check and purge print it (-o json: one
// item of "rows").
type outboxRow struct {
	Status string `json:"status"`
	PK     string `json:"pk"`
	RK     string `json:"rk"`
	OpID   string `json:"opId"`
	// Kind, Queue, MessageID and WindowSeconds are what the transaction
	// wrote (a fence has none of them).
	Kind          string `json:"kind,omitempty"`
	Queue         string `json:"queue,omitempty"`
	MessageID     string `json:"messageId,omitempty"`
	WindowSeconds int64  `json:"windowSeconds,omitempty"`
	// Written is the row's Timestamp (the service's clock): the commit,
	// or the fence's write. AgeSeconds is now minus Written.
	Written    time.Time `json:"written"`
	AgeSeconds int64     `json:"ageSeconds"`
	Detail     string    `json:"detail"`
	// Action is what purge did, or would do, with the row.
	Action string `json:"action,omitempty"`
	etag   string
}

// flagged reports whether a row's status makes check fail.
func (r outboxRow) flagged() bool {
	return r.Status == statusStale || r.Status == statusPoisoned || r.Status == statusOldFence
}

// outboxSummary counts the rows read by status.
type outboxSummary struct {
	Rows     int `json:"rows"`
	Waiting  int `json:"waiting"`
	Stale    int `json:"stale"`
	Poisoned int `json:"poisoned"`
	Fences   int `json:"fences"`
	OldFence int `json:"oldFences"`
	Problems int `json:"problems"`
}

// add counts r.
func (s *outboxSummary) add(r outboxRow) {
	s.Rows++
	switch r.Status {
	case statusWaiting:
		s.Waiting++
	case statusStale:
		s.Stale++
	case statusPoisoned:
		s.Poisoned++
	case statusFence:
		s.Fences++
	case statusOldFence:
		s.OldFence++
	}
	if r.flagged() {
		s.Problems++
	}
}

// String says it in words: "3 rows: 1 waiting, 1 stale, …".
func (s outboxSummary) String() string {
	return fmt.Sprintf("%d rows: %d waiting, %d stale, %d poisoned, %d fences, %d old fences",
		s.Rows, s.Waiting, s.Stale, s.Poisoned, s.Fences, s.OldFence)
}

// outboxScan reads the outbox rows of a table (or a partition) page by
// page and classifies each as it comes: one query per 1,000 rows, and per
// work queue met, one pass over its poisoned records.
type outboxScan struct {
	m     *Main
	store storeadapter.Store
	o     *outboxFlags
	now   time.Time
	// poisoned holds, by work queue, the operation ids of its poisoned
	// records, read when a row of that queue first needs them.
	poisoned map[string]map[string]bool
}

// newOutboxScan connects and returns the scan of o's rows.
func (m *Main) newOutboxScan(o *outboxFlags) (*outboxScan, error) {
	store, err := m.connect(&o.c)
	if err != nil {
		return nil, err
	}
	return &outboxScan{m: m, store: store, o: o, now: m.now(), poisoned: map[string]map[string]bool{}}, nil
}

// outboxSelect are the properties a scan reads.
var outboxSelect = []string{jobs.OutboxKind, jobs.OutboxQueue, jobs.OutboxMessage, jobs.OutboxWindow, jobs.OutboxFenced}

// each calls fn with every outbox row, classified, in key order. A
// missing table is an error: a mistyped -table is not "no rows".
func (s *outboxScan) each(ctx context.Context, fn func(outboxRow) error) error {
	q := storeadapter.Query{Filter: jobs.OutboxRows(s.o.pk), Select: outboxSelect}
	for {
		page, err := s.store.Tables().Query(ctx, s.o.table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return fmt.Errorf("table %s does not exist (check -table)", s.o.table)
		}
		if err != nil {
			return err
		}
		for _, e := range page.Entities {
			r, err := s.classify(ctx, e)
			if err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		q.Continuation = page.Next
	}
}

// classify returns a row with its status: a fence is "fence", or
// "old-fence" past -older-than; a committed row is "poisoned" when its
// operation has a poisoned record on its work queue, else "waiting" or,
// past -older-than, "stale".
func (s *outboxScan) classify(ctx context.Context, e storeadapter.Entity) (outboxRow, error) {
	p := e.Properties
	str := func(name string) string { v, _ := p[name].(string); return v }
	age := max(s.now.Sub(e.Timestamp), 0)
	r := outboxRow{PK: e.PartitionKey, RK: e.RowKey, OpID: strings.TrimPrefix(e.RowKey, jobs.OutboxPrefix),
		Kind: str(jobs.OutboxKind), Queue: str(jobs.OutboxQueue), MessageID: str(jobs.OutboxMessage),
		Written: e.Timestamp.UTC(), AgeSeconds: int64(age / time.Second), etag: e.ETag}
	r.WindowSeconds, _ = p[jobs.OutboxWindow].(int64)
	old := age >= s.o.older
	if jobs.OutboxRowState(e) == jobs.OutboxFence {
		r.Status, r.Detail = statusFence, "a dropped job's fence: the workers remove it after their -outbox-hold"
		if old {
			r.Status, r.Detail = statusOldFence, "a dropped job's fence the workers did not remove (its message was lost or deleted): purge removes it"
		}
		return r, nil
	}
	poisoned, note, err := s.isPoisoned(ctx, r.Queue, r.OpID)
	switch {
	case err != nil:
		return r, err
	case poisoned:
		r.Status, r.Detail = statusPoisoned, fmt.Sprintf("its job is poisoned (enqueue poison show %s -queue %s): poison requeue runs it; poison delete gives it up, then purge the row", r.OpID, r.Queue)
	case !old:
		r.Status, r.Detail = statusWaiting, "committed; its job has not finished yet"
	default:
		r.Status, r.Detail = statusStale, fmt.Sprintf("its job has not finished in %v: lost (its message expired or was deleted), or still retrying or continuing (see the workers' logs for outbox=%s/%s/%s)",
			age.Round(time.Second), s.o.table, r.PK, r.RK)
	}
	if note != "" {
		r.Detail += "; " + note
	}
	return r, nil
}

// isPoisoned reports whether work queue q has a poisoned record of
// operation op, reading q's poisoned records once per scan. A row whose
// queue is not a valid name (rows are written by producers) cannot be
// looked up: note says so.
func (s *outboxScan) isPoisoned(ctx context.Context, q, op string) (poisoned bool, note string, err error) {
	ops, ok := s.poisoned[q]
	if !ok {
		ins, err := cli.PoisonInspector(s.store, q, s.m.Clock)
		if err != nil {
			return false, fmt.Sprintf("its queue %q cannot be looked up: %v", q, err), nil
		}
		if ops, err = ins.PoisonedOps(ctx); err != nil {
			return false, "", err
		}
		s.poisoned[q] = ops
	}
	return ops[op], "", nil
}

// outboxOutput prints the rows of check or purge as they come, then a
// summary, or how the scan failed.
type outboxOutput interface {
	row(r outboxRow) error
	end(key string, v any) error
}

// outboxTable prints rows as an aligned table (see blockTable); end
// prints a line (v, a string) for "summary" and nothing for "error".
type outboxTable struct {
	blockTable
	w      io.Writer
	action bool // purge: an ACTION column first
}

func (t *outboxTable) row(r outboxRow) error {
	head := []string{"STATUS", "AGE", "PK", "OP ID", "KIND", "QUEUE", "MESSAGE ID", "DETAIL"}
	cells := []string{r.Status, (time.Duration(r.AgeSeconds) * time.Second).String(), r.PK, r.OpID, r.Kind, r.Queue, r.MessageID, r.Detail}
	if t.action {
		head, cells = append([]string{"ACTION"}, head...), append([]string{r.Action}, cells...)
	}
	return t.blockTable.row(head, cells...)
}

func (t *outboxTable) end(key string, v any) error {
	if err := t.flush(); err != nil || key != "summary" {
		return err
	}
	_, err := fmt.Fprintln(t.w, v)
	return err
}

// outboxJSON streams one JSON document (see jsonStream):
//
//	{"table": …, "pk": …, "olderThan": …, "rows": [ … ], "summary": { … }}
//
// or "error" in place of "summary" when the scan fails part way.
type outboxJSON struct{ *jsonStream }

func (j outboxJSON) row(r outboxRow) error { return j.item(r) }

// outboxOutput returns the output of o's format; purge adds its fields
// and the ACTION column.
func (m *Main) outboxOutput(o *outboxFlags, purge bool, fields ...jsonField) outboxOutput {
	if o.c.json() {
		head := []jsonField{{"table", o.table}}
		if o.pk != "" {
			head = append(head, jsonField{"pk", o.pk})
		}
		head = append(head, jsonField{"olderThan", o.older.String()})
		return outboxJSON{newJSONStream(m.Stdout, "rows", append(head, fields...)...)}
	}
	return &outboxTable{blockTable: newBlockTable(m.Stdout), w: m.Stdout, action: purge}
}

// finish ends an output after a scan: with "error" (its text scrubbed,
// as it goes to stdout too) when the scan failed, else with the summary.
func (m *Main) finish(out outboxOutput, scanErr error, summary any) error {
	if scanErr != nil {
		return errors.Join(scanErr, out.end("error", m.redact(scanErr.Error())))
	}
	return out.end("summary", summary)
}

// outboxCheck lists a table's outbox rows with their status, read-only,
// and fails (exit status 1) when some need attention.
func (m *Main) outboxCheck(ctx context.Context, args []string) error {
	var o outboxFlags
	fs := o.flagSet(m, "outbox check", "outbox check -table T [-pk P] [-older-than 1h] [flags]",
		"Lists the outbox rows of table -table (of partition -pk), read-only: the rows transactional enqueues\n"+
			"(client.Tx) commit with the application's writes, each until its job is done. Each row's status:\n"+
			"  waiting    committed less than -older-than ago; its job has not finished yet\n"+
			"  stale      committed longer ago and its job has not finished: lost (its message expired or was\n"+
			"             deleted), or still retrying or continuing\n"+
			"  poisoned   its job's work queue (the row's QUEUE, whatever -queue says) holds a poisoned record of\n"+
			"             its operation: requeue it (it runs and removes the row) or delete it (then purge the row)\n"+
			"  fence      a fence: its transaction never committed and the job was dropped; the workers remove it\n"+
			"             after their -outbox-hold\n"+
			"  old-fence  a fence older than -older-than: the workers did not remove it\n"+
			"The age is now minus the row's Timestamp (the service's clock). The exit status is 1 when there are\n"+
			"stale, poisoned or old-fence rows; 'enqueue outbox purge' deletes the stale ones and old fences.\n"+
			"Costs: one query per 1,000 outbox rows (with -pk, of one partition; without it the service reads the\n"+
			"whole table, and may answer with empty pages), and for the rows of each work queue met, one query per\n"+
			"1,000 poisoned records of that queue (read once). -o json prints one JSON document, streamed.")
	if err := o.parse(m, fs, args, minCheckAge, "younger rows are still waiting for their job"); err != nil {
		return err
	}
	scan, err := m.newOutboxScan(&o)
	if err != nil {
		return err
	}
	out := m.outboxOutput(&o, false)
	var sum outboxSummary
	err = scan.each(ctx, func(r outboxRow) error {
		sum.add(r)
		return out.row(r)
	})
	var summary any = fmt.Sprintf("outbox of %s: %s", o.where(), sum)
	if o.c.json() {
		summary = sum
	}
	if err := m.finish(out, err, summary); err != nil {
		return err
	}
	if sum.Problems > 0 {
		return fmt.Errorf("outbox of %s: %d rows need attention (%d stale, %d poisoned, %d old fences)", o.where(), sum.Problems, sum.Stale, sum.Poisoned, sum.OldFence)
	}
	return nil
}

// purgeSummary is what outbox purge did: rows read, rows it deleted (or,
// in a dry run, would delete), rows changed or gone meanwhile, and
// poisoned rows kept.
type purgeSummary struct {
	Rows     int  `json:"rows"`
	DryRun   bool `json:"-"` // the document says it
	Selected int  `json:"selected"`
	Deleted  int  `json:"deleted"`
	Raced    int  `json:"raced"`
	Poisoned int  `json:"poisonedKept"`
}

// text says it in words.
func (s purgeSummary) text(where string) string {
	kept := ""
	if s.Poisoned > 0 {
		kept = fmt.Sprintf("; %d poisoned rows kept (requeue or delete their poison records first)", s.Poisoned)
	}
	if s.DryRun {
		return fmt.Sprintf("dry run: %d of %d outbox rows of %s would be deleted (run again with -yes)%s", s.Selected, s.Rows, where, kept)
	}
	raced := ""
	if s.Raced > 0 {
		raced = fmt.Sprintf(" (%d changed or gone meanwhile, left)", s.Raced)
	}
	return fmt.Sprintf("deleted %d of %d outbox rows of %s%s%s", s.Deleted, s.Rows, where, raced, kept)
}

// outboxPurge deletes the stale rows and old fences check reports, If-Match
// each; a dry run unless -yes.
func (m *Main) outboxPurge(ctx context.Context, args []string) error {
	var (
		o   outboxFlags
		yes bool
	)
	fs := o.flagSet(m, "outbox purge", "outbox purge -table T [-pk P] [-older-than 1h] [-yes] [flags]",
		"Deletes, with -yes, the outbox rows of table -table (of partition -pk) that 'outbox check' reports\n"+
			"stale or old-fence, and prints each with what it did; without -yes it deletes nothing and prints what\n"+
			"it would delete. A stale row's job that is still retrying or continuing is dropped at its next\n"+
			"delivery (its row is gone), so -older-than must exceed the longest job, continuations included (at\n"+
			"least 1h). Poisoned rows are kept: a requeued job needs its row to run; requeue or delete the poison\n"+
			"record first. Each delete is If-Match the row read: a row changed or gone meanwhile stays and is\n"+
			"counted. Costs: check's, and one delete per row deleted.")
	fs.BoolVar(&yes, "yes", false, "delete them (default: a dry run that lists them)")
	if err := o.parse(m, fs, args, minPurgeAge, "a younger row's job may still be waiting its turn: deleting its row drops it"); err != nil {
		return err
	}
	scan, err := m.newOutboxScan(&o)
	if err != nil {
		return err
	}
	out := m.outboxOutput(&o, true, jsonField{"dryRun", !yes})
	sum := purgeSummary{DryRun: !yes}
	err = scan.each(ctx, func(r outboxRow) error {
		sum.Rows++
		switch {
		case r.Status == statusPoisoned:
			sum.Poisoned++
			r.Action = "kept"
		case !r.flagged():
			return nil
		case !yes:
			sum.Selected++
			r.Action = "would delete"
		default:
			sum.Selected++
			derr := scan.store.Tables().DeleteEntity(ctx, o.table, r.PK, r.RK, r.etag)
			switch {
			case derr == nil:
				sum.Deleted++
				r.Action = "deleted"
			case errors.Is(derr, storeadapter.ErrNotFound), errors.Is(derr, storeadapter.ErrPreconditionFailed):
				sum.Raced++
				r.Action = "changed, left"
			default:
				return fmt.Errorf("delete %s %s/%s: %w", o.table, r.PK, r.RK, derr)
			}
		}
		return out.row(r)
	})
	var summary any = sum.text(o.where())
	if o.c.json() {
		summary = sum
	}
	return m.finish(out, err, summary)
}
