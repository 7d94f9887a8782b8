package storeadapter_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func TestLiteral(t *testing.T) {
	guid := storeadapter.GUID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"string", "Jones", "'Jones'"},
		{"empty string", "", "''"},
		{"quote", "O'Brien", "'O''Brien'"},
		{"two quotes", "''", "''''''"},
		{"lone quote", "'", "''''"},
		{"injection attempt", "' or '1' eq '1", "''' or ''1'' eq ''1'"},
		{"OData punctuation", `a & b % c + d # e ? f \ g " h ( ) eq`, `'a & b % c + d # e ? f \ g " h ( ) eq'`},
		{"non-ASCII", "日本語 " + emoji, "'日本語 " + emoji + "'"},
		{"true", true, "true"},
		{"false", false, "false"},
		{"Int32", int32(42), "42"},
		{"negative Int32", int32(-7), "-7"},
		{"smallest Int32", int32(math.MinInt32), "-2147483648"},
		{"Int64", int64(42), "42L"},
		{"largest Int64", int64(math.MaxInt64), "9223372036854775807L"},
		{"smallest Int64", int64(math.MinInt64), "-9223372036854775808L"},
		{"integral Double", 2.0, "2.0"},
		{"zero Double", 0.0, "0.0"},
		{"negative zero Double", math.Copysign(0, -1), "-0.0"},
		{"fractional Double", 2.5, "2.5"},
		{"negative Double", -0.125, "-0.125"},
		{"large Double", 1e21, "1000000000000000000000.0"},
		{"small Double", 1e-7, "0.0000001"},
		{"Double that is not exact in binary", 0.1, "0.1"},
		{"DateTime", time.Date(2026, 11, 21, 10, 30, 5, 123456789, time.UTC), "datetime'2026-11-21T10:30:05.1234567Z'"},
		{"DateTime on the second", time.Date(2026, 11, 21, 10, 30, 5, 0, time.UTC), "datetime'2026-11-21T10:30:05.0000000Z'"},
		{"DateTime in another zone", time.Date(2026, 11, 21, 0, 30, 0, 100, time.FixedZone("UTC+1", 3600)), "datetime'2026-11-20T23:30:00.0000001Z'"},
		{"GUID", guid, "guid'00112233-4455-6677-8899-aabbccddeeff'"},
		{"binary", []byte{0xde, 0xad, 0xbe, 0xef}, "X'deadbeef'"},
		{"empty binary", []byte{}, "X''"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := storeadapter.Literal(tt.in)
			if err != nil {
				t.Fatalf("Literal(%#v): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("Literal(%#v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestLiteralDoubleForm checks that every double literal has a decimal point,
// no exponent, and reads back as the same value.
func TestLiteralDoubleForm(t *testing.T) {
	for _, v := range []float64{
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e300, 1e-300,
		123456789012345678, 1 << 53, 3.141592653589793, 1e20, 1e22, 5e-324, 2.2250738585072014e-308,
	} {
		got, err := storeadapter.Literal(v)
		if err != nil {
			t.Errorf("Literal(%g): %v", v, err)
			continue
		}
		if !strings.Contains(got, ".") || strings.ContainsAny(got, "eE") {
			t.Errorf("Literal(%g) = %q, want a decimal point and no exponent", v, got)
		}
		if back, err := strconv.ParseFloat(got, 64); err != nil || back != v {
			t.Errorf("Literal(%g) = %q, which reads back as %g (%v)", v, got, back, err)
		}
	}
}

func TestLiteralErrors(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want error
	}{
		{"NaN", math.NaN(), storeadapter.ErrInvalidInput},
		{"positive infinity", math.Inf(1), storeadapter.ErrInvalidInput},
		{"negative infinity", math.Inf(-1), storeadapter.ErrInvalidInput},
		{"int", 42, storeadapter.ErrInvalidInput},
		{"float32", float32(1), storeadapter.ErrInvalidInput},
		{"nil", nil, storeadapter.ErrInvalidInput},
		{"pointer", new(string), storeadapter.ErrInvalidInput},
		{"invalid UTF-8", "a\xffb", storeadapter.ErrInvalidInput},
		{"string too long", strings.Repeat("s", storeadapter.MaxStringChars+1), storeadapter.ErrTooLarge},
		// Edm.DateTime holds 1601-9999 only.
		{"DateTime in year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), storeadapter.ErrInvalidInput},
		{"DateTime in year 1600", time.Date(1600, 12, 31, 23, 59, 59, 999999999, time.UTC), storeadapter.ErrInvalidInput},
		{"zero time.Time", time.Time{}, storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := storeadapter.Literal(tt.in)
			if got != "" {
				t.Errorf("Literal(%T) = %q, want \"\"", tt.in, got)
			}
			checkErr(t, err, tt.want, "filter value")
		})
	}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name     string
		property string
		op       storeadapter.Op
		value    any
		want     string
	}{
		{"custom property", "Name", storeadapter.Eq, "Jones", "Name eq 'Jones'"},
		{"PartitionKey", "PartitionKey", storeadapter.Eq, "pk", "PartitionKey eq 'pk'"},
		{"RowKey", "RowKey", storeadapter.Ge, "r'1", "RowKey ge 'r''1'"},
		{"Timestamp", "Timestamp", storeadapter.Lt, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "Timestamp lt datetime'2026-01-02T03:04:05.0000000Z'"},
		{"DateTime at the start of its range", "When", storeadapter.Ge, time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC), "When ge datetime'1601-01-01T00:00:00.0000000Z'"},
		{"DateTime at the end of its range", "When", storeadapter.Le, time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), "When le datetime'9999-12-31T23:59:59.9999999Z'"},
		{"ne", "Age", storeadapter.Ne, int32(3), "Age ne 3"},
		{"gt", "Count", storeadapter.Gt, int64(3), "Count gt 3L"},
		{"le", "Score", storeadapter.Le, 3.0, "Score le 3.0"},
		{"underscore", "_x1", storeadapter.Eq, true, "_x1 eq true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := storeadapter.Compare(tt.property, tt.op, tt.value)
			if err := f.Err(); err != nil {
				t.Fatalf("Compare: %v", err)
			}
			if got := f.String(); got != tt.want {
				t.Errorf("Compare().String() = %q, want %q", got, tt.want)
			}
			if f.IsZero() {
				t.Errorf("Compare().IsZero() = true")
			}
		})
	}
}

