package storeadapter

import (
	"encoding/json"
	"testing"
)

// FuzzJSONStringSize checks that JSONStringSize is exactly what Go's JSON
// encoder writes for a string, which is what the Azure SDK sends: escapes
// of quotes, backslashes and control characters, HTML escapes of < > &,
// the six-byte \u2028 and \u2029, and \ufffd for each invalid UTF-8 byte.
func FuzzJSONStringSize(f *testing.F) {
	for _, s := range []string{"", "plain", "\u2028\u2029", `<a href="x">&amp;</a>`, "\x00\x01\x1f\x7f\b\f\n\r\t\\", "\xff\xfe\xc3", "é漢😀\ufffd", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := JSONStringSize(s); got != len(data) {
			t.Fatalf("JSONStringSize(%+q) = %d, the encoder writes %d bytes: %s", s, got, len(data), data)
		}
	})
}
