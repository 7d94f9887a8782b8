package copykind_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	copykind "github.com/tablekeeper/tablekeeper/jobs/copy"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// The copies into an indexed table of the worker's own account: a rows
// index in another table, a list kept per partition and a copy per
// partition, on the target "Copy".

const indexedTarget = "Copy"

var indexConfig = indexes.Config{Tables: map[string][]indexes.Decl{indexedTarget: {
	{Name: "i", Property: "I", Kind: indexes.KindRows, Table: indexedTarget + "ByI"},
	{Name: "f", Property: "F", Kind: indexes.KindList, Store: indexes.StorePartition},
	{Name: "s", Property: "S", Kind: indexes.KindCopy, Store: indexes.StorePartition},
}}}

// indexedBundle is setup with the declared indexes in the worker's deps
// (on the instrumented own account, which a fault reaches) and a set on
// the same store for the checks, which run with no fault set.
func indexedBundle(t *testing.T) (*bundle, *indexes.Set) {
	t.Helper()
	b := setup(t)
	set, err := indexes.Open(b.home, clock.NewFake(time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)).AutoAdvance(time.Millisecond), indexConfig)
	if err != nil {
		t.Fatal(err)
	}
	b.deps.Indexes = set
	return b, set
}

// prepareTarget fills the target before the copy, its indexes up to date:
// rows of the source's keys with other values (I 9000+) and extra rows
// the source lacks (I 8000+), some of them in partition p01's range
// [r0010, r0040).
func prepareTarget(t *testing.T, b *bundle, set *indexes.Set) {
	t.Helper()
	ctx := context.Background()
	if err := b.home.Tables().CreateTable(ctx, indexedTarget); err != nil {
		t.Fatal(err)
	}
	var ops []storeadapter.TableOp
	for p := range 3 {
		for r := 0; r < 60; r += 6 {
			ops = append(ops,
				storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{PartitionKey: fmt.Sprintf("p%02d", p), RowKey: fmt.Sprintf("r%04d", r),
					Properties: map[string]any{"I": int32(9000 + 100*p + r), "F": true, "S": fmt.Sprint("old ", p, r)}}},
				storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{PartitionKey: fmt.Sprintf("p%02d", p), RowKey: fmt.Sprintf("r%04d x", r),
					Properties: map[string]any{"I": int32(8000 + 100*p + r), "F": false, "S": fmt.Sprint("extra ", p, r)}}})
		}
		transact(t, b.home, indexedTarget, ops)
		ops = nil
	}
	if _, err := set.Sync(ctx, indexedTarget, indexes.Span{}); err != nil {
		t.Fatal(err)
	}
}

// indexesClean fails unless every index of the target is what the table
// says (Check finds nothing) and index i lists under value v exactly want.
func indexesClean(t *testing.T, set *indexes.Set, v int32, want ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range set.Names(indexedTarget) {
		res, err := set.Check(ctx, indexedTarget, name, func(f indexes.Finding) error {
			t.Errorf("index %s: %s %s %s/%s %s", name, f.Problem, f.Value, f.PK, f.RK, f.Detail)
			return nil
		})
		if err != nil || res.Problems() != 0 || res.Entities == 0 {
			t.Fatalf("check %s: %+v, %v", name, res, err)
		}
	}
	ms, err := set.Lookup(ctx, indexedTarget, "i", v, indexes.LookupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.PK+"/"+m.RK)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lookup of I %d: %v, want %v", v, got, want)
	}
}

// TestCopyKeepsIndexes: copies of a table, and of a range, into an
// indexed table of the worker's own account leave its indexes up to
// date, in both modes; a copy of the same table to another account
// touches none of the own account's indexes.
func TestCopyKeepsIndexes(t *testing.T) {
	for _, c := range []struct{ name, args, result string }{
		{"insert", `{"table":"Orders","target":"Copy"}`, ", indexes: 330 updated, 0 removed"},
		{"replace", `{"table":"Orders","target":"Copy","mode":"replace"}`, ", indexes: 360 updated, 0 removed"},
		{"range", `{"table":"Orders","target":"Copy","pk":"p01","rkFrom":"r0010","rkTo":"r0040","mode":"replace"}`, ", indexes: 30 updated, 0 removed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, set := indexedBundle(t)
			seed(t, b.home, "Orders", 3, 120)
			prepareTarget(t, b, set)
			res, err := run(t, b.worker(t, copykind.Config{PageSize: 50}), "op-"+c.name, c.args)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(res, c.result) {
				t.Errorf("result %q, want it to end %q", res, c.result)
			}
			// p01/r0012 had I 9112 in the target (insert keeps it); I
			// is 13 in every partition's r0013.
			var old []string
			fresh := []string{"p00/r0013", "p01/r0013", "p02/r0013"}
			switch c.name {
			case "insert":
				old = []string{"p01/r0012"}
			case "range":
				fresh = []string{"p01/r0013"}
			}
			indexesClean(t, set, 9112, old...)
			indexesClean(t, set, 13, fresh...)
			indexesClean(t, set, 8112, "p01/r0012 x") // an extra row stays, indexed
		})
	}
	t.Run("another account", func(t *testing.T) {
		b, _ := indexedBundle(t)
		seed(t, b.home, "Orders", 3, 120)
		var ownIndexCalls atomic.Int64
		count := func(c instrument.Call) error {
			if c.Name != "Orders" && c.Name != "Checkpoints" {
				ownIndexCalls.Add(1)
			}
			return nil
		}
		b.homeFault.Store(&count)
		res, err := run(t, b.worker(t, copykind.Config{PageSize: 50}), "op-dr", `{"table":"Orders","to":"dr","target":"Copy"}`)
		if err != nil || strings.Contains(res, "indexes") {
			t.Fatalf("copy to dr: %q, %v", res, err)
		}
		if n := ownIndexCalls.Load(); n != 0 {
			t.Errorf("%d calls of the own account beside the source and the checkpoints", n)
		}
	})
}