func TestCompareErrors(t *testing.T) {
	tests := []struct {
		name     string
		property string
		op       storeadapter.Op
		value    any
		want     error
		field    string
	}{
		{"empty property", "", storeadapter.Eq, "x", storeadapter.ErrInvalidInput, "property name"},
		{"property with a space", "Name eq 'x' or Name", storeadapter.Eq, "x", storeadapter.ErrInvalidInput, "property name"},
		{"property with a quote", "Na'me", storeadapter.Eq, "x", storeadapter.ErrInvalidInput, "property name"},
		{"property starting with a digit", "1st", storeadapter.Eq, "x", storeadapter.ErrInvalidInput, "property name"},
		{"upper-case operator", "Name", "EQ", "x", storeadapter.ErrInvalidInput, "filter operator"},
		{"unknown operator", "Name", "like", "x", storeadapter.ErrInvalidInput, "filter operator"},
		{"empty operator", "Name", "", "x", storeadapter.ErrInvalidInput, "filter operator"},
		{"operator injection", "Name", "eq 'x' or Name eq", "x", storeadapter.ErrInvalidInput, "filter operator"},
		{"int value", "Name", storeadapter.Eq, 1, storeadapter.ErrInvalidInput, "filter value"},
		{"NaN value", "Score", storeadapter.Eq, math.NaN(), storeadapter.ErrInvalidInput, "filter value"},
		{"nil value", "Name", storeadapter.Eq, nil, storeadapter.ErrInvalidInput, "filter value"},
		{"invalid UTF-8 value", "Name", storeadapter.Eq, "\xff", storeadapter.ErrInvalidInput, "filter value"},
		// System properties have fixed types.
		{"PartitionKey with an Int32", "PartitionKey", storeadapter.Ne, int32(5), storeadapter.ErrInvalidInput, "filter on PartitionKey"},
		{"RowKey with a GUID", "RowKey", storeadapter.Eq, storeadapter.GUID{}, storeadapter.ErrInvalidInput, "filter on RowKey"},
		{"Timestamp with a string", "Timestamp", storeadapter.Ge, "2026-11-21T00:00:00Z", storeadapter.ErrInvalidInput, "filter on Timestamp"},
		{"Timestamp with a Double", "Timestamp", storeadapter.Ge, 1.0, storeadapter.ErrInvalidInput, "filter on Timestamp"},
		{"DateTime past 9999", "When", storeadapter.Lt, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), storeadapter.ErrInvalidInput, "filter value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := storeadapter.Compare(tt.property, tt.op, tt.value)
			checkErr(t, f.Err(), tt.want, tt.field)
			if f.String() != "" {
				t.Errorf("String() = %q, want \"\" for an invalid filter", f.String())
			}
			if f.IsZero() {
				t.Errorf("IsZero() = true for an invalid filter")
			}
		})
	}
}

