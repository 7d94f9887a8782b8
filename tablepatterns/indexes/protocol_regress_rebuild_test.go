package indexes

// The regression net of protocol_regress_test.go, continued: the batch
// paths (a forced rebuild, Sync) and the rebuild's sweep.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
)

// rebuildOp is a rebuild of Employees under one operation id, so that a
// run after a crash goes on from its checkpoint; its checkpoints are in
// the instrumented store, so a kill reaches their saves too. One chunk at a
// time keeps the crash positions the same from run to run.
func rebuildOp(ctx context.Context, f *fixture) error {
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	_, err := f.x.Rebuild(ctx, employees, nil, cp, "op", RebuildOptions{Parallel: 1})
	return err
}

// syncOp is a Sync of the whole of Employees.
func syncOp(ctx context.Context, f *fixture) error {
	_, err := f.x.Sync(ctx, employees, Span{})
	return err
}

// seed writes n employees over two partitions, with last names shared
// by several and e-mails of their own (no copy conflicts), reconciled one
// by one when indexed is set.
func (f *fixture) seed(n int, indexed bool) []Key {
	f.t.Helper()
	var keys []Key
	for i := range n {
		k := Key{PK: []string{"Sales", "Marketing"}[i%2], RK: fmt.Sprintf("e%02d", i)}
		f.put(k.PK, k.RK, employee([]string{"Jones", "Smith", "Lee"}[i%3], fmt.Sprintf("e%d@contoso.com", i)))
		if indexed {
			f.reconcile(k.PK, k.RK)
		}
		keys = append(keys, k)
	}
	return keys
}

// assertLookups fails unless, for every value the table gives each named
// index, Lookup lists exactly the entities that have it, and every index
// equals the truth with Check clean (assertTruth).
func (f *fixture) assertLookups(names ...string) {
	f.t.Helper()
	truth := f.truth()
	for _, name := range names {
		if len(truth[name]) == 0 {
			f.t.Fatalf("index %s: the table gives it no value: nothing to look up", name)
		}
		for enc, want := range truth[name] {
			v, err := DecodeValue(enc)
			if err != nil {
				f.t.Fatal(err)
			}
			if got := lookupKeys(f.t, f.x, name, v, nil); !slices.Equal(got, sortKeys(want)) {
				f.t.Errorf("index %s: lookup %v = %v, want %v", name, v, got, sortKeys(want))
			}
		}
	}
	f.assertTruth()
}

