package indexes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// legacyLine writes k's line in the table list of value v of index name
// directly into its parts, as a release before format 3 wrote every
// change: live (flag L or P) or a tombstone (D) at generation gen.
func (f *fixture) legacyLine(name, v string, k Key, gen int64, flag string) {
	f.t.Helper()
	ix := mustIndex(f.t, f.x, name)
	enc, err := EncodeValue(v)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.raw.Tables().CreateTable(f.ctx, ix.table); err != nil && !strings.Contains(err.Error(), "exists") {
		f.t.Fatal(err)
	}
	l, err := readList(f.ctx, f.raw.Tables(), ix.table, tableListPartition(ix, enc), tableListBase)
	if err != nil {
		f.t.Fatal(err)
	}
	line := fmt.Sprintf("%s\t%s\t%d\t%s", k.PK, k.RK, gen, flag)
	if err := l.set(k.PK+"\t"+k.RK, line); err != nil {
		f.t.Fatal(err)
	}
	if err := f.raw.Tables().Transact(f.ctx, ix.table, l.ops(false)); err != nil {
		f.t.Fatal(err)
	}
}

// oldRecord writes k's membership record as a release before format 3
// left it (no V), props besides the entity's ETag as R.
func (f *fixture) oldRecord(k Key, props map[string]any) {
	f.t.Helper()
	e, err := getOptional(f.ctx, f.raw.Tables(), employees, k.PK, k.RK)
	if err != nil || e == nil {
		f.t.Fatalf("the entity %v: %v, %v", k, e, err)
	}
	props["R"] = e.ETag
	if _, err := f.raw.Tables().UpsertEntity(f.ctx, employees, storeadapter.Entity{PartitionKey: k.PK, RowKey: memberRowKey(k.RK), Properties: props}, storeadapter.Replace); err != nil {
		f.t.Fatal(err)
	}
}

// TestTableListFromFormat2: records and lines written by a release before
// format 3 (every change in the lines, values pending in S_) are taken
// over. A settled key's line stays its live entry until its value
// changes, and is then hidden by a legacy kill (a marker written dead at
// the record's generation, at or above the line's); a key with values
// pending (a settle that did not finish) is written in format 3 first
// (V=3, which the older release refuses), then its pending values' lines
// are killed and its value gets a marker one generation above. A late
// write of the older release's settle, at a generation up to the record's,
// stays hidden. Lookups, Entries and Check agree at every step, before and
// after a fold, by Reconcile and by Sync.
func TestTableListFromFormat2(t *testing.T) {
	const name = "lastNameAll"
	for _, via := range []string{"Reconcile", "Sync"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t, only(name))
			jones, _ := EncodeValue("Jones")
			smith, _ := EncodeValue("Smith")
			k1, k2 := Key{PK: "Sales", RK: "001"}, Key{PK: "Sales", RK: "002"}
			// 001 settled under Jones at 5; 002 registered Jones → Smith at
			// 7 and died before its settle (Jones's line still live, Smith's
			// never written).
			f.put(k1.PK, k1.RK, employee("Jones", ""))
			f.put(k2.PK, k2.RK, employee("Smith", ""))
			f.legacyLine(name, "Jones", k1, 5, "P")
			f.legacyLine(name, "Jones", k2, 5, "P")
			f.oldRecord(k1, map[string]any{"Gen": int64(5), "A_" + name: jones})
			f.oldRecord(k2, map[string]any{"Gen": int64(7), "A_" + name: smith, "S_" + name: jones + "\t5\n" + smith + "\t7"})
			if got := lookupKeys(t, f.x, name, "Jones", nil); len(got) != 2 {
				t.Fatalf("the stage: Jones lists %v, want both", got)
			}
			f.reconcileVia(via, k1, k2)
			f.assertTruth()
			if v := f.recordProps2("002")["V"]; v != int32(3) {
				t.Errorf("002's record after its settle: V %#v, want 3", v)
			}
			if v, ok := f.recordProps2("001")["V"]; ok {
				t.Errorf("001's record, settled, was rewritten with V %#v", v)
			}
			// The older release's settle of 002 at 7 goes on late: it writes
			// Jones's line dead and Smith's live at 7; a settle of an older
			// generation Jones's line live again.
			f.legacyLine(name, "Smith", k2, 7, "P")
			f.legacyLine(name, "Jones", k2, 6, "L")
			f.assertTruth()
			// 001 changes: its line is hidden by a legacy kill.
			f.put(k1.PK, k1.RK, employee("Brown", ""))
			f.reconcileVia(via, k1, k2)
			f.assertTruth()
			if st := f.record(k1.PK, k1.RK).rows[name]; st.live == 0 {
				t.Errorf("001's state after its change: %+v, want a live marker", st)
			}
			f.prune()
			f.assertTruth()
			f.x.clock = clock.NewFake(time.Now().Add(2 * time.Hour))
			res := f.prune()
			f.assertTruth()
			if res.Pruned == 0 {
				t.Errorf("the late prune deleted no dead marker: %v", res)
			}
			if got := f.listLineOf(name, "Jones", k1); got != "" {
				t.Errorf("Jones's line of 001 after the grace: %q, want none", got)
			}
		})
	}
}

