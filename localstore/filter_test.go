package localstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// filterRow is the row the parseFilter table tests match against.
func filterRow() *row {
	return &row{
		pk: "p1",
		rk: "r5",
		ts: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
		props: map[string]any{
			"Age":    int32(42),
			"Big":    int64(42),
			"Score":  2.5,
			"NaN":    math.NaN(),
			"Name":   "Jones",
			"Quote":  "O'Brien",
			"Empty":  "",
			"Active": true,
			"When":   time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC),
			"ID":     storeadapter.GUID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff},
			"Blob":   []byte{0x01, 0x02},
		},
	}
}

func TestParseFilterMatch(t *testing.T) {
	tests := []struct {
		filter string
		want   bool
	}{
		{"", true},
		{"   ", true},

		// Each type against a literal of its own type.
		{"Age eq 42", true},
		{"Age gt 41", true},
		{"Age lt 42", false},
		{"Big eq 42L", true},
		{"Big le -1L", false},
		{"Score eq 2.5", true},
		{"Score gt 2.0", true},
		{"Score lt 2.5", false},
		{"Name eq 'Jones'", true},
		{"Name ne 'Jones'", false},
		{"Name gt 'Jone'", true},
		{"Name lt 'Jones'", false},
		{"Quote eq 'O''Brien'", true},
		{"Empty eq ''", true},
		{"Active eq true", true},
		{"Active eq false", false},
		{"When eq datetime'2026-01-02T03:04:05.6000000Z'", true},
		{"When lt datetime'2026-01-02T03:04:05.6000001Z'", true},
		{"When gt datetime'2026-01-02T03:04:05Z'", true},
		{"ID eq guid'00112233-4455-6677-8899-aabbccddeeff'", true},
		{"ID eq guid'00112233-4455-6677-8899-AABBCCDDEEFF'", true},
		{"ID ne guid'00112233-4455-6677-8899-aabbccddeef0'", true},
		{"Blob eq X'0102'", true},
		{"Blob eq binary'0102'", true},
		{"Blob gt X'01'", true},

		// Types never mix: Int32 against Int64 or Double, and so on.
		{"Age eq 42L", false},
		{"Age ne 42L", false},
		{"Age eq 42.0", false},
		{"Big eq 42", false},
		{"Score eq 2", false},
		{"Name eq 42", false},
		{"Active eq 'true'", false},
		{"When eq '2026-01-02T03:04:05.6000000Z'", false},
		{"Blob eq '0102'", false},
		{"ID eq '00112233-4455-6677-8899-aabbccddeeff'", false},

		// A missing property makes every comparison false, ne included.
		{"Missing eq 1", false},
		{"Missing ne 1", false},
		{"not (Missing eq 1)", true},
		{"NaN eq 1.0", false},

		// System properties.
		{"PartitionKey eq 'p1'", true},
		{"RowKey ge 'r1' and RowKey lt 'r9'", true},
		{"RowKey lt 'r5'", false},
		{"Timestamp ge datetime'2026-11-21T10:00:00Z'", true},
		{"Timestamp gt datetime'2026-11-21T10:00:00Z'", false},

		// and binds tighter than or.
		{"Name eq 'x' and Age eq 1 or Age eq 42", true},
		{"Age eq 42 or Name eq 'x' and Age eq 1", true},
		{"Age eq 1 and Age eq 42 or Age eq 2", false},
		{"Age eq 42 and Name eq 'Jones' and Active eq true", true},
		{"Age eq 1 or Age eq 2 or Age eq 42", true},

		// Parentheses override it.
		{"Name eq 'x' and (Age eq 1 or Age eq 42)", false},
		{"(Name eq 'x' and Age eq 1) or Age eq 42", true},
		{"(Age eq 42 or Name eq 'x') and Age eq 1", false},
		{"((Age eq 42))", true},
		{"( Age eq 42 )", true},

		// not applies to what follows it.
		{"not (Age eq 42)", false},
		{"not (Age eq 1) and Name eq 'Jones'", true},
		{"not (Age eq 42) or Name eq 'Jones'", true},
		{"not (Age eq 42 or Name eq 'x')", false},
		{"not not (Age eq 42)", true},
		{"not(Age eq 42)", false},

		// Literals that look like operators are data.
		{"Name eq ' or Age eq 42 or Name eq '", false},
		{"Quote eq 'O''Brien' and Name eq 'Jones'", true},
	}
	r := filterRow()
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			p, err := parseFilter(tt.filter)
			if err != nil {
				t.Fatalf("parseFilter(%q): %v", tt.filter, err)
			}
			if got := p.match(r); got != tt.want {
				t.Errorf("parseFilter(%q).match() = %v, want %v", tt.filter, got, tt.want)
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	for _, filter := range []string{
		"Age",
		"Age eq",
		"eq 42",
		"42 eq Age",
		"Age eq 42 and",
		"Age eq 42 or",
		"and Age eq 42",
		"not",
		"not not",
		"(",
		")",
		"()",
		"(Age eq 42",
		"Age eq 42)",
		"((Age eq 42)",
		"Age like 42",
		"Age EQ 42",
		"Age eq 42 Age eq 42",
		"Age eq 99999999999",
		"Big eq 99999999999999999999L",
		"Big eq 1.5L",
		"Score eq 1e999",
		"Score eq NaN",
		"Score eq INF",
		"Name eq 'unterminated",
		"Name eq '",
		"'",
		"''",
		"Name eq Jones",
		"When eq datetime'yesterday'",
		"When eq datetime'2026-01-02'",
		"ID eq guid'nope'",
		"Blob eq X'0'",
		"Blob eq X'zz'",
		"1bad eq 1",
		"bad-name eq 1",
		"Name.Length eq 1",
		"' or '1' eq '1",
		// Trailing text after a complete comparison must not be ignored.
		"Age eq 42 'x'",
		"Age eq 42;",
		"Age eq 42 ; Name eq 'x'",
		"Name eq 'Jones' 'Smith'",
		"Name eq 'Jones'$",
		"Age eq 42 &",
	} {
		t.Run(filter, func(t *testing.T) {
			p, err := parseFilter(filter)
			if !errors.Is(err, storeadapter.ErrInvalidInput) {
				t.Errorf("parseFilter(%q) = %#v, %v; want ErrInvalidInput", filter, p, err)
			}
		})
	}
}

// TestParseFilterBuilderOutput parses what storeadapter's builder produces
// for each type, so the builder and the parser agree on every literal.
func TestParseFilterBuilderOutput(t *testing.T) {
	r := filterRow()
	for name, v := range r.props {
		if f, ok := v.(float64); ok && math.IsNaN(f) {
			continue // Literal rejects NaN.
		}
		t.Run(name, func(t *testing.T) {
			f := storeadapter.Compare(name, storeadapter.Eq, v)
			if err := f.Err(); err != nil {
				t.Fatalf("Compare(%s): %v", name, err)
			}
			p, err := parseFilter(f.String())
			if err != nil {
				t.Fatalf("parseFilter(%q): %v", f.String(), err)
			}
			c, ok := p.(cmpNode)
			if !ok {
				t.Fatalf("parseFilter(%q) = %#v, want a cmpNode", f.String(), p)
			}
			if !storeadapter.Equal(c.lit, v) {
				t.Errorf("literal of %q = %s, want %s", f.String(), storeadapter.Format(c.lit), storeadapter.Format(v))
			}
			if !p.match(r) {
				t.Errorf("%q does not match the row it was built from", f.String())
			}
		})
	}
}

func TestKeyBounds(t *testing.T) {
	type probe struct {
		pk, rk string
		beyond bool
	}
	tests := []struct {
		name   string
		filter storeadapter.Filter
		lo     row // where the scan starts
		probes []probe
	}{
		{
			name:   "RowRange",
			filter: storeadapter.RowRange("p", "b", "d"),
			lo:     row{pk: "p", rk: "b"},
			probes: []probe{{"p", "b", false}, {"p", "c", false}, {"p", "czz", false}, {"p", "d", true}, {"p", "e", true}, {"q", "", true}},
		},
		{
			name:   "RowRange without upper bound",
			filter: storeadapter.RowRange("p", "b", ""),
			lo:     row{pk: "p", rk: "b"},
			probes: []probe{{"p", "zzz", false}, {"p0", "", true}, {"q", "a", true}},
		},
		{
			name:   "one partition",
			filter: storeadapter.PartitionEquals("p"),
			lo:     row{pk: "p"},
			probes: []probe{{"p", "", false}, {"p", "\U0010FFFF", false}, {"p ", "", true}},
		},
		{
			name:   "RowKey le",
			filter: storeadapter.And(storeadapter.PartitionEquals("p"), storeadapter.Compare("RowKey", storeadapter.Le, "m")),
			lo:     row{pk: "p"},
			probes: []probe{{"p", "m", false}, {"p", "m0", true}},
		},
		{
			name: "tightest lower RowKey bound",
			filter: storeadapter.And(storeadapter.PartitionEquals("p"),
				storeadapter.Compare("RowKey", storeadapter.Ge, "b"), storeadapter.Compare("RowKey", storeadapter.Gt, "c")),
			lo:     row{pk: "p", rk: "c"},
			probes: []probe{{"p", "c", false}},
		},
		{
			name: "PartitionKey range",
			filter: storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Ge, "b"),
				storeadapter.Compare("PartitionKey", storeadapter.Lt, "d")),
			lo:     row{pk: "b"},
			probes: []probe{{"b", "", false}, {"c", "zzz", false}, {"d", "", true}, {"e", "", true}},
		},
		{
			name:   "PartitionKey le",
			filter: storeadapter.Compare("PartitionKey", storeadapter.Le, "d"),
			lo:     row{},
			probes: []probe{{"a", "", false}, {"d", "zzz", false}, {"d0", "", true}},
		},
		{
			name:   "RowKey bounds need a partition",
			filter: storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, "m"), storeadapter.Compare("RowKey", storeadapter.Lt, "n")),
			lo:     row{},
			probes: []probe{{"a", "a", false}, {"z", "z", false}},
		},
		{
			name:   "or has no bounds",
			filter: storeadapter.Or(storeadapter.PartitionEquals("a"), storeadapter.PartitionEquals("b")),
			lo:     row{},
			probes: []probe{{"a", "", false}, {"zzz", "", false}},
		},
		{
			name:   "not has no bounds",
			filter: storeadapter.Not(storeadapter.PartitionEquals("a")),
			lo:     row{},
			probes: []probe{{"zzz", "", false}},
		},
		{
			name:   "bounds inside and of or",
			filter: storeadapter.And(storeadapter.PartitionEquals("p"), storeadapter.Or(storeadapter.Compare("RowKey", storeadapter.Lt, "b"), storeadapter.Compare("Age", storeadapter.Eq, int32(1)))),
			lo:     row{pk: "p"},
			probes: []probe{{"p", "zzz", false}, {"q", "", true}},
		},
		{
			name:   "no filter",
			filter: storeadapter.Filter{},
			lo:     row{},
			probes: []probe{{"zzz", "zzz", false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.filter.Err(); err != nil {
				t.Fatal(err)
			}
			p, err := parseFilter(tt.filter.String())
			if err != nil {
				t.Fatalf("parseFilter(%q): %v", tt.filter.String(), err)
			}
			b := keyBounds(p)
			if b.lo == nil || b.lo.pk != tt.lo.pk || b.lo.rk != tt.lo.rk {
				t.Errorf("keyBounds(%q).lo (-want +got):\n- %q/%q\n+ %+v", tt.filter.String(), tt.lo.pk, tt.lo.rk, b.lo)
			}
			for _, pr := range tt.probes {
				if got := b.beyond(&row{pk: pr.pk, rk: pr.rk}); got != pr.beyond {
					t.Errorf("keyBounds(%q).beyond(%q/%q) = %v, want %v", tt.filter.String(), pr.pk, pr.rk, got, pr.beyond)
				}
			}
		})
	}
}

