package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

type indexRow struct {
	Table string
	indexes.Decl
}

type indexesData struct {
	// Configured is false when the console has no worker config.
	Configured bool
	Indexes    []indexRow
}

// indexesPage lists the declared indexes, each with a button that checks
// it.
func (c *Console) indexesPage(w http.ResponseWriter, r *http.Request) {
	d := indexesData{Configured: c.indexes != nil}
	if c.indexes != nil {
		for _, table := range c.indexes.Tables() {
			for _, name := range c.indexes.Names(table) {
				decl, err := c.indexes.Declaration(table, name)
				if err != nil {
					c.fail(w, r, http.StatusInternalServerError, err)
					return
				}
				d.Indexes = append(d.Indexes, indexRow{Table: table, Decl: decl})
			}
		}
	}
	c.render(w, r, http.StatusOK, "indexes", page{Title: "Indexes and exports", Nav: "indexes", Data: d})
}

// maxFindingsShown bounds the findings a check's page lists; the counts
// cover all.
const maxFindingsShown = 50

// indexCheck starts a read-only check of one index as a task. It changes
// nothing, so a read-only console offers it too.
func (c *Console) indexCheck(w http.ResponseWriter, r *http.Request) {
	if !c.checkForm(w, r) {
		return
	}
	table, name := r.PostFormValue("table"), r.PostFormValue("index")
	if c.indexes == nil {
		c.fail(w, r, http.StatusNotFound, errors.New("no indexes are declared: start the console with the worker's -config"))
		return
	}
	if _, err := c.indexes.Declaration(table, name); err != nil {
		c.fail(w, r, http.StatusNotFound, err)
		return
	}
	t, running := c.tasks.start(reading, "Check index "+name+" of "+table, c.who(r), "indexes", func(ctx context.Context, t *task) ([]string, error) {
		var reads atomic.Int64
		var found []string
		obs := instrument.ObserverFunc(func(instrument.Call, time.Duration, error) {
			t.progress(poison.Progress{Phase: "storage calls", Done: int(reads.Add(1))})
		})
		x, err := indexes.Open(instrument.Wrap(c.cfg.Store, instrument.Options{Observers: []instrument.Observer{obs}}), c.cfg.Clock, *c.cfg.Indexes)
		if err != nil {
			return nil, err
		}
		res, err := x.Check(ctx, table, name, func(f indexes.Finding) error {
			if len(found) < maxFindingsShown {
				found = append(found, fmt.Sprintf("%s: %s/%s value %s %s", f.Problem, f.PK, f.RK, f.Value, f.Detail))
			}
			return nil
		})
		lines := []string{fmt.Sprintf("%d entities read, %d indexed, %d entries read: %d missing, %d stale, %d conflicts, %d unindexable (%d storage calls)",
			res.Entities, res.Indexed, res.Entries, res.Missing, res.Stale, res.Conflicts, res.Unindexable, reads.Load())}
		if res.Problems() > 0 {
			lines = append(lines, "'enqueue index rebuild -table "+table+"' repairs missing and stale entries")
		}
		return append(lines, found...), err
	})
	if t == nil {
		c.busy(w, r, running)
		return
	}
	http.Redirect(w, r, c.cfg.Base+"tasks/"+t.ID, http.StatusSeeOther)
}

type exportRow struct {
	Name string // container/blob of the manifest
	tableexport.Manifest
	Err string
}

type exportsData struct {
	To      string
	Targets []string
	Rows    []exportRow
	// Older counts the manifests found but not shown (the newest are).
	Older int
}

// shownExports bounds the manifests the page shows: the newest.
const shownExports = 50

// exportsPage lists the export manifests under ?to=container/prefix
// (tableexport.List: the whole listing, every manifest read once, within
// the page's time bound), newest first.
func (c *Console) exportsPage(w http.ResponseWriter, r *http.Request) {
	d := exportsData{To: r.FormValue("to"), Targets: c.cfg.Exports}
	if d.To == "" && len(c.cfg.Exports) > 0 {
		d.To = c.cfg.Exports[0]
	}
	if d.To == "" {
		c.render(w, r, http.StatusOK, "exports", page{Title: "Exports", Nav: "indexes", Data: d})
		return
	}
	container, prefix, err := tableexport.ParseTarget(d.To)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("to: %w", err))
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	entries, err := tableexport.List(ctx, c.cfg.Store.Container(container), prefix)
	if errors.Is(err, storeadapter.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("container %s does not exist", container))
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	// Newest first: List orders by scope, then start.
	slices.SortStableFunc(entries, func(a, b tableexport.Entry) int { return strings.Compare(b.Manifest.Started, a.Manifest.Started) })
	if len(entries) > shownExports {
		d.Older, entries = len(entries)-shownExports, entries[:shownExports]
	}
	for _, e := range entries {
		d.Rows = append(d.Rows, exportRow{Name: container + "/" + e.Name, Manifest: e.Manifest, Err: c.cfg.Redact(e.Problem)})
	}
	c.render(w, r, http.StatusOK, "exports", page{Title: "Exports", Nav: "indexes", Data: d})
}

// exportVerify starts the verification of one manifest as a task: every
// part read back, its length and SHA-256 compared. It changes nothing.
func (c *Console) exportVerify(w http.ResponseWriter, r *http.Request) {
	if !c.checkForm(w, r) {
		return
	}
	manifest := r.PostFormValue("manifest")
	container, name, ok := strings.Cut(manifest, "/")
	if !ok || storeadapter.ValidateContainerName(container) != nil || storeadapter.ValidateBlobName(name) != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("manifest %q is not container/path", manifest))
		return
	}
	back := "exports?to=" + url.QueryEscape(r.PostFormValue("to"))
	t, running := c.tasks.start(reading, "Verify export "+manifest, c.who(r), back, func(ctx context.Context, t *task) ([]string, error) {
		t.progress(poison.Progress{Phase: "reading the parts back"})
		rep, err := tableexport.Verify(ctx, c.cfg.Store.Container(container), name)
		if err != nil {
			return nil, err
		}
		verdict := "verified: every part is what the manifest says"
		if !rep.OK() {
			verdict = fmt.Sprintf("NOT verified: %d problem(s)", len(rep.Problems))
		}
		lines := []string{verdict, fmt.Sprintf("%d part(s), %d entities, %d bytes read back (manifest: %d entities, %d bytes)",
			rep.Parts, rep.Entities, rep.Bytes, rep.Manifest.Entities, rep.Manifest.Bytes)}
		return append(lines, rep.Problems...), nil
	})
	if t == nil {
		c.busy(w, r, running)
		return
	}
	http.Redirect(w, r, c.cfg.Base+"tasks/"+t.ID, http.StatusSeeOther)
}
