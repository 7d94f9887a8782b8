package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func filterCases() []testCase {
	return []testCase{
		{"Types", testFilterTypes},
		{"Matrix", testFilterMatrix},
	}
}

// mustGUID parses a GUID the suite spells out.
func mustGUID(s string) storeadapter.GUID {
	g, err := storeadapter.ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// filterRow is one entity of the filter data set: a value of every type.
type filterRow struct {
	rk string
	s  string
	b  bool
	i  int32
	l  int64
	d  float64
	t  time.Time
	g  storeadapter.GUID
	x  []byte
}

var (
	g1 = mustGUID("00000000-0000-0000-0000-000000000001")
	g2 = mustGUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
	g3 = mustGUID("F81D4FAE-7DEC-11D0-A765-00A0C91E6BF7")
	g4 = mustGUID("ffffffff-ffff-ffff-ffff-ffffffffffff")
	g5 = mustGUID("12345678-9abc-def0-1234-56789abcdef0")

	// Strings that would break a filter built by concatenation.
	injection = "' or '1' eq '1"
	special   = `é😀 %&+#?/\"<>` + "'"

	t2000   = time.Date(2000, 1, 1, 0, 0, 0, 100, time.UTC) // 100 ns after midnight
	t2026ns = time.Date(2026, 11, 21, 10, 20, 30, 123456700, time.UTC)
)

var filterRows = []filterRow{
	{"r1", "alpha", true, -5, math.MinInt64, -1.5, time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC), g1, []byte{0x00}},
	{"r2", "beta", false, 0, -1, 0.25, t2000, g2, []byte{0x01, 0x02}},
	{"r3", "it's", true, 5, 1 << 53, 1.5, t2026ns, g3, []byte{0xff}},
	{"r4", injection, false, math.MaxInt32, 1<<53 + 1, 0.0025, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), g4, []byte{0x01, 0x02, 0x03}},
	{"r5", special, true, math.MinInt32, math.MaxInt64, 123456.789, time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC), g5, []byte{0x01}},
}

