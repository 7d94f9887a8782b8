package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// poisonUsage lists the poison subcommands.
const poisonUsage = `usage: enqueue poison <subcommand> [flags]

subcommands:
  list     list poisoned messages, newest first [-group] [-kind K]
  show     show one poisoned message with its attempts and original text: ID
  requeue  send poisoned messages back to the work queue: (ID... | -all) [-kind K] [-dry-run]
  delete   delete poisoned messages and their records: ID...
  purge    delete every poisoned message [-older-than D]

Run 'enqueue poison <subcommand> -h' for its flags.
`

// reasonChars is how much of a reason a table shows.
const reasonChars = 80

// runPoison runs one poison subcommand and returns its name for error
// messages ("poison list").
func (m *Main) runPoison(ctx context.Context, args []string) (string, error) {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, poisonUsage)
		return "poison", &usageError{err: errors.New("no subcommand"), printed: true}
	}
	sub, rest := args[0], args[1:]
	name := "poison " + sub
	switch sub {
	case "list":
		return name, m.poisonList(ctx, rest)
	case "show":
		return name, m.poisonShow(ctx, rest)
	case "requeue":
		return name, m.poisonRequeue(ctx, rest)
	case "delete":
		return name, m.poisonDelete(ctx, rest)
	case "purge":
		return name, m.poisonPurge(ctx, rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, poisonUsage)
		return "poison", nil
	}
	fmt.Fprintf(m.Stderr, "enqueue poison: unknown subcommand %q\n\n%s", sub, poisonUsage)
	return "poison", &usageError{err: fmt.Errorf("unknown subcommand %q", sub), printed: true}
}

// mover connects and returns the poison mover of the -queue work queue.
func (m *Main) mover(c *common) (*poison.Mover, error) {
	store, err := m.connect(c)
	if err != nil {
		return nil, err
	}
	return cli.Poison(store, c.queue, m.Now), nil
}

// poisonList prints the poisoned records, newest first, or their groups
// by reason.
func (m *Main) poisonList(ctx context.Context, args []string) error {
	var (
		c     common
		group bool
		kind  string
	)
	fs := m.newFlagSet("poison list", "poison list [-group] [-kind K] [flags]",
		"Lists the poisoned messages of the work queue, newest first. Nothing is changed.", &c)
	fs.BoolVar(&group, "group", false, "group the messages by reason, with counts")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	mv, err := m.mover(&c)
	if err != nil {
		return err
	}
	recs, err := mv.List(ctx, kind)
	if err != nil {
		return err
	}

	if group {
		groups := poison.GroupByReason(recs)
		if c.json() {
			out := make([]groupJSON, 0, len(groups))
			for _, g := range groups {
				out = append(out, groupJSON{Reason: g.Reason, Count: g.Count, Kinds: g.Kinds, Newest: g.Newest})
			}
			return writeJSON(m.Stdout, out)
		}
		if len(groups) == 0 {
			fmt.Fprintf(m.Stdout, "no poisoned messages for queue %s\n", c.queue)
			return nil
		}
		tw := newTable(m.Stdout)
		row(tw, "REASON", "COUNT", "KINDS", "NEWEST")
		for _, g := range groups {
			row(tw, cell(g.Reason, reasonChars), strconv.Itoa(g.Count), strings.Join(g.Kinds, ","), timeCell(g.Newest))
		}
		return tw.Flush()
	}

	if c.json() {
		out := make([]recordJSON, 0, len(recs))
		for _, r := range recs {
			out = append(out, toRecordJSON(r))
		}
		return writeJSON(m.Stdout, out)
	}
	if len(recs) == 0 {
		fmt.Fprintf(m.Stdout, "no poisoned messages for queue %s\n", c.queue)
		return nil
	}
	tw := newTable(m.Stdout)
	row(tw, "MESSAGE ID", "OP ID", "KIND", "DELIVERIES", "LAST ATTEMPT", "REASON")
	for _, r := range recs {
		row(tw, r.MessageID, r.OpID, r.Kind, strconv.FormatInt(r.DequeueCount, 10), timeCell(r.LastAttempt), cell(r.Reason, reasonChars))
	}
	return tw.Flush()
}

