package localstore

import (
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// filterSeeds are inputs that have broken filter escaping or parsing
// elsewhere: quotes, injections, stray punctuation, operators as data,
// whitespace and non-ASCII text.
var filterSeeds = []string{
	"",
	"'",
	"''",
	"'''",
	"' or '1' eq '1",
	"x' or 'a' eq 'a",
	"') or (Name ne '",
	"(",
	")",
	"not not",
	"not (",
	"and",
	"or",
	"eq",
	" ",
	"  leading and trailing  ",
	"\t\n\r",
	"\x00",
	"\x7f\u0085",
	"O'Brien",
	"日本語",
	"\U0001F600",
	"a & b % c + d # e ? f \\ g \" h",
	"X'00'",
	"datetime'2026-01-01T00:00:00Z'",
	"guid'00000000-0000-0000-0000-000000000000'",
	"42L",
	"Name eq 'x'",
	"Age eq 42 or Name eq 'x' and not (Age eq 1)",
	"PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'b'",
	"((((Age eq 1))))",
	"Score eq 1.5e10",
	"Blob eq binary'0102'",
}

// FuzzFilterEscaping checks that any string value survives the builder and
// the parser unchanged: the literal parsed from Compare's text equals the
// value exactly, and the predicate matches a row holding the value and no
// row holding a longer one, so no value can change a filter's structure.
func FuzzFilterEscaping(f *testing.F) {
	for _, s := range filterSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip("not valid UTF-8")
		}
		filter := storeadapter.Compare("Name", storeadapter.Eq, s)
		if filter.Err() != nil {
			t.Skip("rejected by the builder")
		}
		p, err := parseFilter(filter.String())
		if err != nil {
			t.Fatalf("parseFilter(%q): %v", filter.String(), err)
		}
		c, ok := p.(cmpNode)
		if !ok {
			t.Fatalf("parseFilter(%q) = %#v, want one comparison", filter.String(), p)
		}
		if c.prop != "Name" || c.op != storeadapter.Eq {
			t.Errorf("parseFilter(%q) compares %s %s, want Name eq", filter.String(), c.prop, c.op)
		}
		if lit, ok := c.lit.(string); !ok || lit != s {
			t.Errorf("parseFilter(%q) literal = %#v, want %q", filter.String(), c.lit, s)
		}
		same := &row{pk: "p", rk: "r", props: map[string]any{"Name": s}}
		longer := &row{pk: "p", rk: "r", props: map[string]any{"Name": s + "x"}}
		if !p.match(same) {
			t.Errorf("%q does not match Name %q", filter.String(), s)
		}
		if p.match(longer) {
			t.Errorf("%q matches Name %q", filter.String(), s+"x")
		}

		// The value must not change the structure of a larger filter either.
		combined := storeadapter.And(
			storeadapter.PartitionEquals(s),
			storeadapter.Or(filter, storeadapter.Compare("Other", storeadapter.Eq, s)),
			storeadapter.Not(storeadapter.Compare("RowKey", storeadapter.Eq, s)),
		)
		if combined.Err() != nil {
			return // s may be a valid string but not a valid key literal; keys are not checked here.
		}
		pc, err := parseFilter(combined.String())
		if err != nil {
			t.Fatalf("parseFilter(%q): %v", combined.String(), err)
		}
		match := &row{pk: s, rk: s + "x", props: map[string]any{"Name": s}}
		if !pc.match(match) {
			t.Errorf("%q does not match %q/%q", combined.String(), match.pk, match.rk)
		}
		for _, r := range []*row{
			{pk: s + "x", rk: s + "x", props: map[string]any{"Name": s}},
			{pk: s, rk: s, props: map[string]any{"Name": s}},
			{pk: s, rk: s + "x", props: map[string]any{"Name": s + "x", "Other": s + "x"}},
		} {
			if pc.match(r) {
				t.Errorf("%q matches %q/%q %v", combined.String(), r.pk, r.rk, r.props)
			}
		}
		b := keyBounds(pc)
		if b.pkEq == nil || *b.pkEq != s {
			t.Errorf("keyBounds(%q) partition = %v, want %q", combined.String(), b.pkEq, s)
		}
	})
}

// FuzzParseFilter feeds arbitrary text to parseFilter: it must never panic,
// its errors must wrap ErrInvalidInput, and a predicate it returns must be
// safe to evaluate and to take key bounds from.
func FuzzParseFilter(f *testing.F) {
	for _, s := range filterSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := parseFilter(text)
		if err != nil {
			if !errors.Is(err, storeadapter.ErrInvalidInput) {
				t.Fatalf("parseFilter(%q) error %v does not wrap ErrInvalidInput", text, err)
			}
			if p != nil {
				t.Errorf("parseFilter(%q) returned %#v with its error", text, p)
			}
			return
		}
		if p == nil {
			t.Fatalf("parseFilter(%q) returned neither a predicate nor an error", text)
		}
		rows := []*row{
			{},
			{pk: "p", rk: "r", ts: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), props: map[string]any{
				"Name": "x", "Age": int32(1), "Big": int64(1), "Score": 1.5, "Active": true,
				"Blob": []byte{1}, "ID": storeadapter.GUID{1}, "When": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			}},
		}
		b := keyBounds(p)
		if b.lo == nil {
			t.Fatalf("keyBounds(%q).lo = nil", text)
		}
		for _, r := range rows {
			p.match(r)
			b.beyond(r)
		}
	})
}
