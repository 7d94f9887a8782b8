package indexes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Found in review (R1): the degrade check validates the partition ops WITHOUT the
// membership record's op; when the copies fit 4 MiB alone but not with
// the record, the commit fails with ErrTooLarge instead of degrading, and
// no index (not even the rows index) is updated.
func TestLimitTooLargeOnlyWithRecord(t *testing.T) {
	cfg := Config{Tables: map[string][]Decl{employees: {
		{Name: "c1", Property: "P1", Kind: KindCopy, Store: StorePartition},
		{Name: "c2", Property: "P2", Kind: KindCopy, Store: StorePartition},
		{Name: "rows", Property: "P1", Kind: KindRows, Table: "P1Rows"},
	}}}
	f := newFixture(t, cfg)
	build := func(amp, fill int) map[string]any {
		p := map[string]any{"P1": "v1", "P2": "v2", "Fill": strings.Repeat("x", fill)}
		for i := 0; amp > 0; i++ {
			n := min(amp, 30000)
			p[fmt.Sprintf("Big%02d", i)] = strings.Repeat("&", n)
			amp -= n
		}
		return p
	}
	size := func(p map[string]any) int {
		s := 0
		for _, name := range []string{"c1", "c2"} {
			ix := mustIndex(t, f.x, name)
			v, _ := EncodeValue(p[ix.Property])
			e := storeadapter.Entity{PartitionKey: "Sales", RowKey: copyRowKey(ix, v), Properties: maps.Clone(p)}
			e.Properties[propOwner] = "001"
			s += storeadapter.BatchOpSize(e)
		}
		return s
	}
	amp := 340000
	for size(build(amp+100, 0)) < storeadapter.MaxBatchBytes-2000 {
		amp += 100
	}
	base := size(build(amp, 0))
	fill := (storeadapter.MaxBatchBytes - 100 - base) / 2
	p := build(amp, fill)
	t.Logf("copies alone: %d bytes of %d", size(p), storeadapter.MaxBatchBytes)
	if err := storeadapter.ValidateEntity(storeadapter.Entity{PartitionKey: "Sales", RowKey: "001", Properties: p}); err != nil {
		t.Fatal(err)
	}
	f.put("Sales", "001", p)
	out, err := f.x.Reconcile(f.ctx, employees, "Sales", "001")
	t.Logf("outcome %+v err %v", out, err)
	if err != nil {
		t.Errorf("reconcile failed instead of degrading: %v (ErrTooLarge: %v)", err, errors.Is(err, storeadapter.ErrTooLarge))
	}
	if got := lookupKeys(t, f.x, "rows", "v1", nil); !slices.Equal(got, []Key{{PK: "Sales", RK: "001"}}) {
		t.Errorf("the rows index = %v, want the entity", got)
	}
}

// TestLimitFullListLeavesOtherIndexes: a partition list at its part limit
// leaves the entity out of that index only; it still leaves its old value,
// and its other indexes are kept. Found in review: a full table list (when
// table lists were written in their lines) stopped the settling of the
// indexes after it, a full partition list the whole registration.
func TestLimitFullListLeavesOtherIndexes(t *testing.T) {
	for _, tc := range []struct {
		store string
		bytes int // one line per part
	}{{StorePartition, 8}} {
		t.Run(tc.store, func(t *testing.T) {
			defer func(b int) { partBytes = b }(partBytes)
			partBytes = tc.bytes
			list := Decl{Name: "last", Property: "LastName", Kind: KindList, Store: tc.store}
			if tc.store == StoreTable {
				list.Table = "ByLast"
			}
			f := newFixture(t, Config{Tables: map[string][]Decl{employees: {list, {Name: "rows", Property: "Email", Kind: KindRows, Table: "EmailRows"}}}})
			for i := range maxParts {
				rk := fmt.Sprintf("e%03d", i)
				f.put("Sales", rk, employee("Jones", ""))
				f.reconcile("Sales", rk)
			}
			f.put("Sales", "x000", employee("Smith", "old@x"))
			f.reconcile("Sales", "x000")
			f.put("Sales", "x000", employee("Jones", "new@x")) // Jones is full
			for range 2 {
				if out := f.reconcile("Sales", "x000"); len(out.Unindexable) != 1 || !errors.Is(out.Unindexable[0], storeadapter.ErrTooLarge) {
					t.Fatalf("unindexable = %v, want the full list", out.Unindexable)
				}
			}
			if got := lookupKeys(t, f.x, "last", "Smith", ptr("Sales")); len(got) != 0 {
				t.Errorf("the old value's list still holds %v", got)
			}
			if got := lookupKeys(t, f.x, "rows", "new@x", nil); len(got) != 1 {
				t.Errorf("rows index for new@x = %v", got)
			}
			if got := lookupKeys(t, f.x, "rows", "old@x", nil); len(got) != 0 {
				t.Errorf("rows index for old@x still = %v", got)
			}
		})
	}
}

