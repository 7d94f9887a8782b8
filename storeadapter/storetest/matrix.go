package storetest

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The filter matrix: every EDM type × every comparison operator × literals
// of the property's own type and of every other type, generated, against
// one table seeded once. The expected rows come from matrixMatch, the
// suite's model of Azure's filter semantics (docs/azure-behaviour.md,
// "Issue 18 decisions"):
//
//   - a comparison holds only when the entity has the property and the
//     property has the literal's EDM type ("The constant value must be of
//     the same data type as the property in order for the filter to return
//     valid results", Querying tables and entities); with another type it
//     is false, for ne too, as for a property the entity lacks;
//   - strings compare ordinally in UTF-16 code units, DateTime to the 100 ns
//     tick, Binary byte by byte (unsigned), Guid in its written order,
//     Boolean false < true.

// matrixColumns are the property names, one per EDM type, in the order of
// matrixValues' columns.
var matrixColumns = []string{"S", "B", "I", "L", "D", "T", "G", "X"}

// guidN returns a GUID that differs from the others only in its first
// group, so that every plausible GUID order (written, .NET's, byte-wise)
// agrees on it.
func guidN(first string) storeadapter.GUID { return mustGUID(first + "-0000-4000-8000-000000000001") }

var (
	tick       = time.Date(2000, 1, 1, 0, 0, 0, 100, time.UTC) // one 100 ns tick past midnight
	fiveTicks  = time.Date(2000, 1, 1, 0, 0, 0, 500, time.UTC)
	midnight   = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	threeTicks = time.Date(2000, 1, 1, 0, 0, 0, 300, time.UTC)
)

// matrixValues holds the five rows' values, one column per type, each
// column in increasing order from row to row (Boolean alternates).
var matrixValues = [][]any{
	{"A", "a", "ab", "\U0001F600", "\uFFFD"}, // U+FFFD sorts after the emoji in UTF-16
	{false, true, false, true, false},
	{int32(math.MinInt32), int32(-1), int32(0), int32(5), int32(math.MaxInt32)},
	{int64(math.MinInt64), int64(-1), int64(5), int64(1<<53 + 1), int64(math.MaxInt64)},
	{-1e300, -1.5, 0.25, 5.0, 1e300}, // 5.0: an integral Double
	{time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC), tick, fiveTicks, t2026ns, time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)},
	{guidN("00000000"), guidN("10000000"), guidN("7fffffff"), guidN("80000000"), guidN("ffffffff")},
	{[]byte{0x00}, []byte{0x00, 0xff}, []byte{0x01}, []byte{0x7f, 0x00}, []byte{0xff}}, // base64 text sorts 0xff first
}

// matrixOthers are literals of each type to compare every column with:
// for a column of another type they look equal to one of its values (5,
// 5L, 5.0, '5', …), so a store that converted types would match something.
var matrixOthers = []any{"5", true, int32(5), int64(5), 5.0, t2026ns, guidN("7fffffff"), []byte{0x00}}

// matrixExtra are more literals of a column's own type: between, below or
// above its values, and DateTimes equal to a row's to the millisecond but
// not to the tick.
var matrixExtra = map[string][]any{
	"S": {"", "a\uE000", "\uFFFF"},
	"I": {int32(4), int32(6)},
	"L": {int64(1 << 53), int64(4)},
	"D": {5.000000000000001, 0.0, math.Copysign(0, -1)},
	"T": {midnight, threeTicks, time.Date(2026, 11, 21, 10, 20, 30, 123000000, time.UTC)},
	"G": {guidN("7ffffffe"), guidN("80000001")},
	"X": {[]byte{0x00, 0x00}, []byte{0xfe}, []byte{0x01, 0x00}},
}

// matrixRows returns the seeded entities. Partition m: rows m0…m4 with a
// value of every type, each column of one type, and a row without any of
// the properties. Partition x: rows x1…x7, where row xk holds in column c
// a value of the type k columns on, so that across partition x every
// column holds a value of every other type ("across types").
func matrixRows() []entity {
	var ents []entity
	for r := range 5 {
		p := props{}
		for c, name := range matrixColumns {
			p[name] = matrixValues[c][r]
		}
		ents = append(ents, entity{PartitionKey: "m", RowKey: fmt.Sprintf("m%d", r), Properties: p})
	}
	ents = append(ents, entity{PartitionKey: "m", RowKey: "none", Properties: props{"Other": "x"}})
	for k := 1; k < len(matrixColumns); k++ {
		p := props{}
		for c, name := range matrixColumns {
			p[name] = matrixValues[(c+k)%len(matrixColumns)][k%5]
		}
		ents = append(ents, entity{PartitionKey: "x", RowKey: fmt.Sprintf("x%d", k), Properties: p})
	}
	return ents
}

