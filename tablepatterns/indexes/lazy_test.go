package indexes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestLazyClearCalls counts the calls of a table copy and of the blob list
// in each case, their clear left to the next reconcile (see
// lazy and ahead): a new entity 5 (the list 6), a change 5 (the list 7),
// an edit of a copied property 5, then an unchanged reconcile 4 once
// (it finds the values settled and clears them) and 2 after; a delete
// clears at once (6), so the record holds nothing. Through a chain of
// changes the record holds two values, never more: each change drops the
// values its reads show settled at the generation before. Every step ends
// with the index equal to the truth.
func TestLazyClearCalls(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		first, change, again int64
	}{{"emailAll", 5, 5, 5}, {"lastNameBlob", 6, 7, 7}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, only(tc.name))
			step := f.putCosts
			pending := func(want ...string) {
				t.Helper()
				var got []string
				for _, p := range f.record("Sales", "001").pending[tc.name] {
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
			val := func(v string) map[string]any { return f.valued(tc.name, v, "Sales") }

			f.put("Sales", "000", val("first")) // creates the index table or container
			f.reconcile("Sales", "000")
			step(val("a"), tc.first, "a new entity (the reads, the record inserted, the entity read again, the entry written)")
			pending("a")
			step(val("b"), tc.change, "a change (the reads, the entries read, the registration, the entries written)")
			pending("a", "b")
			step(val("c"), tc.again, "a second change (the first's values shown settled by the reads)")
			pending("b", "c")
			if tc.name == "emailAll" {
				edited := f.valued(tc.name, "c", "Engineering")
				step(edited, 5, "an edit of a copied property")
				pending("c")
			}
			e, err := f.raw.Tables().GetEntity(f.ctx, employees, "Sales", "001")
			if err != nil {
				t.Fatal(err)
			}
			current := e.Properties
			f.costs(4, "an unchanged reconcile after a change (the reads, the applied value's entry, the clear)")
			pending()
			f.costs(2, "an unchanged reconcile")
			step(current, 3, "a write that changes no indexed value (the reads, the record fenced)")
			f.costs(2, "an unchanged reconcile after the fence")
			step(val("d"), tc.change, "a change after the clear")
			writes := f.calls.Snapshot()[instrument.OpUpdateEntity].Calls
			step(nil, 6, "a delete (the reads, the entry read, the registration, the entry written, the clear)")
			if n := f.calls.Snapshot()[instrument.OpUpdateEntity].Calls - writes; n != 2 {
				t.Errorf("a delete wrote the record %d times, want 2 (registration, clear)", n)
			}
			if m := f.record("Sales", "001"); m.held() {
				t.Errorf("the record of a deleted entity still holds %+v", m)
			}
		})
	}
}