// poisonShow prints one record with its attempts and its original text.
func (m *Main) poisonShow(ctx context.Context, args []string) error {
	var c common
	fs := m.newFlagSet("poison show", "poison show ID [flags]",
		"Shows one poisoned message (by its original message id): the failure record, each attempt,\n"+
			"and the original text (the envelope pretty-printed when it decodes).", &c)
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("give exactly one message id, got %d", len(pos))
	}
	mv, err := m.mover(&c)
	if err != nil {
		return err
	}
	rec, err := mv.Show(ctx, pos[0])
	if errors.Is(err, storeadapter.ErrNotFound) {
		return fmt.Errorf("no poison record for message %s on queue %s", pos[0], c.queue)
	}
	if err != nil {
		return err
	}
	env, envErr := jobs.DecodeEnvelope(rec.Original)

	if c.json() {
		out := showJSON{recordJSON: toRecordJSON(rec), Attempts: []attemptJSON{}, Original: rec.Original}
		for _, a := range rec.Attempts {
			out.Attempts = append(out.Attempts, attemptJSON{N: a.DequeueCount, Time: a.Time, DurationNs: a.Duration.Nanoseconds(), Host: a.Host, Error: a.Error})
		}
		if envErr == nil {
			out.Envelope = &env
		} else {
			out.EnvelopeError = envErr.Error()
		}
		return writeJSON(m.Stdout, out)
	}

	tw := newTable(m.Stdout)
	field := func(name, value string) { row(tw, name+":", value) }
	field("Message ID", rec.MessageID)
	field("Queue", rec.Queue)
	field("State", rec.State)
	field("Op ID", rec.OpID)
	field("Kind", rec.Kind)
	field("Reason", rec.Reason)
	field("Deliveries", strconv.FormatInt(rec.DequeueCount, 10))
	field("First attempt", timeCell(rec.FirstAttempt))
	field("Last attempt", timeCell(rec.LastAttempt))
	field("Host", rec.Host)
	if rec.OriginalRef != "" {
		field("Original blob", rec.OriginalRef)
	}
	if !rec.RequeuedAt.IsZero() {
		field("Requeued", fmt.Sprintf("%s by %s as message %s", timeCell(rec.RequeuedAt), cell(rec.RequeuedBy, 0), cell(rec.RequeuedMessageID, 0)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(m.Stdout, "\nAttempts (%d):\n", len(rec.Attempts))
	tw = newTable(m.Stdout)
	row(tw, "  #", "TIME", "HOST", "DURATION", "ERROR")
	for _, a := range rec.Attempts {
		row(tw, "  "+strconv.FormatInt(a.DequeueCount, 10), timeCell(a.Time), a.Host, a.Duration.Round(time.Millisecond).String(), a.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if envErr == nil {
		b, err := json.MarshalIndent(env, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "\nOriginal envelope:\n%s\n", b)
		return nil
	}
	fmt.Fprintf(m.Stdout, "\nOriginal text (not a valid envelope: %s):\n", envErr)
	printRaw(m.Stdout, rec.Original)
	return nil
}

// printRaw writes an original text that is not an envelope, with control
// characters other than newlines and tabs escaped so that it cannot drive
// the terminal.
func printRaw(w io.Writer, s string) {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	fmt.Fprintln(w, b.String())
}

// poisonRequeue sends records back to the work queue.
func (m *Main) poisonRequeue(ctx context.Context, args []string) error {
	var (
		c      common
		all    bool
		kind   string
		dryRun bool
	)
	fs := m.newFlagSet("poison requeue", "poison requeue (ID... | -all) [-kind K] [-dry-run] [flags]",
		"Sends poisoned messages back to the work queue as fresh messages (their original text,\n"+
			"untouched) and removes them from the poison queue.", &c)
	fs.BoolVar(&all, "all", false, "requeue every poisoned message (of -kind, if given)")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be requeued and change nothing")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	switch {
	case all && len(pos) > 0:
		return usagef("message ids and -all: give one, not both")
	case !all && len(pos) == 0:
		return usagef("give message ids or -all")
	}
	mv, err := m.mover(&c)
	if err != nil {
		return err
	}
	recs, rerr := mv.Requeue(ctx, poison.RequeueOptions{IDs: pos, All: all, Kind: kind, DryRun: dryRun})

	if c.json() {
		out := struct {
			DryRun   bool          `json:"dryRun"`
			Requeued []requeueJSON `json:"requeued"`
		}{DryRun: dryRun, Requeued: []requeueJSON{}}
		for _, r := range recs {
			out.Requeued = append(out.Requeued, requeueJSON{MessageID: r.MessageID, OpID: r.OpID, Kind: r.Kind, Reason: r.Reason, NewMessageID: r.RequeuedMessageID})
		}
		if err := writeJSON(m.Stdout, out); err != nil {
			return err
		}
		return rerr
	}
	if len(recs) > 0 {
		tw := newTable(m.Stdout)
		if dryRun {
			row(tw, "MESSAGE ID", "OP ID", "KIND", "REASON")
		} else {
			row(tw, "MESSAGE ID", "OP ID", "KIND", "NEW MESSAGE ID")
		}
		for _, r := range recs {
			last := r.RequeuedMessageID
			if dryRun {
				last = cell(r.Reason, reasonChars)
			}
			row(tw, r.MessageID, r.OpID, r.Kind, last)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case dryRun:
		fmt.Fprintf(m.Stdout, "would requeue %d to %s (dry run: nothing changed)\n", len(recs), c.queue)
	default:
		fmt.Fprintf(m.Stdout, "requeued %d to %s\n", len(recs), c.queue)
	}
	return rerr
}

// poisonDelete deletes records with their poison messages.
func (m *Main) poisonDelete(ctx context.Context, args []string) error {
	var c common
	fs := m.newFlagSet("poison delete", "poison delete ID... [flags]",
		"Deletes poisoned messages (by original message id): their poison-queue messages, stored\n"+
			"originals and failure records. The operations are not sent again.", &c)
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("give one or more message ids")
	}
	mv, err := m.mover(&c)
	if err != nil {
		return err
	}
	deleted := []string{}
	var errs []error
	for _, id := range pos {
		err := mv.Delete(ctx, id)
		switch {
		case err == nil:
			deleted = append(deleted, id)
		case errors.Is(err, storeadapter.ErrNotFound):
			errs = append(errs, fmt.Errorf("no poison record for message %s on queue %s", id, c.queue))
		default:
			errs = append(errs, err)
		}
	}
	if c.json() {
		if err := writeJSON(m.Stdout, struct {
			Deleted []string `json:"deleted"`
		}{deleted}); err != nil {
			return err
		}
	} else {
		for _, id := range deleted {
			fmt.Fprintf(m.Stdout, "deleted %s\n", cell(id, 0))
		}
	}
	return errors.Join(errs...)
}

// poisonPurge deletes every poisoned record older than -older-than.
func (m *Main) poisonPurge(ctx context.Context, args []string) error {
	var (
		c         common
		olderThan time.Duration
	)
	fs := m.newFlagSet("poison purge", "poison purge [-older-than D] [flags]",
		"Deletes every poisoned message of the work queue whose last attempt is older than -older-than\n"+
			"(all of them by default), with its stored original and failure record. Prints how many.", &c)
	fs.Var((*durationValue)(&olderThan), "older-than", "only messages whose last attempt is older than this: a Go duration (90m, 36h) or days (7d); 0 for all")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	mv, err := m.mover(&c)
	if err != nil {
		return err
	}
	n, err := mv.Purge(ctx, olderThan)
	if c.json() {
		if werr := writeJSON(m.Stdout, struct {
			Purged int `json:"purged"`
		}{n}); werr != nil {
			return werr
		}
	} else {
		fmt.Fprintf(m.Stdout, "purged %d\n", n)
	}
	return err
}

// durationValue is a flag.Value for a non-negative duration written as Go
// writes durations ("90m", "36h") or as whole days ("7d").
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Set parses s.
func (d *durationValue) Set(s string) error {
	var v time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return fmt.Errorf("must be a duration such as 90m, 36h or 7d, got %q", s)
		}
		v = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if v, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("must be a duration such as 90m, 36h or 7d, got %q", s)
		}
	}
	if v < 0 {
		return fmt.Errorf("must not be negative, got %q", s)
	}
	*d = durationValue(v)
	return nil
}