// Found in review (R4): partition LISTS whose changed parts do not fit one transaction: the
// degrade path only drops copies, so the commit fails (ErrTooLarge,
// permanent) and a deleted entity stays in every list for good.
func TestLimitPartitionListsTooLargeTogether(t *testing.T) {
	cfg := Config{Tables: map[string][]Decl{employees: {
		{Name: "a", Property: "A", Kind: KindList, Store: StorePartition},
		{Name: "b", Property: "B", Kind: KindList, Store: StorePartition},
		{Name: "c", Property: "C", Kind: KindList, Store: StorePartition},
	}}}
	f := newFixture(t, cfg)
	f.put("Sales", "x", map[string]any{"A": "v", "B": "v", "C": "v"})
	f.reconcile("Sales", "x")
	// Other members with long RowKeys of '&' (6 bytes each in the JSON
	// payload): fill each list's part 0 as a real list of ~230 members would.
	for _, name := range []string{"a", "b", "c"} {
		ix := mustIndex(t, f.x, name)
		l, err := readList(f.ctx, f.raw.Tables(), employees, "Sales", listBase(ix, "Sv"))
		if err != nil || len(l.parts) != 1 {
			t.Fatal(len(l.parts), err)
		}
		p := l.parts[0]
		for i := 0; ; i++ {
			line := fmt.Sprintf("%04d%s", i, strings.Repeat("&", 996))
			if p.size+lineBytes(line) > partBytes {
				break
			}
			p.lines = append(p.lines, line)
			p.size += lineBytes(line)
		}
		e := storeadapter.Entity{PartitionKey: "Sales", RowKey: l.partKey(0), Properties: p.properties()}
		if _, err := f.raw.Tables().UpdateEntity(f.ctx, employees, e, storeadapter.Replace, p.etag); err != nil {
			t.Fatal(err)
		}
	}
	f.put("Sales", "x", nil)
	out, err := f.x.Reconcile(f.ctx, employees, "Sales", "x")
	t.Logf("outcome %+v, err %v", out, err)
	for _, name := range []string{"a", "b", "c"} {
		for _, k := range lookupKeys(t, f.x, name, "v", ptr("Sales")) {
			if k.RK == "x" {
				t.Errorf("deleted entity x still in list %s", name)
			}
		}
	}
}

