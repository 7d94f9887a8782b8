package storeadapter

import (
	"cmp"
	"math/bits"
)

// CompareUTF16 orders two strings as Azure does: by UTF-16 code units, the
// ordinal comparison of the .NET service (Azurite, in JavaScript, agrees).
// It is the order of PartitionKeys and RowKeys, of string comparisons in
// filters, of blob names and of table names. It differs from Go's < only
// where characters U+E000–U+FFFF meet characters above U+FFFF: UTF-16
// writes the latter as surrogates (0xD800–0xDFFF), so U+E000–U+FFFF sort
// after them, while UTF-8 bytes sort them before. Every comparison of keys
// or bounds in tablekeeper goes through CompareUTF16.
//
// It returns -1 if a sorts before b, 0 if they are equal, +1 if after.
//
// It compares bytes, without decoding: the strings share every character
// before their first differing byte, so that byte either starts a
// character in both (lead bytes of different characters) or continues
// characters with the same lead byte (the same length, where byte order is
// code point order and UTF-16 order alike). Lead bytes order characters by
// code point, which is UTF-16 order except for lead 0xEE–0xEF (U+E000–U+FFFF)
// against 0xF0–0xF4 (U+10000 and above), reversed there. On invalid UTF-8,
// which validation keeps out of keys, values and names, the result is still
// a total order: bytes compared with 0xEE–0xEF moved after 0xF0–0xF4.
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	// Eight bytes at a time: the first differing byte is the lowest one
	// of the little-endian words' difference.
	for ; i+8 <= n; i += 8 {
		if x, y := load64(a[i:i+8]), load64(b[i:i+8]); x != y {
			i += bits.TrailingZeros64(x^y) / 8
			return cmp.Compare(unitRank(a[i]), unitRank(b[i]))
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			return cmp.Compare(unitRank(a[i]), unitRank(b[i]))
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// load64 reads 8 bytes of s as a little-endian word (one load on the
// platforms that allow unaligned ones).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// unitRank maps a byte to its rank in UTF-16 order at the first difference
// of two strings (see CompareUTF16): lead bytes 0xEE–0xEF (U+E000–U+FFFF)
// move after 0xF0–0xF4 (U+10000 and above, surrogate pairs in UTF-16).
func unitRank(c byte) int {
	switch {
	case c == 0xEE || c == 0xEF:
		return int(c) + 5
	case c >= 0xF0 && c <= 0xF4:
		return int(c) - 2
	}
	return int(c)
}

// LessUTF16 reports whether a sorts before b in Azure's order (see CompareUTF16).
func LessUTF16(a, b string) bool { return CompareUTF16(a, b) < 0 }

// utf16LenOver returns UTF16Len(s) when s may exceed limit UTF-16 units,
// and 0 when it cannot: a string never has more UTF-16 units than UTF-8
// bytes, so short strings need no counting.
func utf16LenOver(s string, limit int) int {
	if len(s) <= limit {
		return 0
	}
	return UTF16Len(s)
}

// UTF16Len counts the UTF-16 code units of a valid UTF-8 string, the unit
// in which Azure measures string sizes, without decoding it: one per
// character (every byte that is not a continuation byte), plus one more for
// each 4-byte character (a surrogate pair).
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c&0xC0 != 0x80 {
			n++
		}
		if c >= 0xF0 {
			n++
		}
	}
	return n
}
