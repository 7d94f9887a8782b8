package storeadapter

import (
	"unicode/utf8"
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
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		switch {
		case len(a) < len(b):
			return -1
		case len(a) > len(b):
			return 1
		}
		return 0
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		if a[i] < b[i] {
			return -1
		}
		return 1
	}
	// Back up to the start of the rune that differs (the shared prefix
	// ends on the same boundary in both strings).
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	ka, kb := utf16Key(ra), utf16Key(rb)
	if ka < kb {
		return -1
	}
	return 1
}

// utf16Key maps a rune to a number that sorts as its first UTF-16 code
// unit does: U+E000–U+FFFF move above every supplementary character.
func utf16Key(r rune) rune {
	if r >= 0xE000 && r <= 0xFFFF {
		return r + 0x110000
	}
	return r
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
