package storetest

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func queryCases() []testCase {
	return []testCase{
		{"KeyOrder", testKeyOrder},
		{"EmptyTable", testQueryEmptyTable},
		{"TopAndContinuation", testTopAndContinuation},
		{"ResumeFromToken", testResumeFromToken},
		{"TokenFromAnotherQuery", testTokenFromAnotherQuery},
		{"FilteredPages", testFilteredPages},
		{"LargePartition", testLargePartition},
		{"RowRangeAndPartition", testRowRange},
		{"Select", testSelect},
		{"InvalidQueries", testInvalidQueries},
		{"ReservedRows", testReservedRows},
	}
}

// insertAll writes ents into tbl, one transaction per partition and
// hundred, keeping the order given within each transaction.
func (e *env) insertAll(t *testing.T, tbl string, ents []entity) {
	t.Helper()
	byPK := map[string][]storeadapter.TableOp{}
	var order []string
	for _, ent := range ents {
		if _, ok := byPK[ent.PartitionKey]; !ok {
			order = append(order, ent.PartitionKey)
		}
		byPK[ent.PartitionKey] = append(byPK[ent.PartitionKey], storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: ent})
	}
	for _, pk := range order {
		for ops := byPK[pk]; len(ops) > 0; ops = ops[min(len(ops), storeadapter.MaxBatchOps):] {
			e.transact(t, tbl, ops[:min(len(ops), storeadapter.MaxBatchOps)])
		}
	}
}

// sortedKeys returns the "pk/rk" of ents in the service's key order.
func sortedKeys(ents []entity) []string {
	s := slices.Clone(ents)
	slices.SortFunc(s, func(a, b entity) int {
		return cmp.Or(storeadapter.CompareUTF16(a.PartitionKey, b.PartitionKey), storeadapter.CompareUTF16(a.RowKey, b.RowKey))
	})
	return keysOf(s)
}

// grid returns one entity for every pair of pks and rks, in a scrambled
// (but repeatable) order, each with an N property counting from 0.
func grid(pks, rks []string) []entity {
	var ents []entity
	for _, pk := range pks {
		for _, rk := range rks {
			ents = append(ents, entity{PartitionKey: pk, RowKey: rk, Properties: props{"N": int32(len(ents))}})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(ents), func(i, j int) { ents[i], ents[j] = ents[j], ents[i] })
	return ents
}

func testKeyOrder(t *testing.T, e *env) {
	tbl := e.newTable(t)
	// Keys compare as strings, ordinally: "10" < "9", "B" < "a", "a" < "a a" < "aa".
	ents := grid([]string{"b", "a", "B", "10", "9"}, []string{"2", "10", "aa", "a", "a a", "B", "_"})
	e.insertAll(t, tbl, ents)
	want := sortedKeys(ents)
	got, _ := e.queryAll(t, tbl, storeadapter.Query{})
	if d := diffLines(want, keysOf(got)); d != "" {
		t.Errorf("Query order (-want +got):\n%s", d)
	}
}

func testQueryEmptyTable(t *testing.T, e *env) {
	tbl := e.newTable(t)
	got, _ := e.queryAll(t, tbl, storeadapter.Query{})
	if len(got) != 0 {
		t.Errorf("Query of an empty table returned %q", keysOf(got))
	}
	got, _ = e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.PartitionEquals("p"), Top: 1})
	if len(got) != 0 {
		t.Errorf("filtered Query of an empty table returned %q", keysOf(got))
	}
}

// pages25 inserts 25 entities in three partitions and returns their keys
// in order.
func (e *env) pages25(t *testing.T, tbl string) []string {
	t.Helper()
	var ents []entity
	for i := range 25 {
		pk := string(rune('a' + min(i/10, 2)))
		ents = append(ents, entity{PartitionKey: pk, RowKey: fmt.Sprintf("%02d", i), Properties: props{"N": int32(i)}})
	}
	slices.Reverse(ents)
	e.insertAll(t, tbl, ents)
	return sortedKeys(ents)
}

