package storetest

import (
	"fmt"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func orderCases() []testCase {
	return []testCase{
		{"UTF16KeyOrder", testUTF16KeyOrder},
		{"UTF16RowRange", testUTF16RowRange},
		{"UTF16PropertyFilter", testUTF16PropertyFilter},
		{"UTF16BlobOrder", testUTF16BlobOrder},
	}
}

// utf16Ordered are keys in the service's order, UTF-16 code units: the
// private-use and other characters U+E000–U+FFFD sort after the characters
// above U+FFFF (emoji), which UTF-16 writes as surrogates 0xD800–0xDFFF.
// Go's < on UTF-8 puts them the other way round. The list is written out,
// not computed, so the suite does not test CompareUTF16 with itself.
var utf16Ordered = []string{
	"a",
	"\u00e9",           // é
	"\u4e2d",           // 中
	"\U00010000",       // the first supplementary character
	"\U0001f600",       // 😀
	"\U0001f600x",      //
	"\ue000",           // first private-use character
	"\ue000a",          //
	"\uf8ff",           // last private-use character of the BMP
	"\ufb01",           // ﬁ
	"\uff21",           // Ａ (fullwidth)
	"\ufffd",           // replacement character
	"\ufffd\U00010000", //
}

// testUTF16KeyOrder checks the order of a full scan, by RowKey and by
// PartitionKey, page by page.
func testUTF16KeyOrder(t *testing.T, e *env) {
	tbl := e.newTable(t)
	pks := []string{"\uff21", "\U0001f600", "p"}
	ents := grid(pks, utf16Ordered)
	e.insertAll(t, tbl, ents)
	var want []string
	for _, pk := range []string{"p", "\U0001f600", "\uff21"} {
		for _, rk := range utf16Ordered {
			want = append(want, pk+"/"+rk)
		}
	}
	for _, top := range []int{0, 3} {
		got, _ := e.queryAll(t, tbl, storeadapter.Query{Top: top})
		if d := diffLines(want, keysOf(got)); d != "" {
			t.Errorf("full scan, Top %d, order (-want +got):\n%s", top, d)
		}
	}
}

// testUTF16RowRange checks range bounds in UTF-16 order: the repro,
// where [U+E000, U+1F600) is empty on Azure because U+E000 sorts after
// U+1F600.
func testUTF16RowRange(t *testing.T, e *env) {
	tbl := e.newTable(t)
	rks := []string{"\ue000", "\uf8ff", "\ufb01", "\uff21", "\ufffd", "\U00010000", "\U0001f600"}
	ents := grid([]string{"p"}, rks)
	e.insertAll(t, tbl, ents)
	keys := func(rks ...string) []string {
		var out []string
		for _, rk := range rks {
			out = append(out, "p/"+rk)
		}
		return out
	}
	tests := []struct {
		from, to string
		want     []string
	}{
		{"\ue000", "\U0001f600", nil},
		{"\U00010000", "\ue000", keys("\U00010000", "\U0001f600")},
		{"\U0001f600", "\ufb01", keys("\U0001f600", "\ue000", "\uf8ff")},
		{"\uf8ff", "", keys("\uf8ff", "\ufb01", "\uff21", "\ufffd")},
		{"", "\U0001f600", keys("\U00010000")},
	}
	for _, tt := range tests {
		for _, top := range []int{0, 2} {
			got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.RowRange("p", tt.from, tt.to), Top: top})
			if d := diffLines(tt.want, keysOf(got)); d != "" {
				t.Errorf("RowRange(p, %+q, %+q), Top %d (-want +got):\n%s", tt.from, tt.to, top, d)
			}
		}
	}
	// Partition bounds follow the same order.
	e.insertAll(t, tbl, grid([]string{"\ue000", "\U0001f600"}, []string{"r"}))
	f := storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Gt, "p"), storeadapter.Compare("PartitionKey", storeadapter.Lt, "\ue000"))
	got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: f})
	if d := diffLines([]string{"\U0001f600/r"}, keysOf(got)); d != "" {
		t.Errorf("PartitionKey in (p, U+E000) (-want +got):\n%s", d)
	}
}

// testUTF16PropertyFilter checks lt/le/gt/ge on a string property.
func testUTF16PropertyFilter(t *testing.T, e *env) {
	tbl := e.newTable(t)
	var ents []entity
	for i, s := range utf16Ordered {
		ents = append(ents, entity{PartitionKey: "p", RowKey: string(rune('a' + i)), Properties: props{"S": s}})
	}
	e.insertAll(t, tbl, ents)
	values := func(ents []storeadapter.Entity) []string {
		var out []string
		for _, x := range ents {
			s, _ := x.Properties["S"].(string)
			out = append(out, s)
		}
		return out
	}
	pivot := 4 // "\U0001f600"
	tests := []struct {
		op   storeadapter.Op
		want []string
	}{
		{storeadapter.Lt, utf16Ordered[:pivot]},
		{storeadapter.Le, utf16Ordered[:pivot+1]},
		{storeadapter.Gt, utf16Ordered[pivot+1:]},
		{storeadapter.Ge, utf16Ordered[pivot:]},
	}
	for _, tt := range tests {
		got, _ := e.queryAll(t, tbl, storeadapter.Query{Filter: storeadapter.Compare("S", tt.op, utf16Ordered[pivot])})
		if d := diffLines(quoteAll(tt.want), quoteAll(values(got))); d != "" {
			t.Errorf("S %s %+q (-want +got):\n%s", tt.op, utf16Ordered[pivot], d)
		}
	}
}

// testUTF16BlobOrder checks the order of a blob listing, with and without
// a prefix. Names avoid U+FFFE and U+FFFF: Azurite fails a whole listing
// (500) when a name holds one.
func testUTF16BlobOrder(t *testing.T, e *env) {
	c := e.newContainer(t)
	for _, name := range utf16Ordered {
		e.put(t, c, "d/"+name, []byte("x"), storeadapter.PutOptions{})
	}
	var want []string
	for _, name := range utf16Ordered {
		want = append(want, "d/"+name)
	}
	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{"", want},
		{"d/", want},
		{"d/\U0001f600", want[4:6]},
		{"d/\ue000", want[6:8]},
		{"d/\ufffd", want[11:]},
	} {
		var got []string
		for _, p := range e.listAll(t, c, tt.prefix) {
			got = append(got, p.Name)
		}
		if d := diffLines(quoteAll(tt.want), quoteAll(got)); d != "" {
			t.Errorf("List(%+q) order (-want +got):\n%s", tt.prefix, d)
		}
	}
}

// quoteAll renders strings with non-ASCII characters escaped, so a diff
// shows which code points differ.
func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%+q", s)
	}
	return out
}
