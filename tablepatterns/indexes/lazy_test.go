package indexes

import (
	"slices"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestTableCopyCalls counts a table copy index's calls in each case, with
// its clear left to the next reconcile (see lazy): a new entity 4, a
// change 5, an edit of a copied property 5, then an unchanged reconcile 4
// once (it finds the values settled and clears them) and 2 after; a
// delete clears at once (6), so the record holds nothing. Through a chain
// of changes the record holds two values, never more: each change drops
// the values its query found settled at the generation before. Every step
// ends with the index equal to the truth.
func TestTableCopyCalls(t *testing.T) {
	f := newFixture(t, only("emailAll"))
	step := func(props map[string]any, want int64, why string) {
		t.Helper()
		f.put("Sales", "001", props)
		before := f.calls.Snapshot()
		f.reconcile("Sales", "001")
		after := f.calls.Snapshot()
		if n := after.Total().Calls - before.Total().Calls; n != want {
			t.Errorf("%s: %d calls, want %d:\n%v", why, n, want, after)
		}
		f.assertTruth()
	}
	pending := func(want ...string) {
		t.Helper()
		var got []string
		for _, p := range f.record("Sales", "001").pending["emailAll"] {
			v, err := DecodeValue(p.value)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, v.(string))
		}
		slices.Sort(got)
		if slices.Sort(want); !slices.Equal(got, want) {
			t.Errorf("the record holds pending %q, want %q", got, want)
		}
	}

	f.put("Sales", "000", employee("", "first@contoso.com")) // creates the index table
	f.reconcile("Sales", "000")
	step(employee("", "a@contoso.com"), 4, "a new entity (the reads, the record inserted, the copy inserted)")
	pending("a@contoso.com")
	step(employee("", "b@contoso.com"), 5, "a change (the reads, the rows' query, the registration, the transaction)")
	pending("a@contoso.com", "b@contoso.com")
	step(employee("", "c@contoso.com"), 5, "a second change")
	pending("b@contoso.com", "c@contoso.com")
	edited := employee("", "c@contoso.com")
	edited["Dept"] = "Engineering"
	step(edited, 5, "an edit of a copied property")
	pending("c@contoso.com")
	step(edited, 4, "an unchanged reconcile after a change (the reads, the rows' query, the clear)")
	pending()
	step(edited, 2, "an unchanged reconcile")
	step(employee("", "d@contoso.com"), 5, "a change after the clear")
	writes := f.calls.Snapshot()[instrument.OpUpdateEntity].Calls
	step(nil, 6, "a delete (the reads, the rows' query, the registration, the transaction, the clear)")
	if n := f.calls.Snapshot()[instrument.OpUpdateEntity].Calls - writes; n != 2 {
		t.Errorf("a delete wrote the record %d times, want 2 (registration, clear)", n)
	}
	pending()
	if m := f.record("Sales", "001"); m.held() {
		t.Errorf("the record of a deleted entity still holds %+v", m)
	}
}
