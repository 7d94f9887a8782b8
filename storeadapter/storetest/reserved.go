package storetest

import (
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// testReservedRows: ApplicationRows leaves out exactly the rows whose
// RowKey starts with storeadapter.ReservedPrefix — alone, with a key
// range, and paged — and ReservedRows selects exactly those of one
// sub-prefix. Keys around the prefix's bounds are the cases that matter:
// "~tk" and "~tk-" sort before it, "~tk0" ("/" cannot be in a key), "~tl" and non-ASCII keys
// after it.
func testReservedRows(t *testing.T, e *env) {
	tbl := e.newTable(t)
	app := []string{"a", "~", "~tk", "~tk-", "~tk0", "~tl", "é", "\U0001F600"}
	reserved := []string{"~tk.", "~tk.c.email_S1", "~tk.m.a", "~tk.m.é", "~tk.o.op-1"}
	var ents []entity
	for _, pk := range []string{"p", "q"} {
		for _, rk := range append(append([]string{}, app...), reserved...) {
			ents = append(ents, entity{PartitionKey: pk, RowKey: rk, Properties: props{"N": int32(len(ents))}})
		}
	}
	e.insertAll(t, tbl, ents)
	var want, wantP, wantM []string
	var appEnts []entity
	for _, ent := range ents {
		if !storeadapter.IsReserved(ent.RowKey) {
			appEnts = append(appEnts, ent)
		}
	}
	want = sortedKeys(appEnts)
	for _, k := range want {
		if k[0] == 'p' {
			wantP = append(wantP, k)
		}
	}
	for _, pk := range []string{"p", "q"} {
		wantM = append(wantM, pk+"/~tk.m.a", pk+"/~tk.m.é")
	}
	for _, tc := range []struct {
		name string
		q    storeadapter.Query
		want []string
	}{
		{"the table", storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.Filter{})}, want},
		{"the table, pages of 2", storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.Filter{}), Top: 2}, want},
		{"a partition", storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.PartitionEquals("p"))}, wantP},
		{"a range over the prefix", storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.RowRange("p", "~", "~tl"))},
			[]string{"p/~", "p/~tk", "p/~tk-", "p/~tk0"}},
		{"membership records", storeadapter.Query{Filter: storeadapter.ReservedRows("m.")}, wantM},
	} {
		got, _ := e.queryAll(t, tbl, tc.q)
		if d := diffLines(tc.want, keysOf(got)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}
