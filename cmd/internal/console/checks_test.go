package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// seedOrders writes n entities of Orders, every third with Status "late".
func seedOrders(t *testing.T, f *fixture, n int) {
	t.Helper()
	if err := f.store.Tables().CreateTable(f.ctx, "Orders"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		status := "ok"
		if i%3 == 0 {
			status = "late"
		}
		e := storeadapter.Entity{PartitionKey: "p1", RowKey: fmt.Sprintf("%04d", i), Properties: map[string]any{"Status": status}}
		if _, err := f.store.Tables().UpsertEntity(f.ctx, "Orders", e, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
}

// exportOrders exports Orders to exports/nightly; stopAfter > 0 stops it
// after that many parts (an export in progress).
func exportOrders(t *testing.T, f *fixture, op string, stopAfter int) {
	t.Helper()
	parts := 0
	o := tableexport.Options{Blobs: f.store.Container("exports"), Prefix: "nightly", OpID: op, MaxPartBytes: 1024,
		Checkpoints: idempotent.Checkpoints{Tables: f.store.Tables(), Table: jobs.DefaultCheckpointTable},
		Clock:       f.clock, CreateContainer: true}
	if stopAfter > 0 {
		o.Stop = func() bool { parts++; return parts >= stopAfter }
	}
	_, err := tableexport.Export(f.ctx, f.store.Tables(), storeadapter.Range{Table: "Orders"}, o)
	if stopAfter > 0 && err == nil || stopAfter == 0 && err != nil {
		t.Fatalf("export %s: %v", op, err)
	}
}

// TestOperationsShowsCheckpoints: an export in progress first with its
// counters, a finished one after it, an opaque position as such.
func TestOperationsShowsCheckpoints(t *testing.T) {
	f := newFixture(t, nil)
	code, body := f.get(t, "/operations")
	if code != http.StatusOK {
		t.Fatalf("GET /operations: %d %s", code, body)
	}
	must(t, "no table", body, `Not created yet: `+jobs.DefaultCheckpointTable)

	seedOrders(t, f, 60)
	exportOrders(t, f, "op-done", 0)
	f.clock.Advance(time.Minute)
	exportOrders(t, f, "op-running", 2)
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: jobs.DefaultCheckpointTable}
	if err := cp.Save(f.ctx, "op-archive", "range", "p1|0042"); err != nil {
		t.Fatal(err)
	}
	_, body = f.get(t, "/operations")
	must(t, "operations", body,
		`<tr data-op="op-running"><td>op-running</td><td>export</td><td>in progress</td>.*<td>pass 1, entities \d+, bytes \d+`,
		`<tr data-op="op-archive"><td>op-archive</td><td>range</td><td>in progress</td>.*<td>position saved</td>`,
		`<tr data-op="op-done"><td>op-done</td><td>export</td><td>done</td>.*entities 60,`)
	if i, j := strings.Index(body, `data-op="op-running"`), strings.Index(body, `data-op="op-done"`); i > j {
		t.Error("the finished export is listed before the one in progress")
	}
}

// TestIndexCheckAndExportVerify: a declared index is listed and its check
// runs as a task that reports what it found; the exports under a prefix
// are listed and one verifies; a damaged part is reported.
func TestIndexCheckAndExportVerify(t *testing.T) {
	idx := &indexes.Config{Tables: map[string][]indexes.Decl{"Orders": {{Name: "byStatus", Property: "Status", Kind: "copy", Store: "partition"}}}}
	if err := idx.Validate(); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *Config) { c.Indexes = idx; c.Exports = []string{"exports/nightly"} })
	seedOrders(t, f, 30)
	_, body := f.get(t, "/indexes")
	must(t, "indexes", body, `<tr data-index="Orders/byStatus"><td>Orders</td><td>byStatus</td><td>Status</td><td>copy</td><td>partition`)

	resp, _ := f.post(t, "/indexes/check", url.Values{"csrf": {f.con.csrf}, "table": {"Orders"}, "index": {"byStatus"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("check: %d", resp.StatusCode)
	}
	body = f.waitTask(t, resp.Header.Get("Location"))
	must(t, "check", body, `id="task-state">done<`, `30 entities read, 30 indexed, 0 entries read: 30 missing`, `enqueue index rebuild -table Orders`)
	if resp, _ = f.post(t, "/indexes/check", url.Values{"csrf": {f.con.csrf}, "table": {"Orders"}, "index": {"nope"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("check of an undeclared index: %d", resp.StatusCode)
	}

	exportOrders(t, f, "op-a", 0)
	_, body = f.get(t, "/exports")
	must(t, "exports", body, `<tr data-manifest="exports/nightly/Orders/2026/11/26/0900/manifest-op-a.json"><td>[^<]+</td>\s*<td>Orders</td><td>whole table</td>`,
		`<td class="n">30</td>`)
	manifest := "exports/nightly/Orders/2026/11/26/0900/manifest-op-a.json"
	resp, _ = f.post(t, "/exports/verify", url.Values{"csrf": {f.con.csrf}, "manifest": {manifest}, "to": {"exports/nightly"}})
	must(t, "verify", f.waitTask(t, resp.Header.Get("Location")), `verified: every part is what the manifest says`, `30 entities`)

	if _, err := f.store.Container("exports").Put(f.ctx, "nightly/Orders/2026/11/26/0900/000001.jsonl", []byte("{}\n"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, _ = f.post(t, "/exports/verify", url.Values{"csrf": {f.con.csrf}, "manifest": {manifest}})
	must(t, "damaged", f.waitTask(t, resp.Header.Get("Location")), `NOT verified: \d+ problem`)

	code, body := f.get(t, "/exports?to=missing/x")
	if code != http.StatusNotFound || !strings.Contains(body, "container missing does not exist") {
		t.Errorf("missing container: %d %s", code, body)
	}
	_, body = f.get(t, "/exports?to=exports/other")
	must(t, "empty prefix", body, `No export manifest under exports/other`)
}

// TestIndexesWithoutConfig says where the declarations come from.
func TestIndexesWithoutConfig(t *testing.T) {
	f := newFixture(t, nil)
	_, body := f.get(t, "/indexes")
	must(t, "indexes", body, `id="no-config"`)
	resp, body := f.post(t, "/indexes/check", url.Values{"csrf": {f.con.csrf}, "table": {"T"}, "index": {"x"}})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "-config") {
		t.Errorf("check without config: %d %s", resp.StatusCode, body)
	}
}
