package purge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// Kind is the envelope kind of purges.
const Kind = "purge"

// checkpointStep names a purge's checkpoint.
const checkpointStep = "purge"

// maxRounds bounds how often one batch is read again and retried after
// its transaction lost to another writer (rows changed or deleted since
// the page was read) before the job fails and is retried later.
const maxRounds = 5

// Args are the arguments of a purge (docs/purge.md documents them). Table
// alone selects every entity of the table; PK one partition; PK with
// RKFrom and/or RKTo the half-open RowKey range [RKFrom, RKTo) in Azure's
// key order (a nil or empty bound is open), as the export kind's source.
// OlderThan keeps only the entities whose Timestamp is older than the
// storage service's time at the first delivery (its checkpoint's create)
// minus OlderThan.
type Args struct {
	Table     string         `json:"table"`
	PK        *string        `json:"pk,omitempty"`
	RKFrom    *string        `json:"rkFrom,omitempty"`
	RKTo      *string        `json:"rkTo,omitempty"`
	OlderThan *jobs.Duration `json:"olderThan,omitempty"`
}

// Kind returns "purge".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := a.source().Validate(); err != nil {
		return fmt.Errorf("args.%w", err)
	}
	if a.OlderThan != nil && *a.OlderThan <= 0 {
		return fmt.Errorf(`args.olderThan: must be a positive duration such as "720h", got %v`, time.Duration(*a.OlderThan))
	}
	return nil
}

func (a Args) source() storeadapter.Range {
	return storeadapter.Range{Table: a.Table, PK: a.PK, RKFrom: a.RKFrom, RKTo: a.RKTo}
}

// stateVersion is the "v" of the checkpoints of purges without
// olderThan; stateVersionServiceCutoff that of purges with it, whose
// cut-off is the storage service's time (see serviceCutoff): a release
// that knows only version 1 refuses them (a transient error) rather than
// purge with no cut-off while CutoffPending holds it. Both are read.
const (
	stateVersion              = 1
	stateVersionServiceCutoff = 2
)

// state is a purge's checkpoint, stored as JSON in its token.
type state struct {
	V int `json:"v"`
	// Args is the SHA-256 of the arguments that began the purge (see
	// idempotent.Digest): a message that reuses the operation id with other
	// arguments is refused instead of resuming another purge's scan.
	Args string `json:"args,omitempty"`
	// Cutoff is fixed by the first delivery: with olderThan, entities
	// whose Timestamp is before it match; nil without olderThan.
	Cutoff *time.Time `json:"cutoff,omitempty"`
	// CutoffPending is set, with olderThan, from the checkpoint's create
	// until its first save, which writes Cutoff: meanwhile the cut-off is
	// the checkpoint's Timestamp (the service's time of the create) minus
	// olderThan (see serviceCutoff).
	CutoffPending bool `json:"cutoffPending,omitempty"`
	// Token is the continuation of the scan after the last page whose
	// deletes are all done ("" before the first page).
	Token string `json:"token,omitempty"`
	// Last is the key of the last entity of that page (for operators).
	Last *storeadapter.Key `json:"last,omitempty"`
	// Deleted counts the entities deleted by the saved pages, Batches the
	// transactions that deleted them, Pages the query pages read.
	Deleted int64 `json:"deleted"`
	Batches int64 `json:"batches"`
	Pages   int64 `json:"pages"`
	// Unindexed counts the deleted entities removed from the table's
	// indexes.
	Unindexed int64 `json:"unindexed,omitempty"`
	// Done is set with the last page: a later delivery does nothing.
	Done bool `json:"done,omitempty"`
}

