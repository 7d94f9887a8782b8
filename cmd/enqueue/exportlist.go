package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// afterUsable checks, before an increment is sent, that its -after
// manifest exists, is of the same scope and records a mark: the worker
// would poison the job for any of these.
func afterUsable(a export.Args) func(context.Context, storeadapter.Store) error {
	return func(ctx context.Context, store storeadapter.Store) error {
		if a.After == "" {
			return nil
		}
		container, name, _ := tableexport.ParseManifestRef(a.After) // validated
		m, err := tableexport.ReadManifest(ctx, store.Container(container), name)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return fmt.Errorf("-after: manifest %s does not exist (nothing was sent)", a.After)
		}
		if err != nil {
			return fmt.Errorf("-after: %w", err)
		}
		want := tableexport.ScopeOf(storeadapter.Range{Table: a.Table, PK: a.PK, RKFrom: a.RKFrom, RKTo: a.RKTo})
		switch {
		case m.Scope() != want:
			return fmt.Errorf("-after: manifest %s is an export of %s, not of %s (nothing was sent)", a.After, m.Scope(), want)
		case m.Mark == "":
			return fmt.Errorf("-after: manifest %s records no mark (written before increments): give -since instead (nothing was sent)", a.After)
		}
		return nil
	}
}

// exportTarget parses -to of list and prune and connects.
func (m *Main) exportTarget(c *common, to string) (storeadapter.Blobs, string, error) {
	if to == "" {
		return nil, "", usagef("-to: is required (container or container/prefix)")
	}
	container, prefix, err := tableexport.ParseTarget(to)
	if err != nil {
		return nil, "", usagef("-to: %v", err)
	}
	store, err := m.connect(c)
	if err != nil {
		return nil, "", err
	}
	return store.Container(container), prefix, nil
}

// listedJSON is one export of "export list -o json".
type listedJSON struct {
	Manifest    string   `json:"manifest"`
	Op          string   `json:"op,omitempty"`
	Scope       string   `json:"scope,omitempty"`
	Started     string   `json:"started,omitempty"`
	Finished    string   `json:"finished,omitempty"`
	Incremental bool     `json:"incremental"`
	Since       string   `json:"since,omitempty"`
	After       string   `json:"after,omitempty"`
	Mark        string   `json:"mark,omitempty"`
	Entities    int64    `json:"entities"`
	Bytes       int64    `json:"bytes"`
	Parts       int      `json:"parts"`
	Verified    *bool    `json:"verified"`
	Problems    []string `json:"problems"`
}

