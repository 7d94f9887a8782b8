package main

import (
	"context"
	"strings"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
)

// purgeArgsFlags renames the purge args fields in validation errors to the
// flags that set them. Longer names come first: the replacer tries its
// pairs in order at each position.
var purgeArgsFlags = strings.NewReplacer(
	"args.olderThan", "-older-than",
	"args.table", "-table",
	"args.rkFrom", "-rk-from",
	"args.rkTo", "-rk-to",
	"args.pk", "-pk",
)

// runPurge enqueues one purge built from flags. The args are validated by
// the purge kind's own parser and Validate, so the CLI and the worker
// apply one rule set, and nothing is sent when they are invalid.
func (m *Main) runPurge(ctx context.Context, args []string) error {
	var (
		c            common
		src          sourceFlags
		table, older string
		id           string
	)
	fs := m.newFlagSet("purge",
		"purge -table T [-pk P [-rk-from A] [-rk-to B]] [-older-than 720h] [-id ID] [flags]",
		"Enqueues a purge: deletes the entities of a table, a partition (-pk) or the RowKey range\n"+
			"[-rk-from, -rk-to) of one, all of them or only those whose Timestamp is older than -older-than\n"+
			"before the job's first delivery, in batches of 100, resuming from a checkpoint. It prints the op\n"+
			"id and the message id. For tables kept one per day, prefer purgeday.", &c)
	fs.StringVar(&table, "table", "", "table to purge (required)")
	src.register(fs, "purge")
	fs.StringVar(&older, "older-than", "", "purge only entities whose Timestamp is older than this before the first delivery, such as 720h or 30d (default: every entity)")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	a := purge.Args{Table: table}
	a.PK, a.RKFrom, a.RKTo = src.given(set)
	if set["older-than"] {
		d, err := cli.ParseDuration(older)
		switch {
		case err != nil:
			return usagef("-older-than: %v", err)
		case d < 0:
			return usagef("-older-than: must not be negative, got %q", older)
		}
		a.OlderThan = (*jobs.Duration)(&d)
	}
	return m.sendKind(ctx, &c, set["id"], id, a, purgeArgsFlags)
}