// Worker deletes the entities of a table, partition or RowKey range (all,
// or those older than a duration): the handler of the "purge" kind, the
// fallback of the high-volume delete pattern for tables that do not keep
// one table per day. Its steps:
//
//  1. Load the checkpoint (operation id, "purge"); one written for other
//     arguments (their digest differs: the id reused) is a permanent
//     error. Done: record "already done" and return. None: read the
//     first page (a missing table fails here, permanently, before
//     anything is written; with olderThan, by the worker's clock, and
//     read again below) and create the checkpoint with an insert; a
//     delivery that loses the insert takes the winner's checkpoint (its
//     cut-off) and reads again from its position. With olderThan the
//     checkpoint is created CutoffPending, and the cut-off is the
//     checkpoint's Timestamp (the service's time of the create) minus
//     olderThan, derived by every delivery alike until the first save
//     writes it (see serviceCutoff).
//  2. Read the next page of the query — the source's keys (PartitionKey
//     eq, RowKey ge/lt) and, with olderThan, Timestamp lt the cut-off,
//     built with storeadapter's filter helpers — from the checkpoint's
//     continuation token, at most PageSize entities, keys and ETags only.
//     The page after it is read meanwhile, while step 3 runs (see
//     Overlap in overlap.go); it is used when the save of step 5 leaves
//     the checkpoint at its token, and dropped otherwise.
//  3. Delete the page's rows in entity group transactions of up to 100
//     rows of one partition in key order (idempotent.Batches), each delete
//     If-Match the ETag the page returned, Config.Transactions of them at
//     once (disjoint rows: the order between them does not matter); step
//     4 waits for all of them. Never an unconditional delete.
//     A transaction that fails because a row was deleted (404) or changed
//     (412) since the page was read rolled back; one query of the
//     batch's key span with the purge's own filter reads the rows that
//     still match, with their current ETags: rows it does not return are
//     gone or no longer match (an update moved their Timestamp past the
//     cut-off) and are dropped; rows it returns are deleted with their
//     current ETag (without olderThan an updated row still matches). The
//     rest of the batch is retried, at most maxRounds times.
//  4. When the table has declared indexes (the config's "index"
//     section), remove the entities deleted from them: indexes.Set.Sync
//     over the span from the saved position (the previous page's last
//     row; the source's start) through this page's last row (the
//     source's end with the last page), in batches. The span starts at
//     the saved position, not at this page's first row, because rows a
//     crashed delivery deleted after that position are in no page any
//     more, while their membership records are in the span.
//  5. Save the checkpoint If-Match its ETag: the page's continuation
//     token, its last key, the counts, and done when the query has no
//     next page. A save that loses (another delivery of the operation
//     saved first) writes nothing; the run reloads the checkpoint and goes
//     on from the winner's position.
//  6. Done: record "deleted N entities in B batches over P pages" and
//     return. Budget spent: return jobs.ContinueLater(0, …); the
//     continuation resumes at step 2. Else go to step 2.
//
// Reserved rows (storeadapter.ReservedPrefix: index entries, membership
// records, outbox rows) are never deleted by step 3: the query leaves them
// out; step 4 changes them through the index library only.
//
// Memory holds one page of keys (and one batch's re-read) at a time,
// whatever the number of matching entities.
//
// Crash positions: before the create nothing is written; the redelivery
// starts afresh with a new cut-off. After the create the cut-off is fixed,
// so every later delivery, continuation or redelivery deletes the same
// set. A crash during step 3 or 4 or before the save of step 5 leaves the
// checkpoint at the previous page: the redelivery reads that page again,
// where the rows already deleted are no longer returned and the others
// are deleted, and its step 4 covers the span from the saved position, so
// the rows deleted before the crash leave the indexes too. After the
// save the redelivery goes on with the next page.
// After the done save a redelivery only reports "already done". A table
// deleted by someone else after the checkpoint exists holds nothing to
// purge: the delivery marks the checkpoint done and reports it gone. The
// counts are those of the saved pages, so rows deleted by a run that
// crashed before its save are not counted (they are gone either way).
//
// Two deliveries of one operation (a redelivery after a lost lease, or a
// continuation and the redelivery of the message it came from): each row
// is deleted by one transaction only, since every delete is If-Match; the
// other's transaction fails (404), its re-read drops those rows and it
// goes on. Every checkpoint write is a compare-and-swap from the state the
// writer read, so the position only moves forward; the loser reloads and
// continues from the winner's further position. Writers of the
// application: a row updated after the page was read fails its delete
// with 412 and is deleted only if it still matches (with olderThan it
// does not: its new Timestamp is after the cut-off), so an entity written
// after the purge's cut-off is never deleted; a row inserted behind the
// scan's position, or after the cut-off, stays.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the purge worker on store, configured by cfg (its defaults
// filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work runs the purge job.Args names (see Worker).
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	if strings.EqualFold(a.Table, w.cfg.CheckpointTable) {
		return jobs.Permanentf("purge: args.table: %s is the purge's own checkpoint table (purge.checkpointTable)", a.Table)
	}
	p := &purger{w: w, args: a, opID: job.ID, budget: w.Budget(w.cfg.TimeBudget)}
	err := p.run(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errMissingTable):
		return jobs.Permanentf("purge: args.table: table %s does not exist", a.Table)
	case errors.Is(err, errOtherArgs):
		return jobs.Permanentf("purge: envelope id: %s was used by a purge of other arguments, whose checkpoint it holds: give this purge a new operation id", job.ID)
	case errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge):
		return jobs.Permanent(fmt.Errorf("purge: %w", err))
	}
	if _, ok := jobs.AsContinue(err); ok {
		return err
	}
	return fmt.Errorf("purge: %w", err)
}