func testTopAndContinuation(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := e.pages25(t, tbl)
	for _, top := range []int{1, 7, 10, 24, 25, storeadapter.MaxPageSize} {
		got, pages := e.queryAll(t, tbl, storeadapter.Query{Top: top})
		if d := diffLines(want, keysOf(got)); d != "" {
			t.Errorf("Query with Top %d, all pages (-want +got):\n%s", top, d)
		}
		if least := (len(want) + top - 1) / top; pages < least {
			t.Errorf("Query with Top %d took %d pages for %d entities, want at least %d", top, pages, len(want), least)
		}
	}
	got, _ := e.queryAll(t, tbl, storeadapter.Query{Top: 3, Filter: storeadapter.PartitionEquals("b")})
	if d := diffLines(want[10:20], keysOf(got)); d != "" {
		t.Errorf("Query of partition b with Top 3 (-want +got):\n%s", d)
	}
}

func testResumeFromToken(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := e.pages25(t, tbl)
	first, err := e.tb.Query(e.ctx, tbl, storeadapter.Query{Top: 10})
	if err != nil {
		t.Fatal(err)
	}
	if first.Next == "" {
		t.Fatalf("first page of 10 (%d entities) has no continuation token", len(first.Entities))
	}
	// A token is a checkpoint: it may be used later, and more than once.
	e.get(t, tbl, "a", "00")
	for i := range 2 {
		rest, _ := e.queryAll(t, tbl, storeadapter.Query{Top: 10, Continuation: first.Next})
		got := append(keysOf(first.Entities), keysOf(rest)...)
		if d := diffLines(want, got); d != "" {
			t.Errorf("first page, then the rest from its token (use %d) (-want +got):\n%s", i+1, d)
		}
	}
}

func testLargePartition(t *testing.T, e *env) {
	const n = 2500
	tbl := e.newTable(t)
	ents := make([]entity, n)
	for i := range ents {
		ents[i] = entity{PartitionKey: "p", RowKey: fmt.Sprintf("%05d", i), Properties: props{"N": int32(i)}}
	}
	e.insertAll(t, tbl, ents)
	want := keysOf(ents)

	got, pages := e.queryAll(t, tbl, storeadapter.Query{})
	if d := diffLines(want, keysOf(got)); d != "" {
		t.Errorf("Query of %d entities (-want +got):\n%s", n, d)
	}
	if pages < 3 {
		t.Errorf("Query of %d entities took %d pages; pages hold at most %d", n, pages, storeadapter.MaxPageSize)
	}
	got, _ = e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.PartitionEquals("p"), Top: storeadapter.MaxPageSize})
	if d := diffLines(want, keysOf(got)); d != "" {
		t.Errorf("Query of partition p (-want +got):\n%s", d)
	}

	// A property filter the store cannot narrow by key: the matches sit at
	// the far end, possibly behind short or empty pages.
	got, _ = e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.Compare("N", storeadapter.Ge, int32(n-3))})
	if d := diffLines(want[n-3:], keysOf(got)); d != "" {
		t.Errorf("Query N ge %d (-want +got):\n%s", n-3, d)
	}
	// A key range across a page boundary.
	got, _ = e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.RowRange("p", "00990", "01010"), Top: 15})
	if d := diffLines(want[990:1010], keysOf(got)); d != "" {
		t.Errorf("Query RowRange [00990, 01010) (-want +got):\n%s", d)
	}
}

