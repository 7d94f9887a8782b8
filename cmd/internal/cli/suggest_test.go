package cli

import (
	"slices"
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	groups := []string{"index/conflict", "archive/not-found", "archive/unavailable", "validation"}
	cases := []struct {
		s    string
		cand []string
		want []string
	}{
		{"index/conflcit", groups, []string{"index/conflict"}}, // a swap
		{"conflict", groups, []string{"index/conflict"}},       // a part of one
		{"indx", []string{"archive", "index", "purge", "purgeday"}, []string{"index"}},
		{"stts", []string{"stats", "raw", "poison"}, []string{"stats"}},
		{"concurency", []string{"concurrency", "batch"}, []string{"concurrency"}},
		{"purg", []string{"purge", "purgeday"}, []string{"purge", "purgeday"}},
		{"zzzzzz", groups, nil},
		{"index/conflict", groups, nil}, // known: nothing to suggest
		{"", groups, nil},
	}
	for _, c := range cases {
		if got := Suggest(c.s, c.cand); !slices.Equal(got, c.want) {
			t.Errorf("Suggest(%q) = %q, want %q", c.s, got, c.want)
		}
	}
	if got := DidYouMean("stts", []string{"stats"}); got != ` (did you mean "stats"?)` {
		t.Errorf("DidYouMean = %q", got)
	}
	err := Unknown("kind", "indx", []string{"archive", "index"}, "registered kinds")
	if want := `unknown kind "indx" (did you mean "index"?); registered kinds: archive, index`; err.Error() != want {
		t.Errorf("Unknown = %q, want %q", err, want)
	}
	many := make([]string, 25)
	for i := range many {
		many[i] = strings.Repeat("x", i+1)
	}
	if err := Unknown("group", "q", many, "groups"); !strings.HasSuffix(err.Error(), " and 5 more") {
		t.Errorf("Unknown with 25 known = %q, want at most 20 listed and the rest counted", err)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"kitten", "sitting", 3}, {"", "ab", 2}, {"é", "e", 1}} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