// listLineOf returns k's line in the list of value v of index name (a
// table or blob list), "" when it has none.
func (f *fixture) listLineOf(name, v string, k Key) string {
	f.t.Helper()
	ix := mustIndex(f.t, f.x, name)
	enc, err := EncodeValue(v)
	if err != nil {
		f.t.Fatal(err)
	}
	var lines []string
	if ix.Store == StoreBlob {
		lines, _, err = readBlobList(f.ctx, f.raw.Container(ix.Container), blobListName(ix, enc))
	} else {
		var l *list
		l, err = readList(f.ctx, f.raw.Tables(), ix.table, tableListPartition(ix, enc), tableListBase)
		if l != nil {
			lines = l.lines()
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
	for _, line := range lines {
		if strings.HasPrefix(line, k.PK+"\t"+k.RK+"\t") {
			return line
		}
	}
	return ""
}

// setFlag rewrites k's line in the list of value v to end in flag, as an
// older release's settle (or a Sync) leaves it: L.
func (f *fixture) setFlag(name, v string, k Key, flag string) {
	f.t.Helper()
	ix := mustIndex(f.t, f.x, name)
	enc, _ := EncodeValue(v)
	line := f.listLineOf(name, v, k)
	if line == "" {
		f.t.Fatalf("%s has no line of %v in %s", name, k, v)
	}
	next := line[:len(line)-1] + flag
	w := func(lines []string) []string {
		i := slices.Index(lines, line)
		lines[i] = next
		return lines
	}
	if ix.Store == StoreBlob {
		c := f.raw.Container(ix.Container)
		lines, etag, err := readBlobList(f.ctx, c, blobListName(ix, enc))
		if err == nil {
			_, err = c.Put(f.ctx, blobListName(ix, enc), []byte(strings.Join(w(lines), "\n")+"\n"), storeadapter.PutOptions{IfMatch: etag})
		}
		if err != nil {
			f.t.Fatal(err)
		}
		return
	}
	l, err := readList(f.ctx, f.raw.Tables(), ix.table, tableListPartition(ix, enc), tableListBase)
	if err != nil {
		f.t.Fatal(err)
	}
	l.set(k.PK+"\t"+k.RK, next)
	if err := f.raw.Tables().Transact(f.ctx, ix.table, l.ops(false)); err != nil {
		f.t.Fatal(err)
	}
}

// TestListProofFlag: a reconcile's settle flags the live line P — the
// evidence the next change reads instead of every pending value's list —
// and a line without it (an older release's settle, a Sync) or one of an
// older generation shows nothing: the next change then reads each pending
// value's list (one call more) and still leaves every list right.
func TestListProofFlag(t *testing.T) {
	for _, name := range []string{"lastNameBlob"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, only(name))
			k := Key{PK: "Sales", RK: "001"}
			change := func(v string, want int64) {
				t.Helper()
				f.putCosts(f.valued(name, v, "Sales"), want, "a change to "+v)
			}
			f.put("Sales", "000", f.valued(name, "first", "Sales"))
			f.reconcile("Sales", "000")
			change("a", 6)
			change("b", 7)
			if line := f.listLineOf(name, "b", k); !strings.HasSuffix(line, "\tP") {
				t.Fatalf("the live line after a change is %q, want it flagged P", line)
			}
			if line := f.listLineOf(name, "a", k); !strings.HasSuffix(line, "\tD") {
				t.Fatalf("the old value's line is %q, want a tombstone", line)
			}
			f.setFlag(name, "b", k, "L")
			change("c", 8) // a, b and c read: a and b shown settled each by its own line
			if p := f.record(k.PK, k.RK).pending[name]; len(p) != 2 {
				t.Errorf("pending after the change = %v, want b and c", p)
			}
			change("d", 7)
			// A Sync settles and clears what the change left, and leaves
			// the line as it was: the next change has nothing to prove.
			if _, err := f.x.Sync(f.ctx, employees, Partition("Sales", "", "")); err != nil {
				t.Fatal(err)
			}
			if p := f.record(k.PK, k.RK).pending[name]; len(p) != 0 {
				t.Errorf("pending after a Sync = %v, want none", p)
			}
			if line := f.listLineOf(name, "d", k); !strings.HasSuffix(line, "\tP") {
				t.Errorf("a Sync with nothing to write rewrote the line: %q", line)
			}
			change("e", 7)
		})
	}
}

// TestListProofOfOlderGenerationShowsNothing: the applied value's P line
// proves the record's pending values only when it is of the record's own
// generation. Here a rebuild's sweep registers a stray line of the key
// (value x) to remove at a new generation and dies before writing, so the
// applied value's P line is of the generation before; the next change
// must still remove the stray line, which no generation before wrote dead.
func TestListProofOfOlderGenerationShowsNothing(t *testing.T) {
	for _, name := range []string{"lastNameBlob"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, only(name))
			k := Key{PK: "Sales", RK: "001"}
			for _, v := range []string{"a", "b"} {
				f.put(k.PK, k.RK, f.valued(name, v, "Sales"))
				f.reconcile(k.PK, k.RK)
			}
			ix := mustIndex(t, f.x, name)
			x, _ := EncodeValue("x")
			if _, err := f.x.applyAll(f.ctx, ix, []write{{value: x, pk: k.PK, rk: k.RK, gen: 1, live: true}}, nil); err != nil {
				t.Fatal(err)
			}
			registered := false
			f.fault = func(_ context.Context, c instrument.Call) error {
				if registered {
					return errKilled
				}
				registered = c.Name == employees && c.Op == instrument.OpUpdateEntity
				return nil
			}
			ti, _ := f.x.indexes(employees)
			_, err := f.x.reconcile(f.ctx, ti, k.PK, k.RK, false, &stray{index: name, value: x, gen: 1})
			f.fault = nil
			if !errors.Is(err, errKilled) {
				t.Fatalf("the sweep's reconcile: %v, want it killed after registering", err)
			}
			if line := f.listLineOf(name, "b", k); !strings.HasSuffix(line, "\tP") {
				t.Fatalf("b's line is %q: the stage needs it flagged P, of the generation before", line)
			}
			f.put(k.PK, k.RK, f.valued(name, "c", "Sales"))
			f.reconcile(k.PK, k.RK)
			if got := lookupKeys(t, f.x, name, "x", nil); len(got) != 0 {
				t.Errorf("x still lists %v", got)
			}
			f.assertTruth()
		})
	}
}

