package indexes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// setFormat rewrites the membership record of Sales/001 with V = v (nil:
// without V) and returns it as written.
func (f *fixture) setFormat(v any) storeadapter.Entity {
	f.t.Helper()
	rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
	if err != nil || rec == nil {
		f.t.Fatalf("the record of Sales/001: %v, %v", rec, err)
	}
	delete(rec.Properties, "V")
	if v != nil {
		rec.Properties["V"] = v
	}
	if _, err := f.raw.Tables().UpdateEntity(f.ctx, employees, *rec, storeadapter.Replace, storeadapter.ETagAny); err != nil {
		f.t.Fatal(err)
	}
	return *rec
}

// recordProps returns the properties of Sales/001's membership record.
func (f *fixture) recordProps() map[string]any {
	f.t.Helper()
	rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
	if err != nil || rec == nil {
		f.t.Fatalf("the record of Sales/001: %v, %v", rec, err)
	}
	return rec.Properties
}

// TestNewerRecordFormatRefused: a membership record of a format this
// release does not know (V above recordFormat, or a V no release writes:
// not an integer, or below 1) is
// left exactly as it is by Reconcile, Sync and Rebuild, which fail with
// ErrNewerFormat (transient: the message waits for a newer worker) and
// write nothing to any index; once the record is of a known format again
// (V as this release wrote it) the same calls bring every index up to
// date.
func TestNewerRecordFormatRefused(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	f.reconcile("Sales", "001")
	before := f.dump()
	known := f.recordProps()["V"]
	if known != int32(3) {
		t.Errorf("a record with a table list's marker has V %#v, want 3", known)
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	for _, v := range []any{int32(4), int64(7), "2", int32(0), int64(-1)} {
		written := f.setFormat(v)
		f.put("Sales", "001", employee("Brown", "brownj@contoso.com"))
		_, rerr := f.x.Reconcile(f.ctx, employees, "Sales", "001")
		_, serr := f.x.Sync(f.ctx, employees, Span{})
		_, berr := f.x.Rebuild(f.ctx, employees, nil, cp, "rebuild-"+time.Now().Format("150405.000000"), RebuildOptions{})
		for name, err := range map[string]error{"Reconcile": rerr, "Sync": serr, "Rebuild": berr} {
			if !errors.Is(err, ErrNewerFormat) {
				t.Errorf("V=%#v: %s = %v, want ErrNewerFormat", v, name, err)
			}
			if errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge) {
				t.Errorf("V=%#v: %s error is one the kinds make permanent: %v", v, name, err)
			}
		}
		if got := f.recordProps(); !maps.EqualFunc(got, written.Properties, func(a, b any) bool { return a == b }) {
			t.Errorf("V=%#v: the record was rewritten: %v, was %v", v, got, written.Properties)
		}
		if got := f.dump(); !maps.EqualFunc(got, before, func(a, b map[string][]Key) bool {
			return maps.EqualFunc(a, b, slices.Equal)
		}) {
			t.Errorf("V=%#v: an index changed:\n got %v\nwant %v", v, got, before)
		}
	}
	f.setFormat(known)
	f.reconcile("Sales", "001")
	f.assertTruth()
	f.put("Sales", "001", employee("Smith", "smithj@contoso.com"))
	if _, err := f.x.Sync(f.ctx, employees, Span{}); err != nil {
		t.Fatal(err)
	}
	f.assertTruth()
}

// TestClearLeavesNewerRecord holds a reconcile just before it clears the
// values it settled; meanwhile a newer release rewrites the record in a
// format this one does not know. The clear loses its If-Match, reads the
// record again and leaves it alone: without the format check it would
// write it back in a format this release knows, dropping what the newer
// release keeps there.
func TestClearLeavesNewerRecord(t *testing.T) {
	f := newFixture(t, sixIndexes())
	f.put("Sales", "001", employee("Jones", "jonesj@contoso.com"))
	// A new entity's settle leaves its values and its rows index's live
	// row to the next reconcile, which changes nothing else: its only
	// write of the record is the clear.
	f.reconcile("Sales", "001")
	h := &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: func(_ context.Context, c instrument.Call) bool {
		return c.Op == instrument.OpUpdateEntity && c.Name == employees && c.RowKey == memberRowKey("001")
	}}
	f.fault = h.fault
	done := f.lateReconcile(h, "its clear")
	written := f.setFormat(int32(recordFormat + 1))
	close(h.release)
	if err := <-done; err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if got := f.recordProps(); !maps.EqualFunc(got, written.Properties, func(a, b any) bool { return a == b }) {
		t.Errorf("the clear rewrote the newer record: %v, was %v", got, written.Properties)
	}
}

