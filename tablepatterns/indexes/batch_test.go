package indexes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// seedMixed writes n employees over partitions, with shared last names,
// unique e-mails (a few shared, so copies conflict), some without a last
// name and one with a RowKey too long for "~tk.m.<rk>".
func (f *fixture) seedMixed(rng *rand.Rand, n int, reconcile bool) []Key {
	f.t.Helper()
	var keys []Key
	for i := range n {
		pk := []string{"Sales", "Marketing", "Ops", "S"}[i%4]
		rk := fmt.Sprintf("%04d", i)
		if i == 7 {
			rk = fmt.Sprintf("%0508d", i) // a hashed membership record
		}
		last := []string{"Jones", "Smith", "", "Okafor", "Lee"}[rng.IntN(5)]
		email := fmt.Sprintf("e%d@contoso.com", i)
		if rng.IntN(10) == 0 {
			email = "shared@contoso.com"
		}
		f.put(pk, rk, employee(last, email))
		if reconcile {
			f.reconcile(pk, rk)
		}
		keys = append(keys, Key{PK: pk, RK: rk})
	}
	return keys
}

// TestRebuildFromScratch: indexes declared on a table that was never
// reconciled are built by the rebuild's batches, in small chunks run in
// parallel, equal to the truth (conflicting copies reported, not lost).
func TestRebuildFromScratch(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.x.chunk = 7
	f.seedMixed(rand.New(rand.NewPCG(3, 4)), 120, false)
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	res, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entities != 120 {
		t.Errorf("rebuild reconciled %d entities, want 120: %v", res.Entities, res)
	}
	f.assertCopyConflictsOnly()
}

// assertCopyConflictsOnly is assertTruth for tables where some e-mails
// are shared: the copy indexes (kept per source partition) hold one owner
// of a value shared in a partition and Check reports the others as
// conflicts; every other index equals the truth.
func (f *fixture) assertCopyConflictsOnly() {
	f.t.Helper()
	want, got := f.truth(), f.dump()
	for name := range want {
		ix := mustIndex(f.t, f.x, name)
		for v, keys := range want[name] {
			if ix.Kind == KindCopy {
				holders := map[string][]Key{}
				for _, k := range got[name][v] {
					holders[k.PK] = append(holders[k.PK], k)
				}
				for _, k := range keys {
					if len(holders[k.PK]) != 1 {
						f.t.Errorf("index %s value %s partition %s: holders %v, want one of the partition's %v", name, v, k.PK, holders[k.PK], keys)
					}
				}
				continue
			}
			if fmt.Sprint(sortKeys(keys)) != fmt.Sprint(sortKeys(got[name][v])) {
				f.t.Errorf("index %s value %s: got %v, want %v", name, v, got[name][v], keys)
			}
		}
		for v := range got[name] {
			if _, ok := want[name][v]; !ok {
				f.t.Errorf("index %s holds value %s no entity has: %v", name, v, got[name][v])
			}
		}
		res, err := f.x.Check(f.ctx, employees, name, func(Finding) error { return nil })
		if err != nil {
			f.t.Fatal(err)
		}
		if res.Missing+res.Stale != 0 || res.Unindexable != f.unfit(ix) {
			f.t.Errorf("check %s: %+v, want %d unindexable", name, res, f.unfit(ix))
		}
	}
}

