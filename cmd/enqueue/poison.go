package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	names := slices.Sorted(maps.Keys(subs))
	fmt.Fprintf(m.Stderr, "enqueue %s: unknown subcommand %q%s\n\n%s", group, sub, cli.DidYouMean(sub, names), usage)
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

// poisonRequeue sends records back to the work queue.
func (m *Main) poisonRequeue(ctx context.Context, args []string) error {
	var (
		c      common
		all    bool
		kind   string
		group  string
		dryRun bool
		d      detailFlags
	)
	fs := m.newFlagSet("poison requeue", "poison requeue (ID... | -all | -group G) [-kind K] [-dry-run] [-details] [flags]",
		"Sends poisoned messages back to the work queue as fresh messages (their original text,\n"+
			"untouched) and removes them from the poison queue. It says why a given id was not requeued,\n"+
			"and warns about messages that failed validation: they fail again unless changed. It prints how\n"+
			"many per group; the messages one per line when ids are given or with -details (at most -limit).\n"+
			"A -kind or -group that names nothing known is refused, listing what exists.", &c)
	fs.BoolVar(&all, "all", false, "requeue every poisoned message (of -kind and -group, if given)")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	fs.StringVar(&group, "group", "", "only messages of this group (see 'poison list -group'), such as archive/unavailable")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be requeued and change nothing")
	d.register(fs, true, "messages")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if err := d.check(fs, &c); err != nil {
		return err
	}
	d.details = d.details || len(pos) > 0
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
	if err := m.checkSelection(ctx, ins, kind, group); err != nil {
		return err
	}
	var skipped []string
	recs, rerr := ins.Requeue(ctx, poison.RequeueOptions{IDs: pos, All: all, Kind: kind, Group: group, DryRun: dryRun,
		Skipped: func(r poison.Record, why string) {
			skipped = append(skipped, fmt.Sprintf("not requeued %s: %s", r.MessageID, why))
		},
		Progress: m.progress("requeued")})
	m.reportSkipped(skipped, d)
	m.warnValidation(recs, dryRun, d)

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
	if err := m.writeRequeued(recs, dryRun, d); err != nil {
		return err
	}
	switch {
	case dryRun:
		fmt.Fprintf(m.Stdout, "would requeue %d to %s (dry run: nothing changed)\n", len(recs), c.queue)
	default:
		fmt.Fprintf(m.Stdout, "requeued %d to %s\n", len(recs), c.queue)
	}
	return rerr
}

// writeRequeued prints the requeued records' counts by group and, with
// -details, the records (at most -limit).
func (m *Main) writeRequeued(recs []poison.Record, dryRun bool, d detailFlags) error {
	head := []string{"MESSAGE ID", "OP ID", "KIND", "NEW MESSAGE ID"}
	if dryRun {
		head[3] = "REASON"
	}
	return m.writeSelected(recs, false, d, head, "messages", func(r poison.Record) []string {
		last := r.RequeuedMessageID
		if dryRun {
			last = cell(r.Reason, reasonChars)
		}
		return []string{r.MessageID, r.OpID, r.Kind, last}
	})
}

// maxShownIDs is how many message ids a warning names; -details names
// them all.
const maxShownIDs = 5

// reportSkipped says on stderr why messages were not requeued: the first
// maxShownErrors, or all with -details; -o json lists them all.
func (m *Main) reportSkipped(skipped []string, d detailFlags) {
	n := len(skipped)
	if !d.details {
		n = min(n, maxShownErrors)
	}
	for _, s := range skipped[:n] {
		fmt.Fprintln(m.Stderr, cell(s, 0))
	}
	if more := len(skipped) - n; more > 0 {
		fmt.Fprintf(m.Stderr, "%d more not requeued (-details or -o json list them)\n", more)
	}
}