func testRowRange(t *testing.T, e *env) {
	tbl := e.newTable(t)
	var ents []entity
	for _, pk := range []string{"p", "q", "pp"} {
		for i := range 15 {
			ents = append(ents, entity{PartitionKey: pk, RowKey: fmt.Sprintf("r%02d", i)})
		}
		ents = append(ents, entity{PartitionKey: pk, RowKey: "r"}, entity{PartitionKey: pk, RowKey: "r05a"})
	}
	e.insertAll(t, tbl, ents)
	keys := func(pk string, rks ...string) []string {
		var out []string
		for _, rk := range rks {
			out = append(out, pk+"/"+rk)
		}
		return out
	}
	tests := []struct {
		name   string
		filter storeadapter.Filter
		want   []string
	}{
		{"RowRange [r05, r10)", storeadapter.RowRange("p", "r05", "r10"), keys("p", "r05", "r05a", "r06", "r07", "r08", "r09")},
		{"RowRange [r12, end)", storeadapter.RowRange("p", "r12", ""), keys("p", "r12", "r13", "r14")},
		{"RowRange [start, r01)", storeadapter.RowRange("p", "", "r01"), keys("p", "r", "r00")},
		{"RowRange [r05, r05)", storeadapter.RowRange("p", "r05", "r05"), nil},
		{"RowRange [r09, r05)", storeadapter.RowRange("p", "r09", "r05"), nil},
		{"RowRange of a missing partition", storeadapter.RowRange("x", "", ""), nil},
		{"PartitionEquals q", storeadapter.PartitionEquals("q"), keys("q", "r", "r00", "r01", "r02", "r03", "r04", "r05", "r05a", "r06", "r07", "r08", "r09", "r10", "r11", "r12", "r13", "r14")},
		{"PartitionEquals of a missing partition", storeadapter.PartitionEquals("P"), nil},
		{"PartitionEquals of the empty key", storeadapter.PartitionEquals(""), nil},
	}
	for _, tt := range tests {
		for _, top := range []int{0, 4} {
			got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: tt.filter, Top: top})
			if d := diffLines(tt.want, keysOf(got)); d != "" {
				t.Errorf("%s, Top %d (filter %s) (-want +got):\n%s", tt.name, top, tt.filter, d)
			}
		}
	}
}

func testSelect(t *testing.T, e *env) {
	tbl := e.newTable(t)
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a", "B": int32(1), "C": true, "D": math.Inf(1)}})
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "s", Properties: props{"A": "a2"}})
	tests := []struct {
		sel  []string
		want []props // for p/r and p/s
	}{
		{[]string{"A", "C"}, []props{{"A": "a", "C": true}, {"A": "a2"}}},
		// A property an entity lacks is simply absent, never nil.
		{[]string{"B", "Missing"}, []props{{"B": int32(1)}, {}}},
		{[]string{"D"}, []props{{"D": math.Inf(1)}, {}}},
		{[]string{"PartitionKey", "RowKey", "Timestamp"}, []props{{}, {}}},
		{nil, []props{{"A": "a", "B": int32(1), "C": true, "D": math.Inf(1)}, {"A": "a2"}}},
	}
	for _, tt := range tests {
		got, _ := e.queryAll(t, tbl, storeadapter.Query{Select: tt.sel})
		if d := diffLines([]string{"p/r", "p/s"}, keysOf(got)); d != "" {
			t.Errorf("Query with Select %q (-want +got):\n%s", tt.sel, d)
			continue
		}
		for i, ent := range got {
			if d := diffProps(tt.want[i], ent.Properties); d != "" {
				t.Errorf("Query with Select %q: %s properties (-want +got):\n%s", tt.sel, keyOf(ent), d)
			}
			if ent.ETag == "" || ent.Timestamp.IsZero() {
				t.Errorf("Query with Select %q: %s has ETag %q and Timestamp %v, want both set", tt.sel, keyOf(ent), ent.ETag, ent.Timestamp)
			}
		}
	}
}