func TestCombinators(t *testing.T) {
	a := storeadapter.Compare("A", storeadapter.Eq, int32(1))
	b := storeadapter.Compare("B", storeadapter.Eq, "x")
	c := storeadapter.Compare("C", storeadapter.Gt, int64(2))
	var zero storeadapter.Filter
	tests := []struct {
		name string
		f    storeadapter.Filter
		want string
	}{
		{"And of nothing", storeadapter.And(), ""},
		{"And of zeros", storeadapter.And(zero, zero), ""},
		{"And of one", storeadapter.And(a), "A eq 1"},
		{"And of one and zeros", storeadapter.And(zero, a, zero), "A eq 1"},
		{"And of two", storeadapter.And(a, b), "(A eq 1) and (B eq 'x')"},
		{"And skips zeros", storeadapter.And(a, zero, b), "(A eq 1) and (B eq 'x')"},
		{"And of three", storeadapter.And(a, b, c), "(A eq 1) and (B eq 'x') and (C gt 2L)"},
		{"Or of two", storeadapter.Or(a, b), "(A eq 1) or (B eq 'x')"},
		{"Or of nothing", storeadapter.Or(), ""},
		{"Or of one", storeadapter.Or(zero, b), "B eq 'x'"},
		{"And of Or", storeadapter.And(storeadapter.Or(a, b), c), "((A eq 1) or (B eq 'x')) and (C gt 2L)"},
		{"Or of And", storeadapter.Or(storeadapter.And(a, b), c), "((A eq 1) and (B eq 'x')) or (C gt 2L)"},
		{"And of one Or keeps its parentheses", storeadapter.And(storeadapter.Or(a, b)), "(A eq 1) or (B eq 'x')"},
		{"Not", storeadapter.Not(a), "not (A eq 1)"},
		{"Not of And", storeadapter.Not(storeadapter.And(a, b)), "not ((A eq 1) and (B eq 'x'))"},
		{"Not of Not", storeadapter.Not(storeadapter.Not(a)), "not (not (A eq 1))"},
		{"Not of zero", storeadapter.Not(zero), ""},
		{"And with Not", storeadapter.And(storeadapter.Not(a), b), "(not (A eq 1)) and (B eq 'x')"},
		{"PartitionEquals", storeadapter.PartitionEquals("o'k"), "PartitionKey eq 'o''k'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			if got := tt.f.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got, want := tt.f.IsZero(), tt.want == ""; got != want {
				t.Errorf("IsZero() = %v, want %v", got, want)
			}
		})
	}
}

