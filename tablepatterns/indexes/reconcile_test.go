package indexes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

func TestReconcileInsertRenameDelete(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.put("Sales", "002", employee("Jones", "jonesm@contoso.com"))
	f.put("Marketing", "003", employee("Jones", "jonesb@contoso.com"))
	f.put("Marketing", "004", employee("", "")) // not indexed
	for _, k := range []Key{{PK: "Sales", RK: "001"}, {PK: "Sales", RK: "002"}, {PK: "Marketing", RK: "003"}, {PK: "Marketing", RK: "004"}} {
		if out := f.reconcile(k.PK, k.RK); !out.Changed && k.RK != "004" {
			t.Errorf("first reconcile of %v changed nothing", k)
		}
	}
	f.assertTruth()
	all := []Key{{PK: "Marketing", RK: "003"}, {PK: "Sales", RK: "001"}, {PK: "Sales", RK: "002"}}
	for _, name := range []string{"lastNameAll", "lastNameBlob", "lastNameRows"} {
		if got := lookupKeys(t, f.x, name, "Jones", nil); !slices.Equal(got, all) {
			t.Errorf("lookup %s Jones = %v, want %v", name, got, all)
		}
		if got := lookupKeys(t, f.x, name, "Jones", ptr("Sales")); !slices.Equal(got, all[1:]) {
			t.Errorf("lookup %s Jones in Sales = %v, want %v", name, got, all[1:])
		}
	}
	if got := lookupKeys(t, f.x, "lastName", "Jones", ptr("Sales")); !slices.Equal(got, all[1:]) {
		t.Errorf("lookup lastName Jones in Sales = %v", got)
	}
	if _, err := f.x.Lookup(f.ctx, employees, "lastName", "Jones", LookupOptions{}); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("partition lookup without pk: %v", err)
	}
	ms, err := f.x.Lookup(f.ctx, employees, "email", "jonesm@contoso.com", LookupOptions{PK: ptr("Sales"), Entities: true})
	if err != nil || len(ms) != 1 || ms[0].RK != "002" || ms[0].Entity.Properties["LastName"] != "Jones" || ms[0].Entity.RowKey != "002" {
		t.Fatalf("email copy lookup = %+v, %v", ms, err)
	}
	if _, ok := ms[0].Entity.Properties[propOwner]; ok {
		t.Error("a looked-up copy shows its bookkeeping")
	}

	// A rename moves the key; a copy follows a change of another property.
	f.put("Sales", "001", employee("Smith", "smithj@contoso.com"))
	f.reconcile("Sales", "001")
	p := employee("Jones", "jonesm@contoso.com")
	p["Dept"] = "Engineering"
	f.put("Sales", "002", p)
	if out := f.reconcile("Sales", "002"); !out.Changed {
		t.Error("a change of a copied property was not reconciled")
	}
	f.put("Marketing", "003", nil)
	f.reconcile("Marketing", "003")
	f.assertTruth()
	if got := lookupKeys(t, f.x, "lastNameRows", "Jones", nil); !slices.Equal(got, []Key{{PK: "Sales", RK: "002"}}) {
		t.Errorf("after renames, Jones = %v", got)
	}
	if got := lookupKeys(t, f.x, "emailAll", "jonesj@contoso.com", nil); len(got) != 0 {
		t.Errorf("the old email still finds %v", got)
	}
	ms, _ = f.x.Lookup(f.ctx, employees, "emailAll", "jonesm@contoso.com", LookupOptions{Entities: true})
	if len(ms) != 1 || ms[0].Entity.Properties["Dept"] != "Engineering" {
		t.Errorf("table copy after update = %+v", ms)
	}
}

