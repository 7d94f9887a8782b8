package indexes

import (
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestRebuildRepairsFastClockGenerations: a registration's generation is
// max(record's Gen+1, the worker's clock in µs), and an entry changes only
// for a higher generation, so entries written by a worker whose clock
// runs ahead carry generations above the other workers' clocks. A rebuild
// run within that skew of those writes must still repair them when the
// membership record that knew them is gone (the scan registers the entity
// afresh, below the old entry's generation) or never accounted for them
// (a stray): the sweep checks list lines and table copies whose
// generation is ahead of its clock, and removes the entry at a
// generation above the entry's. Before, the entity stayed listed under
// its old value (or the stray stayed) in every external kind; Check
// reported each as stale.
func TestRebuildRepairsFastClockGenerations(t *testing.T) {
	for _, damage := range []string{"record lost", "stray"} {
		for _, name := range externalNames {
			t.Run(damage+"/"+name, func(t *testing.T) {
				f := newFixture(t, only(name))
				fast, err := Open(f.store, clock.NewFake(time.Now().Add(time.Minute)), only(name))
				if err != nil {
					t.Fatal(err)
				}
				f.put(subject.PK, subject.RK, f.valued(name, "a", "Sales"))
				if _, err := fast.Reconcile(f.ctx, employees, subject.PK, subject.RK); err != nil {
					t.Fatal(err)
				}
				want, stale := "b", "a"
				if damage == "record lost" {
					if err := f.raw.Tables().DeleteEntity(f.ctx, employees, subject.PK, memberRowKey(subject.RK), storeadapter.ETagAny); err != nil {
						t.Fatal(err)
					}
					f.put(subject.PK, subject.RK, f.valued(name, "b", "Sales"))
				} else {
					want, stale = "a", "Ghost"
					f.stray(name, subject, stale, fast.clock.Now().UnixMicro())
				}
				if err := rebuildOp(f.ctx, f); err != nil {
					t.Fatal(err)
				}
				f.assertOnly(name, subject, want, stale)
			})
		}
	}
}