// TestQueryAgreesWithScan checks that key bounds and page limits only ever
// shorten a scan: paging through Query returns exactly the rows a full scan
// with the same predicate matches, in key order.
func TestQueryAgreesWithScan(t *testing.T) {
	ctx := context.Background()
	s := New(Options{Clock: clock.NewFake(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))})
	tables := s.Tables()
	if err := tables.CreateTable(ctx, "Scan"); err != nil {
		t.Fatal(err)
	}
	var all []*row
	for p := range 5 {
		pk := fmt.Sprintf("p%d", p)
		var ops []storeadapter.TableOp
		for r := range 60 {
			e := storeadapter.Entity{PartitionKey: pk, RowKey: fmt.Sprintf("r%02d", r), Properties: map[string]any{"N": int32(r % 7)}}
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
			all = append(all, &row{pk: e.PartitionKey, rk: e.RowKey, props: e.Properties})
		}
		if err := tables.Transact(ctx, "Scan", ops); err != nil {
			t.Fatal(err)
		}
	}
	n := func(op storeadapter.Op, v int32) storeadapter.Filter { return storeadapter.Compare("N", op, v) }
	filters := []storeadapter.Filter{
		{},
		storeadapter.RowRange("p2", "r10", "r20"),
		storeadapter.RowRange("p2", "r55", ""),
		storeadapter.RowRange("p9", "", ""),
		storeadapter.And(storeadapter.RowRange("p1", "r05", "r50"), n(storeadapter.Eq, 3)),
		storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Gt, "p1"), storeadapter.Compare("PartitionKey", storeadapter.Le, "p3")),
		storeadapter.Or(storeadapter.PartitionEquals("p0"), storeadapter.PartitionEquals("p4")),
		storeadapter.And(storeadapter.PartitionEquals("p3"), storeadapter.Compare("RowKey", storeadapter.Le, "r30"), storeadapter.Compare("RowKey", storeadapter.Gt, "r28")),
		storeadapter.Not(n(storeadapter.Ne, 0)),
		storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, "r58"), n(storeadapter.Ge, 0)),
	}
	for _, f := range filters {
		for _, top := range []int{0, 1, 7} {
			t.Run(fmt.Sprintf("%s/top=%d", f.String(), top), func(t *testing.T) {
				p, err := parseFilter(f.String())
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				for _, r := range all {
					if p.match(r) {
						want = append(want, r.pk+"/"+r.rk)
					}
				}
				var got []string
				q := storeadapter.Query{Filter: f, Top: top}
				for page := 0; ; page++ {
					if page > len(all)+1 {
						t.Fatalf("query did not finish after %d pages", page)
					}
					pg, err := tables.Query(ctx, "Scan", q)
					if err != nil {
						t.Fatal(err)
					}
					if top > 0 && len(pg.Entities) > top {
						t.Fatalf("page of %d entities, want at most %d", len(pg.Entities), top)
					}
					for _, e := range pg.Entities {
						got = append(got, e.PartitionKey+"/"+e.RowKey)
					}
					if pg.Next == "" {
						break
					}
					q.Continuation = pg.Next
				}
				if !slices.Equal(got, want) {
					t.Errorf("Query(%q) (-want +got):\n- %q\n+ %q", f.String(), want, got)
				}
			})
		}
	}
}
