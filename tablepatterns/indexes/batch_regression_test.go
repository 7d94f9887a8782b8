package indexes

// Regression tests of the batched reconcile and rebuild, each from a
// review of the first version: a case it got wrong, shown here to pass.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

func copyOnly() Config {
	return Config{Tables: map[string][]Decl{employees: {
		{Name: "email", Property: "Email", Kind: KindCopy, Store: StorePartition},
	}}}
}

func (f *fixture) record(pk, rk string) membership {
	f.t.Helper()
	e, err := getOptional(f.ctx, f.raw.Tables(), employees, pk, memberRowKey(rk))
	if err != nil {
		f.t.Fatal(err)
	}
	return readMembership(e, nil)
}

// Two keys of one registration group swap a value: A takes B's old value
// while B moves on. The copies map keeps only B's delete of the row A
// inserts.
func TestBatchCopySwapInOneGroup(t *testing.T) {
	f := newFixture(t, copyOnly())
	f.put("P", "a", employee("", "v@x"))
	f.put("P", "b", employee("", "w@x"))
	f.reconcile("P", "a")
	f.reconcile("P", "b")
	f.put("P", "b", employee("", "x@x"))
	f.put("P", "a", employee("", "w@x"))
	if _, err := f.x.Sync(f.ctx, employees, Partition("P", "", "")); err != nil {
		t.Fatal(err)
	}
	f.reconcile("P", "a")
	f.reconcile("P", "b")
	t.Logf("a's record: %v", f.record("P", "a").applied)
	if got := lookupKeys(t, f.x, "email", "w@x", ptr("P")); len(got) != 1 {
		t.Errorf("lookup w@x in P after sync and final reconciles: %v, want [P/a]", got)
	}
	f.assertTruth()
}

// Two keys with one value, no records (rebuild from scratch or Sync): both
// records claim the value; when the holder moves on, the other's
// reconcile does nothing.
func TestBatchCopySharedValueInOneGroup(t *testing.T) {
	f := newFixture(t, copyOnly())
	f.put("P", "a", employee("", "s@x"))
	f.put("P", "b", employee("", "s@x"))
	if _, err := f.x.Sync(f.ctx, employees, Partition("P", "", "")); err != nil {
		t.Fatal(err)
	}
	t.Logf("a: %v, b: %v", f.record("P", "a").applied, f.record("P", "b").applied)
	holder := lookupKeys(t, f.x, "email", "s@x", ptr("P"))
	t.Logf("holder %v", holder)
	other := "a"
	if holder[0].RK == "a" {
		other = "b"
	}
	f.put("P", holder[0].RK, employee("", "n@x"))
	f.reconcile("P", holder[0].RK)
	f.reconcile("P", other) // the documented remedy for a conflict
	if got := lookupKeys(t, f.x, "email", "s@x", ptr("P")); len(got) != 1 || got[0].RK != other {
		t.Errorf("lookup s@x after the holder moved and %s was reconciled: %v, want [P/%s]", other, got, other)
	}
	// The cascade: c takes s@x, then 'other' is deleted and synced.
	f.put("P", "c", employee("", "s@x"))
	f.reconcile("P", "c")
	t.Logf("after c: %v", lookupKeys(t, f.x, "email", "s@x", ptr("P")))
}

// The cascade in isolation: a record claims a value whose row is held by
// another key (as the two tests above leave it); the claimant is deleted
// and synced: its If-Match * delete removes the holder's copy.
func TestBatchCopyCascadeDelete(t *testing.T) {
	f := newFixture(t, copyOnly())
	f.put("P", "a", employee("", "s@x"))
	f.put("P", "b", employee("", "s@x"))
	if _, err := f.x.Sync(f.ctx, employees, Partition("P", "", "")); err != nil {
		t.Fatal(err)
	}
	// both claim s@x; b holds the row (the later write of the map)
	f.put("P", "a", nil)
	if _, err := f.x.Sync(f.ctx, employees, Partition("P", "", "")); err != nil {
		t.Fatal(err)
	}
	f.reconcile("P", "a")
	f.reconcile("P", "b")
	if got := lookupKeys(t, f.x, "email", "s@x", ptr("P")); len(got) != 1 || got[0].RK != "b" {
		t.Errorf("lookup s@x after a was deleted and synced: %v, want [P/b]", got)
	}
	t.Logf("b's record: %v", f.record("P", "b").applied)
}

