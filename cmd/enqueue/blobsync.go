package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// blobsyncUsage lists the blobsync subcommands.
const blobsyncUsage = `usage: enqueue blobsync <subcommand> [flags]

subcommands:
  offload    enqueue the offload of an entity's large properties to blobs:
               -table T -pk P -rk R [-property NAME] [-container C] [-id ID]
  attach     enqueue linking a blob the application uploaded to its entity:
               -table T -pk P -rk R -property NAME -container C -blob NAME [-id ID]
  reconcile  enqueue the repair of a table (or partition) against a container: references to
               missing blobs, stale references, orphaned blobs older than the grace period:
               -table T [-pk P] -container C [-prefix X] [-grace D] [-on-missing report|clear] [-id ID]
  get        print an entity with its offloaded and attached properties read back from their
               blobs and checked against their SHA-256 (exit status 1 on a mismatch):
               -table T -pk P -rk R

Run 'enqueue blobsync <subcommand> -h' for its flags.
`

// blobsyncArgsFlags renames the blobsync args fields in validation
// errors to the flags that set them.
var blobsyncArgsFlags = strings.NewReplacer(
	"args.table", "-table",
	"args.pk", "-pk",
	"args.rk", "-rk",
	"args.property", "-property",
	"args.container", "-container",
	"args.blob", "-blob",
	"args.prefix", "-prefix",
	"args.grace", "-grace",
	"args.onMissing", "-on-missing",
)

// runBlobsync runs one blobsync subcommand and returns its name for error
// messages ("blobsync get").
func (m *Main) runBlobsync(ctx context.Context, args []string) (string, error) {
	enqueue := func(mode string) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error { return m.blobsyncEnqueue(ctx, mode, args) }
	}
	return m.runGroup(ctx, "blobsync", blobsyncUsage, map[string]func(context.Context, []string) error{
		"offload": enqueue(blobsync.ModeOffload), "attach": enqueue(blobsync.ModeAttach),
		"reconcile": enqueue(blobsync.ModeReconcile), "get": m.blobsyncGet,
	}, args)
}

// blobsyncEnqueue enqueues one blobsync job of a mode, its args from
// flags. The args are checked by the kind's own Validate through the
// catalog, so nothing is sent that the worker would refuse on sight.
func (m *Main) blobsyncEnqueue(ctx context.Context, mode string, args []string) error {
	var (
		c                                                      common
		table, pk, rk, property, container, blob, prefix, miss string
		grace                                                  time.Duration
		id                                                     string
	)
	lines := map[string]string{
		blobsync.ModeOffload:   "-table T -pk P -rk R [-property NAME] [-container C] [-id ID]",
		blobsync.ModeAttach:    "-table T -pk P -rk R -property NAME -container C -blob NAME [-id ID]",
		blobsync.ModeReconcile: "-table T [-pk P] -container C [-prefix X] [-grace D] [-on-missing report|clear] [-id ID]",
	}
	about := map[string]string{
		blobsync.ModeOffload: "Enqueues an offload: property -property of entity -pk/-rk of -table (or, without -property, the\n" +
			"properties the worker's config declares for the table and those over its offloadOver) goes to a blob\n" +
			"of container -container (default: the config's) under <prefix>/<table>/<pk>/<rk>/<property>/<sha256>,\n" +
			"and the entity keeps the reference TkBlob_<property>. It prints the op id and the message id.",
		blobsync.ModeAttach: "Enqueues an attach: blob -blob of container -container, which the application uploaded, becomes\n" +
			"property -property of entity -pk/-rk of -table (its reference TkBlob_<property> records the blob's ETag,\n" +
			"length, content type and SHA-256). Enqueue it again after overwriting the blob to refresh the reference.",
		blobsync.ModeReconcile: "Enqueues a reconcile of -table (or partition -pk) with container -container: references to missing\n" +
			"blobs are reported or cleared (-on-missing), stale references refreshed, and managed blobs under\n" +
			"<prefix>/<table>/ older than the grace period that their entity does not name are deleted. It saves\n" +
			"its position under its op id, so a redelivered message resumes; use a new -id to start over.",
	}
	fs := m.newFlagSet("blobsync "+mode, "blobsync "+mode+" "+lines[mode]+" [flags]", about[mode], &c)
	fs.StringVar(&table, "table", "", "table (required)")
	fs.StringVar(&pk, "pk", "", "PartitionKey")
	if mode != blobsync.ModeReconcile {
		fs.StringVar(&rk, "rk", "", "RowKey (required)")
		fs.StringVar(&property, "property", "", "property name, at most 248 characters")
	}
	fs.StringVar(&container, "container", "", "blob container")
	switch mode {
	case blobsync.ModeAttach:
		fs.StringVar(&blob, "blob", "", "the application's blob, in -container (required)")
	case blobsync.ModeReconcile:
		fs.StringVar(&prefix, "prefix", "", "prefix of the managed blob names (default: the config's for the table)")
		cli.DurationVar(fs, &grace, "grace", 0, "keep unreferenced blobs younger than this (default: the config's, 24h; at least the longest maxRunTime of blobsync, archive, copy and restore)")
		fs.StringVar(&miss, "on-missing", "", "report or clear references whose blob is gone (default: the config's, report)")
	}
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	a := blobsync.Args{Mode: mode, Table: table, PK: pk, RK: rk, Property: property, Container: container, Blob: blob,
		Prefix: prefix, OnMissing: miss}
	set := visited(fs)
	for _, f := range []string{"pk", "rk", "property", "container", "blob", "prefix", "on-missing"} {
		if set[f] && fs.Lookup(f).Value.String() == "" {
			return usagef("-%s: must not be empty (leave the flag out instead)", f)
		}
	}
	if set["grace"] {
		d := jobs.Duration(grace)
		a.Grace = &d
	}
	return m.sendKind(ctx, &c, set["id"], id, a, blobsyncArgsFlags)
}

