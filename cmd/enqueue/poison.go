package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// poisonUsage lists the poison subcommands.
const poisonUsage = `usage: enqueue poison <subcommand> [flags]

subcommands:
  list     list poisoned messages, newest first [-group] [-kind K] [-limit N]
  show     show one poisoned message with its attempts and original text: ID or operation id
  requeue  send poisoned messages back to the work queue: (ID... | -all | -group G) [-kind K] [-dry-run]
  delete   delete poisoned messages and their records: (ID... | -group G) [-dry-run]
  purge    delete poisoned and requeued records, stale failure records and abandoned
           checkpoints [-older-than D] [-kind K] [-group G] [-dry-run] [-yes]

Run 'enqueue poison <subcommand> -h' for its flags.
`

// reasonChars is how much of a reason a table shows.
const reasonChars = 80

// runPoison runs one poison subcommand and returns its name for error
// messages ("poison list").
func (m *Main) runPoison(ctx context.Context, args []string) (string, error) {
	return m.runGroup(ctx, "poison", poisonUsage, map[string]func(context.Context, []string) error{
		"list": m.poisonList, "show": m.poisonShow, "requeue": m.poisonRequeue, "delete": m.poisonDelete, "purge": m.poisonPurge,
	}, args)
}

// runGroup runs the subcommand args[0] of a command group (poison,
// index) and returns its name for error messages ("poison list"); no
// subcommand, help or an unknown one print the group's usage.
func (m *Main) runGroup(ctx context.Context, group, usage string, subs map[string]func(context.Context, []string) error, args []string) (string, error) {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, usage)
		return group, &usageError{err: errors.New("no subcommand"), printed: true}
	}
	sub, rest := args[0], args[1:]
	if run, ok := subs[sub]; ok {
		return group + " " + sub, run(ctx, rest)
	}
	switch sub {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, usage)
		return group, nil
	}
	fmt.Fprintf(m.Stderr, "enqueue %s: unknown subcommand %q\n\n%s", group, sub, usage)
	return group, &usageError{err: fmt.Errorf("unknown subcommand %q", sub), printed: true}
}

// inspector connects and returns the poison inspector of the -queue work
// queue. A configuration the service would refuse is an error before any
// call, and so is a work queue that does not exist, so that a mistyped
// -queue is not reported as "no poisoned messages".
func (m *Main) inspector(ctx context.Context, c *common) (*poison.Inspector, error) {
	store, err := m.connect(c)
	if err != nil {
		return nil, err
	}
	ins, err := cli.PoisonInspector(store, c.queue, m.Clock)
	if err != nil {
		return nil, err
	}
	if _, err := store.Queue(c.queue).ApproximateCount(ctx); errors.Is(err, storeadapter.ErrQueueNotFound) {
		return nil, fmt.Errorf("queue %s does not exist (check -queue or $%s)", c.queue, cli.EnvQueue)
	} else if err != nil {
		return nil, err
	}
	return ins, nil
}

// poisonList prints the poisoned records, newest first, or their groups
// by kind and failure class.
func (m *Main) poisonList(ctx context.Context, args []string) error {
	var (
		c     common
		group bool
		kind  string
		limit int
	)
	fs := m.newFlagSet("poison list", "poison list [-group] [-kind K] [-limit N] [flags]",
		"Lists the poisoned messages of the work queue, newest first. Nothing is changed. With -group, lists\n"+
			"the groups of messages that share a kind and a failure class (validation, not-found, unavailable,\n"+
			"too-large, forbidden, conflict, panic, dequeue-count, other), with counts; requeue and delete take\n"+
			"a group's name with -group.", &c)
	fs.BoolVar(&group, "group", false, "group the messages by kind and failure class, with counts")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	fs.IntVar(&limit, "limit", 0, "print at most this many messages or groups (0: all)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if limit < 0 {
		return usagef("-limit: must be 0 (all) or more, got %d", limit)
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	recs, err := ins.List(ctx, kind)
	if err != nil {
		return err
	}
	more := 0
	cut := func(n int) int {
		if limit > 0 && n > limit {
			more = n - limit
			return limit
		}
		return n
	}

	if group {
		groups := poison.GroupRecords(recs)
		groups = groups[:cut(len(groups))]
		if c.json() {
			out := make([]groupJSON, 0, len(groups))
			for _, g := range groups {
				out = append(out, groupJSON{Group: g.Name, Kind: g.Kind, Class: g.Class, Count: g.Count, Newest: g.Newest, Example: g.Example})
			}
			return writeJSON(m.Stdout, out)
		}
		if len(groups) == 0 {
			fmt.Fprintf(m.Stdout, "no poisoned messages for queue %s\n", c.queue)
			return nil
		}
		tw := newTable(m.Stdout)
		row(tw, "GROUP", "COUNT", "NEWEST", "EXAMPLE REASON")
		for _, g := range groups {
			row(tw, g.Name, strconv.Itoa(g.Count), timeCell(g.Newest), cell(g.Example, reasonChars))
		}
		return m.flushMore(tw, more, "groups")
	}

	recs = recs[:cut(len(recs))]
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
	row(tw, "MESSAGE ID", "OP ID", "KIND", "DELIVERIES", "LAST ATTEMPT", "GROUP", "REASON")
	for _, r := range recs {
		row(tw, r.MessageID, r.OpID, r.Kind, strconv.FormatInt(r.DequeueCount, 10), timeCell(r.LastAttempt), poison.GroupName(r), cell(r.Reason, reasonChars))
	}
	return m.flushMore(tw, more, "messages")
}

// flushMore flushes a table and says how many rows -limit left out.
func (m *Main) flushMore(tw *tabwriter.Writer, more int, what string) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(m.Stdout, "(%d more %s; raise -limit to see them)\n", more, what)
	}
	return nil
}