// Result is the summary of a finished purge, as the worker logs it.
func Result(deleted, batches, pages int64) string {
	return fmt.Sprintf("deleted %d entities in %d batches over %d pages", deleted, batches, pages)
}

// purger carries one delivery of a purge.
type purger struct {
	w      *Worker
	args   Args
	opID   string
	budget jobs.Budget
	st     state // the checkpoint as last read or written
	cell   *idempotent.Cell[state]
}

// errMissingTable marks a call on the purged table that found no table
// (a missing checkpoint table is no such error: the create makes it).
var errMissingTable = errors.New("the purged table does not exist")

// tableErr wraps the error of a call on the purged table.
func (p *purger) tableErr(what string, err error) error {
	if errors.Is(err, storeadapter.ErrTableNotFound) {
		return fmt.Errorf("%s %s: %w: %w", what, p.args.Table, errMissingTable, err)
	}
	return fmt.Errorf("%s %s: %w", what, p.args.Table, err)
}

func (p *purger) run(ctx context.Context) error {
	p.cell = &idempotent.Cell[state]{Checkpoints: p.w.Checkpoints, Op: p.opID, Step: checkpointStep, Check: p.check}
	st, found, err := p.cell.Load(ctx)
	if err != nil {
		return err
	}
	loaded := p.cell.ETag()
	var first *storeadapter.Page
	if found {
		p.st = st
	} else {
		p.st = state{V: stateVersion, Args: idempotent.Digest(p.args)}
		if p.args.OlderThan != nil {
			// For the first page only: the cut-off is the service's.
			cut := storeadapter.DateTime(p.w.Clock.Now().Add(-time.Duration(*p.args.OlderThan)))
			p.st.Cutoff = &cut
		}
		// The first page, read before the create, finds a missing table
		// before anything is written.
		page, err := p.page(ctx)
		if err != nil {
			return err
		}
		if p.args.OlderThan != nil {
			p.st.V, p.st.Cutoff, p.st.CutoffPending = stateVersionServiceCutoff, nil, true
		}
		st, won, err := p.cell.Put(ctx, p.st)
		if err != nil {
			return err
		}
		p.st = st
		if won && !p.st.CutoffPending { // else another delivery created it: its cut-off rules
			first = &page
		}
	}
	if err := p.serviceCutoff(ctx); err != nil {
		return err
	}
	var ahead *prefetch
	defer func() { ahead.discard() }()
	for !p.st.Done {
		var page storeadapter.Page
		var ok bool
		if first != nil {
			page, first = *first, nil
		} else if page, ok, err = ahead.take(p.st.Token); err != nil {
			return p.goneOr(ctx, err)
		} else if !ok {
			if page, err = p.page(ctx); err != nil {
				return p.goneOr(ctx, err)
			}
		}
		ahead = p.readAhead(ctx, page.Next)
		next := p.st
		deleted, batches, err := p.deletePage(ctx, page)
		next.Deleted += deleted
		next.Batches += batches
		if err != nil {
			return p.goneOr(ctx, err)
		}
		next.Pages++
		next.Token, next.Done = page.Next, page.Next == ""
		if n := len(page.Entities); n > 0 {
			next.Last = &storeadapter.Key{PK: page.Entities[n-1].PartitionKey, RK: page.Entities[n-1].RowKey}
		}
		if err := p.syncIndexes(ctx, &next); err != nil {
			return p.goneOr(ctx, err)
		}
		if err := p.save(ctx, next); err != nil {
			return err
		}
		if !p.st.Done && p.budget.Spent() {
			return jobs.ContinueLater(0, fmt.Sprintf("deleted %d entities so far", p.st.Deleted))
		}
	}
	text := Result(p.st.Deleted, p.st.Batches, p.st.Pages)
	if p.st.Unindexed > 0 {
		text += fmt.Sprintf(", %d removed from the table's indexes", p.st.Unindexed)
	}
	if found && p.cell.ETag() == loaded {
		text = "already done: " + text // this delivery changed nothing
	}
	jobs.SetResult(ctx, text)
	return nil
}

