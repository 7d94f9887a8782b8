package main

// The index job of the bench (-job index): storage calls per reconcile and
// reconciles per second for each of the six kinds of index, next to a
// direct loop that makes the same storage calls with none of the index
// logic.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// ixCombo is one kind of index: its kind and its store.
type ixCombo struct{ kind, store string }

// ixCombos are the six combinations the index kind supports.
var ixCombos = []ixCombo{
	{indexes.KindCopy, indexes.StorePartition},
	{indexes.KindCopy, indexes.StoreTable},
	{indexes.KindList, indexes.StorePartition},
	{indexes.KindList, indexes.StoreTable},
	{indexes.KindList, indexes.StoreBlob},
	{indexes.KindRows, indexes.StoreTable},
}

func (c ixCombo) String() string { return c.kind + "/" + c.store }

// aimed reports whether the aim of an unchanged reconcile (≤ 2 calls) is
// set for this store: the partition stores. (In the others the first
// unchanged reconcile after a change proves and clears what the change
// left: see the index kind's Reconcile. The bench's unchanged phase is
// that one.) A changed one's (≤ 5) is set for every store.
func (c ixCombo) aimed() bool { return c.store == indexes.StorePartition }

// Aims of the issues, in calls per reconcile.
const (
	aimUnchanged = 2
	aimChanged   = 5
)

// ixName is the name of every bench index, ixProperty the property it
// indexes.
const (
	ixName     = "byName"
	ixProperty = "Name"
)

// ixSetup is one combination's pair of source tables: one the index kind
// reconciles, one the direct loop works on, both with the same entities
// and the same index rows.
type ixSetup struct {
	combo       ixCombo
	x           *indexes.Set // on the instrumented store
	src, direct ixNames
	indexCalls  *instrument.Counts
	directCalls *instrument.Counts
	indexStore  storeadapter.Store // instrumented, counted in indexCalls
	directStore storeadapter.Store // instrumented, counted in directCalls
	raw         storeadapter.Store // not counted: seeding and renames
	rawX        *indexes.Set       // on raw: builds the direct table's index rows
}

// ixNames are a source table's names.
type ixNames struct {
	table, ixTable, container string
}

// ixResult is one combination's figures.
type ixResult struct {
	combo                      ixCombo
	first                      float64 // calls per first reconcile (a new entity)
	unchanged, changed         loopResult
	directUnch, directChanged  loopResult
	unchangedOps, changedOps   instrument.Snapshot
	directUnchOps, directChOps instrument.Snapshot
}

type loopResult struct {
	calls float64 // per reconcile
	took  time.Duration
	cpu   time.Duration // process CPU time, user and system
}

func (l loopResult) perSec(n int) float64 { return float64(n) / l.took.Seconds() }