// TestLazyRecordStaysSmall: found in review. A value the entity left keeps
// its tombstone only TombstoneGrace; when another entity's write prunes it,
// nothing shows the value settled any more, and the next change carries it
// on. Were that change's clear left to the next reconcile too, every such
// value would stay in the record for ever (values reused between entities:
// desks, extensions). A registration that carries one on clears at once:
// the record never holds more than the old and the new value.
func TestLazyRecordStaysSmall(t *testing.T) {
	f := newFixture(t, only("emailAll"))
	clk := clock.NewFake(time.Now())
	f.x.clock = clk
	desk := func(i int) string { return fmt.Sprintf("desk%03d", i) }
	set := func(rk, v, dept string) {
		t.Helper()
		f.put("Sales", rk, map[string]any{"Dept": dept, "Email": v})
		f.reconcile("Sales", rk)
	}
	set("s", desk(0), "Sales")
	for i := 1; i <= 12; i++ {
		set("s", desk(i), "Sales")
		clk.Advance(2 * time.Hour)
		set(fmt.Sprintf("o%03d", i-1), desk(i-1), "Sales") // another entity takes the desk s left: its tombstone is pruned
		if p := f.record("Sales", "s").pending["emailAll"]; len(p) > 2 {
			t.Fatalf("after %d changes the record holds %d values: %v", i, len(p), p)
		}
	}
	f.assertTruth()
}

// TestLazyValuesBesideAnotherIndex: found in review. A table copy's values
// left in the record by its change are shown settled by the next
// registration of another index too (here a partition list, whose change
// needs no clear): that registration drops them instead of settling them
// again at its own generation, so the copy costs one query once, and the
// list's changes cost their 5 after it.
func TestLazyValuesBesideAnotherIndex(t *testing.T) {
	cfg := only("emailAll", "lastName")
	for i := range cfg.Tables[employees] {
		if d := &cfg.Tables[employees][i]; d.Name == "emailAll" {
			d.Properties = []string{"Dept"} // a rename leaves the copy as it is
		}
	}
	f := newFixture(t, cfg)
	f.put("Sales", "000", employee("First", "first@contoso.com")) // creates the index table
	f.reconcile("Sales", "000")
	f.putCosts(employee("Jones", "a@contoso.com"), 6, "a new entity (the reads, the list read, the record and list in one transaction, the entity read again, the copy inserted)")
	f.putCosts(employee("Jones", "b@contoso.com"), 5, "a change of the copy")
	f.putCosts(employee("Smith", "b@contoso.com"), 6, "a change of the list (and the copy's values read once, shown settled)")
	if p := f.record("Sales", "001").pending["emailAll"]; len(p) != 0 {
		t.Errorf("the copy's values still pending: %v", p)
	}
	f.putCosts(employee("Brown", "b@contoso.com"), 5, "a change of the list")
}

