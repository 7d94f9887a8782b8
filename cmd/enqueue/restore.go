package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// restoreArgsFlags renames the restore args fields in validation errors
// to the flags that set them.
var restoreArgsFlags = strings.NewReplacer(
	"args.manifests", "-manifest",
	"args.table", "-table",
	"args.mode", "-mode",
)

// runRestore is "enqueue restore": it enqueues a restore of one export, or
// of a chain, built from flags; with -dry-run it sends nothing and prints
// what the restore would write, skip and delete.
func (m *Main) runRestore(ctx context.Context, args []string) error {
	var (
		c               common
		manifests       listFlag
		table, mode, id string
		dryRun          bool
	)
	fs := m.newFlagSet("restore",
		"restore -manifest container/path/manifest-<op>.json [-manifest M2 ...] [-table T] [-mode insert|replace|mirror] [-dry-run] [-id ID] [flags]",
		"Enqueues a restore of an export into a table: every part is checked against the manifest's length\n"+
			"and SHA-256 before any of it is written. -mode insert (the default) adds the rows the table lacks;\n"+
			"replace overwrites every exported row; mirror replaces, then deletes the table's rows in the\n"+
			"exported scope that the export does not hold. Several -manifest flags are a chain (a full export,\n"+
			"then its increments, in order), restored with -mode replace. -dry-run sends nothing: it checks the\n"+
			"parts, reads the table and prints what would be written, skipped and deleted.", &c)
	fs.Var(&manifests, "manifest", "an export's manifest, container/path/manifest-<op>.json (required; repeat for a chain, in order)")
	fs.StringVar(&table, "table", "", "target table (default: the table the first manifest exported)")
	fs.StringVar(&mode, "mode", "", "insert (default), replace or mirror")
	fs.BoolVar(&dryRun, "dry-run", false, "send nothing: check the parts and print what would be written, skipped and deleted")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	a := restore.Args{Manifests: manifests, Table: table, Mode: mode}
	if !dryRun {
		return m.sendKind(ctx, &c, set["id"], id, a, restoreArgsFlags, manifestsExist(manifests))
	}
	if err := a.Validate(); err != nil {
		return usagef("%s", restoreArgsFlags.Replace(err.Error()))
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	p, err := restore.Plan(ctx, store, a)
	if err != nil {
		return fmt.Errorf("%s (nothing was sent)", strings.TrimPrefix(unpermanent(err).Error(), "restore: "))
	}
	if c.json() {
		return writeJSON(m.Stdout, struct {
			Table     string `json:"table"`
			Mode      string `json:"mode"`
			Manifests int    `json:"manifests"`
			Parts     int    `json:"parts"`
			Rows      int64  `json:"rows"`
			Write     int64  `json:"write"`
			Skip      int64  `json:"skip"`
			Delete    int64  `json:"delete"`
		}{p.Table, cmpMode(mode), p.Manifests, p.Parts, p.Rows, p.Write, p.Skip, p.Delete})
	}
	fmt.Fprintf(m.Stdout, "dry run (nothing sent): restore, mode %s, of %d rows in %d parts of %d manifests, every part checked:\n",
		cmpMode(mode), p.Rows, p.Parts, p.Manifests)
	tw := newTable(m.Stdout)
	row(tw, "TABLE", "WRITE", "SKIP", "DELETE")
	row(tw, p.Table, fmt.Sprint(p.Write), fmt.Sprint(p.Skip), fmt.Sprint(p.Delete))
	return tw.Flush()
}

func cmpMode(mode string) string {
	if mode == "" {
		return restore.ModeInsert
	}
	return mode
}

// unpermanent is err without the jobs.Permanent wrapper's words, for an
// operator's terminal.
func unpermanent(err error) error {
	if jobs.IsPermanent(err) {
		if u := errors.Unwrap(err); u != nil {
			return u
		}
	}
	return err
}

// manifestsExist checks, before anything is sent, that every manifest can
// be read: a missing one would be poisoned by the worker.
func manifestsExist(refs []string) func(context.Context, storeadapter.Store) error {
	return func(ctx context.Context, store storeadapter.Store) error {
		for _, ref := range refs {
			container, name, _ := restore.SplitManifest(ref) // validated
			_, err := tableexport.ReadManifest(ctx, store.Container(container), name)
			if errors.Is(err, storeadapter.ErrNotFound) {
				return fmt.Errorf("-manifest: %s does not exist (nothing was sent)", ref)
			}
			if err != nil {
				return fmt.Errorf("-manifest: %w (nothing was sent)", err)
			}
		}
		return nil
	}
}
