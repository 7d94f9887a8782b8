package storeadapter

import "testing"

func TestReservedFilters(t *testing.T) {
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{ApplicationRows(Filter{}), "(RowKey lt '~tk.') or (RowKey ge '~tk/')"},
		{ApplicationRows(PartitionEquals("p")), "(PartitionKey eq 'p') and ((RowKey lt '~tk.') or (RowKey ge '~tk/'))"},
		{ReservedRows("m."), "(RowKey ge '~tk.m.') and (RowKey lt '~tk.m/')"},
		{KeyPrefix("PartitionKey", "email_"), "(PartitionKey ge 'email_') and (PartitionKey lt 'email`')"},
	} {
		if tc.f.Err() != nil || tc.f.String() != tc.want {
			t.Errorf("filter %q (err %v), want %q", tc.f.String(), tc.f.Err(), tc.want)
		}
	}
	for _, p := range []string{"", "a~", "é"} {
		if KeyPrefix("RowKey", p).Err() == nil {
			t.Errorf("KeyPrefix(%q) built a filter; want an error: its end cannot be made by incrementing the last byte", p)
		}
	}
	for rk, want := range map[string]bool{"~tk.m.a": true, "~tk.": true, "~tk": false, "~tk/": false, "a": false} {
		if IsReserved(rk) != want {
			t.Errorf("IsReserved(%q) = %v, want %v", rk, !want, want)
		}
	}
}
