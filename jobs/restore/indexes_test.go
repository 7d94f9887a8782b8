package restore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// The restores into indexed tables: a rows index, a list kept per
// partition and a copy in another table, on the target "Dst".

const indexedTable = "Dst"

var indexConfig = indexes.Config{Tables: map[string][]indexes.Decl{indexedTable: {
	{Name: "i", Property: "I32", Kind: indexes.KindRows, Table: indexedTable + "ByI"},
	{Name: "b", Property: "B", Kind: indexes.KindList, Store: indexes.StorePartition},
	{Name: "n", Property: "I64", Kind: indexes.KindCopy, Store: indexes.StoreTable, Table: indexedTable + "Copies"},
}}}

// smallSeed is 3 partitions of 120 small rows; every 7th has no I32 (it
// is in no "i" entry).
func smallSeed() []storeadapter.Entity {
	var out []storeadapter.Entity
	for p, pk := range []string{"a", "b 'b'", "c~"} {
		for i := range 120 {
			props := map[string]any{"I32": int32(p*1000 + i), "B": i%3 == 0, "I64": int64(i)}
			if i%7 == 0 {
				delete(props, "I32")
			}
			out = append(out, storeadapter.Entity{PartitionKey: pk, RowKey: fmt.Sprintf("r%03d", i), Properties: props})
		}
	}
	return out
}

// indexed is an env of smallSeed exported in parts of about 24 KiB (3
// parts of about 120 lines: with CheckpointRows 100, saves fall within
// parts and at their ends), and the
// index set on its instrumented store (which hook reaches) and on the raw
// one (which checks).
type indexed struct {
	*env
	set, check *indexes.Set
	ref        string
	// hook, when set, sees every call of the instrumented store first and
	// may fail it; it is called without a lock held (calls of several
	// partitions run at once), so it may run another delivery.
	hook func(c instrument.Call) error
}

func newIndexed(t *testing.T) *indexed {
	t.Helper()
	x := &indexed{env: newEnvOf(t, smallSeed())}
	x.partBytes = 24 << 10
	x.ref = x.export(t, "op-small", nil)
	x.store = instrument.Wrap(x.raw, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		x.mu.Lock()
		f := x.hook
		x.mu.Unlock()
		if f != nil {
			return f(c)
		}
		return nil
	}})
	var err error
	if x.set, err = indexes.Open(x.store, clock.NewFake(t0).AutoAdvance(time.Millisecond), indexConfig); err != nil {
		t.Fatal(err)
	}
	if x.check, err = indexes.Open(x.raw, clock.NewFake(t0).AutoAdvance(time.Millisecond), indexConfig); err != nil {
		t.Fatal(err)
	}
	return x
}

func (x *indexed) setHook(f func(c instrument.Call) error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.hook = f
}