// TestReconcileUnchangedCostsTwoReads: an unchanged reconcile reads the
// record and the entity, nothing else, once the first one after a change
// has proven what the change's settle left (one read per index of the
// table, rows and blob stores) and cleared it (one write).
func TestReconcileUnchangedCostsTwoReads(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "001")
	before := f.calls.Snapshot().Total().Calls
	if out := f.reconcile("Sales", "001"); !out.Changed {
		t.Error("the reconcile after a change cleared nothing")
	}
	if n := f.calls.Snapshot().Total().Calls - before; n != 2+4+1 {
		t.Errorf("the reconcile after a change made %d calls, want 7", n)
	}
	before = f.calls.Snapshot().Total().Calls
	if out := f.reconcile("Sales", "001"); out.Changed {
		t.Error("a second reconcile changed something")
	}
	if n := f.calls.Snapshot().Total().Calls - before; n != 2 {
		t.Errorf("an unchanged reconcile made %d calls, want 2", n)
	}
}

// TestCrashAtEveryCall stops a rename's reconcile at each of its storage
// calls in turn (the call and every later one fail, as for a killed
// worker), changes the entity again in half the runs, and checks that the
// next reconcile converges.
func TestCrashAtEveryCall(t *testing.T) {
	for _, again := range []bool{false, true} {
		for n := 1; ; n++ {
			f := newFixture(t, sixIndexes())
			f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
			f.put("Sales", "002", employee("Jones", "jonesm@contoso.com"))
			f.reconcile("Sales", "001")
			f.reconcile("Sales", "002")
			f.put("Sales", "001", employee("Smith", "smithj@contoso.com"))
			calls := 0
			f.fault = func(context.Context, instrument.Call) error {
				if calls++; calls >= n {
					return fmt.Errorf("crash at call %d: %w", n, storeadapter.ErrUnavailable)
				}
				return nil
			}
			_, err := f.x.Reconcile(f.ctx, employees, "Sales", "001")
			f.fault = nil
			if err == nil {
				if again {
					return
				}
				break // the reconcile made fewer than n calls: every position was tried
			}
			if again {
				f.put("Sales", "001", employee("Brown", "brownj@contoso.com"))
			}
			f.reconcile("Sales", "001")
			f.assertTruth()
			if t.Failed() {
				t.Fatalf("crash at call %d (entity changed again: %v)", n, again)
			}
		}
	}
}

// holdCalls blocks the matching calls of a context marked with lateKey
// until release is closed: it lets a test run one reconcile "late".
type holdCalls struct {
	release chan struct{}
	held    chan struct{}
	match   func(context.Context, instrument.Call) bool
	once    sync.Once
}

type lateKey struct{}

func (h *holdCalls) fault(ctx context.Context, c instrument.Call) error {
	if ctx.Value(lateKey{}) == nil || !h.match(ctx, c) {
		return nil
	}
	h.once.Do(func() { close(h.held) })
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lateReconcile starts a reconcile of Sales/001 whose calls h may hold,
// waits until h holds one (what names it) and returns the reconcile's
// error, once it returns.
func (f *fixture) lateReconcile(h *holdCalls, what string) <-chan error {
	f.t.Helper()
	return f.late(h, what, func(ctx context.Context) error {
		_, err := f.x.Reconcile(ctx, employees, "Sales", "001")
		return err
	})
}

// late runs op with a context h may hold, waits until h holds one of its
// calls (what names it) and returns op's error, once it returns.
func (f *fixture) late(h *holdCalls, what string, op func(ctx context.Context) error) <-chan error {
	f.t.Helper()
	done := make(chan error, 1)
	go func() { done <- op(context.WithValue(f.ctx, lateKey{}, true)) }()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		f.t.Fatalf("the late operation never reached %s", what)
	}
	return done
}

