package cli

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Suggest returns the candidates closest to s, the best first: those
// within an edit distance (insertions, deletions, substitutions and
// swaps of two neighbours, ignoring case) of a third of s's length, at
// least 1 and at most 3, and any candidate s is a part of, or that is
// part of s ("conflict" suggests "index/conflict"). At most three; none
// when s is itself a candidate.
func Suggest(s string, candidates []string) []string {
	if s == "" || slices.Contains(candidates, s) {
		return nil
	}
	limit := min(max(utf8.RuneCountInString(s)/3, 1), 3)
	type scored struct {
		name string
		d    int
	}
	var found []scored
	ls := strings.ToLower(s)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := distance(ls, lc)
		switch {
		case d <= limit:
		case len(ls) >= 3 && (strings.Contains(lc, ls) || strings.Contains(ls, lc) && len(lc) >= 3):
			d = limit + 1 // after the near misses
		default:
			continue
		}
		if !slices.ContainsFunc(found, func(f scored) bool { return f.name == c }) {
			found = append(found, scored{c, d})
		}
	}
	slices.SortStableFunc(found, func(a, b scored) int { return a.d - b.d })
	var out []string
	for _, f := range found[:min(len(found), 3)] {
		out = append(out, f.name)
	}
	return out
}

// DidYouMean returns ` (did you mean "x"?)`, or ` (did you mean "x" or
// "y"?)`, for the candidates Suggest finds for s; "" when it finds none.
func DidYouMean(s string, candidates []string) string {
	sug := Suggest(s, candidates)
	if len(sug) == 0 {
		return ""
	}
	q := make([]string, len(sug))
	for i, c := range sug {
		q[i] = fmt.Sprintf("%q", c)
	}
	return " (did you mean " + strings.Join(q, " or ") + "?)"
}

// Unknown returns the error of a name that is none of the known ones:
// `unknown <what> "s" (did you mean "x"?); known <what>s: a, b, c`, where
// the list says known and lists at most 20 of them.
func Unknown(what, s string, known []string, list string) error {
	names := known
	more := ""
	if len(names) > 20 {
		names, more = names[:20], fmt.Sprintf(" and %d more", len(known)-20)
	}
	tail := ""
	switch {
	case len(names) > 0:
		tail = fmt.Sprintf("; %s: %s%s", list, strings.Join(names, ", "), more)
	case list != "":
		tail = fmt.Sprintf("; %s: none", list)
	}
	return fmt.Errorf("unknown %s %q%s%s", what, s, DidYouMean(s, known), tail)
}

// distance is the optimal string alignment distance of a and b, in
// characters: the edits (insert, delete, substitute, swap two neighbours)
// that turn one into the other.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// FlagError rewrites the flag package's parse errors: "invalid value "abc"
// for flag -limit: parse error" says what the flag takes instead, and an
// undefined flag gets a did-you-mean among fs's flags.
func FlagError(err error, fs *flag.FlagSet) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, "-"+f.Name) })
		return fmt.Errorf("unknown flag -%s%s", name, DidYouMean("-"+name, names))
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if value, rest, ok := strings.Cut(rest, " for flag -"); ok {
			if name, why, ok := strings.Cut(rest, ": "); ok {
				if why == "parse error" {
					return fmt.Errorf("-%s: must be %s, got %s", name, flagKind(fs.Lookup(name)), value)
				}
				return fmt.Errorf("-%s: %s", name, why)
			}
		}
	}
	return err
}

// flagKind says what a flag takes, for a parse error.
func flagKind(f *flag.Flag) string {
	if f == nil {
		return "a valid value"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case int, int64, uint, uint64:
		return "a whole number"
	case bool:
		return "true or false"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration such as 90m, 36h or 7d"
	}
	return "a valid value"
}