// matrixMatch is the suite's model of Azure: does value v (nil: the entity
// lacks the property) satisfy "property op lit"?
func matrixMatch(v any, op storeadapter.Op, lit any) bool {
	c, ok := matrixCompare(v, lit)
	if !ok {
		return false
	}
	switch op {
	case storeadapter.Eq:
		return c == 0
	case storeadapter.Ne:
		return c != 0
	case storeadapter.Gt:
		return c > 0
	case storeadapter.Ge:
		return c >= 0
	case storeadapter.Lt:
		return c < 0
	}
	return c <= 0
}

// matrixCompare orders v against lit when both have one EDM type.
func matrixCompare(v, lit any) (int, bool) {
	tv, ok1 := storeadapter.TypeOf(v)
	tl, ok2 := storeadapter.TypeOf(lit)
	if !ok1 || !ok2 || tv != tl {
		return 0, false
	}
	switch x := v.(type) {
	case string:
		return storeadapter.CompareUTF16(x, lit.(string)), true
	case bool:
		return cmp.Compare(b2i(x), b2i(lit.(bool))), true
	case int32:
		return cmp.Compare(x, lit.(int32)), true
	case int64:
		return cmp.Compare(x, lit.(int64)), true
	case float64:
		return cmp.Compare(x, lit.(float64)), true
	case time.Time:
		return x.Compare(lit.(time.Time)), true
	case storeadapter.GUID:
		y := lit.(storeadapter.GUID)
		return bytes.Compare(x[:], y[:]), true
	case []byte:
		return bytes.Compare(x, lit.([]byte)), true
	}
	return 0, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// azuriteDeviation returns why Azurite answers a generated query otherwise
// than Azure, or "" when it answers it as Azure does. Only those queries
// are skipped on Azurite (docs/azure-behaviour.md, "Azurite deviations the
// contract skips"). rows are the seeded entities.
func azuriteDeviation(col string, op storeadapter.Op, lit any, rows []entity) string {
	tl, _ := storeadapter.TypeOf(lit)
	for _, r := range rows {
		v, ok := r.Properties[col]
		if !ok {
			continue
		}
		tv, _ := storeadapter.TypeOf(v)
		if tv != tl {
			if tl == storeadapter.EdmInt64 && (tv == storeadapter.EdmInt32 || tv == storeadapter.EdmDouble || tv == storeadapter.EdmBoolean) {
				return "Azurite answers HTTP 500 to an Int64 literal compared with an Int32, Double or Boolean property; " +
					"Azure matches no entity"
			}
			return "Azurite compares values of different EDM types as JavaScript values (5 equals 5.0, '5' orders " +
				"against numbers); Azure matches no entity whose property has another type than the literal"
		}
		switch x := v.(type) {
		case time.Time:
			// Azurite keeps DateTime values to the millisecond.
			ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
			if matrixMatch(ms(x), op, ms(lit.(time.Time))) != matrixMatch(x, op, lit) {
				return "Azurite compares DateTime values to the millisecond; Azure to the 100 ns tick"
			}
		case []byte:
			b64 := base64.StdEncoding.EncodeToString
			if matrixMatch(b64(x), op, b64(lit.([]byte))) != matrixMatch(x, op, lit) {
				return "Azurite orders Binary values by their base64 text; Azure byte by byte"
			}
		}
	}
	return ""
}

func testFilterMatrix(t *testing.T, e *env) {
	tbl := e.newTable(t)
	rows := matrixRows()
	e.insertAll(t, tbl, rows)
	ops := []storeadapter.Op{storeadapter.Eq, storeadapter.Ne, storeadapter.Gt, storeadapter.Ge, storeadapter.Lt, storeadapter.Le}
	seen := map[string]bool{}
	run := func(pk, col string, lit any) {
		for _, op := range ops {
			f := storeadapter.Compare(col, op, lit)
			name := pk + ": " + f.String()
			if seen[name] {
				continue
			}
			seen[name] = true
			var part []entity
			for _, r := range rows {
				if r.PartitionKey == pk {
					part = append(part, r)
				}
			}
			t.Run(name, func(t *testing.T) {
				if e.h.Azurite {
					if why := azuriteDeviation(col, op, lit, part); why != "" {
						t.Skip(why + " (docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
					}
				}
				var want []string
				for _, r := range part {
					if v, ok := r.Properties[col]; ok && matrixMatch(v, op, lit) {
						want = append(want, keyOf(r))
					}
				}
				got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(pk), f)})
				if d := diffLines(want, keysOf(got)); d != "" {
					t.Errorf("filter %s in partition %s (-want +got):\n%s", f, pk, d)
				}
			})
		}
	}
	for c, col := range matrixColumns {
		// Partition m: literals of the column's type, and of every other.
		for _, lit := range append(append(append([]any{}, matrixValues[c]...), matrixExtra[col]...), matrixOthers...) {
			run("m", col, lit)
		}
		// Partition x: each column holds every other type.
		for _, lit := range matrixOthers {
			run("x", col, lit)
		}
	}
}