func testInvalidQueries(t *testing.T, e *env) {
	missing := uniqueTableName() // validation must answer before the service
	tests := []struct {
		name string
		q    storeadapter.Query
	}{
		{"Top -1", storeadapter.Query{Top: -1}},
		{"Top 1001", storeadapter.Query{Top: storeadapter.MaxPageSize + 1}},
		{"Select of an invalid name", storeadapter.Query{Select: []string{"A", "a-b"}}},
		{"Select of an empty name", storeadapter.Query{Select: []string{""}}},
		{"Compare with an int", storeadapter.Query{Filter: storeadapter.Compare("N", storeadapter.Eq, 5)}},
		{"Compare with nil", storeadapter.Query{Filter: storeadapter.Compare("N", storeadapter.Eq, nil)}},
		{"Compare with a float32", storeadapter.Query{Filter: storeadapter.Compare("N", storeadapter.Eq, float32(1))}},
		{"Compare with NaN", storeadapter.Query{Filter: storeadapter.Compare("D", storeadapter.Eq, math.NaN())}},
		{"Compare with +Inf", storeadapter.Query{Filter: storeadapter.Compare("D", storeadapter.Lt, math.Inf(1))}},
		{"Compare of an invalid property name", storeadapter.Query{Filter: storeadapter.Compare("a b", storeadapter.Eq, "x")}},
		{"Compare with an unknown operator", storeadapter.Query{Filter: storeadapter.Compare("A", storeadapter.Op("like"), "x")}},
		{"Compare with invalid UTF-8", storeadapter.Query{Filter: storeadapter.Compare("A", storeadapter.Eq, "\xff")}},
		{"And with an invalid operand", storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals("p"), storeadapter.Compare("N", storeadapter.Eq, 5))}},
		{"Or with an invalid operand", storeadapter.Query{Filter: storeadapter.Or(storeadapter.Compare("N", storeadapter.Eq, uint(5)), storeadapter.PartitionEquals("p"))}},
		{"Not of an invalid filter", storeadapter.Query{Filter: storeadapter.Not(storeadapter.Compare("N", storeadapter.Eq, 5))}},
		// Keys are Edm.String and Timestamp Edm.DateTime: a literal of another
		// type can never be valid, and tablekeeper refuses it; a DateTime
		// literal must lie in Edm.DateTime's range, 1601-9999
		// (docs/azure-behaviour.md, "Issue 18 decisions").
		{"PartitionKey compared with an Int32", storeadapter.Query{Filter: storeadapter.Compare("PartitionKey", storeadapter.Ne, int32(5))}},
		{"RowKey compared with a Boolean", storeadapter.Query{Filter: storeadapter.Compare("RowKey", storeadapter.Eq, true)}},
		{"PartitionKey compared with a Binary", storeadapter.Query{Filter: storeadapter.Compare("PartitionKey", storeadapter.Ge, []byte("p"))}},
		{"Timestamp compared with a string", storeadapter.Query{Filter: storeadapter.Compare("Timestamp", storeadapter.Gt, "2026-11-21")}},
		{"Timestamp compared with an Int64", storeadapter.Query{Filter: storeadapter.Compare("Timestamp", storeadapter.Gt, int64(0))}},
		{"DateTime literal in year 10000", storeadapter.Query{Filter: storeadapter.Compare("T", storeadapter.Lt, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}},
		{"DateTime literal in year 1600", storeadapter.Query{Filter: storeadapter.Compare("T", storeadapter.Gt, time.Date(1600, 12, 31, 23, 59, 59, 0, time.UTC))}},
		{"zero time.Time literal", storeadapter.Query{Filter: storeadapter.Compare("Timestamp", storeadapter.Lt, time.Time{})}},
		// Azure allows at most 15 comparisons in a $filter (Azurite
		// accepts more: this checks our validation).
		{"16 comparisons", storeadapter.Query{Filter: comparisons(16)}},
		{"16 comparisons, nested", storeadapter.Query{Filter: storeadapter.Or(comparisons(8), storeadapter.Not(comparisons(8)))}},
	}
	for _, tt := range tests {
		_, err := e.tb.Query(e.ctx, missing, tt.q)
		checkErr(t, "Query with "+tt.name, err, storeadapter.ErrInvalidInput)
	}
	// 15 comparisons are allowed: the table is missing, not the filter.
	_, err := e.tb.Query(e.ctx, missing, storeadapter.Query{Filter: storeadapter.Or(comparisons(7), comparisons(8))})
	checkErr(t, "Query with 15 comparisons", err, storeadapter.ErrTableNotFound)
}