// TestTableListMembers: a key is listed under a value when its entry of
// the highest generation (a line's own, a marker's RowKey's) is live, a
// dead one winning a tie; Lookup (lines and markers not folded), Entries
// (every row) and the fold agree, before and after the fold.
func TestTableListMembers(t *testing.T) {
	const name = "lastNameAll"
	type marker struct {
		gen  int64
		dead bool
	}
	for _, tc := range []struct {
		why     string
		line    string // flag and generation: "L5", "D9", "" for none
		markers []marker
		listed  bool
	}{
		{"a line alone", "L5", nil, true},
		{"a tombstone line alone", "D5", nil, false},
		{"a line killed by its marker", "L5", []marker{{5, true}}, false},
		{"a line killed by a legacy kill above it", "L5", []marker{{7, true}}, false},
		{"a tombstone, then a live marker above it", "D9", []marker{{10, false}}, true},
		{"a line above a dead marker", "L10", []marker{{9, true}}, true},
		{"a live marker and its kill", "", []marker{{4, false}, {4, true}}, false},
		{"a dead marker below a live one", "", []marker{{4, true}, {6, false}}, true},
		{"a live marker alone", "", []marker{{6, false}}, true},
	} {
		t.Run(tc.why, func(t *testing.T) {
			f := newFixture(t, only(name))
			ix := mustIndex(t, f.x, name)
			k := Key{PK: "Sales", RK: "001"}
			jones, _ := EncodeValue("Jones")
			f.legacyLine(name, "Jones", Key{PK: "Sales", RK: "000"}, 1, "L") // a neighbour, and the table
			if tc.line != "" {
				flag := tc.line[:1]
				var gen int64
				fmt.Sscan(tc.line[1:], &gen)
				f.legacyLine(name, "Jones", k, gen, flag)
			}
			for _, m := range tc.markers {
				if _, err := f.raw.Tables().UpsertEntity(f.ctx, ix.table, rowEntity(ix, k.PK, k.RK, rowRef{value: jones, gen: m.gen}, m.gen+100, m.dead), storeadapter.Replace); err != nil {
					t.Fatal(err)
				}
			}
			check := func(when string) {
				t.Helper()
				got := slices.Contains(lookupKeys(t, f.x, name, "Jones", nil), k)
				var entries bool
				if err := f.x.Entries(f.ctx, employees, name, func(en Entry) error {
					entries = entries || en.Key == k
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if got != tc.listed || entries != tc.listed {
					t.Errorf("%s: Lookup lists the key %v, Entries %v; want %v", when, got, entries, tc.listed)
				}
			}
			check("before the fold")
			f.prune()
			check("after the fold")
		})
	}
}

// TestTableListLongKeys: a key whose escaped pair with a generation does
// not fit a RowKey gets markers keyed by a hash of the pair, which hold
// the key; it is indexed, changed, folded, checked and removed like any.
func TestTableListLongKeys(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	long := strings.Repeat("k", storeadapter.MaxKeyChars-len(memberRowKey(""))) // the longest RowKey with a plain record
	k := Key{PK: "Sales", RK: long}
	for _, v := range []string{"Jones", "Smith"} {
		f.put(k.PK, k.RK, employee(v, ""))
		if out := f.reconcile(k.PK, k.RK); len(out.Unindexable) != 0 {
			t.Fatalf("%s: unindexable %v", v, out.Unindexable)
		}
		f.assertTruth()
	}
	ix := mustIndex(t, f.x, name)
	smith, _ := EncodeValue("Smith")
	if rk := rowEntity(ix, k.PK, k.RK, rowRef{value: smith, gen: 1}, 0, false).RowKey; !strings.HasPrefix(rk, markerHashPrefix) {
		t.Errorf("the long key's marker RowKey %q, want a hashed one", rk)
	}
	f.prune()
	f.assertTruth()
	f.put(k.PK, k.RK, nil)
	f.reconcile(k.PK, k.RK)
	f.assertTruth()
}

// TestTableListStrayAboveTheLiveMarker: a rebuild's sweep finds a live
// line of the key under the value its record applies, at a generation
// above its live marker (what a lost record and a clock that ran ahead
// leave). Killing it at its generation would hide the live marker too (a
// dead entry hides every entry of the key at or below it), so the key is
// moved to a marker above it: it stays listed, once.
func TestTableListStrayAboveTheLiveMarker(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	k := Key{PK: "Sales", RK: "001"}
	f.put(k.PK, k.RK, employee("Jones", ""))
	f.reconcile(k.PK, k.RK)
	f.reconcile(k.PK, k.RK)
	ahead := f.x.clock.Now().Add(time.Hour).UnixMicro()
	f.legacyLine(name, "Jones", k, ahead, "L")
	ti, _ := f.x.indexes(employees)
	jones, _ := EncodeValue("Jones")
	if _, err := f.x.reconcile(f.ctx, ti, k.PK, k.RK, false, &stray{index: name, value: jones, gen: ahead}); err != nil {
		t.Fatal(err)
	}
	if st := f.record(k.PK, k.RK).rows[name]; st.live <= ahead {
		t.Errorf("the live marker after the stray's kill: %d, want above the stray's %d", st.live, ahead)
	}
	f.assertTruth()
	f.put(k.PK, k.RK, employee("Smith", ""))
	f.reconcile(k.PK, k.RK)
	f.assertTruth()
}

// TestFoldLosesToAMarkerWrittenMeanwhile: a fold that read a marker not
// folded, held before its transaction while the key changes again (the
// marker written dead), loses its If-Match and reads again: the lines end
// with the key under its last value only.
func TestFoldLosesToAMarkerWrittenMeanwhile(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	ix := mustIndex(t, f.x, name)
	k := Key{PK: "Sales", RK: "001"}
	f.put(k.PK, k.RK, employee("Jones", ""))
	f.reconcile(k.PK, k.RK)
	jones, _ := EncodeValue("Jones")
	h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: func(_ context.Context, c instrument.Call) bool {
		return c.Op == instrument.OpTransact && c.Name == ix.table
	}}
	f.fault = h.fault
	done := f.late(h, "the fold's transaction", func(ctx context.Context) error {
		_, err := f.x.foldList(ctx, ix, jones, nil)
		return err
	})
	f.put(k.PK, k.RK, employee("Smith", ""))
	f.reconcile(k.PK, k.RK)
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.fault = nil
	if line := f.listLineOf(name, "Jones", k); strings.HasSuffix(line, "\tL") {
		t.Errorf("Jones's line after the fold: %q, want no live line", line)
	}
	f.assertTruth()
	f.prune()
	f.assertTruth()
}

// TestPruneFoldStopsAndContinues: a prune asked to stop in its fold of a
// table list (its time budget spent) saves its checkpoint after the value
// it folded and stops; run again under the same id it folds the rest.
func TestPruneFoldStopsAndContinues(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	for i := range 5 {
		rk := fmt.Sprintf("%03d", i)
		f.put("Sales", rk, employee(fmt.Sprintf("Name%d", i), ""))
		f.reconcile("Sales", rk)
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	var stopped *Stopped
	_, err := f.x.Prune(f.ctx, employees, cp, "p", RebuildOptions{Stop: func() bool { return true }})
	if !errors.As(err, &stopped) || stopped.Result.Folded != 1 {
		t.Fatalf("a prune asked to stop: %v (folded %+v), want it stopped after one value", err, stopped)
	}
	res, err := f.x.Prune(f.ctx, employees, cp, "p", RebuildOptions{})
	if err != nil || res.Folded != 5 {
		t.Fatalf("the prune run again: %+v, %v; want the 5 markers folded in all", res, err)
	}
	f.assertTruth()
}