// indexRuns runs the index job on one store: every combination, each
// with b.n entities in 10 partitions. latency is injected into every call
// (0 for Azurite).
func (b bench) indexRuns(ctx context.Context, title string, raw storeadapter.Store, latency time.Duration) error {
	suffix := fmt.Sprintf("R%04d", rand.IntN(10000)) // fresh names on a reused emulator
	var results []ixResult
	for _, c := range ixCombos {
		s, err := b.ixSetup(ctx, c, raw, latency, suffix)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		r, err := b.ixMeasure(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		results = append(results, r)
	}
	b.ixPrint(title, results)
	return nil
}

// ixSetup makes the tables of one combination and seeds them: b.n
// entities each, indexed once (the index's first reconciles are counted
// as "first"; the direct table's are not counted).
func (b bench) ixSetup(ctx context.Context, c ixCombo, raw storeadapter.Store, latency time.Duration, suffix string) (*ixSetup, error) {
	label := strings.ToUpper(c.kind[:1]) + c.kind[1:] + strings.ToUpper(c.store[:1]) + c.store[1:]
	names := func(tag string) ixNames {
		return ixNames{table: "BenchIx" + tag + label + suffix, ixTable: "BenchIx" + tag + label + suffix + "Ix",
			container: strings.ToLower("bench-ix" + tag + "-" + c.kind + "-" + c.store + "-" + suffix)}
	}
	s := &ixSetup{combo: c, src: names(""), direct: names("D"), raw: raw,
		indexCalls: &instrument.Counts{}, directCalls: &instrument.Counts{}}
	s.indexStore = instrumented(raw, latency, s.indexCalls)
	s.directStore = instrumented(raw, latency, s.directCalls)
	decl := func(n ixNames) indexes.Decl {
		d := indexes.Decl{Name: ixName, Property: ixProperty, Kind: c.kind, Store: c.store}
		switch {
		case c.store == indexes.StoreBlob:
			d.Container = n.container
		case c.store == indexes.StoreTable:
			d.Table = n.ixTable
		}
		if c.kind == indexes.KindRows {
			d.Store = ""
		}
		return d
	}
	cfg := indexes.Config{Tables: map[string][]indexes.Decl{s.src.table: {decl(s.src)}, s.direct.table: {decl(s.direct)}}}
	var err error
	if s.x, err = indexes.Open(s.indexStore, nil, cfg); err != nil {
		return nil, err
	}
	if s.rawX, err = indexes.Open(raw, nil, cfg); err != nil {
		return nil, err
	}
	for _, n := range []ixNames{s.src, s.direct} {
		if err := seedIx(ctx, raw.Tables(), n.table, b.n); err != nil {
			return nil, err
		}
	}
	if err := parallel(b.conc, b.n, func(i int) error {
		_, err := s.rawX.Reconcile(ctx, s.direct.table, ixPK(i), ixRK(i))
		return err
	}); err != nil {
		return nil, fmt.Errorf("index the direct table: %w", err)
	}
	return s, nil
}

func ixPK(i int) string { return fmt.Sprintf("P%d", i%10) }
func ixRK(i int) string { return fmt.Sprintf("%08d", i) }

// ixValue is entity i's indexed value: unique, so that no two reconciles
// share an index entity (the figures are those of an uncontended index).
func ixValue(i int, renamed bool) string {
	if renamed {
		return fmt.Sprintf("W%06d", i)
	}
	return fmt.Sprintf("V%06d", i)
}

// seedIx fills a source table with n entities in 10 partitions.
func seedIx(ctx context.Context, t storeadapter.Tables, table string, n int) error {
	if err := idempotent.EnsureTable(ctx, t, table); err != nil {
		return err
	}
	var ops []storeadapter.TableOp
	for i := range n {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{
			PartitionKey: ixPK(i), RowKey: ixRK(i),
			Properties: map[string]any{ixProperty: ixValue(i, false), "Salary": int64(i) << 40, "Rating": 4.5,
				"Hired": time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)}}})
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := t.Transact(ctx, table, batch); err != nil {
			return err
		}
	}
	return nil
}