// warnValidation warns on stderr about requeued records whose failure was
// a validation error, naming the first maxShownIDs (all with -details).
func (m *Main) warnValidation(recs []poison.Record, dryRun bool, d detailFlags) {
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
	shown := strings.Join(ids, ", ")
	if len(ids) > maxShownIDs && !d.details {
		shown = fmt.Sprintf("%s and %d more (-details or -o json list them)", strings.Join(ids[:maxShownIDs], ", "), len(ids)-maxShownIDs)
	}
	fmt.Fprintf(m.Stderr, "warning: %d requeued messages %s poisoned by a validation error; unchanged, they will be poisoned again: %s\n",
		len(ids), verb, shown)
}

// poisonDelete deletes records with their poison messages.
func (m *Main) poisonDelete(ctx context.Context, args []string) error {
	var (
		c      common
		group  string
		dryRun bool
		d      detailFlags
	)
	fs := m.newFlagSet("poison delete", "poison delete (ID... | -group G) [-dry-run] [-details] [flags]",
		"Deletes poisoned messages (by original message id, or a whole group): their poison-queue\n"+
			"messages, stored originals and failure records. The operations are not sent again.", &c)
	fs.StringVar(&group, "group", "", "delete every message of this group (see 'poison list -group'), as purge -group does")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be deleted and change nothing")
	d.register(fs, true, "records a dry run of -group would delete")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if err := d.check(fs, &c); err != nil {
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
		if err := m.checkSelection(ctx, ins, "", group); err != nil {
			return err
		}
		return m.purge(ctx, &c, ins, poison.PurgeOptions{Group: group, DryRun: dryRun}, "deleted", d)
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
		c             common
		o             poison.PurgeOptions
		yes           bool
		noCheckpoints bool
		d             detailFlags
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
	cli.DurationVar(fs, &o.OlderThan, "older-than", 0, "only records whose last activity is older than this: a Go duration (90m, 36h) or days (7d); 0 for all")
	fs.StringVar(&o.Kind, "kind", "", "only records of this job kind")
	fs.StringVar(&o.Group, "group", "", "only records of this group (see 'poison list -group')")
	cli.DurationVar(fs, &o.StaleAfter, "stale-after", poison.DefaultStaleAfter, "remove failure records of messages still being retried once their last attempt is older than this;\nat least the work queue's message time to live (7d by default), or a record of a live message is lost")
	fs.StringVar(&o.CheckpointTable, "checkpoint-table", jobs.DefaultCheckpointTable, "table of the workers' range checkpoints (their -checkpoint-table)")
	fs.BoolVar(&noCheckpoints, "keep-checkpoints", false, "leave the range checkpoints alone")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print what would be removed and change nothing")
	fs.BoolVar(&yes, "yes", false, "purge without asking, even without a filter")
	d.register(fs, true, "records a dry run would remove")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := d.check(fs, &c); err != nil {
		return err
	}
	if o.OlderThan < 0 {
		return usagef("-older-than: must not be negative, got %v", o.OlderThan)
	}
	if o.StaleAfter <= 0 {
		return usagef("-stale-after: must be more than 0 (a failure record younger than the message time to live may belong to a live message), got %v", o.StaleAfter)
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
	if err := m.checkSelection(ctx, ins, o.Kind, o.Group); err != nil {
		return err
	}
	return m.purge(ctx, &c, ins, o, "purged", d)
}

// writePurged prints the counts by group and state of the records a dry
// run would remove and, with -details, the records (at most -limit).
func (m *Main) writePurged(recs []poison.Record, d detailFlags) error {
	return m.writeSelected(recs, true, d, []string{"MESSAGE ID", "STATE", "GROUP", "LAST ATTEMPT"}, "records", func(r poison.Record) []string {
		return []string{r.MessageID, r.State, poison.GroupName(r), timeCell(r.LastAttempt)}
	})
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
// "deleted". A dry run prints the records' counts by group and state and,
// with -details, the records (at most -limit).
func (m *Main) purge(ctx context.Context, c *common, ins *poison.Inspector, o poison.PurgeOptions, verb string, d detailFlags) error {
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
		if werr := m.writePurged(res.Records, d); werr != nil {
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