// crashPoint selects the calls the crash test fails: the source's pages,
// the checkpoint writes, and the target's transactions and queries (the
// writer's batches, each Sync's reads). The index library's writes to its
// other tables are left out to keep the test's time down; its own tests
// crash them at every call.
func crashPoint(c instrument.Call) bool {
	switch c.Name {
	case "Orders", indexedTarget:
		return c.Op == instrument.OpQuery || c.Op == instrument.OpTransact
	case "Checkpoints":
		return c.Op == instrument.OpInsertEntity || c.Op == instrument.OpUpdateEntity
	}
	return false
}

// TestCopyIndexesAfterACrash fails a copy into an indexed table at each of
// its crash points in turn, then delivers it again: the target and its
// indexes end as after a copy that never failed.
func TestCopyIndexesAfterACrash(t *testing.T) {
	const args = `{"table":"Orders","target":"Copy"}`
	start := func() (*bundle, *indexes.Set, *copykind.Worker) {
		b, set := indexedBundle(t)
		seed(t, b.home, "Orders", 3, 80)
		prepareTarget(t, b, set)
		return b, set, b.worker(t, copykind.Config{PageSize: 50, Partitions: 2})
	}
	ref, set, w := start()
	var total atomic.Int64
	count := func(c instrument.Call) error {
		if crashPoint(c) {
			total.Add(1)
		}
		return nil
	}
	ref.homeFault.Store(&count)
	if _, err := run(t, w, "op-crash", args); err != nil {
		t.Fatal(err)
	}
	ref.homeFault.Store(nil)
	indexesClean(t, set, 13, "p00/r0013", "p01/r0013", "p02/r0013")
	want := application(rows(t, ref.home, indexedTarget), every)
	if total.Load() < 20 {
		t.Fatalf("the reference copy made %d calls that are crash points, want many pages", total.Load())
	}
	for k := int64(1); k <= total.Load(); k++ {
		b, set, w := start()
		var n atomic.Int64
		var at atomic.Value
		crash := func(c instrument.Call) error {
			if crashPoint(c) && n.Add(1) == k {
				at.Store(c)
				return fmt.Errorf("crash at call %d: %w", k, storeadapter.ErrUnavailable)
			}
			return nil
		}
		b.homeFault.Store(&crash)
		_, err := run(t, w, "op-crash", args)
		failed, _ := at.Load().(instrument.Call)
		if !errors.Is(err, storeadapter.ErrUnavailable) {
			t.Fatalf("call %d (%s %s) failed; Work returned %v", k, failed.Op, failed.Name, err)
		}
		b.homeFault.Store(nil)
		if _, err := run(t, w, "op-crash", args); err != nil {
			t.Fatalf("redelivery after a crash at call %d (%s %s): %v", k, failed.Op, failed.Name, err)
		}
		sameRows(t, fmt.Sprintf("after a crash at call %d (%s %s)", k, failed.Op, failed.Name), application(rows(t, b.home, indexedTarget), every), want)
		indexesClean(t, set, 13, "p00/r0013", "p01/r0013", "p02/r0013")
	}
}

// TestCopyIndexesTwoDeliveries: two deliveries of a copy into an indexed
// table at once leave its indexes up to date.
func TestCopyIndexesTwoDeliveries(t *testing.T) {
	b, set := indexedBundle(t)
	seed(t, b.home, "Orders", 3, 200)
	prepareTarget(t, b, set)
	w := b.worker(t, copykind.Config{PageSize: 50})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := run(t, w, "op-2x", `{"table":"Orders","target":"Copy","mode":"replace"}`); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	indexesClean(t, set, 12, "p00/r0012", "p01/r0012", "p02/r0012")
	indexesClean(t, set, 9112)
}