// ixMeasure runs the phases of one combination: first reconciles (index
// only), unchanged reconciles, renames (not counted), changed reconciles.
// The index's and the direct loop's reconciles of one phase alternate in
// ixChunks chunks (each loop going first in every other chunk), so that a
// slow spell of a shared machine falls on both.
func (b bench) ixMeasure(ctx context.Context, s *ixSetup) (ixResult, error) {
	r := ixResult{combo: s.combo}
	reconcile := func(i int) error {
		out, err := s.x.Reconcile(ctx, s.src.table, ixPK(i), ixRK(i))
		if err == nil && (len(out.Conflicts) > 0 || len(out.Unindexable) > 0) {
			err = fmt.Errorf("reconcile %s/%s: %s", ixPK(i), ixRK(i), out)
		}
		return err
	}
	// run runs fn for entities [lo, hi) and adds its figures to l.
	run := func(l *loopResult, lo, hi int, fn func(i int) error) error {
		cpu0, start := cpuTime(), time.Now()
		if err := parallel(b.conc, hi-lo, func(i int) error { return fn(lo + i) }); err != nil {
			return err
		}
		l.took += time.Since(start)
		l.cpu += cpuTime() - cpu0
		return nil
	}
	// phase runs both loops over every entity, chunk by chunk.
	phase := func(idx, dir *loopResult, idxOps, dirOps *instrument.Snapshot, dirFn func(i int) error) error {
		before, dirBefore := s.indexCalls.Snapshot(), s.directCalls.Snapshot()
		for k := range ixChunks {
			lo, hi := k*b.n/ixChunks, (k+1)*b.n/ixChunks
			first, second := func() error { return run(idx, lo, hi, reconcile) }, func() error { return run(dir, lo, hi, dirFn) }
			if k%2 == 1 {
				first, second = second, first
			}
			if err := first(); err != nil {
				return err
			}
			if err := second(); err != nil {
				return err
			}
		}
		*idxOps, *dirOps = subSnapshot(s.indexCalls.Snapshot(), before), subSnapshot(s.directCalls.Snapshot(), dirBefore)
		idx.calls = float64(idxOps.Total().Calls) / float64(b.n)
		dir.calls = float64(dirOps.Total().Calls) / float64(b.n)
		return nil
	}
	before := s.indexCalls.Snapshot()
	var first loopResult
	if err := run(&first, 0, b.n, reconcile); err != nil {
		return r, fmt.Errorf("first reconciles: %w", err)
	}
	r.first = float64(subSnapshot(s.indexCalls.Snapshot(), before).Total().Calls) / float64(b.n)
	d := direct{t: s.directStore.Tables(), s: s}
	if err := phase(&r.unchanged, &r.directUnch, &r.unchangedOps, &r.directUnchOps, func(i int) error { return d.unchanged(ctx, i) }); err != nil {
		return r, fmt.Errorf("unchanged reconciles: %w", err)
	}
	for _, table := range []string{s.src.table, s.direct.table} {
		if err := rename(ctx, s.raw.Tables(), table, b.n, b.conc); err != nil {
			return r, err
		}
	}
	if err := phase(&r.changed, &r.directChanged, &r.changedOps, &r.directChOps, func(i int) error { return d.changed(ctx, i) }); err != nil {
		return r, fmt.Errorf("changed reconciles: %w", err)
	}
	return r, s.check(ctx, b.n)
}

// ixChunks is how many chunks the two loops of a phase alternate in.
const ixChunks = 6

// rename gives every entity of table its renamed value.
func rename(ctx context.Context, t storeadapter.Tables, table string, n, conc int) error {
	return parallel(conc, n, func(i int) error {
		_, err := t.UpdateEntity(ctx, table, storeadapter.Entity{PartitionKey: ixPK(i), RowKey: ixRK(i),
			Properties: map[string]any{ixProperty: ixValue(i, true)}}, storeadapter.Merge, storeadapter.ETagAny)
		return err
	})
}

// check looks a few renamed values up, old and new, so that figures of an
// index that does not work are not reported.
func (s *ixSetup) check(ctx context.Context, n int) error {
	for _, i := range []int{0, n / 2, n - 1} {
		pk := ixPK(i)
		for _, renamed := range []bool{false, true} {
			ms, err := s.rawX.Lookup(ctx, s.src.table, ixName, ixValue(i, renamed), indexes.LookupOptions{PK: &pk})
			if err != nil {
				return err
			}
			want := 0
			if renamed {
				want = 1
			}
			if len(ms) != want || want == 1 && ms[0].RK != ixRK(i) {
				return fmt.Errorf("check: lookup %s in %s found %v, want %d match(es) for %s/%s", ixValue(i, renamed), pk, ms, want, pk, ixRK(i))
			}
		}
	}
	return nil
}

func subSnapshot(after, before instrument.Snapshot) instrument.Snapshot {
	d := instrument.Snapshot{}
	for op, st := range after {
		if n := st.Calls - before[op].Calls; n > 0 {
			d[op] = instrument.Stats{Calls: n, Errors: st.Errors - before[op].Errors, Latency: st.Latency - before[op].Latency}
		}
	}
	return d
}

