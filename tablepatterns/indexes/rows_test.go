package indexes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestRowsCosts: the calls of each reconcile of a rows index (format 2),
// each followed by a check of the index against the table. A change is
// the two reads, the registration, the old row made dead (no read) and
// the new one inserted: 5. The record keeps the kills until an unchanged
// reconcile proves them with one read and clears them (4, once), or until
// they are more than maxKills (that change clears at once: 6).
func TestRowsCosts(t *testing.T) {
	for _, name := range rowsKeyedIndexes {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, only(name))
			if err := f.raw.Tables().CreateTable(f.ctx, mustIndex(t, f.x, name).table); err != nil {
				t.Fatal(err)
			}
			f.putCosts(employee("Jones", ""), 5, "a new entity (reads, record inserted, entity read again, row inserted)")
			f.putCosts(employee("Smith", ""), 5, "a change")
			f.putCosts(employee("Brown", ""), 5, "a second change, the first's kill carried")
			f.putCosts(employee("Smith", ""), 5, "a value the key had before: a row of its own")
			f.costs(4, "the first unchanged reconcile: the live row read, the kills cleared")
			f.costs(2, "an unchanged reconcile")
			if m := f.record("Sales", "001"); !m.rows[name].idle() {
				t.Errorf("the record after an unchanged reconcile: %+v, want nothing to settle", m.rows[name])
			}
			for i := range maxKills {
				f.putCosts(employee(fmt.Sprintf("Name%02d", i), ""), 5, fmt.Sprintf("change %d without an unchanged reconcile between", i+1))
			}
			f.putCosts(employee("Lee", ""), 6, "the change whose kills pass maxKills: cleared at once")
			if k := f.record("Sales", "001").rows[name].kills; len(k) != 0 {
				t.Errorf("kills after the clearing change: %v", k)
			}
			f.putCosts(employee("Okafor", ""), 5, "a change after the clear")
			f.putCosts(employee("", ""), 5, "the value removed: the kill, then the record cleared at once")
			f.putCosts(nil, 3, "the entity deleted, its record holding nothing: a fence")
		})
	}
}

// TestRowsCrashChain: a change's reconcile dies at each of its calls in
// turn; the application changes the entity again, and that reconcile dies
// at each of its calls in turn; then the message is redelivered (an
// unchanged reconcile, or the second change's own). For every pair of
// positions the index must end exactly the entity's value, Check clean:
// the kills of a settle that never ran are carried into the next
// registration, and a probe that finds its row proves only what was
// written in order before it.
func TestRowsCrashChain(t *testing.T) {
	for _, name := range rowsKeyedIndexes {
		t.Run(name, func(t *testing.T) { rowsCrashChain(t, name, nil) })
	}
}

// rowsCrashChain runs TestRowsCrashChain's pairs of crash positions on
// index name, calling between (when not nil) after the setup ("setup"),
// after each crashed reconcile ("first", "second") and after the
// redelivery ("redelivered"), whose index is then checked again.
func rowsCrashChain(t *testing.T, name string, between func(f *fixture, at string)) {
	step := func(f *fixture, at string) {
		if between != nil {
			between(f, at)
		}
	}
	tried := 0
	for n := 1; ; n++ {
		done1 := false
		for m := 1; ; m++ {
			f := newFixture(t, only(name))
			f.put("Sales", "001", employee("Jones", ""))
			f.put("Sales", "002", employee("Jones", "")) // a neighbour under every value
			f.reconcile("Sales", "001")
			f.reconcile("Sales", "002")
			step(f, "setup")
			f.put("Sales", "002", employee("Smith", ""))
			f.reconcile("Sales", "002")
			f.put("Sales", "001", employee("Smith", ""))
			if err := f.dieAt(n); err == nil {
				done1 = true
			}
			step(f, "first")
			f.put("Sales", "001", employee("Jones", ""))
			second := f.dieAt(m)
			step(f, "second")
			f.reconcile("Sales", "001") // the redelivery
			tried++
			f.assertTruth()
			if between != nil {
				between(f, "redelivered")
				f.assertTruth()
			}
			if t.Failed() {
				t.Fatalf("first reconcile killed at call %d, second at %d", n, m)
			}
			if second == nil {
				break
			}
		}
		if done1 {
			break
		}
	}
	if tried < 20 {
		t.Errorf("tried %d pairs of crash positions", tried)
	}
}

// rowsKeyedIndexes are the indexes of sixIndexes written by the rows
// protocol (see rowsState): the rows index and the table list.
var rowsKeyedIndexes = []string{"lastNameRows", "lastNameAll"}