// TestLateReconcileCannotUndoNewer holds a reconcile that registered an
// older version of the entity just before it writes the table, rows and
// blob stores; meanwhile the entity changes and a second reconcile
// finishes. When the first is let go, its writes must not undo the
// second's: every index must still match the truth.
func TestLateReconcileCannotUndoNewer(t *testing.T) {
	isExternalWrite := func(_ context.Context, c instrument.Call) bool {
		switch c.Op {
		case instrument.OpInsertEntity, instrument.OpUpdateEntity, instrument.OpTransact, instrument.OpPut:
			return c.Name != employees
		}
		return false
	}
	for _, final := range []string{"Smith", "Jones", ""} {
		t.Run("final="+final, func(t *testing.T) {
			f := newFixture(t, sixIndexes())
			f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
			f.reconcile("Sales", "001")
			h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: isExternalWrite}
			f.fault = h.fault
			f.put("Sales", "001", employee("Brown", "brownj@contoso.com"))
			done := f.lateReconcile(h, "an external write")
			if final == "" {
				f.put("Sales", "001", nil)
			} else {
				f.put("Sales", "001", employee(final, strings.ToLower(final)+"j@contoso.com"))
			}
			f.reconcile("Sales", "001")
			f.assertTruth()
			close(h.release)
			if err := <-done; err != nil {
				t.Fatalf("late reconcile: %v", err)
			}
			f.assertTruth()
		})
	}
}

// TestStaleRegistrationFenced holds a reconcile at its registration, after
// it read a version of the entity that the application then undoes (the
// value set back, the entity deleted again, the indexed values removed
// again): the reconcile of that last write (a Reconcile, or a Sync: a
// restore or copy that wrote the entity back, a purge that deleted it)
// finds nothing changed. Let go, the held registration must not win with
// what it read: an unchanged reconcile that finds the entity written
// since the record's last write fences the record, and a first
// registration (no record to fence) reads the entity again.
func TestStaleRegistrationFenced(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, final map[string]any // the entity before the held reconcile read it, and after
		deleted       bool           // the entity was indexed and deleted before
	}{
		{"value set back", employee("Jones", "jonesj@contoso.com"), employee("Jones", "jonesj@contoso.com"), false},
		{"entity deleted again", nil, nil, false},
		{"entity deleted again, its record kept", employee("Jones", "jonesj@contoso.com"), nil, true},
		{"indexed values removed again", map[string]any{"Dept": "Sales"}, map[string]any{"Dept": "Sales"}, false},
	} {
		for _, by := range []string{"Reconcile", "Sync"} {
			t.Run(tc.name+", then "+by, func(t *testing.T) {
				f := newFixture(t, sixIndexes())
				f.put("Sales", "000", employee("First", "first@contoso.com")) // creates the index tables
				f.reconcile("Sales", "000")
				if tc.before != nil {
					f.put("Sales", "001", tc.before)
					f.reconcile("Sales", "001")
				}
				if tc.deleted {
					f.put("Sales", "001", nil)
					f.reconcile("Sales", "001")
				}
				h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: isRecordWrite}
				f.fault = h.fault
				f.put("Sales", "001", employee("Brown", "brownj@contoso.com"))
				done := f.lateReconcile(h, "the registration")
				f.put("Sales", "001", tc.final)
				if by == "Reconcile" {
					f.reconcile("Sales", "001")
				} else if res, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", "")); err != nil || res.Registered != 0 {
					t.Fatalf("Sync: %+v, %v; want nothing registered (a fence is not a registration)", res, err)
				}
				f.assertTruth()
				close(h.release)
				if err := <-done; err != nil {
					t.Fatalf("late reconcile: %v", err)
				}
				f.fault = nil
				f.assertTruth()
			})
		}
	}
}

// TestFenceCosts: the record keeps the version of the entity its last
// write read (R), so that an unchanged reconcile is the two reads whether
// a reconcile or a Sync registered the entity; a write of a property no
// index reads and a record without R (an older release wrote it) cost
// the fence, once; an entity gone costs it every time (no ETag names an
// absence).
func TestFenceCosts(t *testing.T) {
	f := newFixture(t, only("lastName", "lastNameRows"))
	f.put("Sales", "000", employee("First", "")) // creates the index table
	f.reconcile("Sales", "000")
	f.put("Sales", "001", employee("Jones", ""))
	if _, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", "")); err != nil {
		t.Fatal(err)
	}
	f.costs(2, "an unchanged reconcile after a Sync registered the entity")
	props := employee("Jones", "")
	props["Phone"] = "555-0100"
	f.putCosts(props, 3, "a write of a property no index reads (the reads, the fence)")
	f.costs(2, "an unchanged reconcile after the fence")
	rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
	if err != nil || rec == nil {
		t.Fatalf("the record: %v, %v", rec, err)
	}
	delete(rec.Properties, "R")
	if _, err := f.raw.Tables().UpdateEntity(f.ctx, employees, *rec, storeadapter.Replace, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	f.costs(3, "an unchanged reconcile of a record an older release wrote (the reads, the fence)")
	f.costs(2, "an unchanged reconcile after the fence")
	f.put("Sales", "001", nil)
	f.reconcile("Sales", "001")
	f.costs(3, "an unchanged reconcile of an entity gone (no ETag names an absence)")
	f.costs(3, "another unchanged reconcile of an entity gone")
}

