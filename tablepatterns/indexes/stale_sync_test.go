package indexes

import (
	"context"
	"fmt"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// isRecordWrite matches the writes of the source table: the membership
// records' (and the partition stores', in their transactions).
func isRecordWrite(_ context.Context, c instrument.Call) bool {
	switch c.Op {
	case instrument.OpInsertEntity, instrument.OpUpdateEntity, instrument.OpTransact:
		return c.Name == employees
	}
	return false
}

// TestStaleSyncRegistrationRechecked: a Sync (and a rebuild) held at the
// first registration of an entity the application then deletes, or
// strips of its indexed values, must not leave the entity indexed: the
// reconcile of that last write found no record and wrote nothing, so the
// batch reads the entities it registered first again.
func TestStaleSyncRegistrationRechecked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		final map[string]any
		run   func(f *fixture, ctx context.Context) error
	}{
		{"sync, entity deleted", nil, func(f *fixture, ctx context.Context) error {
			return f.syncRechecked(ctx, SyncResult{Entities: 2, Records: 1, Registered: 1, Removed: 1, Fallbacks: 1})
		}},
		{"sync, indexed values removed", map[string]any{"Dept": "Sales"}, func(f *fixture, ctx context.Context) error {
			return f.syncRechecked(ctx, SyncResult{Entities: 2, Records: 1, Registered: 1, Fallbacks: 1})
		}},
		{"rebuild, entity deleted", nil, func(f *fixture, ctx context.Context) error {
			cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
			_, err := f.x.Rebuild(ctx, employees, nil, cp, "op", RebuildOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, sixIndexes())
			f.put("Sales", "000", employee("First", "first@contoso.com")) // creates the index tables
			f.reconcile("Sales", "000")
			f.put("Sales", "001", employee("Brown", "brownj@contoso.com")) // not reconciled yet
			h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: isRecordWrite}
			f.fault = h.fault
			done := f.late(h, "a write of the source table", func(ctx context.Context) error { return tc.run(f, ctx) })
			f.put("Sales", "001", tc.final)
			f.reconcile("Sales", "001")
			close(h.release)
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			f.fault = nil
			f.assertTruth()
		})
	}
}

// syncRechecked runs TestStaleSyncRegistrationRechecked's Sync and checks
// its counts: the rechecked key counts once, as what its fallback found.
func (f *fixture) syncRechecked(ctx context.Context, want SyncResult) error {
	res, err := f.x.Sync(ctx, employees, Partition("Sales", "", ""))
	if err == nil && res != want {
		err = fmt.Errorf("Sync = %+v, want %+v", res, want)
	}
	return err
}

// TestSyncFenceCost: a Sync over entities the application rewrote as they
// were (a copy run again) only fences their records: the chunk's reads
// and one transaction of fences, without reading the lists the entities
// are in.
func TestSyncFenceCost(t *testing.T) {
	f := newFixture(t, Config{Tables: map[string][]Decl{employees: {
		{Name: "lastName", Property: "LastName", Kind: KindList, Store: StorePartition},
	}}})
	write := func() {
		for i := range 100 {
			f.put("Sales", fmt.Sprintf("%03d", i), employee(fmt.Sprintf("Name%03d", i), ""))
		}
	}
	write()
	if _, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", "")); err != nil {
		t.Fatal(err)
	}
	write()
	before := f.calls.Snapshot()
	res, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", ""))
	if err != nil || res.Registered != 0 || res.Fallbacks != 0 {
		t.Fatalf("Sync: %+v, %v; want nothing registered, no key by key", res, err)
	}
	after := f.calls.Snapshot()
	if n, tx := after.Total().Calls-before.Total().Calls, after[instrument.OpTransact].Calls-before[instrument.OpTransact].Calls; n > 5 || tx != 1 {
		t.Errorf("a Sync that only fences 100 records: %d calls, %d transactions; want the chunk's 4 queries and 1 transaction:\n%v", n, tx, after)
	}
	f.assertTruth()
	f.costs(2, "a reconcile after the Sync fenced")
}