// exportList lists the exports under a prefix (their manifests), and with
// -verify checks each one as 'export verify' does.
func (m *Main) exportList(ctx context.Context, args []string) error {
	var (
		c      common
		to     string
		verify bool
	)
	fs := m.newFlagSet("export list", "export list -to container/prefix [-verify] [flags]",
		"Lists the exports under a prefix — every manifest-<op>.json below it — oldest first per scope (table,\n"+
			"partition, range): start, rows, size, whether it is full or an increment, its since and the mark the\n"+
			"next increment starts from. -verify also checks each export as 'export verify' does, reading every\n"+
			"part back (as many reads as the exports hold); exit status 1 when one does not verify. Read-only.", &c)
	fs.StringVar(&to, "to", "", "the exports' container or container/prefix, as given to 'enqueue export -to' (required)")
	fs.BoolVar(&verify, "verify", false, "verify each export (reads every part)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	b, prefix, err := m.exportTarget(&c, to)
	if err != nil {
		return err
	}
	entries, err := tableexport.List(ctx, b, prefix)
	if err != nil {
		return err
	}
	out := make([]listedJSON, 0, len(entries))
	failed := 0
	for _, e := range entries {
		mf := e.Manifest
		l := listedJSON{Manifest: b.Name() + "/" + e.Name, Op: mf.Op, Scope: mf.Scope(), Started: mf.Started, Finished: mf.Finished,
			Incremental: mf.Incremental(), Since: mf.Since, After: mf.After, Mark: mf.Mark,
			Entities: mf.Entities, Bytes: mf.Bytes, Parts: len(mf.Parts), Problems: []string{}}
		if e.Problem != "" {
			l.Scope, l.Problems = "", []string{e.Problem}
			ok := false
			l.Verified = &ok
			failed++
		} else if verify {
			rep, err := tableexport.Verify(ctx, b, e.Name)
			if err != nil {
				return err
			}
			ok := rep.OK()
			l.Verified = &ok
			if !ok {
				l.Problems = rep.Problems
				failed++
			}
		}
		out = append(out, l)
	}
	if c.json() {
		if err := writeJSON(m.Stdout, out); err != nil {
			return err
		}
	} else if err := m.printList(out, b.Name()+"/"+prefix); err != nil {
		return err
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

func (m *Main) printList(out []listedJSON, where string) error {
	if len(out) == 0 {
		fmt.Fprintf(m.Stdout, "no export under %s\n", where)
		return nil
	}
	tw := newTable(m.Stdout)
	row(tw, "SCOPE", "STARTED", "KIND", "ROWS", "BYTES", "SINCE", "MARK", "VERIFIED", "MANIFEST")
	for _, l := range out {
		kind, verified := "full", "-"
		if l.Incremental {
			kind = "increment"
		}
		if l.Verified != nil {
			verified = "ok"
			if !*l.Verified {
				verified = fmt.Sprintf("%d problems", len(l.Problems))
			}
		}
		row(tw, or(l.Scope, "?"), or(l.Started, "-"), kind, strconv.FormatInt(l.Entities, 10), strconv.FormatInt(l.Bytes, 10),
			or(l.Since, "-"), or(l.Mark, "-"), verified, l.Manifest)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range out {
		for _, p := range l.Problems {
			fmt.Fprintf(m.Stdout, "%s: %s\n", l.Manifest, p)
		}
	}
	return nil
}

func or(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// exportPrune deletes the exports under a prefix that finished more than
// -keep-days ago and that no kept export depends on
// (tableexport.PlanPrune has the rule). Dry run unless -yes.
func (m *Main) exportPrune(ctx context.Context, args []string) error {
	var (
		c    common
		to   string
		keep int
		yes  bool
	)
	fs := m.newFlagSet("export prune", "export prune -to container/prefix -keep-days N [-yes] [flags]",
		"Deletes the exports under a prefix that finished more than -keep-days days ago — their parts, then\n"+
			"their manifests — except what a kept export needs: per scope, the newest full export started no\n"+
			"later than the oldest kept export (or the newest full export) and every export after it are kept,\n"+
			"and a scope without a full export keeps its increments. Without -yes it deletes nothing and prints\n"+
			"what it would delete and why. Running it again is harmless: what is gone is skipped.", &c)
	fs.StringVar(&to, "to", "", "the exports' container or container/prefix, as given to 'enqueue export -to' (required)")
	fs.IntVar(&keep, "keep-days", 0, "keep the exports that finished in the last N days, 1-36500 (required)")
	fs.BoolVar(&yes, "yes", false, "delete (default: a dry run)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if keep < 1 || keep > 36500 {
		return usagef("-keep-days: must be 1-36500, got %d", keep)
	}
	b, prefix, err := m.exportTarget(&c, to)
	if err != nil {
		return err
	}
	entries, err := tableexport.List(ctx, b, prefix)
	if err != nil {
		return err
	}
	cut := m.now().Add(-time.Duration(keep) * 24 * time.Hour)
	type decisionJSON struct {
		Manifest string `json:"manifest"`
		Scope    string `json:"scope"`
		Finished string `json:"finished"`
		Delete   bool   `json:"delete"`
		Reason   string `json:"reason"`
		// DeletedParts counts the parts this run deleted.
		DeletedParts int `json:"deletedParts"`
	}
	var out []decisionJSON
	deleted := 0
	for _, d := range tableexport.PlanPrune(entries, cut) {
		j := decisionJSON{Manifest: b.Name() + "/" + d.Name, Scope: d.Manifest.Scope(), Finished: d.Manifest.Finished, Delete: d.Delete, Reason: d.Reason}
		if d.Problem != "" {
			j.Scope = ""
		}
		if d.Delete && yes {
			del, err := tableexport.DeleteExport(ctx, b, d.Manifest)
			if err != nil {
				return fmt.Errorf("prune %s (%d parts deleted so far; run again to finish): %w", j.Manifest, del.Parts, err)
			}
			j.DeletedParts = del.Parts
			deleted++
		}
		out = append(out, j)
	}
	if c.json() {
		if out == nil {
			out = []decisionJSON{}
		}
		return writeJSON(m.Stdout, struct {
			DryRun  bool           `json:"dryRun"`
			Cut     string         `json:"cut"`
			Exports []decisionJSON `json:"exports"`
			Deleted int            `json:"deleted"`
		}{!yes, storeadapter.FormatDateTime(cut), out, deleted})
	}
	tw := newTable(m.Stdout)
	row(tw, "ACTION", "FINISHED", "SCOPE", "MANIFEST", "WHY")
	would := 0
	for _, j := range out {
		action := "keep"
		if j.Delete {
			action, would = "delete", would+1
		}
		row(tw, action, or(j.Finished, "-"), or(j.Scope, "?"), j.Manifest, j.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !yes {
		fmt.Fprintf(m.Stdout, "dry run: would delete %d of %d exports (cut: finished before %s; run again with -yes)\n", would, len(out), storeadapter.FormatDateTime(cut))
		return nil
	}
	fmt.Fprintf(m.Stdout, "deleted %d of %d exports (cut: finished before %s)\n", deleted, len(out), storeadapter.FormatDateTime(cut))
	return nil
}