// ixPrint reports one store's figures.
func (b bench) ixPrint(title string, rs []ixResult) {
	fmt.Printf("%s: %d entities per index, concurrency %d, one index per table, values unique per entity\n", title, b.n, b.conc)
	fmt.Printf("storage calls per reconcile and reconciles/s, of the index kind and of the direct loop making the same calls\n")
	fmt.Printf("%-15s %6s | %-29s | %-29s | %s\n", "", "first", "unchanged value", "changed value (a rename)", "aim: changed ≤ 5,")
	fmt.Printf("%-15s %6s | %6s %6s %7s %7s | %6s %6s %7s %7s | %s\n", "index", "calls", "calls", "direct", "rec/s", "direct", "calls", "direct", "rec/s", "direct", "unchanged ≤ 2 (partition)")
	for _, r := range rs {
		aim := aimNote(r.changed.calls, aimChanged)
		if r.combo.aimed() {
			aim = aimNote(r.unchanged.calls, aimUnchanged) + ", " + aim
		}
		fmt.Printf("%-15s %6.2f | %6.2f %6.2f %7.0f %7.0f | %6.2f %6.2f %7.0f %7.0f | %s\n", r.combo, r.first,
			r.unchanged.calls, r.directUnch.calls, r.unchanged.perSec(b.n), r.directUnch.perSec(b.n),
			r.changed.calls, r.directChanged.calls, r.changed.perSec(b.n), r.directChanged.perSec(b.n), aim)
	}
	for _, r := range rs {
		if !sameCalls(r.changedOps, r.directChOps) || !sameCalls(r.unchangedOps, r.directUnchOps) {
			fmt.Printf("note: %s: the direct loop's calls differ from the index's: changed %v vs %v\n", r.combo, opsLine(r.directChOps, b.n), opsLine(r.changedOps, b.n))
		}
	}
	if b.verbose {
		fmt.Println("calls per reconcile by operation (the direct loop's are the same unless noted above), CPU per reconcile (index, direct):")
		cpu := func(l loopResult) time.Duration { return (l.cpu / time.Duration(b.n)).Round(time.Microsecond) }
		for _, r := range rs {
			fmt.Printf("  %-15s unchanged: %s; CPU %v, %v\n  %-15s changed:   %s; CPU %v, %v\n",
				r.combo, opsLine(r.unchangedOps, b.n), cpu(r.unchanged), cpu(r.directUnch), "", opsLine(r.changedOps, b.n), cpu(r.changed), cpu(r.directChanged))
		}
	}
	fmt.Println()
}

func aimNote(got float64, aim int) string {
	if got <= float64(aim)+0.005 {
		return "met"
	}
	return fmt.Sprintf("missed by %.2f", got-float64(aim))
}

// sameCalls reports whether two snapshots made the same calls by op.
func sameCalls(a, b instrument.Snapshot) bool {
	if len(a) != len(b) {
		return false
	}
	for op, st := range a {
		if b[op].Calls != st.Calls {
			return false
		}
	}
	return true
}

