package catalog_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestBackupKeepsOffloadedBlobs: a table whose large properties blobsync
// offloaded is exported, deleted, its blobs collected by a reconcile — the
// bad day a backup is for — and restored whole: the export holds each
// offloaded value beside its reference, and restore puts it back in a
// blob of the restored row (a crash at the first put included). A copy of
// the table gets blobs of its own, which a reconcile of the source does
// not collect.
func TestBackupKeepsOffloadedBlobs(t *testing.T) {
	const copied = "EmployeesCopy"
	cfg := catalog.Config{}
	cfg.Blobsync.Tables = largeentity.Layout{{Table: staff, Container: "staff-blobs", Prefix: "large", Properties: []string{"Bio"}}}
	// A grace of a minute: every kind that writes a blob before its
	// entity runs at most that long.
	cfg.Blobsync.MaxRunTime, cfg.Archive.MaxRunTime = jobs.Duration(time.Minute), jobs.Duration(time.Minute)
	cfg.Copy.MaxRunTime, cfg.Restore.MaxRunTime = jobs.Duration(time.Minute), jobs.Duration(time.Minute)
	cfg.Blobsync.Grace = jobs.Duration(time.Minute)
	a := newApp(t, cfg)
	for _, c := range []string{"staff-blobs", "backups"} {
		if err := a.store.Container(c).Create(a.ctx); err != nil {
			t.Fatal(err)
		}
	}
	bio := func(rk string) string { return strings.Repeat("Ein langer Lebenslauf von "+rk+". ", 800) }
	rks := []string{"001", "002", "003"}
	for _, rk := range rks {
		a.employee("Sales", rk, "Jones", map[string]any{"Bio": bio(rk)})
		a.mustRun("blobsync", fmt.Sprintf(`{"mode":"offload","table":%q,"pk":"Sales","rk":%q}`, staff, rk))
	}
	a.employee("Sales", "004", "Smith", nil) // nothing offloaded

	res := a.mustRun("export", fmt.Sprintf(`{"table":%q,"to":"backups/nightly"}`, staff))
	manifest := strings.TrimPrefix(res[strings.Index(res, " to ")+len(" to "):], "")
	rep, err := tableexport.Verify(a.ctx, a.store.Container("backups"), strings.TrimPrefix(manifest, "backups/"))
	if err != nil || !rep.OK() || rep.Entities != 4 {
		t.Fatalf("verify %s: %+v, %v", manifest, rep, err)
	}
	err = tableexport.ReadPart(a.ctx, a.store.Container("backups"), rep.Manifest.Parts[0].Name, func(e storeadapter.Entity) error {
		_, ref := e.Properties[largeentity.RefPrefix+"Bio"]
		if e.RowKey != "004" && (e.Properties["Bio"] != bio(e.RowKey) || !ref) {
			t.Errorf("the export's line of %s must hold Bio beside its reference; it holds %v", e.RowKey, keys(e))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	a.mustRun("copy", fmt.Sprintf(`{"table":%q,"target":%q}`, staff, copied))

	// The bad day: the table is deleted and a reconcile collects its blobs.
	if err := a.store.Tables().DeleteTable(a.ctx, staff); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(2 * time.Minute)
	w, err := blobsync.New(kit.Plain(a.store), cfg.Blobsync)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := w.Run(a.ctx, "op-reconcile", blobsync.Args{Mode: blobsync.ModeReconcile, Table: staff, Container: "staff-blobs"}); err != nil || rec.Reconcile.Orphans != len(rks) {
		t.Fatalf("reconcile of the deleted %s: %v, %+v; want its %d blobs collected", staff, err, rec.Reconcile, len(rks))
	}
	for _, rk := range rks {
		if got, err := largeentity.Get(a.ctx, a.store, copied, "Sales", rk); err != nil || got.Properties["Bio"] != bio(rk) {
			t.Errorf("the copy's %s after the source's blobs went: %v", rk, err)
		}
	}

	// The restore's first blob put fails (a crash there): nothing is lost,
	// the redelivery puts it again.
	failed := false
	a.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpPut && c.Name == "staff-blobs" && !failed {
			failed = true
			return errors.New("injected: the worker died here")
		}
		return nil
	}
	args := fmt.Sprintf(`{"manifests":[%q]}`, manifest)
	if _, err := a.runID("op-restore", "restore", args); err == nil || !failed {
		t.Fatalf("restore with its first put failing: %v (failed %v), want the error", err, failed)
	}
	a.fault = nil
	res, err = a.runID("op-restore", "restore", args)
	if err != nil || !strings.Contains(res, "4 rows written") || !strings.Contains(res, "offloaded blobs: 3 put, 0 missing") {
		t.Fatalf("restore: %q, %v", res, err)
	}
	for _, rk := range rks {
		got, err := largeentity.Get(a.ctx, a.store, staff, "Sales", rk)
		if err != nil || got.Properties["Bio"] != bio(rk) {
			t.Fatalf("restored %s: %v (Bio intact: %v)", rk, err, got.Properties["Bio"] == bio(rk))
		}
		raw := mustGet(t, a, staff, rk)
		ref, _, _ := largeentity.RefOf(raw, "Bio")
		if _, inline := raw.Properties["Bio"]; inline || ref.Container != "staff-blobs" || !strings.HasPrefix(ref.Name, "large/"+staff+"/Sales/"+rk+"/Bio/") {
			t.Errorf("restored %s holds Bio inline (%v) or names %s/%s, want the managed blob of its key", rk, inline, ref.Container, ref.Name)
		}
	}
	// A reconcile of the restored table keeps every blob its rows name.
	a.clock.Advance(2 * time.Minute)
	if rec, err := w.Run(a.ctx, "op-reconcile-2", blobsync.Args{Mode: blobsync.ModeReconcile, Table: staff, Container: "staff-blobs"}); err != nil || rec.Reconcile.Orphans != 0 || rec.Reconcile.Missing != 0 {
		t.Fatalf("reconcile of the restored %s: %v, %+v; want nothing collected or missing", staff, err, rec.Reconcile)
	}
}

func keys(e storeadapter.Entity) []string {
	var out []string
	for k := range e.Properties {
		out = append(out, k)
	}
	return out
}