// unfit counts the entities whose keys are too long for ix (a rows
// index's RowKeys hold both keys and a generation: see rowKey).
func (f *fixture) unfit(ix *index) int {
	f.t.Helper()
	n := 0
	err := queryAll(f.ctx, f.raw.Tables(), employees, storeadapter.Query{}, func(e storeadapter.Entity) error {
		v, ok := e.Properties[ix.Property]
		if enc, err := EncodeValue(v); ok && err == nil && !storeadapter.IsReserved(e.RowKey) && fitsIndex(ix, e.PartitionKey, e.RowKey, enc) != nil {
			n++
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func sortKeys(keys []Key) []Key {
	out := append([]Key(nil), keys...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].Compare(out[i]) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestSyncAfterDeletes: entities deleted behind the indexes' back (their
// records left) are removed from every index by one Sync over their
// span, in batches, and the entities around them are untouched.
func TestSyncAfterDeletes(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.x.chunk = 9
	rng := rand.New(rand.NewPCG(5, 6))
	var keys []Key
	for i := range 60 {
		k := Key{PK: "Sales", RK: fmt.Sprintf("%03d", i)}
		f.put(k.PK, k.RK, employee([]string{"Jones", "Smith", "Lee"}[i%3], fmt.Sprintf("e%d@contoso.com", i)))
		f.reconcile(k.PK, k.RK)
		keys = append(keys, k)
	}
	f.put("Sales", fmt.Sprintf("%0508d", 1), employee("Jones", "long@contoso.com"))
	f.reconcile("Sales", fmt.Sprintf("%0508d", 1))
	for _, k := range keys {
		if rng.IntN(2) == 0 {
			f.put(k.PK, k.RK, nil)
		}
	}
	f.put("Sales", fmt.Sprintf("%0508d", 1), nil)
	before := f.calls.Snapshot().Total().Calls
	res, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	calls := f.calls.Snapshot().Total().Calls - before
	f.assertTruth()
	if res.Removed < 20 || res.Fallbacks != 0 {
		t.Errorf("sync: %+v; want the deleted entities removed in batches, none key by key", res)
	}
	t.Logf("sync of 61 keys (%d removed): %d calls", res.Removed, calls)
	// Nothing left to do: a second sync only reads, and fences the
	// records of the entities gone (kept for the tombstone grace; no ETag
	// names an absence, see Reconcile's step 2).
	before = f.calls.Snapshot().Total().Calls
	if res, err = f.x.Sync(f.ctx, employees, Partition("Sales", "", "")); err != nil || res.Registered != 0 {
		t.Fatalf("second sync: %+v, %v", res, err)
	}
	// Four queries a chunk of nine keys: the entities' keys, the records,
	// the hashed records, the entities; and one transaction, the fences.
	if n := f.calls.Snapshot().Total().Calls - before; n > 5*(61/9+1) {
		t.Errorf("a sync with nothing to do made %d calls", n)
	}
}

// TestRebuildCrashAtEveryCall fails a rebuild's n-th storage call, for
// every n, then runs it again to the end: the indexes always equal the
// truth.
func TestRebuildCrashAtEveryCall(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: every call position of a rebuild")
	}
	for n := 1; ; n += 3 {
		f := newFixture(t, sixIndexes())
		f.x.chunk = 6
		rng := rand.New(rand.NewPCG(7, 8))
		keys := f.seedMixed(rng, 24, true)
		for _, k := range keys[:6] { // deleted and changed behind the indexes' back
			f.put(k.PK, k.RK, nil)
		}
		for i, k := range keys[6:12] {
			f.put(k.PK, k.RK, employee("Brown", fmt.Sprintf("b%d@new.com", i)))
		}
		cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
		var calls atomic.Int64
		f.fault = func(context.Context, instrument.Call) error {
			if calls.Add(1) == int64(n) {
				return fmt.Errorf("crash at call %d: %w", n, storeadapter.ErrUnavailable)
			}
			return nil
		}
		_, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 3})
		f.fault = nil
		if err == nil && calls.Load() < int64(n) {
			t.Logf("crashed at every third of the rebuild's %d calls", calls.Load())
			return
		}
		if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 3}); err != nil {
			t.Fatalf("crash at call %d, then: %v", n, err)
		}
		f.assertCopyConflictsOnly()
		if t.Failed() {
			t.Fatalf("crash at call %d", n)
		}
	}
}