// blobsyncGetJSON is what get -o json prints: the entity in annotated
// OData JSON (every EDM type kept) with its blob properties restored, and
// where each of those came from.
type blobsyncGetJSON struct {
	Table  string          `json:"table"`
	PK     string          `json:"pk"`
	RK     string          `json:"rk"`
	Entity json.RawMessage `json:"entity"`
	Blobs  []blobsyncBlob  `json:"blobs"`
}

// blobsyncBlob is one property read back from its blob.
type blobsyncBlob struct {
	Property string `json:"property"`
	largeentity.Ref
}

// blobsyncGet prints an entity with its blob properties read back and
// verified. A blob that does not match its reference fails the command
// (exit status 1) with the property named.
func (m *Main) blobsyncGet(ctx context.Context, args []string) error {
	var (
		c             common
		table, pk, rk string
	)
	fs := m.newFlagSet("blobsync get", "blobsync get -table T -pk P -rk R [flags]",
		"Prints entity -pk/-rk of -table with every TkBlob_<property> reference replaced by the property read\n"+
			"back from its blob, its SHA-256 and length checked and its type (Edm.String or Edm.Binary) restored.\n"+
			"The exit status is 1 when a blob is missing or does not match its reference.", &c)
	fs.StringVar(&table, "table", "", "table (required)")
	fs.StringVar(&pk, "pk", "", "PartitionKey (required)")
	fs.StringVar(&rk, "rk", "", "RowKey (required)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := checkTableFlag(table); err != nil {
		return err
	}
	for _, k := range []struct{ flag, v string }{{"pk", pk}, {"rk", rk}} {
		if err := storeadapter.ValidateKey(k.flag, k.v); err != nil {
			return usagef("-%s: %v", k.flag, err)
		}
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	raw, err := store.Tables().GetEntity(ctx, table, pk, rk)
	if err != nil {
		if errors.Is(err, storeadapter.ErrNotFound) {
			return fmt.Errorf("%s %s/%s does not exist: %w", table, pk, rk, err)
		}
		return err
	}
	var blobs []blobsyncBlob
	for _, p := range largeentity.Refs(raw) {
		if _, inline := raw.Properties[p]; inline {
			continue
		}
		if ref, ok, err := largeentity.RefOf(raw, p); ok && err == nil {
			blobs = append(blobs, blobsyncBlob{Property: p, Ref: ref})
		}
	}
	slices.SortFunc(blobs, func(a, b blobsyncBlob) int { return strings.Compare(a.Property, b.Property) })
	e, err := largeentity.Restore(ctx, store, raw)
	if err != nil {
		return err
	}
	if c.json() {
		data, err := storeadapter.MarshalEntityJSON(e)
		if err != nil {
			return err
		}
		return writeJSON(m.Stdout, blobsyncGetJSON{Table: table, PK: pk, RK: rk, Entity: data, Blobs: blobs})
	}
	from := map[string]blobsyncBlob{}
	for _, b := range blobs {
		from[b.Property] = b
	}
	names := make([]string, 0, len(e.Properties))
	for name := range e.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	tw := newTable(m.Stdout)
	row(tw, "PROPERTY", "VALUE", "FROM")
	for _, name := range names {
		src := "entity"
		if b, ok := from[name]; ok {
			src = fmt.Sprintf("%s %s/%s (%d bytes, sha256 verified)", b.Mode, b.Container, b.Name, b.Length)
		}
		row(tw, name, cell(storeadapter.Format(e.Properties[name]), 100), src)
	}
	return tw.Flush()
}