// A long RowKey (hashed record) in an unscoped span: its entity is missing
// when the chunk's entities are read, then written and reconciled before
// the hashed records are read: the batch pairs the new record with the
// old (missing) entity and removes the key from its indexes.
func TestBatchHashedUnscopedStaleEntity(t *testing.T) {
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "lastNameAll", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "EmployeesByLastName"},
	}}})
	long := strings.Repeat("z", 508)
	f.put("P", "a", employee("Smith", ""))
	f.reconcile("P", "a")
	var queries atomic.Int64
	var inHook atomic.Bool
	f.fault = func(ctx context.Context, c instrument.Call) error {
		if c.Op != instrument.OpQuery || c.Name != employees || inHook.Load() {
			return nil
		}
		if queries.Add(1) == 3 { // records, entities, then hashed records
			inHook.Store(true)
			defer inHook.Store(false)
			f.put("P", long, employee("Jones", ""))
			if _, err := f.x.Reconcile(ctx, employees, "P", long); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	if _, err := f.x.Sync(f.ctx, employees, Span{}); err != nil {
		t.Fatal(err)
	}
	f.fault = nil
	if got := lookupKeys(t, f.x, "lastNameAll", "Jones", nil); len(got) != 1 {
		t.Errorf("after the application's write, its reconcile and a sync: lookup Jones = %v, want [P/%s...]", got, long[:4])
	}
}

// The sweep's Timestamp rule for table copies: a stale owner whose row
// another key's tombstone rewrote after the rebuild began is not checked.
func TestBatchSweepTableCopyTimestamp(t *testing.T) {
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "emailAll", Property: "Email", Kind: KindCopy, Store: StoreTable, Table: "EmployeesByEmail"},
	}}})
	// y held s@x once (its tombstone), x holds it now.
	f.put("P", "y", employee("", "s@x"))
	f.reconcile("P", "y")
	f.put("P", "y", employee("", "t@x"))
	f.reconcile("P", "y")
	f.put("P", "x", employee("", "s@x"))
	f.reconcile("P", "x")
	// x is deleted and its record lost (a restore, a wiped record, a bug):
	// the copy row of s@x is stale and only the sweep can find it.
	f.put("P", "x", nil)
	if err := f.raw.Tables().DeleteEntity(f.ctx, employees, "P", memberRowKey("x"), storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	// y's record says it once had s@x pending... make y write a tombstone to
	// the row after the rebuild began: y's record is made to claim s@x, as
	// a restored record would.
	rec, _ := f.raw.Tables().GetEntity(f.ctx, employees, "P", memberRowKey("y"))
	m := readMembership(&rec, nil)
	m.applied["emailAll"] = "" // y's entity has t@x; claim s@x was applied
	v, _ := EncodeValue("s@x")
	m.applied["emailAll"] = v + "#old"
	if _, err := f.raw.Tables().UpdateEntity(f.ctx, employees, m.entity("P", "y"), storeadapter.Replace, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	got := lookupKeys(t, f.x, "emailAll", "s@x", nil)
	t.Logf("after rebuild: s@x -> %v", got)
	if len(got) != 0 {
		t.Errorf("rebuild left a stale table copy: %v", got)
	}
}

// A table list at its limit: one key's live write that does not fit fails
// the whole value's group, so a deleted key's tombstone in the same batch
// is not written either.
func TestBatchTableListLimitPoisonsGroup(t *testing.T) {
	defer func(b int) { partBytes = b }(partBytes)
	partBytes = 8 // one line per part: 60 lines at most
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "lastNameAll", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "EmployeesByLastName"},
	}}})
	for i := range 60 {
		rk := fmt.Sprintf("k%02d", i)
		f.put("P", rk, employee("Jones", ""))
		f.reconcile("P", rk)
	}
	f.put("P", "k00", nil)                   // deleted (purge/archive then Sync)
	f.put("P", "k60", employee("Jones", "")) // new, does not fit
	res, err := f.x.Sync(f.ctx, employees, Partition("P", "", ""))
	t.Logf("sync: %+v %v", res, err)
	got := lookupKeys(t, f.x, "lastNameAll", "Jones", nil)
	for _, k := range got {
		if k.RK == "k00" {
			t.Errorf("the deleted k00 is still listed after Sync (%d listed)", len(got))
		}
	}
}