// TestConcurrentReconcilesConverge runs many reconciles of a few
// entities at once while the entities change, with storage calls delayed
// at random (so requests arrive out of order) and some failing; after a
// last reconcile of each entity every index equals the truth.
func TestConcurrentReconcilesConverge(t *testing.T) {
	f := newFixture(t, sixIndexes())
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	f.fault = func(ctx context.Context, c instrument.Call) error {
		mu.Lock()
		d, fail := time.Duration(rng.IntN(1500))*time.Microsecond, rng.IntN(40) == 0
		mu.Unlock()
		time.Sleep(d)
		if fail {
			return fmt.Errorf("injected: %w", storeadapter.ErrUnavailable)
		}
		return nil
	}
	names := []string{"Jones", "Smith", "Brown", "Lee"}
	keys := []Key{{PK: "Sales", RK: "001"}, {PK: "Sales", RK: "002"}, {PK: "Sales", RK: "003"}, {PK: "Marketing", RK: "004"}, {PK: "Marketing", RK: "005"}}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 40 {
				k := keys[r.IntN(len(keys))]
				if w%2 == 0 { // writers change an entity, then reconcile it
					switch r.IntN(5) {
					case 0:
						f.put(k.PK, k.RK, nil)
					default:
						f.put(k.PK, k.RK, employee(names[r.IntN(len(names))], fmt.Sprintf("%s.%d.%d@contoso.com", k.RK, w, i)))
					}
				}
				_, _ = f.x.Reconcile(f.ctx, employees, k.PK, k.RK) // failures are injected
			}
		}()
	}
	wg.Wait()
	f.fault = nil
	for _, k := range keys {
		f.reconcile(k.PK, k.RK)
	}
	f.assertTruth()
}