// comparisons returns a filter of n comparisons joined with and.
func comparisons(n int) storeadapter.Filter {
	fs := make([]storeadapter.Filter, n)
	for i := range fs {
		fs[i] = storeadapter.Compare("N", storeadapter.Ne, int32(i))
	}
	return storeadapter.And(fs...)
}

// testTokenFromAnotherQuery: a continuation token names the next key to
// scan (Azure's NextPartitionKey/NextRowKey are the keys, encoded), not the
// query it came from, so a token used with another filter, page size or
// table resumes that query at the key — it does not start it over
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testTokenFromAnotherQuery(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := e.pages25(t, tbl) // a/00…a/09, b/10…b/19, c/20…c/24
	first, err := e.tb.Query(e.ctx, tbl, storeadapter.Query{Top: 3, Filter: storeadapter.PartitionEquals("a")})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLines(want[:3], keysOf(first.Entities)); d != "" || first.Next == "" {
		t.Fatalf("first page of partition a, Top 3 (-want +got):\n%s(token %q)", d, first.Next)
	}
	got, _ := e.queryAll(t, tbl, storeadapter.Query{Continuation: first.Next})
	if d := diffLines(want[3:], keysOf(got)); d != "" {
		t.Errorf("every entity from the token of another query (-want +got):\n%s", d)
	}
	got, _ = e.queryAll(t, tbl, storeadapter.Query{Continuation: first.Next, Top: 4, Filter: storeadapter.Compare("N", storeadapter.Ge, int32(20))})
	if d := diffLines(want[20:], keysOf(got)); d != "" {
		t.Errorf("N ge 20 from the token of another query (-want +got):\n%s", d)
	}
	other := e.newTable(t)
	e.pages25(t, other)
	got, _ = e.queryAll(t, other, storeadapter.Query{Continuation: first.Next, Filter: storeadapter.PartitionEquals("a")})
	if d := diffLines(want[3:10], keysOf(got)); d != "" {
		t.Errorf("partition a of another table from the token (-want +got):\n%s", d)
	}
}

// testFilteredPages: a page holds at most Top entities and may hold fewer,
// even none, while a token is still returned ("It is possible for a query to
// return no results but to still return a continuation header", Query
// timeout and pagination); a token need not promise another match. Azure
// scans on from the last match and may end with an empty page; Azurite
// filters first and does not. Both are the documented contract: following
// tokens to the end gives every match once, in key order
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testFilteredPages(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := e.pages25(t, tbl)
	for _, tt := range []struct {
		name   string
		filter storeadapter.Filter
		want   []string
	}{
		{"two matches with rows after them", storeadapter.Or(storeadapter.Compare("N", storeadapter.Eq, int32(3)), storeadapter.Compare("N", storeadapter.Eq, int32(7))), []string{want[3], want[7]}},
		{"the last row", storeadapter.Compare("N", storeadapter.Eq, int32(24)), want[24:]},
		{"no match", storeadapter.Compare("N", storeadapter.Gt, int32(100)), nil},
	} {
		for _, top := range []int{1, 2, 0} {
			got, pages := e.queryAll(t, tbl, storeadapter.Query{Filter: tt.filter, Top: top})
			if d := diffLines(tt.want, keysOf(got)); d != "" {
				t.Errorf("%s, Top %d (-want +got):\n%s", tt.name, top, d)
			}
			if top > 0 && pages < (len(tt.want)+top-1)/top {
				t.Errorf("%s, Top %d: %d pages for %d matches", tt.name, top, pages, len(tt.want))
			}
		}
	}
}
