package storeadapter_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// utf16Compare is the reference: compare the UTF-16 encodings unit by unit.
func utf16Compare(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// TestCompareUTF16Order checks CompareUTF16 against the UTF-16 encodings,
// including the keys of the issue that Go's < orders the other way.
func TestCompareUTF16Order(t *testing.T) {
	keys := []string{"", "a", "ab", "b", "\u007f", "\u0080", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uf8ff", "\ufb01",
		"\uff21", "\ufffd", "\U00010000", "\U0001f600", "\U0010ffff", "a\ue000", "a\U0001f600", "a\U0001f600b", "é", "e\u0301"}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := storeadapter.CompareUTF16(a, b), utf16Compare(a, b); got != want {
				t.Errorf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
			}
		}
	}
	if !storeadapter.LessUTF16("\U0001f600", "\ue000") {
		t.Errorf("U+1F600 must sort before U+E000 in Azure's order")
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, storeadapter.CompareUTF16)
	if !slices.IsSortedFunc(sorted, utf16Compare) {
		t.Errorf("SortFunc(CompareUTF16) is not UTF-16 order: %+q", sorted)
	}
}

// FuzzCompare checks CompareUTF16 against the reference on valid UTF-8.
func FuzzCompare(f *testing.F) {
	f.Add("\ue000", "\U0001f600")
	f.Add("abc", "abd")
	f.Fuzz(func(t *testing.T, a, b string) {
		a, b = strings.ToValidUTF8(a, "?"), strings.ToValidUTF8(b, "?")
		if got, want := storeadapter.CompareUTF16(a, b), utf16Compare(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
	})
}
