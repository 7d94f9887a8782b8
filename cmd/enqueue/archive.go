package main

import (
	"context"
	"flag"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs/archive"
)

// archiveArgsFlags renames the archive args fields in validation errors to
// the flags that set them. Longer names come first: the replacer tries its
// pairs in order at each position.
var archiveArgsFlags = strings.NewReplacer(
	"args.toBlob", "-to-blob",
	"args.table", "-table",
	"args.rkFrom", "-rk-from",
	"args.rkTo", "-rk-to",
	"args.rk", "-rk",
	"args.pk", "-pk",
	"args.to", "-to",
)

// runArchive enqueues one archive move built from flags. The args are
// validated by the archive kind's own parser and Validate, so the CLI and
// the worker apply one rule set, and nothing is sent when they are
// invalid.
func (m *Main) runArchive(ctx context.Context, args []string) error {
	var (
		c                                       common
		table, to, toBlob, pk, rk, rkFrom, rkTo string
		id                                      string
	)
	fs := m.newFlagSet("archive",
		"archive -table T (-to A | -to-blob container/prefix) -pk P (-rk R | -rk-from A [-rk-to B]) [-id ID] [flags]",
		"Enqueues an archive move: one entity (-rk) or the RowKey range [-rk-from, -rk-to) of partition -pk,\n"+
			"from table -table to table -to or to blobs under -to-blob. It prints the op id and the message id.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&to, "to", "", "target table (or -to-blob)")
	fs.StringVar(&toBlob, "to-blob", "", "target blobs: \"container\" or \"container/prefix\", no . or .. segments (or -to)")
	fs.StringVar(&pk, "pk", "", "PartitionKey (required)")
	fs.StringVar(&rk, "rk", "", "RowKey of the one entity to move (or -rk-from)")
	fs.StringVar(&rkFrom, "rk-from", "", "first RowKey of the range to move (\"\" for the first row)")
	fs.StringVar(&rkTo, "rk-to", "", "RowKey the range stops before (omit to run to the last row)")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// Rules of the flags themselves; the rules of the args are the archive
	// kind's own (its Validate, through jobs.ParseArgs below).
	switch {
	case set["rk"] && set["rk-to"]:
		return usagef("-rk and -rk-to: give one, not both (-rk-to ends a range that starts at -rk-from)")
	case set["rk-to"] && !set["rk-from"]:
		return usagef("-rk-to: needs -rk-from (use -rk-from '' to start at the first row)")
	}

	a := archive.Args{Table: table, To: to, ToBlob: toBlob}
	if set["pk"] {
		a.PK = &pk
	}
	if set["rk"] {
		a.RK = &rk
	}
	if set["rk-from"] {
		a.RKFrom = &rkFrom
	}
	if set["rk-to"] {
		a.RKTo = &rkTo
	}
	return m.sendKind(ctx, &c, set["id"], id, a, archiveArgsFlags)
}