// poisonShow prints one record with its attempts and its original text.
func (m *Main) poisonShow(ctx context.Context, args []string) error {
	var c common
	fs := m.newFlagSet("poison show", "poison show ID [flags]",
		"Shows one poisoned message, by its original message id or by its operation id: the failure\n"+
			"record, each attempt, and the original text (the envelope pretty-printed when it decodes).", &c)
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("give exactly one message id or operation id, got %d", len(pos))
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	rec, err := ins.Show(ctx, pos[0])
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		return fmt.Errorf("no poison record with message id or operation id %s on queue %s", pos[0], c.queue)
	case errors.Is(err, storeadapter.ErrInvalidInput):
		return &usageError{err: err}
	case err != nil:
		return err
	}
	env, envErr := jobs.DecodeEnvelope(rec.Original)

	if c.json() {
		out := showJSON{recordJSON: toRecordJSON(rec), Attempts: []attemptJSON{}, Original: rec.Original}
		for _, a := range rec.Attempts {
			out.Attempts = append(out.Attempts, attemptJSON{N: a.DequeueCount, Time: a.Time, DurationNs: a.Duration.Nanoseconds(), Host: a.Host, Error: a.Error})
		}
		if envErr == nil {
			out.Envelope, out.Outbox = &env, env.Outbox
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
	if envErr == nil && env.Outbox != nil {
		field("Outbox", outboxText(env.Outbox))
	}
	field("Group", poison.GroupName(rec))
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

// outboxText describes the outbox reference of a job sent by a
// transactional enqueue: its row, "table/pk/rk", and its commit window.
func outboxText(o *jobs.OutboxRef) string {
	s := fmt.Sprintf("%s/%s/%s (window %v", o.Table, o.PK, o.RK, time.Duration(o.Window))
	if !o.Since.IsZero() {
		s += " from " + timeCell(o.Since)
	}
	return s + "; the row stays until the job is done: requeue runs it, delete leaves the row to 'outbox purge')"
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
		group  string
		dryRun bool
	)
	fs := m.newFlagSet("poison requeue", "poison requeue (ID... | -all | -group G) [-kind K] [-dry-run] [flags]",
		"Sends poisoned messages back to the work queue as fresh messages (their original text,\n"+
			"untouched) and removes them from the poison queue. It says why a given id was not requeued,\n"+
			"and warns about messages that failed validation: they fail again unless changed.", &c)
	fs.BoolVar(&all, "all", false, "requeue every poisoned message (of -kind and -group, if given)")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	fs.StringVar(&group, "group", "", "only messages of this group (see 'poison list -group'), such as archive/unavailable")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be requeued and change nothing")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	all = all || group != ""
	switch {
	case all && len(pos) > 0:
		return usagef("message ids and -all or -group: give one, not both")
	case !all && len(pos) == 0:
		return usagef("give message ids, -all or -group")
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	var skipped []string
	recs, rerr := ins.Requeue(ctx, poison.RequeueOptions{IDs: pos, All: all, Kind: kind, Group: group, DryRun: dryRun,
		Skipped: func(r poison.Record, why string) {
			skipped = append(skipped, fmt.Sprintf("not requeued %s: %s", r.MessageID, why))
		},
		Progress: m.progress("requeued")})
	for _, s := range skipped {
		fmt.Fprintln(m.Stderr, cell(s, 0))
	}
	m.warnValidation(recs, dryRun)

	if c.json() {
		out := struct {
			DryRun   bool          `json:"dryRun"`
			Requeued []requeueJSON `json:"requeued"`
			Skipped  []string      `json:"skipped"`
		}{DryRun: dryRun, Requeued: []requeueJSON{}, Skipped: append([]string{}, skipped...)}
		for _, r := range recs {
			out.Requeued = append(out.Requeued, requeueJSON{MessageID: r.MessageID, OpID: r.OpID, Kind: r.Kind, Group: poison.GroupName(r),
				Reason: r.Reason, NewMessageID: r.RequeuedMessageID})
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

// warnValidation warns on stderr about requeued records whose failure was
// a validation error.
func (m *Main) warnValidation(recs []poison.Record, dryRun bool) {
	var ids []string
	for _, r := range recs {
		if poison.Class(r) == poison.ClassValidation {
			ids = append(ids, r.MessageID)
		}
	}
	if len(ids) == 0 {
		return
	}
	verb := "were"
	if dryRun {
		verb = "would be"
	}
	fmt.Fprintf(m.Stderr, "warning: %d requeued messages %s poisoned by a validation error; unchanged, they will be poisoned again: %s\n",
		len(ids), verb, strings.Join(ids, ", "))
}

// poisonDelete deletes records with their poison messages.
func (m *Main) poisonDelete(ctx context.Context, args []string) error {
	var (
		c      common
		group  string
		dryRun bool
	)
	fs := m.newFlagSet("poison delete", "poison delete (ID... | -group G) [-dry-run] [flags]",
		"Deletes poisoned messages (by original message id, or a whole group): their poison-queue\n"+
			"messages, stored originals and failure records. The operations are not sent again.", &c)
	fs.StringVar(&group, "group", "", "delete every message of this group (see 'poison list -group'), as purge -group does")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be deleted and change nothing")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	switch {
	case group != "" && len(pos) > 0:
		return usagef("message ids and -group: give one, not both")
	case group == "" && len(pos) == 0:
		return usagef("give one or more message ids, or -group")
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	if group != "" {
		return m.purge(ctx, &c, ins, poison.PurgeOptions{Group: group, DryRun: dryRun}, "deleted")
	}
	deleted := []string{}
	var errs []error
	notFound := func(id string) {
		errs = append(errs, fmt.Errorf("no poison record for message %s on queue %s", id, c.queue))
	}
	if dryRun {
		for _, id := range pos {
			_, err = ins.Show(ctx, id)
			switch {
			case err == nil:
				deleted = append(deleted, id)
			case errors.Is(err, storeadapter.ErrNotFound):
				notFound(id)
			default:
				errs = append(errs, err)
			}
		}
	} else {
		res, err := ins.DeleteMany(ctx, poison.DeleteOptions{IDs: pos, Progress: m.progress("deleted")})
		deleted = append(deleted, res.Deleted...)
		for _, id := range res.NotFound {
			notFound(id)
		}
		errs = append(errs, err)
	}
	if c.json() {
		if err := writeJSON(m.Stdout, struct {
			DryRun  bool     `json:"dryRun"`
			Deleted []string `json:"deleted"`
		}{dryRun, deleted}); err != nil {
			return err
		}
	} else {
		verb := "deleted"
		if dryRun {
			verb = "would delete"
		}
		for _, id := range deleted {
			fmt.Fprintf(m.Stdout, "%s %s\n", verb, cell(id, 0))
		}
	}
	return errors.Join(errs...)
}

// poisonPurge removes the records a purge selects (see poison.Inspector.Purge).
func (m *Main) poisonPurge(ctx context.Context, args []string) error {
	var (
		c              common
		o              poison.PurgeOptions
		yes            bool
		noCheckpoints  bool
		staleAfterFlag = durationValue(poison.DefaultStaleAfter)
	)
	fs := m.newFlagSet("poison purge", "poison purge [-older-than D] [-kind K] [-group G] [-dry-run] [-yes] [flags]",
		"Removes what the poison table no longer needs: poisoned messages (poison-queue message, stored\n"+
			"original and failure record) and requeued records whose last activity is older than -older-than\n"+
			"(all of them by default); failure records of messages still being retried whose last attempt is\n"+
			"older than -stale-after (their message succeeded but the record stayed, or expired); the range\n"+
			"checkpoints of the operations it abandons; and the records of jobs dropped because their transaction\n"+
			"never committed (which stats counts) older than -older-than, unless -group is given. Without\n"+
			"-older-than, -kind or -group it asks for confirmation on a terminal; elsewhere it needs -yes. Prints\n"+
			"how many.", &c)
	fs.Var((*durationValue)(&o.OlderThan), "older-than", "only records whose last activity is older than this: a Go duration (90m, 36h) or days (7d); 0 for all")
	fs.StringVar(&o.Kind, "kind", "", "only records of this job kind")
	fs.StringVar(&o.Group, "group", "", "only records of this group (see 'poison list -group')")
	fs.Var(&staleAfterFlag, "stale-after", "remove failure records of messages still being retried once their last attempt is older than this;\nat least the work queue's message time to live (7d by default), or a record of a live message is lost")
	fs.StringVar(&o.CheckpointTable, "checkpoint-table", jobs.DefaultCheckpointTable, "table of the workers' range checkpoints (their -checkpoint-table)")
	fs.BoolVar(&noCheckpoints, "keep-checkpoints", false, "leave the range checkpoints alone")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print what would be removed and change nothing")
	fs.BoolVar(&yes, "yes", false, "purge without asking, even without a filter")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	o.StaleAfter = time.Duration(staleAfterFlag)
	if o.StaleAfter == 0 {
		return usagef("-stale-after: must be more than 0 (a failure record younger than the message time to live may belong to a live message)")
	}
	if noCheckpoints {
		o.CheckpointTable = ""
	} else if err := storeadapter.ValidateTableName(o.CheckpointTable); err != nil {
		return usagef("-checkpoint-table: %v", err)
	}
	if o.OlderThan == 0 && o.Kind == "" && o.Group == "" && !o.DryRun && !yes {
		if err := m.confirm(fmt.Sprintf("purge every poisoned and requeued record of queue %s?", c.queue)); err != nil {
			return err
		}
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	return m.purge(ctx, &c, ins, o, "purged")
}

// confirm asks question on a terminal and returns nil on "y" or "yes". Not
// on a terminal, it is a usage error: -yes is required.
func (m *Main) confirm(question string) error {
	if !m.isTerminal(m.Stdin) || !m.isTerminal(m.Stderr) {
		return usagef("purging without -older-than, -kind or -group removes every record: add -yes to confirm (asked only on a terminal)")
	}
	fmt.Fprintf(m.Stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(m.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return usagef("not confirmed: nothing purged")
	}
	return nil
}

// purge runs a purge and prints what it removed; verb is "purged" or
// "deleted".
func (m *Main) purge(ctx context.Context, c *common, ins *poison.Inspector, o poison.PurgeOptions, verb string) error {
	if !o.DryRun {
		o.Progress = m.progress(verb)
	}
	res, err := ins.Purge(ctx, o)
	byState := map[string]int{}
	for _, r := range res.Records {
		byState[r.State]++
	}
	if c.json() {
		out := struct {
			DryRun      bool           `json:"dryRun"`
			Purged      int            `json:"purged"`
			ByState     map[string]int `json:"byState"`
			Checkpoints int            `json:"checkpoints"`
			Drops       int            `json:"drops"`
			Records     []recordJSON   `json:"records"`
		}{DryRun: o.DryRun, Purged: len(res.Records), ByState: byState, Checkpoints: res.Checkpoints, Drops: res.Drops, Records: []recordJSON{}}
		for _, r := range res.Records {
			out.Records = append(out.Records, toRecordJSON(r))
		}
		if werr := writeJSON(m.Stdout, out); werr != nil {
			return werr
		}
		return err
	}
	if o.DryRun {
		verb = "would remove"
		tw := newTable(m.Stdout)
		for _, r := range res.Records {
			row(tw, r.MessageID, r.State, poison.GroupName(r), timeCell(r.LastAttempt))
		}
		if werr := tw.Flush(); werr != nil {
			return werr
		}
	}
	msg := fmt.Sprintf("%s %d", verb, len(res.Records))
	if len(res.Records) > 0 {
		var parts []string
		for _, s := range []string{poison.StatePoisoned, poison.StateRequeued, poison.StateFailing} {
			if byState[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", byState[s], s))
			}
		}
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	if res.Checkpoints > 0 {
		msg += fmt.Sprintf(" and %d checkpoints", res.Checkpoints)
	}
	if res.Drops > 0 {
		msg += fmt.Sprintf(" and %d records of dropped jobs", res.Drops)
	}
	if o.DryRun {
		msg += " (dry run: nothing changed)"
	}
	fmt.Fprintln(m.Stdout, msg)
	return err
}