func (x *indexed) worker(t *testing.T) *restore.Worker {
	t.Helper()
	d := kit.Plain(x.store)
	d.Indexes = x.set
	w, err := restore.New(d, restore.Config{CheckpointRows: 100})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// prepare fills the target before the restore, its indexes up to date:
// extra rows the export lacks (I32 90000+, in the export's partitions and
// two others) and rows of the export's keys with other values (I32
// 80000+). It returns the extras' keys in partition "b 'b'".
func (x *indexed) prepare(t *testing.T) (extrasInB []string) {
	t.Helper()
	ctx := context.Background()
	if err := x.raw.Tables().CreateTable(ctx, indexedTable); err != nil {
		t.Fatal(err)
	}
	put := func(pk, rk string, props map[string]any) {
		t.Helper()
		if _, err := x.raw.Tables().UpsertEntity(ctx, indexedTable, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		pk := []string{"a", "b 'b'", "c~", "0", "zz"}[i%5]
		rk := fmt.Sprintf("r%03d x", i)
		put(pk, rk, map[string]any{"I32": int32(90000 + i), "B": true, "I64": int64(-1 - i)})
		if pk == "b 'b'" {
			extrasInB = append(extrasInB, pk+"/"+rk)
		}
	}
	for i, e := range smallSeed() {
		if i%9 == 0 {
			put(e.PartitionKey, e.RowKey, map[string]any{"I32": int32(80000 + i), "B": false})
		}
	}
	if _, err := x.check.Sync(ctx, indexedTable, indexes.Span{}); err != nil {
		t.Fatal(err)
	}
	return extrasInB
}

// clean fails unless every index of the target is what its table says:
// Check finds nothing, and the rows index lists exactly the rows with an
// I32, under their values.
func (x *indexed) clean(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, name := range x.check.Names(indexedTable) {
		res, err := x.check.Check(ctx, indexedTable, name, func(f indexes.Finding) error {
			t.Errorf("index %s: %s %s %s/%s %s", name, f.Problem, f.Value, f.PK, f.RK, f.Detail)
			return nil
		})
		if err != nil {
			t.Fatalf("check %s: %v", name, err)
		}
		if res.Problems() != 0 || res.Entities == 0 {
			t.Fatalf("check %s: %+v", name, res)
		}
	}
	want := map[string]string{}
	for _, r := range appRows(rows(t, x.raw.Tables(), indexedTable)) {
		if v, ok := r.Properties["I32"]; ok {
			want[r.PartitionKey+"/"+r.RowKey] = fmt.Sprint(v)
		}
	}
	got := map[string]string{}
	if err := x.check.Entries(ctx, indexedTable, "i", func(en indexes.Entry) error {
		got[en.PK+"/"+en.RK] = fmt.Sprint(en.Value)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("index i lists %d keys, the table has %d rows with I32", len(got), len(want))
	}
}

// lookup returns the keys index i lists under the value v.
func (x *indexed) lookup(t *testing.T, v int32) []string {
	t.Helper()
	ms, err := x.check.Lookup(context.Background(), indexedTable, "i", v, indexes.LookupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.PK+"/"+m.RK)
	}
	return out
}

// TestRestoreKeepsIndexes: insert, replace and mirror (the whole table,
// and one partition) into a target whose indexes were up to date leave
// them up to date: lookups find the restored rows, rows mirror deleted
// are in no index any more, and the result counts them.
func TestRestoreKeepsIndexes(t *testing.T) {
	for _, c := range []struct {
		name, mode string
		pk         *string
	}{
		{"insert", restore.ModeInsert, nil},
		{"replace", restore.ModeReplace, nil},
		{"mirror", restore.ModeMirror, nil},
		{"mirror partition", restore.ModeMirror, ptr("b 'b'")},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newIndexed(t)
			ref := x.ref
			if c.pk != nil {
				x.partBytes = 4 << 10 // parts of a partition
				ref = x.export(t, "op-part", c.pk)
			}
			extrasInB := x.prepare(t)
			x.clean(t)
			res, err := run(t, x.worker(t), "op-"+strings.ReplaceAll(c.name, " ", "-"), restore.Args{Manifests: []string{ref}, Table: indexedTable, Mode: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			x.clean(t)
			if got := x.lookup(t, 1005); !slices.Equal(got, []string{"b 'b'/r005"}) {
				t.Errorf("lookup of a restored row's value: %v", got)
			}
			// Row 126 of the seed had value 80126 in the target.
			wantChanged := []string{"b 'b'/r006"}
			if c.mode != restore.ModeInsert {
				wantChanged = nil
			}
			if got := x.lookup(t, 80126); !slices.Equal(got, wantChanged) {
				t.Errorf("lookup of the target's own value of a restored key: %v, want %v", got, wantChanged)
			}
			// Extra 1 is in partition "b 'b'".
			wantExtra := []string{"b 'b'/r001 x"}
			if c.mode == restore.ModeMirror {
				wantExtra = nil
			}
			if got := x.lookup(t, 90001); !slices.Equal(got, wantExtra) {
				t.Errorf("lookup of an extra row's value: %v, want %v", got, wantExtra)
			}
			wantRemoved := 0
			if c.mode == restore.ModeMirror {
				wantRemoved = 60
				if c.pk != nil {
					wantRemoved = len(extrasInB)
				}
			}
			if want := fmt.Sprintf(", %d deleted, indexes: ", wantRemoved); !strings.Contains(res, want) || !strings.HasSuffix(res, fmt.Sprintf(", %d removed", wantRemoved)) {
				t.Errorf("result %q, want %d deleted and removed from the indexes", res, wantRemoved)
			}
		})
	}
}

// crashPoints returns the selector of the calls a crash test fails: the
// restore's own (part reads, checkpoint writes, the target's
// transactions) and the first query of the target after a transaction
// (a Sync's first read after a Flush, or the mirror's scan going on after
// deletes). The index library's calls after that first read are left
// out, to keep the test's time down: the library's own tests crash its
// writes at every call (go test ./tablepatterns/indexes).
func crashPoints() func(c instrument.Call) bool {
	var mu sync.Mutex
	wrote := false
	return func(c instrument.Call) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case c.Op == instrument.OpOpen:
			return true
		case c.Op == instrument.OpInsertEntity || c.Op == instrument.OpUpdateEntity:
			return c.Name == jobs.DefaultCheckpointTable
		case c.Op == instrument.OpTransact && c.Name == indexedTable:
			wrote = true
			return true
		case c.Op == instrument.OpQuery && c.Name == indexedTable && wrote:
			wrote = false
			return true
		}
		return false
	}
}