func TestCombinatorsPropagateErrors(t *testing.T) {
	good := storeadapter.Compare("A", storeadapter.Eq, int32(1))
	bad := storeadapter.Compare("bad-name", storeadapter.Eq, int32(1))
	worse := storeadapter.Compare("A", "like", int32(1))
	tests := []struct {
		name string
		f    storeadapter.Filter
		want error // the first invalid filter's own error
	}{
		{"And, bad last", storeadapter.And(good, bad), bad.Err()},
		{"And, bad first", storeadapter.And(bad, good), bad.Err()},
		{"And, first of two errors", storeadapter.And(good, worse, bad), worse.Err()},
		{"Or", storeadapter.Or(good, bad), bad.Err()},
		{"Not", storeadapter.Not(bad), bad.Err()},
		{"nested", storeadapter.Or(good, storeadapter.And(good, storeadapter.Not(bad))), bad.Err()},
		{"RowRange with a bad key literal", storeadapter.RowRange("pk", "a", "\xff"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Err()
			if !errors.Is(err, storeadapter.ErrInvalidInput) {
				t.Fatalf("Err() = %v, want ErrInvalidInput", err)
			}
			if tt.want != nil && err != tt.want {
				t.Errorf("Err() = %v, want %v", err, tt.want)
			}
			if tt.f.String() != "" {
				t.Errorf("String() = %q, want \"\"", tt.f.String())
			}
		})
	}
}

func TestRowRange(t *testing.T) {
	tests := []struct {
		name         string
		pk, from, to string
		want         string
	}{
		{"bounded", "pk", "a", "c", "((PartitionKey eq 'pk') and (RowKey ge 'a')) and (RowKey lt 'c')"},
		{"no upper bound", "pk", "a", "", "(PartitionKey eq 'pk') and (RowKey ge 'a')"},
		{"whole partition", "pk", "", "", "(PartitionKey eq 'pk') and (RowKey ge '')"},
		{"quotes", "o'k", "it's", "z'", "((PartitionKey eq 'o''k') and (RowKey ge 'it''s')) and (RowKey lt 'z''')"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := storeadapter.RowRange(tt.pk, tt.from, tt.to)
			if err := f.Err(); err != nil {
				t.Fatalf("Err() = %v", err)
			}
			if got := f.String(); got != tt.want {
				t.Errorf("RowRange(%q, %q, %q) = %q, want %q", tt.pk, tt.from, tt.to, got, tt.want)
			}
		})
	}
}

// TestFilterComparisonLimit: Azure allows at most 15 comparisons in one
// $filter; the builder refuses more with an error that says so, however
// they are nested.
func TestFilterComparisonLimit(t *testing.T) {
	cmps := func(n int) []storeadapter.Filter {
		fs := make([]storeadapter.Filter, n)
		for i := range fs {
			fs[i] = storeadapter.Compare("RowKey", storeadapter.Ne, strconv.Itoa(i))
		}
		return fs
	}
	if err := storeadapter.And(cmps(15)...).Err(); err != nil {
		t.Fatalf("And of 15 comparisons: %v", err)
	}
	for name, f := range map[string]storeadapter.Filter{
		"And of 16":            storeadapter.And(cmps(16)...),
		"Or of 16":             storeadapter.Or(cmps(16)...),
		"And of two Ors of 8":  storeadapter.And(storeadapter.Or(cmps(8)...), storeadapter.Or(cmps(8)...)),
		"Not of 10 and 6 more": storeadapter.And(storeadapter.Not(storeadapter.And(cmps(10)...)), storeadapter.And(cmps(6)...)),
		"RowRange and 13 more": storeadapter.And(storeadapter.RowRange("p", "a", "b"), storeadapter.And(cmps(13)...)),
	} {
		err := f.Err()
		if !errors.Is(err, storeadapter.ErrInvalidInput) || !strings.Contains(err.Error(), "at most 15 comparisons") {
			t.Errorf("%s: Err() = %v, want ErrInvalidInput saying at most 15 comparisons", name, err)
		}
	}
}
