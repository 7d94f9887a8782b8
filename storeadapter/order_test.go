package storeadapter_test

import (
	"fmt"
	"math/rand/v2"
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

// FuzzCompare checks CompareUTF16 against the reference on valid UTF-8,
// and against byteRankCompare on any bytes.
func FuzzCompare(f *testing.F) {
	f.Add("\ue000", "\U0001f600")
	f.Add("abc", "abd")
	f.Add("prefix12\uffff", "prefix12\U0010ffff")
	f.Add("\xee", "\xf0")
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := storeadapter.CompareUTF16(a, b), byteRankCompare(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
		a, b = strings.ToValidUTF8(a, "?"), strings.ToValidUTF8(b, "?")
		if got, want := storeadapter.CompareUTF16(a, b), utf16Compare(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
	})
}

// boundaryRunes are the characters where UTF-8 lengths, lead bytes or the
// UTF-16 order change, with their neighbours.
var boundaryRunes = []rune{0, 'a', 'z', 0x7f, 0x80, 0xe9, 0x7ff, 0x800, 0xfff, 0x1000, 0xd7ff,
	0xe000, 0xe001, 0xefff, 0xf000, 0xf8ff, 0xfb01, 0xfffd, 0xffff,
	0x10000, 0x1f600, 0x3ffff, 0x40000, 0xfffff, 0x100000, 0x10ffff}

// randomRune returns a boundary character or one drawn from the ranges
// whose order differs between UTF-8 and UTF-16, or from all of Unicode.
func randomRune(rng *rand.Rand) rune {
	switch rng.IntN(4) {
	case 0:
		return boundaryRunes[rng.IntN(len(boundaryRunes))]
	case 1:
		return 0xe000 + rng.Int32N(0x2000)
	case 2:
		return 0x10000 + rng.Int32N(0x100000)
	}
	for {
		if r := rng.Int32N(0x110000); r < 0xd800 || r > 0xdfff {
			return r
		}
	}
}

// TestCompareUTF16Random checks CompareUTF16 against the reference on
// pairs of random strings that share a prefix of random length (so their
// first difference falls inside and across the 8-byte words compared at
// once) and then differ in characters rich in U+E000–U+FFFF and
// supplementary characters.
func TestCompareUTF16Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 4))
	randomString := func(n int) string {
		rs := make([]rune, n)
		for i := range rs {
			rs[i] = randomRune(rng)
		}
		return string(rs)
	}
	for range 200_000 {
		prefix := randomString(rng.IntN(12))
		a, b := prefix+randomString(rng.IntN(4)), prefix+randomString(rng.IntN(4))
		if got, want := storeadapter.CompareUTF16(a, b), utf16Compare(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
	}
}

// byteRankCompare is the order CompareUTF16 documents for any bytes, valid
// UTF-8 or not: bytes compared one by one, 0xEE–0xEF after 0xF0–0xF4.
func byteRankCompare(a, b string) int {
	rank := func(s string) []int {
		r := make([]int, len(s))
		for i := range len(s) {
			switch c := int(s[i]); {
			case c == 0xee || c == 0xef:
				r[i] = c + 5
			case c >= 0xf0 && c <= 0xf4:
				r[i] = c - 2
			default:
				r[i] = c
			}
		}
		return r
	}
	return slices.Compare(rank(a), rank(b))
}

// TestCompareUTF16InvalidUTF8 checks that CompareUTF16 is the total order
// byteRankCompare on any bytes: validation keeps invalid UTF-8 out of keys
// and values, but a sort must not see an inconsistent order if some
// slips through.
func TestCompareUTF16InvalidUTF8(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	alphabet := []byte{0, 'a', 0x7f, 0x80, 0xbf, 0xc0, 0xc3, 0xdf, 0xe0, 0xed, 0xee, 0xef, 0xf0, 0xf4, 0xf5, 0xff}
	randomBytes := func(n int) string {
		s := make([]byte, n)
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(s)
	}
	for range 200_000 {
		prefix := randomBytes(rng.IntN(20))
		a, b := prefix+randomBytes(rng.IntN(3)), prefix+randomBytes(rng.IntN(3))
		got, want := storeadapter.CompareUTF16(a, b), byteRankCompare(a, b)
		if got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
		if back := storeadapter.CompareUTF16(b, a); back != -got {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d but reversed %d", a, b, got, back)
		}
	}
}

// BenchmarkCompareUTF16 compares keys of the shapes localstore's B-tree
// compares most: equal PartitionKeys, and RowKeys that differ late.
func BenchmarkCompareUTF16(b *testing.B) {
	pairs := [][2]string{
		{"tenant03", "tenant03"},
		{"order001234", "order005678"},
		{"2026-11-21T10:00:00Z-0000012345", "2026-11-21T10:00:00Z-0000012399"},
		{"caf\u00e9-\ue000-x", "caf\u00e9-\U0001f600-x"},
	}
	for _, p := range pairs {
		b.Run(fmt.Sprintf("%dbytes", len(p[0])), func(b *testing.B) {
			for b.Loop() {
				storeadapter.CompareUTF16(p[0], p[1])
			}
		})
	}
}