func testFilterTypes(t *testing.T, e *env) {
	tbl := e.newTable(t)
	var ents []entity
	for _, r := range filterRows {
		ents = append(ents, entity{PartitionKey: "f", RowKey: r.rk, Properties: props{
			"S": r.s, "B": r.b, "I": r.i, "L": r.l, "D": r.d, "T": r.t, "G": r.g, "X": r.x,
		}})
	}
	before := e.now()
	e.insertAll(t, tbl, ents)
	e.insert(t, tbl, entity{PartitionKey: "other", RowKey: "r1", Properties: props{"S": "alpha", "B": true}})

	type F = storeadapter.Filter
	c := storeadapter.Compare
	const (
		eq = storeadapter.Eq
		ne = storeadapter.Ne
		gt = storeadapter.Gt
		ge = storeadapter.Ge
		lt = storeadapter.Lt
		le = storeadapter.Le
	)
	and, or, not := storeadapter.And, storeadapter.Or, storeadapter.Not
	f := func(rks ...string) []string {
		for i, rk := range rks {
			rks[i] = "f/" + rk
		}
		return rks
	}
	all := f("r1", "r2", "r3", "r4", "r5")

	// Filters within partition f.
	tests := []struct {
		name   string
		filter F
		want   []string
	}{
		{"string eq", c("S", eq, "alpha"), f("r1")},
		{"string with a quote", c("S", eq, "it's"), f("r3")},
		{"injection attempt matches only itself", c("S", eq, injection), f("r4")},
		{"another injection attempt", c("S", eq, "x' or 'a' eq 'a"), nil},
		{"injection closing the parenthesis", c("S", eq, "') or ('1' eq '1"), nil},
		{"special characters", c("S", eq, special), f("r5")},
		{"string ne", c("S", ne, "alpha"), f("r2", "r3", "r4", "r5")},
		{"string gt (ordinal)", c("S", gt, "b"), f("r2", "r3", "r5")},
		{"string range", and(c("S", ge, "alpha"), c("S", lt, "beta")), f("r1")},
		{"empty string", c("S", eq, ""), nil},
		{"strings are case-sensitive", c("S", eq, "ALPHA"), nil},

		{"bool eq true", c("B", eq, true), f("r1", "r3", "r5")},
		{"bool eq false", c("B", eq, false), f("r2", "r4")},
		{"bool ne true", c("B", ne, true), f("r2", "r4")},

		{"int32 lt 0", c("I", lt, int32(0)), f("r1", "r5")},
		{"int32 ge 5", c("I", ge, int32(5)), f("r3", "r4")},
		{"int32 max", c("I", eq, int32(math.MaxInt32)), f("r4")},
		{"int32 min", c("I", eq, int32(math.MinInt32)), f("r5")},

		{"int64 min", c("L", eq, int64(math.MinInt64)), f("r1")},
		{"int64 max", c("L", eq, int64(math.MaxInt64)), f("r5")},
		// Beyond 2^53 a float64 cannot tell these apart; Int64 must.
		{"int64 2^53+1", c("L", eq, int64(1<<53+1)), f("r4")},
		{"int64 2^53", c("L", eq, int64(1<<53)), f("r3")},
		{"int64 gt 2^53", c("L", gt, int64(1<<53)), f("r4", "r5")},
		{"int64 lt 0", c("L", lt, int64(0)), f("r1", "r2")},

		{"double lt 0", c("D", lt, 0.0), f("r1")},
		{"double gt 1", c("D", gt, 1.0), f("r3", "r5")},
		{"double eq", c("D", eq, 0.25), f("r2")},
		{"double range", and(c("D", ge, 0.0025), c("D", le, 0.25)), f("r2", "r4")},

		{"datetime lt 100 ns", c("T", lt, t2000), f("r1")},
		{"datetime eq to 100 ns", c("T", eq, t2000), f("r2")},
		{"datetime le 1601", c("T", le, time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)), f("r1")},
		{"datetime gt", c("T", gt, t2026ns), f("r5")},
		{"datetime ge", c("T", ge, t2026ns), f("r3", "r5")},
		{"datetime given in another zone", c("T", eq, t2026ns.In(time.FixedZone("UTC-5", -5*3600))), f("r3")},

		{"guid eq", c("G", eq, g3), f("r3")},
		{"guid ne", c("G", ne, g3), f("r1", "r2", "r4", "r5")},

		{"binary eq", c("X", eq, []byte{0x01, 0x02}), f("r2")},
		{"binary eq ff", c("X", eq, []byte{0xff}), f("r3")},

		{"or", or(c("S", eq, "alpha"), c("I", eq, int32(5))), f("r1", "r3")},
		{"and not", and(c("B", eq, true), not(c("S", eq, "alpha"))), f("r3", "r5")},
		{"not or", not(or(c("B", eq, true), c("L", lt, int64(0)))), f("r4")},
		{"or of and", or(and(c("I", gt, int32(0)), c("B", eq, false)), c("G", eq, g1)), f("r1", "r4")},
		{"and of ors", and(or(c("I", lt, int32(0)), c("I", gt, int32(100))), or(c("D", lt, 0.0), c("D", gt, 1000.0))), f("r1", "r5")},
		{"not not", not(not(c("S", eq, "alpha"))), f("r1")},
		{"zero filters are skipped", and(F{}, c("S", eq, "beta"), F{}), f("r2")},

		{"RowKey gt", c("RowKey", gt, "r3"), f("r4", "r5")},
		{"RowKey ne", c("RowKey", ne, "r1"), f("r2", "r3", "r4", "r5")},
		{"Timestamp since the inserts", c("Timestamp", ge, before.Add(-e.recentSlack())), all},
		{"Timestamp long ago", c("Timestamp", lt, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)), nil},
	}
	for _, tt := range tests {
		q := storeadapter.Query{Filter: and(storeadapter.PartitionEquals("f"), tt.filter)}
		got, _ := e.queryAll(t, tbl, q)
		if d := diffLines(tt.want, keysOf(got)); d != "" {
			t.Errorf("%s: filter %s (-want +got):\n%s", tt.name, q.Filter, d)
		}
	}

	// Filters across partitions.
	across := []struct {
		name   string
		filter F
		want   []string
	}{
		{"zero filter", F{}, append(f("r1", "r2", "r3", "r4", "r5"), "other/r1")},
		{"property in both partitions", c("S", eq, "alpha"), []string{"f/r1", "other/r1"}},
		{"PartitionKey ne", c("PartitionKey", ne, "f"), []string{"other/r1"}},
		{"PartitionKey ge and property", and(c("PartitionKey", ge, "g"), c("B", eq, true)), []string{"other/r1"}},
		{"partition or row", or(storeadapter.PartitionEquals("other"), c("RowKey", eq, "r5")), []string{"f/r5", "other/r1"}},
		{"property some entities lack", c("I", eq, int32(-5)), []string{"f/r1"}},
	}
	for _, tt := range across {
		got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: tt.filter})
		if d := diffLines(tt.want, keysOf(got)); d != "" {
			t.Errorf("%s: filter %s (-want +got):\n%s", tt.name, tt.filter, d)
		}
	}

	// The values come back as written, through a filtered query too.
	got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.PartitionEquals("f")})
	if len(got) == len(ents) {
		for i := range got {
			checkEntity(t, "filtered Query", ents[i], got[i])
		}
	}
}