// TestRestoreIndexesAfterACrash fails a restore into an indexed table at
// each of its crash points in turn (a crash there: the calls before it
// are done, none after), then delivers it again: the table and its
// indexes end as after a restore that never failed.
func TestRestoreIndexesAfterACrash(t *testing.T) {
	for _, mode := range []string{restore.ModeInsert, restore.ModeMirror} {
		t.Run(mode, func(t *testing.T) {
			setup := func() (*indexed, *restore.Worker, restore.Args) {
				x := newIndexed(t)
				x.prepare(t)
				return x, x.worker(t), restore.Args{Manifests: []string{x.ref}, Table: indexedTable, Mode: mode}
			}
			ref, w, args := setup()
			ref.clean(t)
			var total atomic.Int64
			crashPoint := crashPoints()
			ref.setHook(func(c instrument.Call) error {
				if crashPoint(c) {
					total.Add(1)
				}
				return nil
			})
			if _, err := run(t, w, "op-crash", args); err != nil {
				t.Fatal(err)
			}
			ref.clean(t)
			want := appRows(rows(t, ref.raw.Tables(), indexedTable))
			if total.Load() < 50 {
				t.Fatalf("the reference restore made %d calls that are crash points, want many parts and syncs", total.Load())
			}
			for k := int64(1); k <= total.Load(); k++ {
				x, w, args := setup()
				var n atomic.Int64
				var at atomic.Value
				crashPoint := crashPoints()
				x.setHook(func(c instrument.Call) error {
					if crashPoint(c) && n.Add(1) == k {
						at.Store(c)
						return fmt.Errorf("crash at call %d: %w", k, storeadapter.ErrUnavailable)
					}
					return nil
				})
				_, err := run(t, w, "op-crash", args)
				failed, _ := at.Load().(instrument.Call)
				if !errors.Is(err, storeadapter.ErrUnavailable) {
					t.Fatalf("call %d (%s) failed; Work returned %v", k, failed.Op, err)
				}
				x.setHook(nil)
				if _, err := run(t, w, "op-crash", args); err != nil {
					t.Fatalf("redelivery after a crash at call %d (%s %s): %v", k, failed.Op, failed.Name, err)
				}
				same(t, appRows(rows(t, x.raw.Tables(), indexedTable)), want)
				x.clean(t)
				if t.Failed() {
					t.Fatalf("after a crash at call %d (%s %s)", k, failed.Op, failed.Name)
				}
			}
		})
	}
}

// TestRestoreIndexesTwoDeliveries: a delivery held at a transaction while
// a second delivery of the operation runs the whole restore, then going
// on (its saves lose to the other's): the indexes end up to date.
func TestRestoreIndexesTwoDeliveries(t *testing.T) {
	for _, mode := range []string{restore.ModeReplace, restore.ModeMirror} {
		t.Run(mode, func(t *testing.T) {
			x := newIndexed(t)
			x.prepare(t)
			args := restore.Args{Manifests: []string{x.ref}, Table: indexedTable, Mode: mode}
			held, other := x.worker(t), x.worker(t)
			var transacts atomic.Int64
			x.setHook(func(c instrument.Call) error {
				if c.Op != instrument.OpTransact || c.Name != indexedTable || transacts.Add(1) != 3 {
					return nil
				}
				x.setHook(nil)
				if _, err := run(t, other, "op-two", args); err != nil {
					t.Errorf("the second delivery: %v", err)
				}
				return nil
			})
			if _, err := run(t, held, "op-two", args); err != nil {
				t.Fatal(err)
			}
			x.clean(t)
		})
	}
}

// TestRestoreUndeclaredTableSyncsNothing: a restore into a table without
// declared indexes, by a worker that has some for another table, makes
// no call beside its own: the target's writes, its checkpoint, the parts.
func TestRestoreUndeclaredTableSyncsNothing(t *testing.T) {
	x := newIndexed(t)
	var other atomic.Int64
	x.setHook(func(c instrument.Call) error {
		if c.Name != "Plain" && c.Name != jobs.DefaultCheckpointTable && c.Name != "exports" {
			other.Add(1)
		}
		return nil
	})
	res, err := run(t, x.worker(t), "op-plain", restore.Args{Manifests: []string{x.ref}, Table: "Plain", Mode: restore.ModeReplace})
	if err != nil || res != "restore: Plain: 360 rows written, 0 skipped (exist), 0 deleted" {
		t.Fatalf("restore = %q, %v", res, err)
	}
	if n := other.Load(); n != 0 {
		t.Errorf("%d calls beside the restore's own", n)
	}
}