// After TestRebuildFromScratch's rebuild, count records that claim a
// partition copy whose row another key holds (the test's check counts them
// as ordinary conflicts).
func TestBatchRebuildFromScratchFalseClaims(t *testing.T) {
	f := newFixture(t, sixIndexes())
	keys := f.seedMixed(randFor(3, 4), 120, false)
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 4}); err != nil {
		t.Fatal(err)
	}
	ix := mustIndex(t, f.x, "email")
	claims := 0
	for _, k := range keys {
		m := f.record(k.PK, k.RK)
		v := stateValue(m.applied["email"])
		if v == "" {
			continue
		}
		row, _ := getOptional(f.ctx, f.raw.Tables(), employees, k.PK, copyRowKey(ix, v))
		if owner, _ := propString(row, propOwner); owner != k.RK {
			claims++
		}
	}
	if claims > 0 {
		t.Errorf("%d records claim a partition copy another key holds", claims)
	}
}

func randFor(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }

// TestBatchRebuildQueriesScale: a chunk's queries are bounded by its own
// range, so a rebuild from scratch of a table without records (each
// chunk's records query finds none) makes about the same number of
// queries per chunk at 10,000 and at 40,000 entities (it grew with the
// square of the table when the records query ran to the table's end).
func TestBatchRebuildQueriesScale(t *testing.T) {
	perChunk := map[int]float64{}
	for _, n := range []int{10000, 40000} {
		f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
			{Name: "lastNameRows", Property: "LastName", Kind: KindRows, Table: "EmployeesLastNameRows"},
		}}})
		var ops []storeadapter.TableOp
		for i := range n {
			e := storeadapter.Entity{PartitionKey: fmt.Sprintf("dept%02d", i%10), RowKey: fmt.Sprintf("%06d", i), Properties: employee(fmt.Sprintf("Name%02d", i%40), "")}
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
		}
		for _, b := range idempotent.Batches(ops) {
			if err := f.raw.Tables().Transact(f.ctx, employees, b); err != nil {
				t.Fatal(err)
			}
		}
		var q atomic.Int64
		f.fault = func(_ context.Context, c instrument.Call) error {
			if c.Op == instrument.OpQuery && c.Name == employees {
				q.Add(1)
			}
			return nil
		}
		cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
		if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{}); err != nil {
			t.Fatal(err)
		}
		perChunk[n] = float64(q.Load()) / float64(n/defaultChunk)
		t.Logf("%d entities: %d queries of the source table, %.1f a chunk", n, q.Load(), perChunk[n])
	}
	if perChunk[40000] > 1.5*perChunk[10000] || perChunk[40000] > 10 {
		t.Errorf("queries a chunk: %.1f at 10,000 entities, %.1f at 40,000; want about the same, at most 10", perChunk[10000], perChunk[40000])
	}
}