// opsLine renders calls per reconcile by op: "GetEntity 2.00, Transact 1.00".
func opsLine(s instrument.Snapshot, n int) string {
	var parts []string
	for _, op := range s.Ops() {
		parts = append(parts, fmt.Sprintf("%s %.2f", op, float64(s[op].Calls)/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// direct makes, on the direct table, the storage calls a reconcile makes,
// in the same order and with the same conditions, without the index
// logic: it knows the index's layout (tablepatterns/indexes layout.go) and that the
// entity was renamed from ixValue(i, false) to ixValue(i, true), and
// writes what it read back with the change, fenced by the ETags it read.
// A row the layout says must exist and does not is an error, so a change
// of the layout shows here rather than as a cheaper loop.
type direct struct {
	t storeadapter.Tables
	s *ixSetup
}

// read is a reconcile's first step: the membership record, then the
// entity (in this order: see the index kind's Worker).
func (d direct) read(ctx context.Context, i int) (e, rec storeadapter.Entity, err error) {
	if rec, err = d.t.GetEntity(ctx, d.s.direct.table, ixPK(i), storeadapter.ReservedPrefix+"m."+ixRK(i)); err != nil {
		return e, rec, err
	}
	e, err = d.t.GetEntity(ctx, d.s.direct.table, ixPK(i), ixRK(i))
	return e, rec, err
}

// changed makes a changed reconcile's calls.
func (d direct) changed(ctx context.Context, i int) error {
	pk, rk, table := ixPK(i), ixRK(i), d.s.direct.table
	e, rec, err := d.read(ctx, i)
	if err != nil {
		return err
	}
	encOld, err := indexes.EncodeValue(ixValue(i, false))
	if err != nil {
		return err
	}
	encNew, err := indexes.EncodeValue(e.Properties[ixProperty])
	if err != nil {
		return err
	}
	state := "A_" + ixName
	c := d.s.combo
	if c.store == indexes.StorePartition {
		// Read both entries, then one transaction: the record and the
		// entries of the old and the new value.
		rec.Properties[state] = encNew
		ops := []storeadapter.TableOp{{Action: storeadapter.TxUpdateReplace, Entity: rec, IfMatch: rec.ETag}}
		if c.kind == indexes.KindCopy {
			key := func(v string) string { return storeadapter.ReservedPrefix + "c." + ixName + "_" + v }
			old, err := d.t.GetEntity(ctx, table, pk, key(encOld))
			if err != nil {
				return fmt.Errorf("old copy: %w", err)
			}
			if _, err := d.t.GetEntity(ctx, table, pk, key(encNew)); !errors.Is(err, storeadapter.ErrNotFound) {
				return fmt.Errorf("new copy: %v, want not found", err)
			}
			cp := e.Clone()
			cp.RowKey, cp.Properties["tkOwner"] = key(encNew), rk
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: old.RowKey}, IfMatch: old.ETag},
				storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: cp})
		} else {
			base := func(v string) string { return storeadapter.ReservedPrefix + "l." + ixName + "_" + v + " !" }
			parts := func(v string) ([]storeadapter.Entity, error) {
				f := storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Compare("RowKey", storeadapter.Ge, base(v)+"0000"),
					storeadapter.Compare("RowKey", storeadapter.Lt, base(v)+":"))
				p, err := d.t.Query(ctx, table, storeadapter.Query{Filter: f})
				return p.Entities, err
			}
			old, err := parts(encOld)
			if err != nil || len(old) != 1 {
				return fmt.Errorf("old list: %d parts, %v; want 1", len(old), err)
			}
			if nw, err := parts(encNew); err != nil || len(nw) != 0 {
				return fmt.Errorf("new list: %d parts, %v; want none", len(nw), err)
			}
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: old[0].RowKey}, IfMatch: old[0].ETag},
				storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: base(encNew) + "0000",
					Properties: map[string]any{"L0": rk + "\n"}}})
		}
		return d.t.Transact(ctx, table, ops)
	}
	// The other stores: register (the record with the values to settle),
	// settle each value (read, then write If-Match), clear the record. A
	// table copy reads its rows before registering, writes them in one
	// transaction and leaves the clear to the next reconcile.
	gen := time.Now().UnixMicro()
	rec.Properties["Gen"], rec.Properties[state], rec.Properties["S_"+ixName] = gen, encNew, encOld+"\n"+encNew
	switch {
	case c.kind == indexes.KindCopy:
		old, err := d.copies(ctx, i, encOld, encNew)
		if err != nil {
			return err
		}
		if _, err := d.t.UpdateEntity(ctx, table, rec, storeadapter.Replace, rec.ETag); err != nil {
			return fmt.Errorf("register: %w", err)
		}
		return d.settleCopies(ctx, i, e, old, encOld, encNew, gen)
	case c.store == indexes.StoreBlob:
		// Both lists read ahead, the old value's first; the old value's
		// line written dead, then the new value's live, flagged P.
		old, err := d.readList(ctx, encOld)
		if err != nil || !old.found {
			return fmt.Errorf("old list: %v (found: %v)", err, old.found)
		}
		nw, err := d.readList(ctx, encNew)
		if err != nil || nw.found {
			return fmt.Errorf("new list: %v (found: %v)", err, nw.found)
		}
		if _, err := d.t.UpdateEntity(ctx, table, rec, storeadapter.Replace, rec.ETag); err != nil {
			return fmt.Errorf("register: %w", err)
		}
		line := ixPK(i) + "\t" + ixRK(i) + "\t" + strconv.FormatInt(gen, 10) + "\t"
		if err := d.writeList(ctx, encOld, old, line+"D"); err != nil {
			return err
		}
		return d.writeList(ctx, encNew, nw, line+"P")
	}
	// A rows index (format 2) or a table list's markers (format 3): the
	// record names the old value's row by its generation (T_); the
	// registration adds it to the kills (K_) and makes the new value's
	// row, of this generation, the live one. Then the old row written dead
	// If-Match any and the new one inserted, both without a read, and no
	// clear.
	oldGen, _ := rec.Properties["T_"+ixName].(int64)
	delete(rec.Properties, "S_"+ixName)
	format := int32(2)
	if c.kind == indexes.KindList {
		format = 3
	}
	rec.Properties["V"], rec.Properties["T_"+ixName], rec.Properties["U_"+ixName] = format, gen, true
	rec.Properties["K_"+ixName] = encOld + "\t" + strconv.FormatInt(oldGen, 10)
	if _, err := d.t.UpdateEntity(ctx, table, rec, storeadapter.Replace, rec.ETag); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if _, err := d.t.UpdateEntity(ctx, d.s.direct.ixTable, d.row(i, encOld, oldGen, gen, true), storeadapter.Replace, storeadapter.ETagAny); err != nil {
		return fmt.Errorf("the old row: %w", err)
	}
	_, err = d.t.InsertEntity(ctx, d.s.direct.ixTable, d.row(i, encNew, gen, gen, false))
	return err
}