// dieAt reconciles Sales/001 with its n-th storage call and every later
// one failing (a killed worker), and returns its error (nil when it made
// fewer than n calls).
func (f *fixture) dieAt(n int) error {
	f.t.Helper()
	calls := 0
	f.fault = func(context.Context, instrument.Call) error {
		if calls++; calls >= n {
			return fmt.Errorf("killed at call %d: %w", n, storeadapter.ErrUnavailable)
		}
		return nil
	}
	defer func() { f.fault = nil }()
	_, err := f.x.Reconcile(f.ctx, employees, "Sales", "001")
	return err
}

// TestRowsLateSettleLoses: a change's reconcile (g1, Jones to Smith) is
// held just before its insert of Smith's live row; the application
// changes the value twice more (Smith to Brown, and back to Smith), each
// reconciled to the end; then the held insert goes on. It must not make
// the key live under Smith twice or under a value it left: the row it
// inserts is g1's own, which g2's settle already wrote dead (its probe
// found nothing, so it wrote every kill, g1's live row last), so the
// insert finds it (409) and is done. Then the same with the hold on the
// probe of the old row instead.
func TestRowsLateSettleLoses(t *testing.T) {
	for _, name := range rowsKeyedIndexes {
		t.Run(name, func(t *testing.T) {
			for _, held := range []instrument.Op{instrument.OpInsertEntity, instrument.OpUpdateEntity} {
				t.Run(string(held), func(t *testing.T) {
					f := newFixture(t, only(name))
					ix := mustIndex(t, f.x, name)
					f.put("Sales", "001", employee("Jones", ""))
					f.reconcile("Sales", "001")
					f.put("Sales", "001", employee("Smith", ""))
					h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: func(_ context.Context, c instrument.Call) bool {
						return c.Op == held && c.Name == ix.table
					}}
					f.fault = h.fault
					done := f.lateReconcile(h, "its "+string(held))
					for _, last := range []string{"Brown", "Smith"} {
						f.put("Sales", "001", employee(last, ""))
						f.reconcile("Sales", "001")
					}
					close(h.release)
					if err := <-done; err != nil {
						t.Fatalf("the late reconcile: %v", err)
					}
					f.fault = nil
					f.assertTruth()
					smith, _ := EncodeValue("Smith")
					var live []int64
					err := f.x.scanEntries(f.ctx, ix, nil, "", func(en Entry) error {
						if !en.Dead && en.Encoded == smith {
							live = append(live, en.row)
						}
						return nil
					}, nil)
					if err != nil || len(live) != 1 {
						t.Errorf("Smith's live rows: %v, %v; want the last change's only", live, err)
					}
					f.reconcile("Sales", "001")
					f.assertTruth()
				})
			}
		})
	}
}

// TestRowsFromFormat1: records and rows written by a release before this
// one (format 1: rows keyed by the key pair, values pending in S_) are
// taken over. A settled key's format-1 row stays its live row until its
// value changes; a key with values pending (a settle that did not finish)
// is written in format 2 first (V=2, so that the older release refuses the
// record from then on), then its pending values' format-1 rows are made
// dead and its value gets a row of its own. Sync does the same in
// batches. Every step ends with the index right.
func TestRowsFromFormat1(t *testing.T) {
	for _, via := range []string{"Reconcile", "Sync"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t, only("lastNameRows"))
			jones, _ := EncodeValue("Jones")
			smith, _ := EncodeValue("Smith")
			// What the older release left: 001 settled under Jones; 002
			// registered Jones → Smith at generation 7 and died before its
			// settle (Jones's row still live, Smith's never written).
			f.put("Sales", "001", employee("Jones", ""))
			f.put("Sales", "002", employee("Smith", ""))
			f.format1("001", map[string]any{"Gen": int64(5), "A_lastNameRows": jones}, 5, map[string]bool{jones: false})
			f.format1("002", map[string]any{"Gen": int64(7), "A_lastNameRows": smith, "S_lastNameRows": jones + "\t5\n" + smith + "\t7"}, 5, map[string]bool{jones: false})
			sync := func() {
				t.Helper()
				f.reconcileVia(via, Key{PK: "Sales", RK: "001"}, Key{PK: "Sales", RK: "002"})
			}
			sync()
			f.assertTruth()
			if v := f.recordProps2("002")["V"]; v != int32(2) {
				t.Errorf("002's record after its settle: V %#v, want 2", v)
			}
			if v, ok := f.recordProps2("001")["V"]; ok {
				t.Errorf("001's record, settled in format 1, was rewritten with V %#v", v)
			}
			// 001 changes: its format-1 row is made dead.
			f.put("Sales", "001", employee("Brown", ""))
			sync()
			f.assertTruth()
			var format1 []Key
			err := f.x.Entries(f.ctx, employees, "lastNameRows", func(en Entry) error {
				if en.row == 0 {
					format1 = append(format1, en.Key)
				}
				return nil
			})
			if err != nil || len(format1) != 0 {
				t.Errorf("live format-1 rows left: %v, %v", format1, err)
			}
		})
	}
}