// TestNoReadAheadAfterLostRegistration: a reconcile whose registration
// lost to another reconcile of the entity reads nothing ahead in its next
// round (reads between the record's read and its registration widen the
// window the other registers in), so it carries the pending values on and
// clears the record at once, and the index is right.
func TestNoReadAheadAfterLostRegistration(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	k := Key{PK: "Sales", RK: "001"}
	f.put(k.PK, k.RK, f.valued(name, "a", "Sales"))
	f.reconcile(k.PK, k.RK)
	var once sync.Once
	f.fault = func(ctx context.Context, c instrument.Call) error {
		if ctx.Value(lateKey{}) == nil || c.Op != instrument.OpGetEntity || c.RowKey != k.RK {
			return nil
		}
		once.Do(func() { // between the late reconcile's record read and its entity read
			f.put(k.PK, k.RK, f.valued(name, "b", "Sales"))
			f.reconcile(k.PK, k.RK) // registers b, leaves a and b pending (lazy)
			f.put(k.PK, k.RK, f.valued(name, "c", "Sales"))
		})
		return nil
	}
	if _, err := f.x.Reconcile(context.WithValue(f.ctx, lateKey{}, true), employees, k.PK, k.RK); err != nil {
		t.Fatal(err)
	}
	f.fault = nil
	if p := f.record(k.PK, k.RK).pending[name]; len(p) != 0 {
		t.Errorf("pending after a change registered in a second round = %v, want none (carried on, cleared at once)", p)
	}
	f.assertOnly(name, k, "c", "a", "b")
}

// assertReadAfterRegistration writes Sales/001 as props, reconciles it and
// fails unless the table copy's rows (EmployeesByEmail) were first read
// after the registration: nothing was read ahead.
func (f *fixture) assertReadAfterRegistration(props map[string]any) {
	f.t.Helper()
	var calls []string
	f.fault = func(_ context.Context, c instrument.Call) error {
		calls = append(calls, string(c.Op)+" "+c.Name)
		return nil
	}
	f.put("Sales", "001", props)
	f.reconcile("Sales", "001")
	f.fault = nil
	registered := slices.Index(calls, "UpdateEntity "+employees)
	read := slices.IndexFunc(calls, func(c string) bool { return strings.HasSuffix(c, " EmployeesByEmail") })
	if registered < 0 || read < registered {
		f.t.Errorf("calls %q: the copy rows were read before the registration", calls)
	}
}

// TestNoReadAheadWithNothingPending: a change of an entity whose record
// holds nothing pending (cleared) has nothing to show settled, so it reads
// its entries after the registration, as the settle's own reads.
func TestNoReadAheadWithNothingPending(t *testing.T) {
	f := newFixture(t, only("emailAll"))
	f.put("Sales", "001", employee("", "a@contoso.com"))
	f.reconcile("Sales", "001")
	f.reconcile("Sales", "001") // unchanged: clears what the first left
	if p := f.record("Sales", "001").pending["emailAll"]; len(p) != 0 {
		t.Fatalf("the stage: pending %v, want none", p)
	}
	f.assertReadAfterRegistration(employee("", "b@contoso.com"))
	f.assertTruth()
}

// TestConflictKeepsRecordSmall: found in review. A table copy whose every
// new value is held by another entity never settles, so its values were
// never cleared: with a rows index changing beside it (nothing read ahead,
// every value carried on), each change added one. The clear now also
// removes the values an unsettled index wrote as tombstones; only the
// value it could not take stays, and the change before's.
func TestConflictKeepsRecordSmall(t *testing.T) {
	f := newFixture(t, only("emailAll", "lastNameRows"))
	holders := map[string]string{"x@c": "002", "z@c": "003", "y@c": "004", "w@c": "005"}
	for email, rk := range holders {
		f.put("Sales", rk, employee("Lee", email))
		f.reconcile("Sales", rk)
	}
	f.put("Sales", "001", employee("Jones", "a@c"))
	f.reconcile("Sales", "001")
	for i, step := range []struct{ last, email string }{{"Smith", "x@c"}, {"Brown", "z@c"}, {"Green", "y@c"}, {"White", "w@c"}} {
		f.put("Sales", "001", employee(step.last, step.email))
		out, err := f.x.Reconcile(f.ctx, employees, "Sales", "001")
		if err == nil && len(out.Conflicts) == 0 {
			t.Fatalf("change %d: no conflict (%v): the stage needs the value held", i, err)
		}
		if p := f.record("Sales", "001").pending["emailAll"]; len(p) > 2 {
			t.Errorf("after change %d the record holds %d values of the copy: %v", i, len(p), p)
		}
	}
	if got := lookupKeys(t, f.x, "emailAll", "a@c", nil); len(got) != 0 {
		t.Errorf("a@c still lists %v", got)
	}
	if got := lookupKeys(t, f.x, "emailAll", "w@c", nil); !slices.Equal(got, []Key{{PK: "Sales", RK: "005"}}) {
		t.Errorf("w@c lists %v, want its holder only", got)
	}
}
