package main

import (
	"context"
	"flag"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exportArgsFlags renames the export args fields in validation errors to
// the flags that set them. Longer names come first: the replacer tries its
// pairs in order at each position.
var exportArgsFlags = strings.NewReplacer(
	"args.maxPartBytes", "-max-part-bytes",
	"args.table", "-table",
	"args.rkFrom", "-rk-from",
	"args.rkTo", "-rk-to",
	"args.gzip", "-gzip",
	"args.pk", "-pk",
	"args.to", "-to",
	"args.since", "-since",
	"args.afterLatest", "-after-latest",
	"args.after", "-after",
)

// runExport is "enqueue export": "verify" checks a manifest, "clean"
// deletes its stray parts, anything else enqueues an export built from
// flags.
func (m *Main) runExport(ctx context.Context, args []string) (string, error) {
	if len(args) > 0 && args[0] == "verify" {
		return "export verify", m.exportVerify(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "clean" {
		return "export clean", m.exportClean(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "list" {
		return "export list", m.exportList(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "prune" {
		return "export prune", m.exportPrune(ctx, args[1:])
	}
	return "export", m.exportEnqueue(ctx, args)
}

// exportEnqueue enqueues one export. The args are validated by the export
// kind's own parser and Validate, so the CLI and the worker apply one rule
// set, and nothing is sent when they are invalid.
func (m *Main) exportEnqueue(ctx context.Context, args []string) error {
	var (
		c            common
		src          sourceFlags
		table, to    string
		id, maxPart  string
		since, after string
		gzip, latest bool
	)
	fs := m.newFlagSet("export",
		"export -table T [-pk P [-rk-from A] [-rk-to B]] -to container/prefix [-since T | -after M | -after-latest] [-gzip] [-max-part-bytes N] [-id ID] [flags]",
		"Enqueues an export of a table, a partition (-pk) or the RowKey range [-rk-from, -rk-to) of one to\n"+
			"JSON-lines blobs <prefix>/<table>/YYYY/MM/DD/HHMM/NNNNNN.jsonl and a manifest\n"+
			"manifest-<op>.json beside them (see 'enqueue export verify'). With -since, -after or -after-latest it is an\n"+
			"increment: only the rows written (inserted or updated) since then. Every manifest records the mark\n"+
			"the next increment starts from (-after it). Deletions are not seen by increments. It prints the op\n"+
			"id and the message id. Subcommands: verify, clean, list, prune.", &c)
	fs.StringVar(&table, "table", "", "table to export (required)")
	src.register(fs, "export")
	fs.StringVar(&to, "to", "", "target blobs: \"container\" or \"container/prefix\", no . or .. segments (required; the container must exist: checked before sending)")
	fs.StringVar(&since, "since", "", "export only the rows whose Timestamp is at or after this RFC 3339 time (2026-11-21T00:00:00Z)")
	fs.StringVar(&after, "after", "", "export only the rows written since the mark of this earlier export of the same scope: its manifest, container/path/manifest-<op>.json (checked before sending)")
	fs.BoolVar(&latest, "after-latest", false, "as -after, with the newest export of the same scope under -to that records a mark, found by the worker (for schedules)")
	fs.BoolVar(&gzip, "gzip", false, "gzip each part (.jsonl.gz)")
	fs.StringVar(&maxPart, "max-part-bytes", "", "size cap of a part in uncompressed bytes, 1024-4294967296 (default: the worker's export.maxPartBytes, 64 MiB)")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	a := export.Args{Table: table, To: to, Gzip: gzip, After: after, AfterLatest: latest}
	a.PK, a.RKFrom, a.RKTo = src.given(set)
	if set["since"] {
		a.Since = &since
	}
	if set["max-part-bytes"] {
		n, err := strconv.ParseInt(maxPart, 10, 64)
		if err != nil {
			return usagef("-max-part-bytes: %q is not a whole number of bytes", maxPart)
		}
		a.MaxPartBytes = &n
	}
	return m.sendKind(ctx, &c, set["id"], id, a, exportArgsFlags, containerExists("to", to), afterUsable(a))
}

// exportVerify reads a manifest and checks every part it lists against
// it (tableexport.Verify). It prints the parts checked and every problem;
// the exit status is 1 when it finds one.
func (m *Main) exportVerify(ctx context.Context, args []string) error {
	var (
		c  common
		mf manifestFlags
	)
	fs := m.newFlagSet("export verify",
		"export verify (-manifest container/path/manifest-<op>.json | -to container/prefix -table T -id OP) [flags]",
		"Reads an export's manifest and checks each part it lists: present, its SHA-256, size and line count\n"+
			"as the manifest says, every line parseable, its metadata in agreement; and no unlisted part of the\n"+
			"same export in its folder. Read-only. Exit status 1 when it finds a problem ('export clean' deletes\n"+
			"unlisted parts).", &c)
	mf.register(fs)
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	store, container, name, err := m.findExport(ctx, &c, mf)
	if err != nil {
		return err
	}
	rep, err := tableexport.Verify(ctx, store.Container(container), name)
	if err != nil {
		return err
	}
	if err := m.printVerify(&c, container, rep); err != nil {
		return err
	}
	if !rep.OK() {
		return errReported
	}
	return nil
}

// exportClean deletes the stray parts of a finished export: parts of its
// operation in its folder that the manifest does not list (a run that
// lost its registration to another wrote them). Dry run unless -yes.
func (m *Main) exportClean(ctx context.Context, args []string) error {
	var (
		c   common
		mf  manifestFlags
		yes bool
	)
	fs := m.newFlagSet("export clean",
		"export clean (-manifest container/path/manifest-<op>.json | -to container/prefix -table T -id OP) [-yes] [flags]",
		"Lists the stray parts of a finished export — parts of its operation in its folder that its manifest\n"+
			"does not list, written by a run that lost its registration to another (their rows are in the listed\n"+
			"parts) — and with -yes deletes them, each If-Match its ETag; 'export verify' then finds none. Without\n"+
			"-yes it deletes nothing.", &c)
	mf.register(fs)
	fs.BoolVar(&yes, "yes", false, "delete the stray parts (default: a dry run that lists them)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	store, container, name, err := m.findExport(ctx, &c, mf)
	if err != nil {
		return err
	}
	cl, err := tableexport.CleanStrays(ctx, store.Container(container), name, !yes)
	if err != nil {
		return err
	}
	if c.json() {
		strays := cl.Strays
		if strays == nil {
			strays = []string{}
		}
		return writeJSON(m.Stdout, struct {
			Manifest string   `json:"manifest"`
			DryRun   bool     `json:"dryRun"`
			Strays   []string `json:"strays"`
			Deleted  int      `json:"deleted"`
			Raced    int      `json:"raced"`
		}{container + "/" + name, !yes, strays, cl.Deleted, cl.Raced})
	}
	for _, s := range cl.Strays {
		fmt.Fprintln(m.Stdout, container+"/"+s)
	}
	switch {
	case !yes && len(cl.Strays) > 0:
		fmt.Fprintf(m.Stdout, "dry run: would delete %d stray parts of %s/%s (run again with -yes)\n", len(cl.Strays), container, name)
	case !yes:
		fmt.Fprintf(m.Stdout, "no stray part: %s/%s lists every part of its operation\n", container, name)
	default:
		fmt.Fprintf(m.Stdout, "deleted %d of %d stray parts of %s/%s", cl.Deleted, len(cl.Strays), container, name)
		if cl.Raced > 0 {
			fmt.Fprintf(m.Stdout, " (%d changed or gone meanwhile, left)", cl.Raced)
		}
		fmt.Fprintln(m.Stdout)
	}
	return nil
}

// manifestFlags name an export's manifest, directly or by its folder,
// table and operation id.
type manifestFlags struct {
	manifest, to, table, id string
}

func (f *manifestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.manifest, "manifest", "", "the manifest: container/name")
	fs.StringVar(&f.to, "to", "", "or find the manifest of export -id of -table under this container/prefix")
	fs.StringVar(&f.table, "table", "", "the exported table (with -to)")
	fs.StringVar(&f.id, "id", "", "the export's operation id (with -to)")
}

// findExport checks the manifest flags, connects and returns the store,
// the container and the manifest's name.
func (m *Main) findExport(ctx context.Context, c *common, f manifestFlags) (storeadapter.Store, string, string, error) {
	var container, name string
	switch {
	case f.manifest != "" && f.to != "":
		return nil, "", "", usagef("-manifest and -to: give one, not both")
	case f.manifest != "":
		var ok bool
		if container, name, ok = strings.Cut(f.manifest, "/"); !ok || name == "" {
			return nil, "", "", usagef("-manifest: %q is not container/path", f.manifest)
		}
		if err := storeadapter.ValidateContainerName(container); err != nil {
			return nil, "", "", usagef("-manifest: %v", err)
		}
		if err := storeadapter.ValidateBlobName(name); err != nil {
			return nil, "", "", usagef("-manifest: %v", err)
		}
	case f.to != "":
		if f.table == "" || f.id == "" {
			return nil, "", "", usagef("-to: needs -table and -id to find the manifest")
		}
		var err error
		if container, _, err = tableexport.ParseTarget(f.to); err != nil {
			return nil, "", "", usagef("-to: %v", err)
		}
		if err := storeadapter.ValidateTableName(f.table); err != nil {
			return nil, "", "", usagef("-table: %v", err)
		}
	default:
		return nil, "", "", usagef("-manifest: is required (or -to with -table and -id)")
	}
	store, err := m.connect(c)
	if err != nil {
		return nil, "", "", err
	}
	if name == "" {
		_, prefix, _ := tableexport.ParseTarget(f.to) // checked above
		if name, err = findManifest(ctx, store.Container(container), path.Join(prefix, f.table)+"/", f.id); err != nil {
			return nil, "", "", err
		}
	}
	return store, container, name, nil
}

// findManifest returns the name of export id's manifest under folder
// (<prefix>/<table>/), listing the folder's blobs.
func findManifest(ctx context.Context, b storeadapter.Blobs, folder, id string) (string, error) {
	leaf := "manifest-" + id + ".json"
	for marker := ""; ; {
		page, err := b.List(ctx, folder, marker)
		if err != nil {
			return "", fmt.Errorf("list %s/%s: %w", b.Name(), folder, err)
		}
		for _, p := range page.Blobs {
			if path.Base(p.Name) == leaf {
				return p.Name, nil
			}
		}
		if marker = page.Next; marker == "" {
			return "", fmt.Errorf("no manifest %s under %s/%s: %w", leaf, b.Name(), folder, storeadapter.ErrNotFound)
		}
	}
}

// printVerify prints a verify report.
func (m *Main) printVerify(c *common, container string, rep tableexport.Report) error {
	if c.json() {
		problems := rep.Problems
		if problems == nil {
			problems = []string{}
		}
		return writeJSON(m.Stdout, struct {
			Manifest string   `json:"manifest"`
			Op       string   `json:"op"`
			Table    string   `json:"table"`
			OK       bool     `json:"ok"`
			Parts    int      `json:"parts"`
			Entities int64    `json:"entities"`
			Bytes    int64    `json:"bytes"`
			Problems []string `json:"problems"`
		}{container + "/" + rep.Manifest.Name, rep.Manifest.Op, rep.Manifest.Table, rep.OK(), rep.Parts, rep.Entities, rep.Bytes, problems})
	}
	tw := newTable(m.Stdout)
	row(tw, "PART", "ENTITIES", "BYTES", "SHA256")
	for _, p := range rep.Manifest.Parts {
		row(tw, p.Name, strconv.FormatInt(p.Entities, 10), strconv.FormatInt(p.Bytes, 10), p.SHA256)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "\nmanifest %s/%s (op %s, table %s): %d parts, %d entities, %d bytes read back\n",
		container, rep.Manifest.Name, rep.Manifest.Op, rep.Manifest.Table, rep.Parts, rep.Entities, rep.Bytes)
	if rep.OK() {
		fmt.Fprintln(m.Stdout, "ok: every part matches the manifest")
		return nil
	}
	fmt.Fprintf(m.Stdout, "%d problems:\n", len(rep.Problems))
	for _, p := range rep.Problems {
		fmt.Fprintln(m.Stdout, "  "+p)
	}
	return nil
}

// sourceFlags are the -pk, -rk-from and -rk-to flags of a command whose
// kind takes a storeadapter.Range: a table, one partition, or a RowKey
// range of one.
type sourceFlags struct{ pk, rkFrom, rkTo string }

// register adds the three flags to fs; verb ("export", "purge") names
// what the command does with the rows.
func (s *sourceFlags) register(fs *flag.FlagSet, verb string) {
	fs.StringVar(&s.pk, "pk", "", "PartitionKey of the one partition to "+verb+" (default: the whole table)")
	fs.StringVar(&s.rkFrom, "rk-from", "", "first RowKey of the range (needs -pk)")
	fs.StringVar(&s.rkTo, "rk-to", "", "RowKey the range stops before (needs -pk; omit to run to the last row)")
}

// given returns the flags that were set (in set, as visited returns it),
// nil for the others: an empty value given is a bound, not no bound.
func (s *sourceFlags) given(set map[string]bool) (pk, rkFrom, rkTo *string) {
	if set["pk"] {
		pk = &s.pk
	}
	if set["rk-from"] {
		rkFrom = &s.rkFrom
	}
	if set["rk-to"] {
		rkTo = &s.rkTo
	}
	return pk, rkFrom, rkTo
}