// Found in review (R5): a table list write prunes expired tombstones in EVERY part it read
// (filter), making them all dirty: a long list with a tombstone in each
// part then needs one transaction larger than 4 MiB, and every later
// write of that value's list fails for good (ErrTooLarge).
func TestLimitTableListPruneTooLarge(t *testing.T) {
	cfg := Config{Tables: map[string][]Decl{employees: {
		{Name: "all", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "ByLast"},
	}}}
	f := newFixture(t, cfg)
	ix := mustIndex(t, f.x, "all")
	// A list of 20 parts, as ~4,600 members with long RowKeys would make,
	// each part holding one removal older than the grace period.
	for n := range 20 {
		p := &part{number: n}
		p.lines = append(p.lines, listLine("Sales", fmt.Sprintf("gone%02d", n), member{gen: 1, dead: true}))
		for i := 0; ; i++ {
			line := listLine("Sales", fmt.Sprintf("m%02d-%04d-%s", n, i, strings.Repeat("x", 950)), member{gen: 2})
			if p.size+lineBytes(line) > partBytes {
				break
			}
			p.lines = append(p.lines, line)
			p.size += lineBytes(line)
		}
		l := &list{pk: tableListPartition(ix, "SJones"), base: tableListBase}
		e := storeadapter.Entity{PartitionKey: l.pk, RowKey: l.partKey(n), Properties: p.properties()}
		if err := f.raw.Tables().CreateTable(f.ctx, "ByLast"); err != nil && !errors.Is(err, storeadapter.ErrAlreadyExists) {
			t.Fatal(err)
		}
		if _, err := f.raw.Tables().InsertEntity(f.ctx, "ByLast", e); err != nil {
			t.Fatal(err)
		}
	}
	f.put("Sales", "y", employee("Jones", ""))
	_, err := f.x.Reconcile(f.ctx, employees, "Sales", "y")
	t.Logf("reconcile: %v", err)
	if err != nil {
		t.Errorf("a new member cannot join the list: %v", err)
	}
}

// TestTableListPastItsPartLimit: a table list's members are its markers
// (see markers), so a value whose lines fill every part still takes new
// members: the fold leaves the markers it has no room for, and lookups
// read them. A member leaving a full list is folded out of it, and its
// tombstone line makes room once TombstoneGrace has passed.
func TestTableListPastItsPartLimit(t *testing.T) {
	defer func(b int) { partBytes = b }(partBytes)
	partBytes = 40 // one line per part
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	for i := range maxParts {
		rk := fmt.Sprintf("e%03d", i)
		f.put("Sales", rk, employee("Jones", ""))
		f.reconcile("Sales", rk)
	}
	if res := f.prune(); res.Folded != maxParts {
		t.Fatalf("the first fold folded %d markers, want %d (a part each)", res.Folded, maxParts)
	}
	x := Key{PK: "Sales", RK: "x000"}
	f.put(x.PK, x.RK, employee("Smith", ""))
	f.reconcile(x.PK, x.RK)
	f.put(x.PK, x.RK, employee("Jones", "")) // Jones is full
	if out := f.reconcile(x.PK, x.RK); len(out.Unindexable) != 0 {
		t.Fatalf("unindexable = %v, want none: a marker needs no room in the lines", out.Unindexable)
	}
	if res := f.prune(); res.Folded != 1 { // Smith's dead marker; Jones's for x000 has no room
		t.Errorf("the fold past the limit folded %d markers, want Smith's dead one", res.Folded)
	}
	if got := lookupKeys(t, f.x, name, "Jones", nil); len(got) != maxParts+1 || !slices.Contains(got, x) {
		t.Errorf("Jones lists %d keys (x000: %v), want %d with x000", len(got), slices.Contains(got, x), maxParts+1)
	}
	f.assertTruth()
	f.put("Sales", "e000", employee("Brown", "")) // a line leaves Jones: room for x000 once its tombstone expires
	f.reconcile("Sales", "e000")
	f.x.clock = clock.NewFake(time.Now().Add(2 * time.Hour))
	f.prune()
	ix := mustIndex(t, f.x, name)
	jones, _ := EncodeValue("Jones")
	l, err := readList(f.ctx, f.raw.Tables(), ix.table, tableListPartition(ix, jones), tableListBase)
	if err != nil || !strings.Contains(strings.Join(l.lines(), "\n"), "Sales\tx000\t") {
		t.Errorf("Jones's lines after room was made: %v, %v; want x000's among them", l.lines(), err)
	}
	f.assertTruth()
}