// row is entity i's row of generation gen under value v, live or dead
// (written at generation at): a rows index's row, or a table list's
// marker, in the value's list partition, not folded.
func (d direct) row(i int, v string, gen, at int64, dead bool) storeadapter.Entity {
	e := storeadapter.Entity{PartitionKey: v, RowKey: rowKey(i, gen), Properties: map[string]any{"tkGen": gen, "tkDead": dead}}
	if dead {
		e.Properties["tkGen"] = at
	}
	if d.s.combo.kind == indexes.KindList {
		e.PartitionKey, e.RowKey, e.Properties["tkFolded"] = ixName+"_"+v, "m"+e.RowKey, false
	}
	return e
}

// rowKey is the RowKey of entity i's rows index row of generation gen.
func rowKey(i int, gen int64) string {
	return fmt.Sprintf("%s !%s !%019d", indexes.EscapeKey(ixPK(i)), indexes.EscapeKey(ixRK(i)), gen)
}

// unchanged makes an unchanged reconcile's calls: the two reads, and for
// a table copy or list, whose change (or first reconcile) left its value
// in the record, the read of that value's entry and the clear of the
// record; for a rows index, whose first reconcile left its live row
// unproven, the read of that row and the clear.
func (d direct) unchanged(ctx context.Context, i int) error {
	_, rec, err := d.read(ctx, i)
	if err != nil || d.s.combo.store == indexes.StorePartition {
		return err
	}
	enc, err := indexes.EncodeValue(ixValue(i, false))
	if err != nil {
		return err
	}
	switch {
	case d.s.combo.kind == indexes.KindRows || d.s.combo.store == indexes.StoreTable && d.s.combo.kind == indexes.KindList:
		gen, _ := rec.Properties["T_"+ixName].(int64)
		row := d.row(i, enc, gen, gen, false)
		_, err = d.t.GetEntity(ctx, d.s.direct.ixTable, row.PartitionKey, row.RowKey)
		delete(rec.Properties, "U_"+ixName)
		delete(rec.Properties, "K_"+ixName)
	case d.s.combo.kind == indexes.KindCopy:
		_, err = d.copies(ctx, i, enc)
	default:
		if l, rerr := d.readList(ctx, enc); rerr != nil || !l.found {
			err = fmt.Errorf("list: %v (found: %v)", rerr, l.found)
		}
	}
	if err != nil {
		return err
	}
	delete(rec.Properties, "S_"+ixName)
	_, err = d.t.UpdateEntity(ctx, d.s.direct.table, rec, storeadapter.Replace, rec.ETag)
	return err
}