// An index redeclared under the same name (copy/table -> copy/partition),
// then rebuilt: records written under the old declaration claim a value
// (table copies record it even for the conflict's loser), so the force
// registration's Replace If-Match * overwrites the row another key took.
func TestBatchRedeclaredCopyIfMatchAny(t *testing.T) {
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "email", Property: "Email", Kind: KindCopy, Store: StoreTable, Table: "EmployeesByEmail"},
	}}})
	f.put("P", "a", employee("", "s@x"))
	f.put("P", "b", employee("", "s@x"))
	f.reconcile("P", "a")
	f.reconcile("P", "b") // conflict, but its record says s@x
	x2, err := Open(f.store, nil, copyOnly())
	if err != nil {
		t.Fatal(err)
	}
	x2.chunk = 1
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := x2.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 1}); err != nil {
		t.Fatal(err)
	}
	ix := mustIndex(t, x2, "email")
	v, _ := EncodeValue("s@x")
	row, _ := getOptional(f.ctx, f.raw.Tables(), employees, "P", copyRowKey(ix, v))
	owner, _ := propString(row, propOwner)
	ra, rb := f.record("P", "a"), f.record("P", "b")
	t.Logf("row owner %q; a claims %q, b claims %q", owner, ra.applied["email"], rb.applied["email"])
	if ra.applied["email"] != "" && rb.applied["email"] != "" {
		t.Errorf("after the rebuild both records claim the partition copy (row owner %q)", owner)
	}
}

// TestRecordShedsRemovedIndex: an index removed from the config leaves
// nothing in the membership records once they are registered again — at
// the entity's next change, or by a rebuild (they kept its properties for
// ever).
func TestRecordShedsRemovedIndex(t *testing.T) {
	f := newFixture(t, sixIndexes())
	for _, rk := range []string{"a", "b"} {
		f.put("P", rk, employee("Jones", rk+"@x"))
		f.reconcile("P", rk)
	}
	cfg := sixIndexes()
	cfg.Tables[employees] = cfg.Tables[employees][:1] // only "email" left
	x, err := Open(f.store, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.put("P", "a", employee("Smith", "a2@x"))
	if _, err := x.Reconcile(f.ctx, employees, "P", "a"); err != nil {
		t.Fatal(err)
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, rk := range []string{"a", "b"} {
		m := f.record("P", rk)
		if len(m.applied) != 1 || m.applied["email"] == "" || len(m.pending) != 0 {
			t.Errorf("record of %s after the index removal: applied %v, pending %v; want email only", rk, m.applied, m.pending)
		}
	}
}

// TestConflictWaiterWoken: an entity whose copy value another entity of
// its partition holds is left out of the copy index; when the holder
// leaves the value — renamed and reconciled, or deleted and synced by a
// purge or archive — the waiting entity is reconciled and takes the copy,
// in both copy stores, without a write or message of its own (it waited
// for its next write or a rebuild before).
func TestConflictWaiterWoken(t *testing.T) {
	for _, leave := range []string{"rename", "delete and sync"} {
		t.Run(leave, func(t *testing.T) {
			f := newFixture(t, sixIndexes())
			f.put("P", "holder", employee("Jones", "s@x"))
			f.reconcile("P", "holder")
			f.put("P", "waiter", employee("Jones", "s@x"))
			if out := f.reconcile("P", "waiter"); len(out.Conflicts) != 2 {
				t.Fatalf("the waiter's reconcile: %d conflicts, want 2 (both copy indexes)", len(out.Conflicts))
			}
			if leave == "rename" {
				f.put("P", "holder", employee("Jones", "t@x"))
				f.reconcile("P", "holder")
			} else {
				f.put("P", "holder", nil)
				if _, err := f.x.Sync(f.ctx, employees, Partition("P", "", "")); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"email", "emailAll"} {
				if got := lookupKeys(t, f.x, name, "s@x", ptr("P")); len(got) != 1 || got[0].RK != "waiter" {
					t.Errorf("%s: lookup s@x after the holder left = %v, want [P/waiter]", name, got)
				}
			}
			f.assertTruth()
		})
	}
}
