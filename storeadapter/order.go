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
