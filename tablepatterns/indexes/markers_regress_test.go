package indexes

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestTableListTakeoverAboveTheClock (found in review): a format-2 record
// with a table list's values still pending is taken over with the applied
// value's marker one generation above the record's (listsToRows). A
// registration in the same round (a rebuild's, forced) must register above
// that marker too, even when the record's generation is at or above this
// worker's clock (a worker whose clock ran ahead wrote it): at the same
// generation it would kill the very marker it makes live.
func TestTableListTakeoverAboveTheClock(t *testing.T) {
	const name = "lastNameAll"
	for _, via := range []string{"Rebuild", "reconcile"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t, only(name))
			jones, _ := EncodeValue("Jones")
			k := Key{PK: "Sales", RK: "001"}
			ahead := time.Now().Add(time.Minute).UnixMicro() // the older worker's clock ran a minute ahead
			f.put(k.PK, k.RK, employee("Jones", ""))
			f.legacyLine(name, "Jones", k, ahead, "P")
			f.oldRecord(k, map[string]any{"Gen": ahead, "A_" + name: jones, "S_" + name: jones + "\t" + strconv.FormatInt(ahead, 10)})
			if via == "Rebuild" {
				cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
				if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{}); err != nil {
					t.Fatal(err)
				}
			} else {
				ti, _ := f.x.indexes(employees)
				if _, err := f.x.reconcile(f.ctx, ti, k.PK, k.RK, true, nil); err != nil {
					t.Fatal(err)
				}
			}
			f.reconcile(k.PK, k.RK) // the next message: an unchanged reconcile
			f.assertTruth()
		})
	}
}

// TestTableListCrashChainWithFolds: the crash chain of TestRowsCrashChain
// on a table list with a prune (a fold) after each crash, and, in a second
// run, the clock moved past the grace before the redelivery and after it.
func TestTableListCrashChainWithFolds(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late %v", late), func(t *testing.T) {
			rowsCrashChain(t, "lastNameAll", func(f *fixture, at string) {
				f.prune()
				if late && (at == "second" || at == "redelivered") {
					f.x.clock = clock.NewFake(f.x.clock.Now().Add(3 * time.Hour))
					f.prune()
				}
			})
		})
	}
}

// TestTableListOrphanMarkerSwept (found in review): a rebuild after the
// membership records were lost (what a rebuild exists to repair) moves
// each key to a marker of its own generation; the key's earlier live
// marker of the same value, which no record names, must be killed by the
// sweep as a rows index's stray row is, folded or not, or it would list
// the key again once the key has left the value and the dead entries that
// hid it have gone past the grace.
func TestTableListOrphanMarkerSwept(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	k := Key{PK: "Sales", RK: "001"}
	f.put(k.PK, k.RK, employee("Jones", ""))
	f.reconcile(k.PK, k.RK)
	f.prune() // Jones's marker folded into its line
	if err := f.raw.Tables().DeleteEntity(f.ctx, employees, k.PK, memberRowKey(k.RK), storeadapter.ETagAny); err != nil {
		t.Fatal(err) // the record is lost
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "op", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	f.assertTruth()
	live := f.record(k.PK, k.RK).rows[name].live
	err := f.x.scanEntries(f.ctx, mustIndex(t, f.x, name), nil, "", func(en Entry) error {
		if en.Key == k && en.row > 0 && !en.Dead && en.row != live {
			t.Errorf("a live marker of generation %d left beside the live one (%d)", en.row, live)
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.put(k.PK, k.RK, employee("Smith", ""))
	f.reconcile(k.PK, k.RK)
	f.assertTruth()
	f.x.clock = clock.NewFake(time.Now().Add(2 * time.Hour))
	f.prune()
	f.assertTruth()
}

// TestFoldReadsTheMarkersAgainAfterALoss (found in review): a fold whose
// transaction loses to a marker written meanwhile reads the markers again,
// not only the parts: retried with the marker's old ETag, every try would
// lose, and the fold would leave the value, a bystander's marker with it.
func TestFoldReadsTheMarkersAgainAfterALoss(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	ix := mustIndex(t, f.x, name)
	k, other := Key{PK: "Sales", RK: "001"}, Key{PK: "Sales", RK: "002"}
	for _, key := range []Key{k, other} {
		f.put(key.PK, key.RK, employee("Jones", ""))
		f.reconcile(key.PK, key.RK)
	}
	jones, _ := EncodeValue("Jones")
	h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: func(_ context.Context, c instrument.Call) bool {
		return c.Op == instrument.OpTransact && c.Name == ix.table
	}}
	var transacts atomic.Int64 // the fold's transactions
	f.fault = func(ctx context.Context, c instrument.Call) error {
		if ctx.Value(lateKey{}) != nil && c.Op == instrument.OpTransact && c.Name == ix.table {
			transacts.Add(1)
		}
		return h.fault(ctx, c)
	}
	var folded int
	done := f.late(h, "the fold's transaction", func(ctx context.Context) error {
		n, err := f.x.foldList(ctx, ix, jones, nil)
		folded = n
		return err
	})
	f.put(k.PK, k.RK, employee("Smith", ""))
	f.reconcile(k.PK, k.RK) // 001's Jones marker written dead
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.fault = nil
	if folded == 0 {
		t.Errorf("the fold folded nothing in %d transactions (all with 001's stale ETag); 002's marker is left for the next prune", transacts.Load())
	}
}
