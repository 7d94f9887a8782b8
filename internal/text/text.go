package text

import (
	"strings"
	"unicode/utf8"
)

// Truncate returns s as valid UTF-8 (invalid bytes become U+FFFD) of at
// most n characters: a longer text is cut to n-1 characters followed by
// "…". Error texts and names stored in entities and shown to operators are
// bounded with it.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	count := 0
	for i := range s {
		if count == n-1 {
			return s[:i] + "…"
		}
		count++
	}
	return s
}
