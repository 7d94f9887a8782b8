package indexes

import (
	"slices"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestWithin: the span of a range after a saved position through a page's
// last key holds exactly the keys of the range in between; nil ends are
// the range's own.
func TestWithin(t *testing.T) {
	p, from, to := "P", "b", "m"
	keys := []Key{{PK: "A", RK: "z"}, {PK: "P", RK: "a"}, {PK: "P", RK: "b"}, {PK: "P", RK: "c"}, {PK: "P", RK: "f"},
		{PK: "P", RK: "l"}, {PK: "P", RK: "m"}, {PK: "Q", RK: "a"}}
	rng := storeadapter.Range{Table: "T", PK: &p, RKFrom: &from, RKTo: &to}
	for _, c := range []struct {
		name           string
		r              storeadapter.Range
		after, through *Key
		want           []string
	}{
		{"table", storeadapter.Range{Table: "T"}, nil, nil, []string{"A/z", "P/a", "P/b", "P/c", "P/f", "P/l", "P/m", "Q/a"}},
		{"table after through", storeadapter.Range{Table: "T"}, &Key{PK: "A", RK: "z"}, &Key{PK: "P", RK: "m"}, []string{"P/a", "P/b", "P/c", "P/f", "P/l", "P/m"}},
		{"partition", storeadapter.Range{Table: "T", PK: &p}, nil, nil, []string{"P/a", "P/b", "P/c", "P/f", "P/l", "P/m"}},
		{"range", rng, nil, nil, []string{"P/b", "P/c", "P/f", "P/l"}},
		{"range first page", rng, nil, &Key{PK: "P", RK: "c"}, []string{"P/b", "P/c"}},
		{"range next page", rng, &Key{PK: "P", RK: "c"}, &Key{PK: "P", RK: "f"}, []string{"P/f"}},
		{"range last page", rng, &Key{PK: "P", RK: "f"}, nil, []string{"P/l"}},
	} {
		var got []string
		sp := Within(c.r, c.after, c.through)
		for _, k := range keys {
			if sp.contains(k) {
				got = append(got, k.PK+"/"+k.RK)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
