package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// minCheckpointAge is the youngest a checkpoint may be and be pruned: a
// queue message lives up to 7 days from its send (storeadapter.DefaultTTL)
// and every delivery of a long operation writes its checkpoint, so one
// untouched for a day longer has no delivery left to read it.
const minCheckpointAge = storeadapter.DefaultTTL + 24*time.Hour

// runCheckpoints is "enqueue checkpoints": "prune" is its one command.
func (m *Main) runCheckpoints(ctx context.Context, args []string) (string, error) {
	if len(args) == 0 || args[0] != "prune" {
		return "checkpoints", usagef("a command is required: prune")
	}
	return "checkpoints prune", m.checkpointsPrune(ctx, args[1:])
}

// checkpointsPrune deletes the checkpoints last written before
// -older-than: the done checkpoints exports and purges keep so that a late
// redelivery reports "already done", and those of abandoned operations.
func (m *Main) checkpointsPrune(ctx context.Context, args []string) error {
	var (
		c     common
		table string
		yes   bool
		older time.Duration
	)
	fs := m.newFlagSet("checkpoints prune", "checkpoints prune [-table T] [-older-than 8d] [-yes] [flags]",
		"Counts, and with -yes deletes, the checkpoints of the checkpoint table last written longer than\n"+
			"-older-than ago: the done checkpoints of exports and purges (kept so that a late redelivery says\n"+
			"\"already done\") and those of operations abandoned midway. No message can read them any more:\n"+
			"a message lives 7 days, so -older-than must be at least 8d. Each delete is If-Match: a checkpoint\n"+
			"written again meanwhile stays. Without -yes it deletes nothing.", &c)
	fs.StringVar(&table, "table", "TablekeeperCheckpoints", "the checkpoint table (the kinds' checkpointTable)")
	cli.DurationVar(fs, &older, "older-than", minCheckpointAge, "prune checkpoints last written longer ago than this: a Go duration (200h) or days (8d), at least 8d")
	fs.BoolVar(&yes, "yes", false, "delete them (default: a dry run that counts them)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := storeadapter.ValidateTableName(table); err != nil {
		return usagef("-table: %v", err)
	}
	if older < minCheckpointAge {
		return usagef("-older-than: must be at least 8d (a message lives 7 days: a younger checkpoint may still be read), got %v", older)
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	cut := m.now().Add(-older)
	p, err := idempotent.Checkpoints{Tables: store.Tables(), Table: table}.Prune(ctx, cut, !yes)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(m.Stdout, struct {
			Table   string `json:"table"`
			Before  string `json:"before"`
			DryRun  bool   `json:"dryRun"`
			Found   int    `json:"found"`
			Deleted int    `json:"deleted"`
			Raced   int    `json:"raced"`
		}{table, cut.UTC().Format(time.RFC3339), !yes, p.Found, p.Deleted, p.Raced})
	}
	if !yes {
		fmt.Fprintf(m.Stdout, "dry run: %d checkpoints of %s last written before %s would be deleted (run again with -yes)\n", p.Found, table, cut.UTC().Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(m.Stdout, "deleted %d of %d checkpoints of %s last written before %s", p.Deleted, p.Found, table, cut.UTC().Format(time.RFC3339))
	if p.Raced > 0 {
		fmt.Fprintf(m.Stdout, " (%d written again meanwhile, left)", p.Raced)
	}
	fmt.Fprintln(m.Stdout)
	return nil
}
