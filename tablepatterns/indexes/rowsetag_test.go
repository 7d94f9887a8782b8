package indexes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestRowsTombstoneWithoutRead: the membership record keeps the ETag of
// the key's live rows index row (E_<index>), so a change writes the old
// value's tombstone If-Match of it without reading the row first: 6
// calls, and 5 for a delete. A record without the ETag (a worker that
// does not know E_ rewrote it) costs the read again, and one naming a
// row that changed since costs a lost write and the read; both end with
// the index right. (Each change is to a value new to the key: a value it
// had before has its row, which the insert finds, 2 calls more.)
func TestRowsTombstoneWithoutRead(t *testing.T) {
	f := newFixture(t, only("lastNameRows"))
	change := func(last string, want int64, why string) {
		t.Helper()
		props := employee(last, "")
		if last == "" {
			props = nil
		}
		f.putCosts(props, want, why)
	}
	record := func() map[string]any {
		t.Helper()
		rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
		if err != nil || rec == nil {
			t.Fatalf("the record: %v, %v", rec, err)
		}
		return rec.Properties
	}
	rewrite := func(edit func(props map[string]any)) {
		t.Helper()
		rec, _ := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
		edit(rec.Properties)
		if _, err := f.raw.Tables().UpdateEntity(f.ctx, employees, *rec, storeadapter.Replace, storeadapter.ETagAny); err != nil {
			t.Fatal(err)
		}
	}

	f.put("Sales", "000", employee("Jones", "")) // creates the index table
	f.reconcile("Sales", "000")
	change("Jones", 6, "a new entity (the reads, the record inserted, the entity read again, the row inserted, the clear)")
	brown, _ := EncodeValue("Brown")
	change("Brown", 6, "a change (the reads, the registration, the tombstone If-Match, the insert, the clear)")
	if e, _ := record()["E_lastNameRows"].(string); len(e) <= len(brown)+1 || e[:len(brown)+1] != brown+"\t" {
		t.Errorf("the record keeps E_lastNameRows %q, want Brown's row and its ETag", e)
	}
	rewrite(func(p map[string]any) { delete(p, "E_lastNameRows") })
	change("Smith", 7, "a change after a worker dropped the ETag (the tombstone reads first)")
	rewrite(func(p map[string]any) {
		smith, _ := EncodeValue("Smith")
		p["E_lastNameRows"] = smith + "\t" + `W/"datetime'2020-01-01T00%3A00%3A00.0000000Z'"`
	})
	before := f.calls.Snapshot()[instrument.OpUpdateEntity]
	change("Green", 8, "a change whose kept ETag names a row that changed (a lost write, then the read)")
	if got := f.calls.Snapshot()[instrument.OpUpdateEntity]; got.Errors-before.Errors != 1 {
		t.Errorf("%d failed updates, want the one lost to the stale ETag", got.Errors-before.Errors)
	}
	change("White", 6, "the next change, the record's ETag right again")
	change("", 5, "a delete (the reads, the registration, the tombstone, the clear)")
}

// TestRowsStaleETagAtOneConflict: a reconcile killed after its tombstone
// and before its clear leaves the record with the ETag of a row that
// tombstone changed. With maxConflicts 1 (the least the config takes),
// the next reconcile's guess loses, and its one compare-and-swap round is
// still whole: the redelivery and the next change both succeed.
func TestRowsStaleETagAtOneConflict(t *testing.T) {
	cfg := only("lastNameRows")
	cfg.MaxConflicts = 1
	f := newFixture(t, cfg)
	f.put("Sales", "000", employee("Jones", "")) // creates the index table
	f.reconcile("Sales", "000")
	f.put("Sales", "001", employee("Jones", ""))
	f.reconcile("Sales", "001")
	f.put("Sales", "001", employee("Brown", ""))
	records := 0
	f.fault = func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpUpdateEntity && c.Name == employees {
			if records++; records == 2 { // the registration, then the clear
				return fmt.Errorf("killed before the clear: %w", storeadapter.ErrUnavailable)
			}
		}
		return nil
	}
	if _, err := f.x.Reconcile(f.ctx, employees, "Sales", "001"); err == nil {
		t.Fatal("the reconcile was not killed at its clear")
	}
	f.fault = nil
	f.reconcile("Sales", "001") // the redelivery
	f.assertTruth()
	f.put("Sales", "001", employee("Smith", ""))
	f.reconcile("Sales", "001")
	f.assertTruth()
}

// TestRowsETagOnlyOfRowsTheSettleLeft: the record keeps a row's ETag only
// when the row holds the settle's own generation and state. Here the new
// value's row is already there, dead, at a generation above the
// registration's (a worker whose clock ran ahead wrote it): the settle
// leaves it, and must not keep its ETag, or the next change's tombstone
// would replace it If-Match of it, below its generation.
func TestRowsETagOnlyOfRowsTheSettleLeft(t *testing.T) {
	f := newFixture(t, only("lastNameRows"))
	f.put("Sales", "001", employee("Jones", ""))
	f.reconcile("Sales", "001")
	future := time.Now().Add(time.Hour).UnixMicro()
	brown, _ := EncodeValue("Brown")
	ix := mustIndex(t, f.x, "lastNameRows")
	if _, err := f.x.applyAll(f.ctx, ix, []write{{value: brown, pk: "Sales", rk: "001", gen: future}}, nil); err != nil {
		t.Fatal(err)
	}
	f.put("Sales", "001", employee("Brown", ""))
	f.reconcile("Sales", "001")
	rec, err := getOptional(f.ctx, f.raw.Tables(), employees, "Sales", memberRowKey("001"))
	if err != nil || rec == nil {
		t.Fatalf("the record: %v, %v", rec, err)
	}
	if lr, ok := readMembership(rec).live[ix.Name]; ok {
		t.Errorf("the record kept %+v, the ETag of a row the settle did not write", lr)
	}
	f.put("Sales", "001", employee("Smith", ""))
	f.reconcile("Sales", "001")
	row, err := getOptional(f.ctx, f.raw.Tables(), ix.table, brown, memberKey("Sales", "001"))
	if err != nil || row == nil {
		t.Fatalf("Brown's row: %v, %v", row, err)
	}
	if gen, _ := row.Properties[propGen].(int64); gen != future {
		t.Errorf("Brown's row holds generation %d, want %d: a lower generation replaced it", gen, future)
	}
}