// entryGens are the generations of an index's live entries, by value and
// key.
func (f *fixture) entryGens(name string) map[string]int64 {
	f.t.Helper()
	out := map[string]int64{}
	err := f.x.Entries(f.ctx, employees, name, func(e Entry) error {
		out[e.Encoded+"\t"+e.PK+"\t"+e.RK] = e.Gen
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestProtocolRebuildKeepsMembers (P2a, "a rebuild of a list index"): a
// forced rebuild over entities already indexed registers each entity's
// value as both the value it leaves and the one it takes, on the entry it
// already has. It is killed at each of its calls, then run again under the
// same operation id. The table list and the blob list are the point (P2a:
// "a rebuild empties every list"); the table copy (the same collapse of a
// kill and a live write on one row) and rows run too. No index may lose a
// member (Lookup of every value equals the table, Check clean), and every
// entry must have been rewritten at a newer generation: the rebuild really
// wrote over the entries it kept, so the test cannot pass because the
// rebuild left them alone.
func TestProtocolRebuildKeepsMembers(t *testing.T) {
	names := externalNames
	before := map[string]map[string]int64{}
	tried := atEveryCall(t, "rebuild of indexed entities", func() *fixture {
		f := newFixture(t, only(names...))
		f.x.chunk = 3 // several chunks, so the crash lands between saves too
		f.seed(8, true)
		for _, name := range names {
			before[name] = f.entryGens(name)
		}
		return f
	}, rebuildOp, func(f *fixture) {
		f.assertLookups(names...)
		for _, name := range names {
			after := f.entryGens(name)
			for k, gen := range before[name] {
				if after[k] <= gen {
					f.t.Errorf("index %s: line %q kept generation %d through the rebuild (now %d)", name, k, gen, after[k])
				}
			}
		}
	})
	if tried < 20 {
		t.Errorf("tried %d crash positions: the kills did not reach the rebuild's calls", tried)
	}
	t.Logf("%d crash positions", tried)
}

// TestProtocolSyncNewEntities is P3: a Sync (a restore's or a copy's) of
// entities never indexed registers them — none→value, no old value to
// remove — and is killed between the registration and the settle; the
// same Sync runs again. Today the record keeps the value pending, so the
// second Sync settles it; a protocol under which such a record looks
// settled would leave every entity out of the external indexes. The stage
// is checked: every record registered with its values pending and no
// external index listing anything. The same for a direct Reconcile (an
// archive bringing an entity in), then every other crash position of the
// Sync.
func TestProtocolSyncNewEntities(t *testing.T) {
	f := newFixture(t, sixIndexes())
	keys := f.seed(6, false)
	c := newCrew(f)
	if err := c.run(c.dies("restore", 1), syncOp); !errors.Is(err, errKilled) {
		t.Fatalf("the Sync killed after registering: %v", err)
	}
	f.assertRegisteredOnly(keys...)
	if err := syncOp(f.ctx, f); err != nil {
		t.Fatalf("the Sync again: %v", err)
	}
	f.assertLookups(externalNames...)

	brought := Key{PK: "Ops", RK: "archived"}
	f.put(brought.PK, brought.RK, employee("Archer", "archer@contoso.com"))
	if err := c.run(c.dies("archive", 1), reconcileOp(brought)); !errors.Is(err, errKilled) {
		t.Fatalf("the reconcile killed after registering: %v", err)
	}
	f.assertRegisteredOnly(brought)
	f.reconcile(brought.PK, brought.RK)
	f.assertLookups(externalNames...)

	tried := atEveryCall(t, "sync of new entities", func() *fixture {
		f := newFixture(t, sixIndexes())
		f.seed(6, false)
		return f
	}, syncOp, func(f *fixture) { f.assertLookups(externalNames...) })
	if tried < 10 {
		t.Errorf("tried %d crash positions: the kills did not reach the Sync's calls", tried)
	}
	t.Logf("%d crash positions", tried)
}

// assertRegisteredOnly fails unless each key's record registered its
// value in every external index, still pending, and no external index
// lists the key yet.
func (f *fixture) assertRegisteredOnly(keys ...Key) {
	f.t.Helper()
	got := f.dump()
	for _, k := range keys {
		m := f.record(k.PK, k.RK)
		for _, name := range externalNames {
			if m.applied[name] == "" || len(m.pending[name]) == 0 && !m.rows[name].unproven {
				f.t.Fatalf("%v, index %s: applied %q, pending %v, rows %+v: the kill did not land between the registration and the settle", k, name, m.applied[name], m.pending[name], m.rows[name])
			}
			for v, listed := range got[name] {
				if slices.Contains(listed, k) {
					f.t.Fatalf("%v is already listed in %s under %s: the kill did not land before the settle", k, name, v)
				}
			}
		}
	}
}

// stray writes a live entry of index name for k under value, at
// generation gen, with no membership record accounting for it: what damage
// (a lost record, a bug, an older binary) leaves, and only a rebuild's
// sweep can find.
func (f *fixture) stray(name string, k Key, value string, gen int64) {
	f.t.Helper()
	enc, err := EncodeValue(value)
	if err != nil {
		f.t.Fatal(err)
	}
	ix := mustIndex(f.t, f.x, name)
	if ix.rowsKeyed() { // a live row (a table list's marker) of its own generation
		err := idempotent.CreateOnMissing(f.ctx, idempotent.TableCreator(f.raw.Tables(), ix.table), func(ctx context.Context) error {
			_, err := f.raw.Tables().InsertEntity(ctx, ix.table, rowEntity(ix, k.PK, k.RK, rowRef{value: enc, gen: gen}, gen, false))
			return err
		})
		if err != nil {
			f.t.Fatal(err)
		}
		return
	}
	w := write{value: enc, pk: k.PK, rk: k.RK, gen: gen, live: true, content: map[string]any{"Dept": "Ghost"}}
	res, err := f.x.applyAll(f.ctx, ix, []write{w}, nil)
	if err == nil {
		err = res[0].err
	}
	if err != nil {
		f.t.Fatalf("stray %s entry of %v under %s: %v", name, k, value, err)
	}
}

// TestProtocolSweepRemovesStrays is P4: each external index gets two live
// entries no record accounts for — the subject under "Ghost" while its
// record and entity say "a", and a key with neither entity nor record
// under "a", the subject's and the bystander's value. Before the rebuild
// Check must see exactly those two as stale (so the strays are real live
// entries); the rebuild is killed at each of its calls and run again, and
// its sweep must have removed both: the subject listed under "a" only,
// the ghost key under nothing, Check clean.
func TestProtocolSweepRemovesStrays(t *testing.T) {
	ghost := Key{PK: "Ops", RK: "gone"}
	tried := atEveryCall(t, "rebuild over stray entries", func() *fixture {
		f := newFixture(t, only(externalNames...))
		for _, k := range []Key{subject, bystander} {
			f.put(k.PK, k.RK, employee("a", "a"))
			f.reconcile(k.PK, k.RK)
		}
		minuteAgo := f.x.clock.Now().Add(-time.Minute).UnixMicro()
		for _, name := range externalNames {
			f.stray(name, subject, "Ghost", minuteAgo)
			f.stray(name, ghost, "a", minuteAgo)
			res, err := f.x.Check(f.ctx, employees, name, func(Finding) error { return nil })
			if err != nil || res.Stale != 2 || res.Problems() != 2 {
				t.Fatalf("index %s before the rebuild: check %+v, %v; want the two strays stale", name, res, err)
			}
		}
		return f
	}, rebuildOp, func(f *fixture) {
		for _, name := range externalNames {
			if slices.Contains(lookupKeys(f.t, f.x, name, "a", nil), ghost) {
				f.t.Errorf("index %s: the stray %v is still listed under a", name, ghost)
			}
			f.assertOnly(name, subject, "a", "Ghost")
		}
	})
	if tried < 20 {
		t.Errorf("tried %d crash positions: the kills did not reach the rebuild's calls", tried)
	}
	t.Logf("%d crash positions", tried)
}