func TestCopyConflict(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "shared@contoso.com"))
	f.put("Sales", "002", employee("Jones", "shared@contoso.com"))
	f.reconcile("Sales", "001")
	out := f.reconcile("Sales", "002")
	if len(out.Conflicts) != 2 {
		t.Fatalf("conflicts = %v, want one per copy index", out.Conflicts)
	}
	for _, err := range out.Conflicts {
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"001"`) {
			t.Errorf("conflict %v does not wrap ErrConflict or name the holder", err)
		}
	}
	if got := lookupKeys(t, f.x, "emailAll", "shared@contoso.com", nil); !slices.Equal(got, []Key{{PK: "Sales", RK: "001"}}) {
		t.Errorf("the conflicting copy overwrote the holder: %v", got)
	}
	var problems []string
	if _, err := f.x.Check(f.ctx, employees, "email", func(fd Finding) error {
		problems = append(problems, fd.Problem+" "+fd.RK)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(problems, []string{"conflict 002"}) {
		t.Errorf("check found %v", problems)
	}
	// The holder moves on: the next reconcile of 002 takes the value.
	f.put("Sales", "001", employee("Jones", "other@contoso.com"))
	f.reconcile("Sales", "001")
	if out := f.reconcile("Sales", "002"); len(out.Conflicts) != 0 {
		t.Fatalf("conflicts after the holder moved: %v", out.Conflicts)
	}
	f.assertTruth()
}

func TestUnindexableValue(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "001")
	f.put("Sales", "001", employee(strings.Repeat("J", 600), "jonesj@contoso.com"))
	out := f.reconcile("Sales", "001")
	if len(out.Unindexable) != 4 {
		t.Fatalf("unindexable = %v, want the four LastName indexes", out.Unindexable)
	}
	if !strings.Contains(out.Unindexable[0].Error(), "LastName") {
		t.Errorf("error %v does not name the property", out.Unindexable[0])
	}
	if got := lookupKeys(t, f.x, "lastNameRows", "Jones", nil); len(got) != 0 {
		t.Errorf("the old value still lists %v", got)
	}
	res, err := f.x.Check(f.ctx, employees, "lastNameAll", func(Finding) error { return nil })
	if err != nil || res.Unindexable != 1 || res.Problems() != 1 {
		t.Errorf("check = %+v, %v; want one unindexable", res, err)
	}
}

func TestSpillOver(t *testing.T) {
	defer func(b int) { partBytes = b }(partBytes)
	partBytes = 240 // parts of 240 bytes of lines
	f := newFixture(t, sixIndexes())
	const n = 120
	for i := range n {
		f.put("Sales", fmt.Sprintf("emp%03d", i), employee("Jones", fmt.Sprintf("e%d@contoso.com", i)))
		f.reconcile("Sales", fmt.Sprintf("emp%03d", i))
	}
	if res := f.prune(); res.Folded != n { // a table list's lines are written by its fold
		t.Errorf("the prune folded %d markers, want %d", res.Folded, n)
	}
	for _, base := range []struct{ table, pk, base string }{
		{employees, "Sales", listBase(mustIndex(t, f.x, "lastName"), "SJones")},
		{"EmployeesByLastName", "lastNameAll_SJones", tableListBase},
	} {
		l, err := readList(f.ctx, f.raw.Tables(), base.table, base.pk, base.base)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.parts) < 3 {
			t.Errorf("%s: %d parts for %d members: no spill-over", base.table, len(l.parts), n)
		}
	}
	for _, name := range []string{"lastName", "lastNameAll"} {
		if got := lookupKeys(t, f.x, name, "Jones", ptr("Sales")); len(got) != n {
			t.Errorf("%s lookup found %d of %d", name, len(got), n)
		}
	}
	f.assertTruth()
	for i := range n {
		if i%3 != 0 {
			f.put("Sales", fmt.Sprintf("emp%03d", i), nil)
			f.reconcile("Sales", fmt.Sprintf("emp%03d", i))
		}
	}
	f.assertTruth()
}

// TestSpillOverAtRealSize spills a partition list and a table list over
// at the real part size, with long RowKeys.
func TestSpillOverAtRealSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 550 entities into lists of half a megabyte")
	}
	cfg := Config{Tables: map[string][]Decl{employees: {
		{Name: "lastName", Property: "LastName", Kind: KindList, Store: StorePartition},
		{Name: "lastNameAll", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "EmployeesByLastName"},
	}}}
	f := newFixture(t, cfg)
	n := partBytes/500 + 60
	for i := range n {
		rk := fmt.Sprintf("%04d-%s", i, strings.Repeat("x", 495))
		f.put("Sales", rk, employee("Jones", ""))
		f.reconcile("Sales", rk)
	}
	l, err := readList(f.ctx, f.raw.Tables(), employees, "Sales", listBase(mustIndex(t, f.x, "lastName"), "SJones"))
	if err != nil || len(l.parts) < 2 {
		t.Fatalf("%d parts, %v", len(l.parts), err)
	}
	if got := lookupKeys(t, f.x, "lastNameAll", "Jones", nil); len(got) != n {
		t.Errorf("lookup found %d of %d", len(got), n)
	}
	f.assertTruth()
}

func mustIndex(t *testing.T, x *Set, name string) *index {
	ix, err := x.index(employees, name)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// TestRebuild wipes every index and the membership records, plants stale
// entries, rebuilds (stopping once midway to resume from the checkpoint)
// and checks the result equals the truth.
func TestRebuild(t *testing.T) {
	f := newFixture(t, sixIndexes())
	for i := range 30 {
		f.put([]string{"Sales", "Marketing"}[i%2], fmt.Sprintf("%03d", i), employee([]string{"Jones", "Smith", ""}[i%3], fmt.Sprintf("e%d@contoso.com", i)))
		f.reconcile([]string{"Sales", "Marketing"}[i%2], fmt.Sprintf("%03d", i))
	}
	f.assertTruth()
	// Wipe the index tables, the container and the reserved rows.
	wipe := func(table string, cond func(storeadapter.Entity) bool) {
		_ = queryAll(f.ctx, f.raw.Tables(), table, storeadapter.Query{}, func(e storeadapter.Entity) error {
			if cond(e) {
				return f.raw.Tables().DeleteEntity(f.ctx, table, e.PartitionKey, e.RowKey, storeadapter.ETagAny)
			}
			return nil
		})
	}
	all := func(storeadapter.Entity) bool { return true }
	for _, tb := range []string{"EmployeesByEmail", "EmployeesByLastName", "EmployeesLastNameRows"} {
		wipe(tb, all)
	}
	wipe(employees, func(e storeadapter.Entity) bool { return storeadapter.IsReserved(e.RowKey) })
	page, _ := f.raw.Container("employee-index").List(f.ctx, "", "")
	for _, b := range page.Blobs {
		_ = f.raw.Container("employee-index").Delete(f.ctx, b.Name, "")
	}
	// Stale entries the membership records know nothing of.
	for _, rk := range []string{"999", "000"} {
		if _, err := f.raw.Tables().InsertEntity(f.ctx, "EmployeesLastNameRows", storeadapter.Entity{PartitionKey: "SGhost", RowKey: memberKey("Sales", rk), Properties: map[string]any{propGen: int64(1), propDead: false}}); err != nil {
			t.Fatal(err)
		}
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	calls := 0
	f.fault = func(_ context.Context, c instrument.Call) error {
		// One failed call is retried; an outage stops the rebuild.
		if calls++; calls == 40 || calls >= 150 {
			return fmt.Errorf("outage: %w", storeadapter.ErrUnavailable)
		}
		return nil
	}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op1", RebuildOptions{}); err == nil {
		t.Fatal("the rebuild did not stop at the injected failure")
	}
	f.fault = nil
	res, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op1", RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Swept < 1 {
		t.Errorf("rebuild swept nothing: %v", res)
	}
	f.assertTruth()
	if tok, _ := cp.Load(f.ctx, "op1", rebuildStep); tok != "" {
		t.Errorf("checkpoint left behind: %q", tok)
	}

	// A deleted entity's membership record goes once its generation is
	// older than the tombstone grace period.
	f.put("Sales", "000", nil)
	f.reconcile("Sales", "000")
	if rec, _ := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("000")); rec == nil {
		t.Fatal("the membership record of a just-deleted entity is gone")
	}
	f.x.clock = clock.NewFake(time.Now().Add(2 * time.Hour))
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op2", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("000")); rec != nil {
		t.Errorf("the membership record of a long-deleted entity is still there: %v", rec.Properties)
	}
	f.assertTruth()
}

func TestConfigValidate(t *testing.T) {
	decl := func(mod func(*Decl)) Config {
		d := Decl{Name: "ix", Property: "P", Kind: KindList, Store: StoreTable, Table: "IndexTable"}
		mod(&d)
		return Config{Tables: map[string][]Decl{"Source": {d}}}
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{decl(func(d *Decl) { d.Kind = "tree" }), `index "ix": kind: must be`},
		{decl(func(d *Decl) { d.Store = "queue" }), `store: a list index is stored in`},
		{decl(func(d *Decl) { d.Table = "x" }), `table:`},
		{decl(func(d *Decl) { d.Table = "" }), `table: is required`},
		{decl(func(d *Decl) { d.Name = "bad-name" }), `name: must be`},
		{decl(func(d *Decl) { d.Property = "1x" }), `property:`},
		{decl(func(d *Decl) { d.Store, d.Table, d.Container = StoreBlob, "", "Bad_Container" }), `container:`},
		{decl(func(d *Decl) {
			d.Kind, d.Store, d.Table, d.Properties = KindCopy, StorePartition, "", make([]string, 250)
		}), `properties[0]`},
		{decl(func(d *Decl) { d.Properties = []string{"A"} }), `properties: only a copy`},
		{decl(func(d *Decl) { d.Kind, d.Store = KindRows, ""; d.Table = "Source" }), `a rows index needs a table of its own`},
		{Config{Tables: map[string][]Decl{"Source": {{Name: "a", Property: "P", Kind: KindList, Store: StorePartition}, {Name: "A", Property: "Q", Kind: KindList, Store: StorePartition}}}}, `declared twice`},
		{Config{Tables: map[string][]Decl{"Source": {{Name: "a", Property: "P", Kind: KindRows, Table: "Idx"}, {Name: "b", Property: "Q", Kind: KindList, Store: StoreTable, Table: "Idx"}}}}, `a rows index needs a table of its own`},
		{Config{Tables: map[string][]Decl{"Source": {{Name: "a", Property: "P", Kind: KindList, Store: StoreTable, Table: "Other"}}, "Other": nil}}, `is a declared source table`},
		{Config{Tables: map[string][]Decl{"Source": {{Name: "a", Property: "P", Kind: KindList, Store: StoreTable, Table: "Idx"}}, "Second": {{Name: "a", Property: "P", Kind: KindList, Store: StoreTable, Table: "Idx"}}}}, `serves one source table`},
		{Config{TombstoneGrace: jobs.Duration(time.Minute)}, `index.tombstoneGrace`},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", tc.cfg.Tables, err, tc.want)
		}
	}
	good := sixIndexes()
	if err := good.Validate(); err != nil {
		t.Errorf("the issue's declarations: %v", err)
	}
}

// TestRecordReadBeforeEntity: a reconcile whose record read is slow must
// not pair the record a later reconcile wrote with the older entity it
// read first (found in review: the two were read in parallel).
func TestRecordReadBeforeEntity(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "001")
	f.put("Sales", "001", employee("Brown", "brownj@contoso.com"))
	h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: func(_ context.Context, c instrument.Call) bool {
		return c.Op == instrument.OpGetEntity && c.RowKey == memberRowKey("001")
	}}
	f.fault = h.fault
	gets := func() int64 { return f.calls.Snapshot()[instrument.OpGetEntity].Calls }
	before := gets()
	done := make(chan error, 1)
	go func() {
		_, err := f.x.Reconcile(context.WithValue(f.ctx, lateKey{}, true), employees, "Sales", "001")
		done <- err
	}()
	<-h.held
	// Give an entity read made in parallel with the held record read the
	// time to return Brown.
	for deadline := time.Now().Add(200 * time.Millisecond); gets() == before && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	f.put("Sales", "001", employee("Smith", "smithj@contoso.com"))
	f.reconcile("Sales", "001")
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.assertTruth()
}

// TestPartitionListRenameBetweenLongLists renames an entity between two
// partition lists of many parts: the transaction holds only the parts
// that change (found in review: it touched every part and went over 100
// operations).
func TestPartitionListRenameBetweenLongLists(t *testing.T) {
	defer func(b int) { partBytes = b }(partBytes)
	partBytes = 8 // one short line per part
	cfg := Config{Tables: map[string][]Decl{employees: {{Name: "lastName", Property: "LastName", Kind: KindList, Store: StorePartition}}}}
	f := newFixture(t, cfg)
	for i := range 100 {
		rk := fmt.Sprintf("e%03d", i)
		f.put("Sales", rk, employee([]string{"Jones", "Smith"}[i%2], ""))
		f.reconcile("Sales", rk)
	}
	f.put("Sales", "e000", employee("Smith", ""))
	if _, err := f.x.Reconcile(f.ctx, employees, "Sales", "e000"); err != nil {
		t.Fatalf("rename between two lists of 50 parts: %v", err)
	}
	f.assertTruth()
}

// TestPartitionCopiesTooLargeTogether: partition copies that each fit an
// entity but not one transaction together are removed and reported, and
// the other indexes are kept (found in review: the reconcile failed).
func TestPartitionCopiesTooLargeTogether(t *testing.T) {
	cfg := Config{Tables: map[string][]Decl{employees: {
		{Name: "c1", Property: "P1", Kind: KindCopy, Store: StorePartition},
		{Name: "c2", Property: "P2", Kind: KindCopy, Store: StorePartition},
		{Name: "c3", Property: "P3", Kind: KindCopy, Store: StorePartition},
		{Name: "rows", Property: "P1", Kind: KindRows, Table: "P1Rows"},
	}}}
	f := newFixture(t, cfg)
	p := map[string]any{"P1": "v1", "P2": "v2", "P3": "v3"}
	for i := range 15 {
		p[fmt.Sprintf("Big%d", i)] = strings.Repeat("€", 32000)
	}
	f.put("Sales", "001", p)
	out := f.reconcile("Sales", "001")
	if len(out.Unindexable) != 3 || !strings.Contains(out.Unindexable[0].Error(), "one transaction") {
		t.Fatalf("unindexable = %v, want the three copies", out.Unindexable)
	}
	if got := lookupKeys(t, f.x, "rows", "v1", nil); !slices.Equal(got, []Key{{PK: "Sales", RK: "001"}}) {
		t.Errorf("the rows index = %v", got)
	}
	f.put("Sales", "001", map[string]any{"P1": "v1", "P2": "v2", "P3": "v3"}) // small again
	if out := f.reconcile("Sales", "001"); len(out.Unindexable) != 0 {
		t.Fatalf("unindexable after shrinking: %v", out.Unindexable)
	}
	f.assertTruth()
}

// TestTombstonesPrunedAfterGrace: a removal leaves tombstones; past the
// grace period a rebuild deletes the rows index's dead rows and the table
// list's dead markers, the next write of a blob list or copy entry drops
// theirs, and the next fold of a table list (a prune) its dead lines. A
// table list's tombstones are counted as its members are (see markers).
func TestTombstonesPrunedAfterGrace(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "001")
	f.put("Sales", "001", employee("Smith", "smithj@contoso.com"))
	f.reconcile("Sales", "001")
	tombs := func() (n int) {
		for _, name := range f.x.Names(employees) {
			ix := mustIndex(t, f.x, name)
			if err := f.x.scanMembers(f.ctx, ix, func(e Entry) error {
				if e.Dead {
					n++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	if n := tombs(); n != 4 { // emailAll, lastNameAll, lastNameBlob, lastNameRows
		t.Fatalf("%d tombstones after a rename, want 4", n)
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "early", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	// A rebuild moves every key of a rows index to a row of its own
	// generation (see rowsState.changed): Smith's row of the rename is
	// dead now too.
	if n := tombs(); n != 5 {
		t.Fatalf("%d tombstones after a rebuild within the grace period, want 5", n)
	}
	f.x.clock = clock.NewFake(time.Now().Add(2 * time.Hour))
	res, err := f.x.Rebuild(f.ctx, employees, nil, cp, "late", RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The grace counts from a row's kill: Jones's row and Smith's of the
	// rename (killed by the rename and the first rebuild) go; Smith's of
	// the first rebuild, killed by this one, stays. The same for the table
	// list's markers.
	if res.Pruned != 4 {
		t.Errorf("rebuild pruned %d tombstone rows, want the rows index's 2 and the table list's 2", res.Pruned)
	}
	// Writes of the old values' entries drop their tombstones; a table
	// list's, its next fold.
	f.put("Sales", "002", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "002")
	f.prune()
	if n := tombs(); n != 1 {
		t.Errorf("%d tombstones left after the grace period and new writes, want the rows row this rebuild killed", n)
	}
	f.assertTruth()
}