// recordJSON is a poison record as -o json prints it.
type recordJSON struct {
	MessageID         string    `json:"messageId"`
	Queue             string    `json:"queue"`
	State             string    `json:"state"`
	OpID              string    `json:"opId"`
	Kind              string    `json:"kind"`
	Reason            string    `json:"reason"`
	DequeueCount      int64     `json:"dequeueCount"`
	FirstAttempt      time.Time `json:"firstAttempt,omitzero"`
	LastAttempt       time.Time `json:"lastAttempt,omitzero"`
	Host              string    `json:"host,omitempty"`
	LastError         string    `json:"lastError,omitempty"`
	OriginalRef       string    `json:"originalRef,omitempty"`
	RequeuedAt        time.Time `json:"requeuedAt,omitzero"`
	RequeuedBy        string    `json:"requeuedBy,omitempty"`
	RequeuedMessageID string    `json:"requeuedMessageId,omitempty"`
}

// toRecordJSON converts a record.
func toRecordJSON(r poison.Record) recordJSON {
	return recordJSON{
		MessageID: r.MessageID, Queue: r.Queue, State: r.State, OpID: r.OpID, Kind: r.Kind, Reason: r.Reason,
		DequeueCount: r.DequeueCount, FirstAttempt: r.FirstAttempt, LastAttempt: r.LastAttempt, Host: r.Host,
		LastError: r.LastError, OriginalRef: r.OriginalRef, RequeuedAt: r.RequeuedAt, RequeuedBy: r.RequeuedBy,
		RequeuedMessageID: r.RequeuedMessageID,
	}
}

// showJSON is what "poison show -o json" prints: the record, its attempts,
// the original text and, when it decodes, the envelope.
type showJSON struct {
	recordJSON
	Attempts      []attemptJSON  `json:"attempts"`
	Original      string         `json:"original"`
	Envelope      *jobs.Envelope `json:"envelope,omitempty"`
	EnvelopeError string         `json:"envelopeError,omitempty"`
}

// attemptJSON is one attempt in "poison show -o json".
type attemptJSON struct {
	N          int64     `json:"n"`
	Time       time.Time `json:"time"`
	DurationNs int64     `json:"durationNs"`
	Host       string    `json:"host"`
	Error      string    `json:"error"`
}

// groupJSON is one group of "poison list -group -o json".
type groupJSON struct {
	Reason string    `json:"reason"`
	Count  int       `json:"count"`
	Kinds  []string  `json:"kinds"`
	Newest time.Time `json:"newest"`
}

// requeueJSON is one record of "poison requeue -o json".
type requeueJSON struct {
	MessageID    string `json:"messageId"`
	OpID         string `json:"opId"`
	Kind         string `json:"kind"`
	Reason       string `json:"reason"`
	NewMessageID string `json:"newMessageId,omitempty"`
}