// syncIndexes removes the entities this page deleted from the table's
// indexes (when it has declared ones; see indexes.Set.Sync), before the
// checkpoint moves past them: the span from the last saved position to
// the page's last row (to the source's end with the last page). Spans
// start at the saved position, not at the page's first row, so that rows
// a crashed delivery deleted after that position — which no page returns
// again — are covered by the next delivery's first span: their membership
// records are still there. Entities of the span the purge kept are read
// and, their indexes being up to date, left alone.
func (p *purger) syncIndexes(ctx context.Context, next *state) error {
	if !p.w.Indexes.Declared(p.args.Table) || next.Last == p.st.Last && !next.Done {
		return nil
	}
	var after, through *indexes.Key
	if p.st.Last != nil {
		after = &indexes.Key{PK: p.st.Last.PK, RK: p.st.Last.RK}
	}
	if !next.Done {
		through = &indexes.Key{PK: next.Last.PK, RK: next.Last.RK}
	}
	res, err := p.w.Indexes.Sync(ctx, p.args.Table, indexes.Within(p.args.source(), after, through))
	if err != nil {
		return p.tableErr("reconcile the indexes of", err)
	}
	next.Unindexed += int64(res.Removed)
	return nil
}

// goneOr handles err, a failed call of a purge whose checkpoint exists:
// when the table was deleted meanwhile, nothing matches any more, so the
// purge is done — the checkpoint is marked so and the result says the
// table is gone; any other error is returned.
func (p *purger) goneOr(ctx context.Context, err error) error {
	if !errors.Is(err, errMissingTable) {
		return err
	}
	next := p.st
	next.Done = true
	if err := p.save(ctx, next); err != nil {
		return err
	}
	jobs.SetResult(ctx, fmt.Sprintf("table %s is gone (deleted by someone else); before that: %s", p.args.Table, Result(p.st.Deleted, p.st.Batches, p.st.Pages)))
	return nil
}

// filter is the purge's query: the source's keys and, with olderThan,
// Timestamp before the cut-off.
func (p *purger) filter() storeadapter.Filter {
	f := p.args.source().Filter(nil)
	if p.st.Cutoff != nil {
		f = storeadapter.And(f, storeadapter.Compare("Timestamp", storeadapter.Lt, *p.st.Cutoff))
	}
	return f
}

// keysOnly selects no custom property: a page holds keys, ETags and
// Timestamps only.
var keysOnly = []string{}

// page reads the next page of the scan from the checkpoint's token.
func (p *purger) page(ctx context.Context) (storeadapter.Page, error) {
	return p.query(ctx, p.filter(), p.st.Token)
}

// query reads the page of the scan at token.
func (p *purger) query(ctx context.Context, filter storeadapter.Filter, token string) (storeadapter.Page, error) {
	page, err := p.w.Store.Tables().Query(ctx, p.args.Table, storeadapter.Query{
		Filter: filter, Select: keysOnly, Top: p.w.cfg.PageSize, Continuation: token})
	if err != nil {
		return page, p.tableErr("query", err)
	}
	return page, nil
}

// deletes returns the If-Match deletes of the rows es.
func deletes(es []storeadapter.Entity) []storeadapter.TableOp {
	ops := make([]storeadapter.TableOp, len(es))
	for i, e := range es {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxDelete,
			Entity: storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, IfMatch: e.ETag}
	}
	return ops
}

// deleteBatch deletes one batch (one partition, at most 100 rows, each
// If-Match) and returns how many rows its successful transaction deleted
// (see step 3 of Worker for a transaction that loses to another writer).
func (p *purger) deleteBatch(ctx context.Context, ops []storeadapter.TableOp) (int, error) {
	for round := 0; ; round++ {
		err := p.w.Store.Tables().Transact(ctx, p.args.Table, ops)
		if err == nil {
			return len(ops), nil
		}
		if !raced(err) {
			return 0, p.tableErr(fmt.Sprintf("delete %d entities of partition %q of", len(ops), ops[0].Entity.PartitionKey), err)
		}
		if round == maxRounds {
			return 0, fmt.Errorf("delete %d entities of %s partition %q: rows kept changing in %d rounds; retrying later: %w",
				len(ops), p.args.Table, ops[0].Entity.PartitionKey, maxRounds+1, err)
		}
		current, rerr := p.matching(ctx, ops)
		if rerr != nil {
			return 0, rerr
		}
		kept := make([]storeadapter.TableOp, 0, len(ops))
		changed := false
		for _, op := range ops {
			cur, ok := current[op.Entity.RowKey]
			if !ok {
				changed = true // gone, or no longer matching
				continue
			}
			if cur.ETag != op.IfMatch {
				op.IfMatch, changed = cur.ETag, true
			}
			kept = append(kept, op)
		}
		if len(kept) == 0 {
			return 0, nil
		}
		if !changed {
			// A conflict the read does not show: retry the job later.
			return 0, fmt.Errorf("delete %d entities of %s partition %q: %w", len(ops), p.args.Table, ops[0].Entity.PartitionKey, err)
		}
		ops = kept
	}
}