// TestRebuildStopsAndContinues: a rebuild asked to stop after each chunk
// saves its position and returns *Stopped; run again it goes on, and the
// result counts every entity once.
func TestRebuildStopsAndContinues(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.x.chunk = 10
	f.seedMixed(rand.New(rand.NewPCG(9, 9)), 80, false)
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	runs := 0
	for {
		runs++
		asked := 0
		res, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 2, Stop: func() bool { asked++; return asked > 1 }})
		var stopped *Stopped
		if errors.As(err, &stopped) {
			if runs > 100 {
				t.Fatal("the rebuild never ends")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Entities != 80 {
			t.Errorf("rebuild over %d runs reconciled %d entities, want 80", runs, res.Entities)
		}
		break
	}
	if runs < 5 {
		t.Errorf("the rebuild stopped only %d times", runs)
	}
	f.assertCopyConflictsOnly()
}

// TestRebuildRacesApplication: while a rebuild runs, the application
// keeps changing, deleting and re-creating entities, each followed by its
// reconcile, with storage calls delayed at random so requests arrive out
// of order. The rebuild never leaves an entry older than its entity: once
// the last reconciles are done, every index equals the truth.
func TestRebuildRacesApplication(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.x.chunk = 5
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(11, 12))
	f.fault = func(ctx context.Context, c instrument.Call) error {
		mu.Lock()
		d := time.Duration(rng.IntN(800)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
		return nil
	}
	keys := f.seedMixed(rand.New(rand.NewPCG(1, 1)), 60, true)
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			for i := 0; ctx.Err() == nil; i++ {
				k := keys[r.IntN(len(keys))]
				if r.IntN(4) == 0 {
					f.put(k.PK, k.RK, nil)
				} else {
					f.put(k.PK, k.RK, employee([]string{"Jones", "Smith", "Brown"}[r.IntN(3)], fmt.Sprintf("%s.%d.%d@contoso.com", k.RK[:4], w, i)))
				}
				_, _ = f.x.Reconcile(f.ctx, employees, k.PK, k.RK)
			}
		}()
	}
	for run := range 3 {
		if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, fmt.Sprint("op", run), RebuildOptions{Parallel: 4}); err != nil {
			cancel()
			wg.Wait()
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	f.fault = nil
	for _, k := range keys {
		f.reconcile(k.PK, k.RK)
	}
	f.assertTruth()
}

// TestRebuildCost is the rebuild's cost on the benchmark's table (see
// BENCHMARKS.md): 5,000 entities in 10 partitions, a partition copy, a
// table list and a rows index, rebuilt from scratch. The aim is at most
// 0.25 storage calls per entity.
func TestRebuildCost(t *testing.T) {
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "email", Property: "Email", Kind: KindCopy, Store: StorePartition},
		{Name: "lastNameAll", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "EmployeesByLastName"},
		{Name: "lastNameRows", Property: "LastName", Kind: KindRows, Table: "EmployeesLastNameRows"},
	}}})
	const n = 5000
	var ops []storeadapter.TableOp
	for i := range n {
		e := storeadapter.Entity{PartitionKey: fmt.Sprintf("dept%02d", i%10), RowKey: fmt.Sprintf("%06d", i), Properties: employee(fmt.Sprintf("Name%02d", i%40), fmt.Sprintf("e%d@contoso.com", i))}
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
	}
	for _, b := range idempotent.Batches(ops) {
		if err := f.raw.Tables().Transact(f.ctx, employees, b); err != nil {
			t.Fatal(err)
		}
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	before := f.calls.Snapshot().Total().Calls
	res, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls := f.calls.Snapshot().Total().Calls - before
	perEntity := float64(calls) / n
	t.Logf("rebuild of %d entities: %d calls, %.3f per entity (%v)", n, calls, perEntity, res)
	if res.Entities != n {
		t.Errorf("reconciled %d entities, want %d", res.Entities, n)
	}
	if perEntity > 0.25 {
		t.Errorf("a rebuild costs %.3f calls per entity, want at most 0.25", perEntity)
	}
	f.assertTruth()
}