// TestRowsOfBothFormatsRead: rows index rows of format 1 (keyed by the
// key pair, as releases before this one wrote them) and of format 2 (the
// key pair and a generation) are read by Lookup, Check and Entries alike:
// a key with several rows is listed once, while any of them is live, a
// dead row is not live, and a malformed generation is an error rather
// than a wrong key. A rebuild then leaves exactly the entities' rows
// live: the stray ones of either format dead.
func TestRowsOfBothFormatsRead(t *testing.T) {
	f := newFixture(t, sixIndexes())
	for _, rk := range []string{"001", "002", "003", "004"} {
		f.put("Sales", rk, employee("Jones", ""))
	}
	f.reconcile("Sales", "001")
	f.reconcile("Sales", "002")
	jones, _ := EncodeValue("Jones")
	ix := mustIndex(t, f.x, "lastNameRows")
	row := func(rk, gen string, dead bool) {
		t.Helper()
		key := memberKey("Sales", rk)
		if gen != "" {
			key += keySep + gen
		}
		e := storeadapter.Entity{PartitionKey: jones, RowKey: key, Properties: map[string]any{propGen: int64(42), propDead: dead}}
		if _, err := f.raw.Tables().UpsertEntity(f.ctx, ix.table, e, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
	row("001", "0000000000000000042", false) // beside its own live row
	row("002", "", true)                     // a dead format-1 row beside its live one
	row("003", "", false)                    // its only row, of format 1
	row("004", "0000000000000000041", true)  // dead: 004 is missing
	want := []Key{{PK: "Sales", RK: "001"}, {PK: "Sales", RK: "002"}, {PK: "Sales", RK: "003"}}
	for _, pk := range []*string{nil, ptr("Sales")} {
		if got := lookupKeys(t, f.x, "lastNameRows", "Jones", pk); !slices.Equal(got, want) {
			t.Errorf("lookup Jones (pk %v) = %v, want %v", pk, got, want)
		}
	}
	var missing []Key
	_, err := f.x.Check(f.ctx, employees, "lastNameRows", func(fd Finding) error {
		if fd.Problem != ProblemMissing {
			t.Errorf("check: %s %s/%s %s", fd.Problem, fd.PK, fd.RK, fd.Detail)
		}
		missing = append(missing, fd.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missing, []Key{{PK: "Sales", RK: "004"}}) {
		t.Errorf("check found %v missing; want Sales/004", missing)
	}
	for _, bad := range []string{"42", "000000000000000004x", "00000000000000000042"} {
		row("002", bad, false)
		if _, err := f.x.Lookup(f.ctx, employees, "lastNameRows", "Jones", LookupOptions{}); err == nil {
			t.Errorf("a row with generation %q was read as a key", bad)
		}
		if err := f.raw.Tables().DeleteEntity(f.ctx, ix.table, jones, memberKey("Sales", "002")+keySep+bad, storeadapter.ETagAny); err != nil {
			t.Fatal(err)
		}
	}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	if _, err := f.x.Rebuild(f.ctx, employees, nil, cp, "rebuild-both", RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	f.assertTruth()
	live := 0
	err = f.x.Entries(f.ctx, employees, "lastNameRows", func(en Entry) error {
		live++
		if en.row == 0 {
			t.Errorf("a format-1 row of %v is live after the rebuild", en.Key)
		}
		return nil
	})
	if err != nil || live != 4 {
		t.Errorf("after the rebuild: %d live rows, %v; want one per entity", live, err)
	}
}

// TestListLineOfLaterFormatLive: a list line whose flag is neither L nor
// D (a later format marks some live lines P) is read as live.
func TestListLineOfLaterFormatLive(t *testing.T) {
	for flag, dead := range map[string]bool{"L": false, "P": false, "D": true} {
		pk, rk, m, err := parseListLine("Sales\t001\t42\t" + flag)
		if err != nil || pk != "Sales" || rk != "001" || m.gen != 42 || m.dead != dead {
			t.Errorf("flag %s: %q %q %+v %v; want Sales 001 gen 42 dead %v", flag, pk, rk, m, err, dead)
		}
	}
}