// tableCopyKey is the RowKey of a table copy row of an encoded value.
func tableCopyKey(v string) string { return storeadapter.ReservedPrefix + "t." + v }

// copies reads the table copy rows of encoded values (one query, as the
// index reads them before it registers) and returns the first value's,
// which must exist; the others must not.
func (d direct) copies(ctx context.Context, i int, values ...string) (storeadapter.Entity, error) {
	var eqs []storeadapter.Filter
	for _, v := range values {
		eqs = append(eqs, storeadapter.Compare("RowKey", storeadapter.Eq, tableCopyKey(v)))
	}
	f := storeadapter.And(storeadapter.PartitionEquals(ixName+"_"+ixPK(i)), storeadapter.Or(eqs...))
	p, err := d.t.Query(ctx, d.s.direct.ixTable, storeadapter.Query{Filter: f})
	if err != nil || len(p.Entities) != 1 || p.Entities[0].RowKey != tableCopyKey(values[0]) {
		return storeadapter.Entity{}, fmt.Errorf("copies: %v, %d rows; want the first value's only", err, len(p.Entities))
	}
	return p.Entities[0], nil
}

// settleCopies settles a table copy's old and new value at once, as the
// index does for the writes of one source partition: one transaction,
// from the rows read before the registration, that writes the old value's
// tombstone (If-Match) and inserts the new value's copy.
func (d direct) settleCopies(ctx context.Context, i int, e, old storeadapter.Entity, encOld, encNew string, gen int64) error {
	pk, rk, s := ixPK(i), ixRK(i), d.s
	cpk := ixName + "_" + pk
	tomb := storeadapter.Entity{PartitionKey: cpk, RowKey: tableCopyKey(encOld), Properties: map[string]any{"tkTombs": strconv.FormatInt(gen, 10) + "\t" + rk}}
	next := storeadapter.Entity{PartitionKey: cpk, RowKey: tableCopyKey(encNew), Properties: e.Clone().Properties}
	next.Properties["tkOwner"], next.Properties["tkGen"] = rk, gen
	return d.t.Transact(ctx, s.direct.ixTable, []storeadapter.TableOp{
		{Action: storeadapter.TxUpdateReplace, Entity: tomb, IfMatch: old.ETag},
		{Action: storeadapter.TxInsert, Entity: next}})
}

// listEntry is a blob list of one value as the direct loop read it:
// whether it exists, and its ETag.
type listEntry struct {
	found bool
	etag  string
}

// readList reads value v's blob list.
func (d direct) readList(ctx context.Context, v string) (listEntry, error) {
	s := d.s
	_, props, err := s.directStore.Container(s.direct.container).Get(ctx, s.direct.table+"/"+ixName+"/"+v)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return listEntry{}, nil
	}
	return listEntry{found: err == nil, etag: props.ETag}, err
}

// writeList writes value v's blob list as the one line, If-Match of the
// list read (en), or creates it.
func (d direct) writeList(ctx context.Context, v string, en listEntry, line string) error {
	s := d.s
	_, err := s.directStore.Container(s.direct.container).Put(ctx, s.direct.table+"/"+ixName+"/"+v, []byte(line+"\n"),
		storeadapter.PutOptions{ContentType: "text/plain; charset=utf-8", IfMatch: en.etag, IfNoneMatchAny: !en.found})
	return err
}