// raced reports whether a conditional delete lost to another writer: the
// row changed or vanished since it was read (not its table).
func raced(err error) bool {
	return errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err)
}

// matching reads, with one query (paged), the rows of the batch's key span
// that still match the purge's filter, keys and ETags only, by RowKey.
func (p *purger) matching(ctx context.Context, ops []storeadapter.TableOp) (map[string]storeadapter.Entity, error) {
	lo, hi := ops[0].Entity.RowKey, ops[len(ops)-1].Entity.RowKey // Batches keeps key order
	f := storeadapter.ApplicationRows(storeadapter.And(storeadapter.PartitionEquals(ops[0].Entity.PartitionKey),
		storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi)))
	if p.st.Cutoff != nil {
		f = storeadapter.And(f, storeadapter.Compare("Timestamp", storeadapter.Lt, *p.st.Cutoff))
	}
	q := storeadapter.Query{Filter: f, Select: keysOnly}
	rows := make(map[string]storeadapter.Entity, len(ops))
	for {
		page, err := p.w.Store.Tables().Query(ctx, p.args.Table, q)
		if err != nil {
			return nil, p.tableErr("read", err)
		}
		for _, e := range page.Entities {
			rows[e.RowKey] = e
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return rows, nil
		}
	}
}

// check refuses a checkpoint of another version, or one written for other
// arguments (the operation id reused: errOtherArgs).
func (p *purger) check(st state) error {
	if st.V != stateVersion && st.V != stateVersionServiceCutoff {
		return fmt.Errorf("checkpoint %s/%s: not a purge checkpoint of version %d or %d (version %d)", p.opID, checkpointStep, stateVersion, stateVersionServiceCutoff, st.V)
	}
	if st.Args != idempotent.Digest(p.args) {
		return errOtherArgs
	}
	return nil
}

// serviceCutoff fixes, while the checkpoint says CutoffPending, the
// cut-off from the storage service's clock, which the rows' Timestamps
// are read by (a worker whose clock runs ahead by more than olderThan
// would otherwise delete rows written after the purge began): the
// checkpoint's Timestamp, its create's as long as no save changed it
// (its ETag is still the one this delivery holds), minus olderThan. Every
// delivery before the first save derives the same cut-off; that save
// writes it. When the checkpoint changed meanwhile, its state is taken
// (another delivery saved the cut-off).
func (p *purger) serviceCutoff(ctx context.Context) error {
	if p.st.CutoffPending && p.args.OlderThan == nil { // the digest says they are the same args: never
		return jobs.Permanentf("checkpoint %s/%s: a cut-off is pending, but args.olderThan is not set", p.opID, checkpointStep)
	}
	for p.st.CutoffPending {
		at, changed, err := p.w.Checkpoints.WrittenAt(ctx, p.opID, checkpointStep, p.cell.ETag())
		if err != nil {
			return fmt.Errorf("the cut-off: %w", err)
		}
		if changed {
			st, found, err := p.cell.Load(ctx)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("checkpoint %s/%s vanished while the purge ran (cleared by another process); the redelivery starts again", p.opID, checkpointStep)
			}
			p.st = st
			continue
		}
		cut := storeadapter.DateTime(at.Add(-time.Duration(*p.args.OlderThan)))
		p.st.Cutoff, p.st.CutoffPending = &cut, false
	}
	return nil
}

// errOtherArgs marks a checkpoint of the operation id written by a purge
// of other arguments.
var errOtherArgs = errors.New("the operation id belongs to a purge of other arguments")

// save writes next If-Match the checkpoint's ETag and takes it. When
// another delivery saved first it writes nothing and takes that
// delivery's checkpoint instead.
func (p *purger) save(ctx context.Context, next state) error {
	st, _, err := p.cell.Put(ctx, next)
	if err != nil {
		return err
	}
	p.st = st
	return nil
}
