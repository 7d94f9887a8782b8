package e2e

// The test in this file kills workers, so it runs alone (no t.Parallel),
// like those of export_test.go: it picks the moment of each SIGKILL from
// what storage shows (rows gone) plus a random delay.

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestKilledPurgeDeletesExactly purges a RowKey range of one partition,
// only the entities older than -older-than, with small pages and the
// worker killed with SIGKILL twice midway (after some pages' deletes are
// visible, and again after more). The table also holds rows of another
// partition, rows of the partition outside the range, and rows in the
// range written after the cut-off. After a drain exactly the matching
// rows are gone, every other row is there with its content and ETag
// untouched, nothing is poisoned, and a redelivery of the finished
// purge deletes nothing and says "already done".
func TestKilledPurgeDeletesExactly(t *testing.T) {
	e := setup(t, 150*time.Second)
	start := time.Now()
	tbl, ckpt, q := e.table("Purge"), e.table("PurgeCkpt"), e.queue("purge")
	const from, to, n = "r00100", "r07900", 8000
	inRange := func(en storeadapter.Entity) bool {
		return en.PartitionKey == "u01" && en.RowKey >= from && en.RowKey < to
	}

	// Old rows: the partition to purge (in and outside the range) and
	// another partition.
	e.seed(tbl, append(numbered("u01", n), numbered("u02", 500)...))
	oldEnd := maxTimestamp(e.entities(tbl, storeadapter.Filter{}))
	time.Sleep(2500 * time.Millisecond)
	// New rows in the range, written after the cut-off.
	var young []storeadapter.Entity
	for i := 100; i < 7900; i += 97 {
		young = append(young, storeadapter.Entity{PartitionKey: "u01", RowKey: rowKey(i) + "-new", Properties: map[string]any{"N": int64(i), "Note": "young"}})
	}
	for ops := range slices.Chunk(young, 100) {
		tx := make([]storeadapter.TableOp, len(ops))
		for i, en := range ops {
			tx[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: en}
		}
		if err := store.Tables().Transact(e.ctx, tbl, tx); err != nil {
			t.Fatal(err)
		}
	}
	all := e.entities(tbl, storeadapter.Filter{})
	var want []storeadapter.Entity
	matching := 0
	for _, en := range all {
		switch {
		case inRange(en) && !en.Timestamp.After(oldEnd):
			matching++
		case inRange(en) && en.Timestamp.Sub(oldEnd) < 2*time.Second:
			t.Fatalf("young row %s written %v after the old ones, want at least 2s", en.RowKey, en.Timestamp.Sub(oldEnd))
		default:
			want = append(want, en)
		}
	}
	if matching != 7800 || len(want) != len(all)-7800 {
		t.Fatalf("%d matching rows of %d, want 7800", matching, len(all))
	}
	// The cut-off (first delivery − olderThan) falls half a second after
	// the last old row, at least 1.5 s before the first young one, while
	// the first delivery comes within a second of the enqueue.
	olderThan := time.Since(oldEnd.Add(500 * time.Millisecond)).Round(time.Millisecond)
	t.Logf("seeded %d rows (%d matching) in %v; -older-than %v", len(all), matching, time.Since(start).Round(time.Millisecond), olderThan)

	cfg := writeWorkerConfig(t, map[string]any{"runner": fastRunner(),
		"purge": map[string]any{"checkpointTable": ckpt, "pageSize": 20, "timeBudget": "10m"}})
	opID := "op-purge-" + e.suffix
	args := []string{"purge", "-queue", q, "-table", tbl, "-pk", "u01", "-rk-from", from, "-rk-to", to,
		"-older-than", olderThan.String(), "-id", opID}
	e.enqueue(args...)
	rng := rand.New(rand.NewPCG(indexSeed(t), 0))
	// Kill 1 once the first page's rows are gone, kill 2 once the middle
	// of the range is.
	marks := []string{rowKey(100), rowKey(4000)}
	e.killWhile(q, cfg, rng, len(marks), 100*time.Millisecond, func(kill int) func() bool {
		return func() bool { return !e.exists(tbl, "u01", marks[kill]) }
	})
	if e.exists(tbl, "u01", rowKey(7899)) {
		t.Logf("after the kills the range's last row is still there (%v)", time.Since(start).Round(time.Millisecond))
	} else {
		t.Errorf("the purge finished before the last kill: raise the row count")
	}

	w := e.drainProc(q, 90*time.Second, "-config", cfg)
	if stats := w.stats(); stats.Poisoned != 0 || stats.Succeeded != 1 {
		t.Errorf("draining worker's counters = %+v, want 1 succeeded and none poisoned", stats)
	}
	checkNoPoison(t, e, q)
	checkKept(t, e, tbl, want)
	res := w.results()
	if len(res) != 1 || !strings.HasPrefix(res[0], "deleted ") {
		t.Errorf("results %q, want one \"deleted …\"", res)
	}
	t.Logf("purged after %v: %q", time.Since(start).Round(time.Millisecond), res)

	// A redelivery of the finished purge deletes nothing, not even a row
	// written since in the range that is older than olderThan by the time
	// it runs (a fresh purge would delete it).
	late := storeadapter.Entity{PartitionKey: "u01", RowKey: rowKey(5000) + "-late", Properties: map[string]any{"Note": "late"}}
	if _, err := store.Tables().InsertEntity(e.ctx, tbl, late); err != nil {
		t.Fatal(err)
	}
	time.Sleep(olderThan + time.Second)
	before := e.entities(tbl, storeadapter.Filter{})
	e.enqueue(args...)
	again := e.drainProc(q, 60*time.Second, "-config", cfg)
	if r := again.results(); len(r) != 1 || !strings.HasPrefix(r[0], "already done: ") {
		t.Errorf("the redelivered purge's results are %q, want \"already done: …\"", r)
	}
	checkKept(t, e, tbl, before)
}

// maxTimestamp returns the latest Timestamp of es.
func maxTimestamp(es []storeadapter.Entity) time.Time {
	var m time.Time
	for _, en := range es {
		if en.Timestamp.After(m) {
			m = en.Timestamp
		}
	}
	return m
}

// checkKept checks that a table holds exactly want: the same keys, each
// with its ETag (never rewritten) and properties.
func checkKept(t *testing.T, e *env, tbl string, want []storeadapter.Entity) {
	t.Helper()
	got := e.entities(tbl, storeadapter.Filter{})
	if !slices.Equal(keys(got), keys(want)) {
		extra, missing := 0, 0
		g, w := map[string]bool{}, map[string]bool{}
		for _, k := range keys(got) {
			g[k] = true
		}
		for _, k := range keys(want) {
			if w[k] = true; !g[k] {
				missing++
			}
		}
		for k := range g {
			if !w[k] {
				extra++
			}
		}
		t.Fatalf("the table holds %d rows, want %d: %d that should be gone, %d missing that should stay", len(got), len(want), extra, missing)
	}
	for i := range got {
		if got[i].ETag != want[i].ETag {
			t.Errorf("%s/%s: ETag %s, want %s (untouched)", got[i].PartitionKey, got[i].RowKey, got[i].ETag, want[i].ETag)
		}
		if d := diffProperties(want[i].Properties, got[i].Properties); len(d) > 0 {
			t.Errorf("%s/%s: %s", got[i].PartitionKey, got[i].RowKey, strings.Join(d, "; "))
		}
	}
}
