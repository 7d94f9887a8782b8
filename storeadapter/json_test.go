package storeadapter_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestMarshalEntityLine: a line holds every EDM type, the Timestamp with
// seven fractional digits and the ETag; it ends in one newline, its bytes
// do not depend on map order, a plain JSON reader parses it, and
// UnmarshalEntityJSON reads back exactly what was written.
func TestMarshalEntityLine(t *testing.T) {
	ts := time.Date(2026, 11, 21, 10, 0, 0, 123456700, time.UTC)
	e := storeadapter.Entity{
		PartitionKey: "p 😀", RowKey: "",
		ETag:      `W/"datetime'2026-11-21T10%3A00%3A00.1234567Z'"`,
		Timestamp: ts,
		Properties: map[string]any{
			"I64":    int64(1<<53 + 1),
			"I64Min": int64(math.MinInt64),
			"I32":    int32(-7),
			"Dbl":    2.0,
			"NaN":    math.NaN(),
			"Inf":    math.Inf(1),
			"NegInf": math.Inf(-1),
			"When":   time.Date(1601, 1, 1, 0, 0, 0, 100, time.UTC),
			"Guid":   storeadapter.GUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			"Bin":    []byte{0, 0xff, 0x10},
			"Empty":  "",
			"Astral": "\U0001F600\U00010000 \u2028 <&>",
			"Bool":   true,
		},
	}
	line, err := storeadapter.MarshalEntityLine(e)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("line %q does not end in exactly one newline", line)
	}
	for range 20 {
		again, _ := storeadapter.MarshalEntityLine(e.Clone())
		if !bytes.Equal(again, line) {
			t.Fatalf("two renderings differ:\n%s\n%s", line, again)
		}
	}
	for _, want := range []string{`"Timestamp":"2026-11-21T10:00:00.1234567Z"`, `"Timestamp@odata.type":"Edm.DateTime"`,
		`"odata.etag":"W/\"datetime'2026-11-21T10%3A00%3A00.1234567Z'\""`, `"I64":"9007199254740993"`, `"I64@odata.type":"Edm.Int64"`} {
		if !strings.Contains(string(line), want) {
			t.Errorf("line %s lacks %s", line, want)
		}
	}
	var plain map[string]any
	if err := json.Unmarshal(line, &plain); err != nil {
		t.Fatalf("a plain JSON reader cannot parse the line: %v", err)
	}
	got, err := storeadapter.UnmarshalEntityJSON(line, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.PartitionKey != e.PartitionKey || got.RowKey != e.RowKey || got.ETag != e.ETag || !got.Timestamp.Equal(ts) {
		t.Errorf("read back keys %q/%q, ETag %q, Timestamp %v; want %q/%q, %q, %v", got.PartitionKey, got.RowKey, got.ETag, got.Timestamp, e.PartitionKey, e.RowKey, e.ETag, ts)
	}
	if len(got.Properties) != len(e.Properties) {
		t.Errorf("read back %d properties, want %d: %v", len(got.Properties), len(e.Properties), got.Properties)
	}
	for name, v := range e.Properties {
		if !storeadapter.Equal(v, got.Properties[name]) {
			t.Errorf("property %s: read back %s, want %s", name, storeadapter.Format(got.Properties[name]), storeadapter.Format(v))
		}
	}
	if _, err := storeadapter.MarshalEntityLine(storeadapter.Entity{Properties: map[string]any{"X": 1}}); err == nil {
		t.Error("MarshalEntityLine accepted a Go int, which has no EDM type")
	}
}

// TestEntityJSONNotHTMLEscaped: MarshalEntityJSON and MarshalEntityLine
// write < > & as themselves, not as the six-byte escapes json.Marshal
// writes by default, and the text reads back as written. (U+2028 and U+2029
// stay escaped: encoding/json always escapes them.)
func TestEntityJSONNotHTMLEscaped(t *testing.T) {
	const text = "<a href='x'>&amp;</a> \u2028"
	e := storeadapter.Entity{PartitionKey: "p<&>", RowKey: "r", Properties: map[string]any{"S": text}}
	data, err := storeadapter.MarshalEntityJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	line, err := storeadapter.MarshalEntityLine(e)
	if err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string][]byte{"MarshalEntityJSON": data, "MarshalEntityLine": line} {
		for _, raw := range []string{`"PartitionKey":"p<&>"`, `"S":"<a href='x'>&amp;</a> \u2028"`} {
			if !strings.Contains(string(b), raw) {
				t.Errorf("%s = %s, want it to hold %s", what, b, raw)
			}
		}
		if strings.Contains(string(b), `\u003c`) || strings.Contains(string(b), `\u0026`) {
			t.Errorf("%s = %s: HTML-escaped", what, b)
		}
		got, err := storeadapter.UnmarshalEntityJSON(b, "")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.PartitionKey != e.PartitionKey || got.Properties["S"] != text {
			t.Errorf("%s read back %q and S %q, want %q and %q", what, got.PartitionKey, got.Properties["S"], e.PartitionKey, text)
		}
	}
	if want := len(`{"PartitionKey":"p<&>","RowKey":"r","S":"<a href='x'>&amp;</a> \u2028"}`); len(data) != want {
		t.Errorf("MarshalEntityJSON wrote %d bytes, want %d: %s", len(data), want, data)
	}
}
