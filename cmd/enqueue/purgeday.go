package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// purgedayArgsFlags renames the purgeday args fields in validation errors
// to the flags that set them.
var purgedayArgsFlags = strings.NewReplacer(
	"args.prefix", "-prefix",
	"args.keepDays", "-keep-days",
	"args.before", "-before",
	"args.exportTo", "-export-to",
	"args.dryRun", "-dry-run",
	"keepDays or before", "-keep-days or -before",
)

// runPurgeday is "enqueue purgeday": it enqueues a day purge built from
// flags. The args are validated by the purgeday kind's own parser and
// Validate, and -before against this machine's clock, so nothing is sent
// when they are invalid. With -dry-run it also lists now, read-only, the
// day tables the purge would delete (the plan the worker computes too).
func (m *Main) runPurgeday(ctx context.Context, args []string) error {
	var (
		c                                  common
		prefix, keepDays, before, exportTo string
		id                                 string
		dryRun                             bool
	)
	fs := m.newFlagSet("purgeday",
		"purgeday -prefix P (-keep-days N | -before YYYY-MM-DD) [-export-to container/prefix] [-dry-run] [-id ID] [flags]",
		"Enqueues the purge of the day tables <prefix>YYYYMMDD older than the cut-off: today (UTC) minus\n"+
			"-keep-days days, or the -before date. Each such day is deleted with one DeleteTable; tables whose\n"+
			"suffix is not a real date are never touched. -export-to exports each day to JSON-lines blobs and a\n"+
			"manifest first, verified before the delete. -dry-run deletes nothing: it prints the day tables that\n"+
			"would go now, and the worker records them in the job's result. It prints the op id and the message id.", &c)
	fs.StringVar(&prefix, "prefix", "", "day tables' prefix: a letter, then letters and digits, at most 55 (required)")
	fs.StringVar(&keepDays, "keep-days", "", "keep today and this many days before it, 1-36500 (1 keeps yesterday and today)")
	fs.StringVar(&before, "before", "", "delete the days before this date, YYYY-MM-DD (UTC), no later than yesterday")
	fs.StringVar(&exportTo, "export-to", "", "export each day first: \"container\" or \"container/prefix\" (the container must exist)")
	fs.BoolVar(&dryRun, "dry-run", false, "delete nothing: print what would go, and have the worker record it")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	a := purgeday.Args{Prefix: prefix, ExportTo: exportTo, DryRun: dryRun}
	if set["keep-days"] {
		n, err := strconv.Atoi(keepDays)
		if err != nil {
			return usagef("-keep-days: %q is not a whole number of days", keepDays)
		}
		a.KeepDays = &n
	}
	if set["before"] {
		a.Before = &before
	}
	if !set["id"] {
		id = client.NewOpID(m.now())
	}
	if err := checkJob(ctx, a, id, purgedayArgsFlags); err != nil {
		return err
	}
	if _, err := a.Cutoff(m.now()); err != nil {
		return usagef("%s", purgedayArgsFlags.Replace(err.Error()))
	}
	cl, store, err := m.connectClient(&c, 0)
	if err != nil {
		return err
	}
	if !dryRun {
		return m.sendOne(ctx, &c, cl, a, id)
	}
	plan, err := purgeday.MakePlan(ctx, store.Tables(), a, m.now())
	if errors.Is(err, storeadapter.ErrInvalidInput) {
		return usagef("%s", purgedayArgsFlags.Replace(err.Error()))
	}
	if err != nil {
		return err
	}
	messageID, err := enqueue(ctx, cl, a, id)
	if err != nil {
		return err
	}
	return m.printPlan(&c, plan, id, messageID)
}

// printPlan prints a dry run's plan and the message that carries it.
func (m *Main) printPlan(c *common, p purgeday.Plan, id, messageID string) error {
	if c.json() {
		type day struct {
			Table string `json:"table"`
			Date  string `json:"date"`
		}
		days := make([]day, 0, len(p.Expired))
		for _, d := range p.Expired {
			days = append(days, day{d.Table, d.Date.Format(time.DateOnly)})
		}
		return writeJSON(m.Stdout, struct {
			OpID      string `json:"opId"`
			MessageID string `json:"messageId"`
			Prefix    string `json:"prefix"`
			Cutoff    string `json:"cutoff"`
			DayTables int    `json:"dayTables"`
			Expired   []day  `json:"expired"`
			Kept      int    `json:"kept"`
			Other     int    `json:"otherTables"`
		}{id, messageID, p.Prefix, p.Cutoff.Format(time.DateOnly), p.DayTables(), days, p.Kept, p.Other})
	}
	fmt.Fprintf(m.Stdout, "dry run: %d of %d day tables %s* are older than %s and would be deleted (%d kept; %d other tables with the prefix, never touched):\n",
		len(p.Expired), p.DayTables(), p.Prefix, p.Cutoff.Format(time.DateOnly), p.Kept, p.Other)
	tw := newTable(m.Stdout)
	row(tw, "TABLE", "DATE")
	for _, d := range p.Expired {
		row(tw, d.Table, d.Date.Format(time.DateOnly))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout)
	tw = newTable(m.Stdout)
	row(tw, "OP ID", "MESSAGE ID", "QUEUE")
	row(tw, id, messageID, c.queue)
	return tw.Flush()
}