func (f *fixture) recordProps2(rk string) map[string]any {
	f.t.Helper()
	rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey(rk))
	if err != nil || rec == nil {
		f.t.Fatalf("the record of Sales/%s: %v, %v", rk, rec, err)
	}
	return rec.Properties
}

// TestRowEntities: a release before this one settling a format-1 record
// writes rows by compare-and-swap on tkGen. A format-1 row this release
// makes dead carries the generation of the record it settles, so that
// writer's later write of it (same or lower generation) loses. A format-2
// row carries its RowKey's generation, which readers split off.
func TestRowEntities(t *testing.T) {
	jones, _ := EncodeValue("Jones")
	e := rowEntity(&index{Decl: Decl{Kind: KindRows}}, "Sales", "001", rowRef{value: jones}, 9, true)
	if e.RowKey != memberKey("Sales", "001") || e.Properties[propGen] != int64(9) || e.Properties[propDead] != true {
		t.Errorf("a format-1 kill = %+v, want the key pair's row dead at generation 9", e)
	}
	if d := rowEntity(&index{Decl: Decl{Kind: KindRows}}, "Sales", "001", rowRef{value: jones, gen: 12}, 30, true); d.Properties[propGen] != int64(30) {
		t.Errorf("a format-2 row written dead = %+v, want tkGen 30, the killer's: the grace counts from the kill", d)
	}
	k := rowEntity(&index{Decl: Decl{Kind: KindRows}}, "Sales", "001", rowRef{value: jones, gen: 12}, 9, false)
	if want := memberKey("Sales", "001") + keySep + "0000000000000000012"; k.RowKey != want || k.Properties[propGen] != int64(12) {
		t.Errorf("a format-2 row = %+v, want RowKey %q and tkGen 12", k, want)
	}
	pk, rk, err := splitMemberKey(k.RowKey)
	if err != nil || pk != "Sales" || rk != "001" {
		t.Errorf("split %q = %q %q %v", k.RowKey, pk, rk, err)
	}
}

// TestRowsKeyLimit: a rows index's RowKey holds the key pair and a
// generation, so a key within 21 characters of the limit is reported
// unindexable (and the entity stays out of that index) rather than
// written under a key the store refuses.
func TestRowsKeyLimit(t *testing.T) {
	f := newFixture(t, only("lastNameRows"))
	fits := fmt.Sprintf("%0*d", storeadapter.MaxKeyChars-len(memberKey("S", ""))-len(keySep)-genDigits, 1)
	for _, c := range []struct {
		rk    string
		fails bool
	}{{fits, false}, {fits + "0", true}} {
		f.put("S", c.rk, employee("Jones", ""))
		out, err := f.x.Reconcile(f.ctx, employees, "S", c.rk)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(out.Unindexable) > 0; got != c.fails || c.fails && !errors.Is(out.Unindexable[0], storeadapter.ErrTooLarge) {
			t.Errorf("RowKey of %d characters: unindexable %v, want %v", len(c.rk), out.Unindexable, c.fails)
		}
	}
	keys := lookupKeys(t, f.x, "lastNameRows", "Jones", nil)
	if !slices.Equal(keys, []Key{{PK: "S", RK: fits}}) {
		t.Errorf("Jones lists %d keys, want the one that fits", len(keys))
	}
}

// TestRowsStrayOutlivesProbe: a rebuild's sweep registers a stray row of
// the key (one no record accounted for) as a kill, and dies before
// writing it. The next change's probe finds the old live row, which
// proves the kills registered before that row's own registration dead,
// not the stray, registered after it: the stray must still be written
// dead.
func TestRowsStrayOutlivesProbe(t *testing.T) {
	for _, name := range rowsKeyedIndexes {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, only(name))
			ix := mustIndex(t, f.x, name)
			ti, _ := f.x.indexes(employees)
			f.put("Sales", "001", employee("Jones", ""))
			f.reconcile("Sales", "001")
			f.reconcile("Sales", "001") // proven: nothing left to settle
			ghost, _ := EncodeValue("Ghost")
			f.stray(name, Key{PK: "Sales", RK: "001"}, "Ghost", 42)
			ghostPK := rowEntity(ix, "Sales", "001", rowRef{value: ghost}, 0, false).PartitionKey
			f.fault = func(_ context.Context, c instrument.Call) error {
				if c.Name == ix.table && c.PartitionKey == ghostPK {
					return fmt.Errorf("killed before the stray: %w", storeadapter.ErrUnavailable)
				}
				return nil
			}
			if _, err := f.x.reconcile(f.ctx, ti, "Sales", "001", false, &stray{index: ix.Name, value: ghost, gen: 42, row: 42}); err == nil {
				t.Fatal("the sweep's reconcile wrote the stray")
			}
			f.fault = nil
			if k := f.record("Sales", "001").rows[ix.Name].kills; len(k) != 1 || !k[0].stray {
				t.Fatalf("the stage: kills %v, want the stray", k)
			}
			f.putCosts(employee("Smith", ""), 7, "a change: the probe finds Jones's row, the stray is written all the same, and the record cleared at once (a stray among the kills)")
		})
	}
}

// TestRowsFenceReadsTheLiveRowOnce: an unchanged reconcile that must fence
// (the entity written since, a property no index reads) and whose live
// row is missing (the change's settle died before its insert) reads that
// row once, before the fence, and then settles: the fence, the read, the
// kill, the insert and the clear. (Found in review: it read the row again
// after the fence.)
func TestRowsFenceReadsTheLiveRowOnce(t *testing.T) {
	for _, name := range rowsKeyedIndexes {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, only(name))
			ix := mustIndex(t, f.x, name)
			f.put("Sales", "001", employee("Jones", ""))
			f.reconcile("Sales", "001")
			f.put("Sales", "001", employee("Smith", ""))
			f.fault = func(_ context.Context, c instrument.Call) error {
				if c.Op == instrument.OpInsertEntity && c.Name == ix.table {
					return fmt.Errorf("killed: %w", storeadapter.ErrUnavailable)
				}
				return nil
			}
			if _, err := f.x.Reconcile(f.ctx, employees, "Sales", "001"); err == nil {
				t.Fatal("the stage: the change's settle was not killed")
			}
			f.put("Sales", "001", employee("Smith", "smith@contoso.com"))
			reads := 0
			f.fault = func(_ context.Context, c instrument.Call) error {
				if c.Op == instrument.OpGetEntity && c.Name == ix.table {
					reads++
				}
				return nil
			}
			f.costs(7, "the two reads, the live row read, the fence, the kill, the insert, the clear")
			if reads != 1 {
				t.Errorf("the live row was read %d times, want once", reads)
			}
		})
	}
}

// format1 writes what a release before this one leaves for Sales/rk: its
// membership record without V (props, besides the entity's ETag as R), and
// the rows index's format-1 rows, live or dead, at generation gen.
func (f *fixture) format1(rk string, props map[string]any, gen int64, rows map[string]bool) {
	f.t.Helper()
	e, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", rk)
	if err != nil || e == nil {
		f.t.Fatalf("the entity Sales/%s: %v, %v", rk, e, err)
	}
	props["R"] = e.ETag
	if _, err := f.raw.Tables().InsertEntity(f.ctx, employees, storeadapter.Entity{PartitionKey: "Sales", RowKey: memberRowKey(rk), Properties: props}); err != nil {
		f.t.Fatal(err)
	}
	table := mustIndex(f.t, f.x, "lastNameRows").table
	if err := f.raw.Tables().CreateTable(f.ctx, table); err != nil && !errors.Is(err, storeadapter.ErrAlreadyExists) {
		f.t.Fatal(err)
	}
	for v, dead := range rows {
		row := storeadapter.Entity{PartitionKey: v, RowKey: memberKey("Sales", rk), Properties: map[string]any{propGen: gen, propDead: dead}}
		if _, err := f.raw.Tables().UpsertEntity(f.ctx, table, row, storeadapter.Replace); err != nil {
			f.t.Fatal(err)
		}
	}
}

// reconcileVia reconciles the keys, one by one ("Reconcile") or with one
// Sync of the table ("Sync").
func (f *fixture) reconcileVia(via string, keys ...Key) {
	f.t.Helper()
	if via == "Sync" {
		if _, err := f.x.Sync(f.ctx, employees, Span{}); err != nil {
			f.t.Fatal(err)
		}
		return
	}
	for _, k := range keys {
		f.reconcile(k.PK, k.RK)
	}
}

// deadRows counts the dead rows of index ix.
func (f *fixture) deadRows(x *Set, ix *index) int {
	f.t.Helper()
	n := 0
	err := x.scanEntries(f.ctx, ix, nil, "", func(en Entry) error {
		if en.Dead {
			n++
		}
		return nil
	}, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// renameAll writes n employees as Jones, Syncs, then as Smith, and Syncs:
// n dead rows under Jones in every rows index.
func (f *fixture) renameAll(n int) {
	f.t.Helper()
	for _, last := range []string{"Jones", "Smith"} {
		for i := range n {
			f.put(fmt.Sprintf("P%d", i%7), fmt.Sprintf("%05d", i), employee(last, ""))
		}
		f.reconcileVia("Sync")
	}
}

// prune runs a Prune of the table (which folds its table lists' markers:
// see markers) under a fresh operation id, and returns its result.
func (f *fixture) prune() RebuildResult {
	f.t.Helper()
	f.prunes++
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	res, err := f.x.Prune(f.ctx, employees, cp, fmt.Sprintf("fixture-prune-%d", f.prunes), RebuildOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}
