package indexes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Outcome is what one reconcile did.
type Outcome struct {
	// Changed is true when the reconcile wrote an index entry or the
	// membership record, other than the fence of an unchanged entity (see
	// Reconcile, step 2).
	Changed bool
	// Conflicts are copy indexes whose value another entity holds (each
	// error wraps ErrConflict); the entity is not in them yet.
	Conflicts []error
	// Unindexable are indexes whose value cannot be indexed (too long for
	// a key, or a copy that would not fit an entity); the entity is
	// removed from them.
	Unindexable []error
	// wake are the copy values the entity left that other entities
	// waited for (see wake).
	wake []wakeup
	// gone is true when the reconcile removed an entity that no longer
	// exists from the indexes it was in (SyncResult.Removed).
	gone bool
}

// Reconcile brings every index of a source table's entity up to date with
// the entity as it is now (a missing entity is removed from them). Run it
// after every write of an indexed entity, in any order and as often as
// wanted, and after every move or delete of one: the index kind's worker
// runs it for each message, and the kinds that move or delete entities
// (archive, purge) run it for the entities they remove.
//
// # Steps, crash positions and concurrent workers
//
// The source entity is the truth; its membership record (RowKey
// storeadapter.ReservedPrefix+"m."+rk, in the entity's partition) says, per index, what
// was applied (A_<index>); for table copies and the blob lists, which
// values are still to be settled (S_<index>) at generation Gen; for a rows
// index and a table list (its markers: see markers), which of the key's
// rows is the live one and which must end dead (see rowsState). A
// reconcile:
//
//  1. reads its record, then the entity (in that order: see the end);
//  2. computes each index's value from the entity; if every index's
//     applied state matches and nothing is pending, stops (two reads).
//     The table copies and the blob lists with values pending
//     read the entries of those and of the old and new values, which the
//     settle writes from, and learn which pending values the record's
//     generation has settled already (see ahead; not after a lost
//     registration: see readAhead). When the entity was written since the record's last
//     write read it (the ETag kept there, R, differs from the entity's,
//     or either is unknown: an older release wrote the record, or there
//     is no entity) and this reconcile registers nothing, it fences: it
//     writes the record as it is with the entity's ETag, If-Match (a
//     lost compare-and-swap restarts at 1). A reconcile that read the record
//     before and an older version of the entity then loses its
//     registration, instead of registering what the application has
//     since undone (a value set back, an entity deleted again). The fence
//     carries the clear of the rows indexes it proves first (5);
//  3. registers: writes the record with a new generation (greater than
//     the last and than the clock in microseconds), the new applied
//     states and, per table copy and blob list, the pending values: those
//     pending before, less those shown settled in 2, the old value and the
//     new; per rows index or table list that changes, the old value's live row
//     added to the kills and the new value's row of this generation made
//     the live one (rowsState.changed). The write is If-Match of the record read in 1 (an insert
//     when there was none), in one
//     transaction with every partition-store change: a partition copy
//     moved to its new RowKey (deleted and inserted on the ETags read), the
//     entity's RowKey moved between partition lists. A lost
//     compare-and-swap restarts at 1. The record keeps the entity's ETag
//     (R). A first registration (there was no record) has no record to
//     be fenced by: it reads the entity again, and restarts at 1 when it
//     was written since;
//  4. settles each pending value of the table copies and blob lists at
//     the registered generation: live for the new value, a tombstone for
//     the others (see apply: an entry changes only for a higher
//     generation); a blob list's tombstones first, then its live line,
//     flagged P when every tombstone was made. A rows index (and a table
//     list, at its markers) writes its kills dead
//     (blind upserts, in the order registered), then inserts the live row
//     (settleRows). A change first writes its last kill, the previous
//     live row, dead If-Match any: when that row exists, every kill before
//     it is dead already, and only strays are written;
//  5. clears the settled values from the record, If-Match of its
//     registration. When a later generation registered meanwhile, it
//     carries the values on and settles them too; the record then only
//     loses the values this generation tombstoned that no later one made
//     the index's value (see clear), so it stays small however long the
//     reconciles of one entity overlap, and its ETags stay as they are.
//     When the values to clear are only those of table copies and blob
//     lists the entity is still in, and the registration carried
//     on no value but their old and new ones, the clear is left to the
//     next reconcile (see lazy): a change drops them in its registration
//     (3), an unchanged reconcile finds them settled (4 writes nothing)
//     and clears them here. The record so holds at most two values per
//     index between reconciles. A change of a rows index (or a table list)
//     leaves its kills
//     and its live row's doubt to the next reconcile as well (see
//     lazyRows): the next change's probe proves them, and an unchanged
//     reconcile reads the live row (provenRows) and clears them; the
//     change that passes maxKills clears at once.
//
// Why it converges. Registrations are serialised by the record's ETag and
// each reads the entity after reading the record, so a higher generation
// always saw an equal or newer version of the entity. The reconcile that
// read the record after the application's last write saw the truth: it
// registers it; or it finds nothing to change, and then no registration
// of an older version can follow. Either the record's R is the entity's
// ETag, so that the entity was not written between the read that R
// names, which came before the record's last write, and this one (ETags
// never repeat): every reconcile that read this record read the entity
// after that write, so this version (or a later write's), never an older
// one. Or this reconcile fences (2): every reconcile that read the record
// before loses its registration, and reads both again. A first
// registration, which inserts the record, is checked by the entity's read
// after it: written since, it starts again; else the application's later
// writes are reconciled by reads that find the record. A
// partition store changes atomically with its registration, so it always
// matches the record. The pending values of a registration include those
// of every earlier one that was not settled, so the last generation
// writes every entry any earlier one may still write, and an entry keeps
// the highest generation's write whatever order the requests arrive in: a
// reconcile that read an older version can never overwrite a newer one.
// A rows index row is written live only by an insert of the generation
// that made its value the key's, and by no other: a late settler of an
// older generation inserts its own row, which a later one killed or will
// kill (its registration carries that row), never the later one's. Its
// kills are items of one sequence per key and index, each registration
// appending to it and each settle writing a prefix of it dead in order
// before it creates its own live row, so that a row's existence proves
// every kill registered before that row's registration dead: that is
// what the probe (4) and provenRows take as proof, and why strays (a
// rebuild's finds, registered later) and format-1 rows (written in no
// order) are never taken as proven by another row. A value dropped in 3 without settling again is one that g, the
// record's generation, settled: its entry holds the key at exactly g (a
// table copy's row, a list's line), or its list's value was the applied
// one, whose line holds the key live at g flagged P: every settler of g
// wrote the record's other values dead before it, and only a settler of g
// writes it. A write of an older generation loses to g's; the
// registration above g carries the old value (a tombstone) and the new
// (live), and every other value was written dead at g, which is right
// for it still. The entries are read before the registration, but only
// for that and to write from: an entry changed between makes that write
// lose, and it is read again.
//
// Crash positions: before 3 nothing was written; after 3 the record holds
// pending values, so any later reconcile (the redelivered message, or
// another) settles them at that generation (4 and 5 are idempotent: an
// entry that already holds the generation is left alone), or, when it is
// a change, carries them into its own registration (a table copy's or a
// blob list's value only while its entries do not show it settled; every
// kill of a rows index or table list, and its probe finds the live row
// missing when the settle did not reach it, and so writes every kill);
// after 4
// the entries are right and only the record's pending values remain,
// cleared by the next reconcile at the cost of rewriting nothing. Two workers
// reconciling one entity: one wins the registration, the other restarts
// and either sees nothing to do or registers a later generation; two
// workers settling one generation write the same entries. Two workers
// changing one shared entry (a blob list, a copy row): every write is
// If-Match of the ETag read, retried on a loss. A table list's lines are
// written only by its fold (see markers), If-Match of every row it read.
//
// A copy whose value another entity holds is never overwritten: the
// reconcile finishes the other indexes and fails with ErrConflict (retried,
// and reported in the failure record and by Check) and marks the
// holder's copy waited, so that the reconcile that takes the holder off
// the value reconciles the waiting entities (see wake). A
// value that cannot be indexed (too long for a key, or partition copies
// that together exceed one transaction) is removed from that index and
// the job fails permanently, naming it.
//
// A membership record read after the entity could pair an old version
// of the entity with a newer record, and register it above the newer
// version: the record is read first.
func (x *Set) Reconcile(ctx context.Context, table, pk, rk string) (Outcome, error) {
	ti, err := x.indexes(table)
	if err != nil {
		return Outcome{}, err
	}
	out, err := x.reconcile(ctx, ti, pk, rk, false, nil)
	if err != nil {
		return out, err
	}
	return out, x.wake(ctx, ti, out.wake, 1)
}

// wakeup is a copy value an entity left that other entities of its
// partition waited for.
type wakeup struct {
	ix        *index
	pk, value string
}

// Waking: a copy never overwrites the copy of another entity that holds
// the value, so an entity that finds its value held is left out of that
// index (ErrConflict) — and marks the holder's copy row waited
// (propWaited), in the same write that decides the conflict. When the
// holder leaves the value (it changes or is deleted), the reconcile that
// removes its copy sees the mark and reconciles, after its own steps, the
// entities of the partition that have the value (up to maxWake, one
// query), so one of them takes the copy without waiting for its next
// write. The mark goes with the holder's copy. A crash between the two
// leaves the waiting entity out until its next write, reconcile or a
// rebuild (index check reports it), as before waking.

// maxWake bounds the entities one wake-up reconciles, and maxWakeDepth
// the chain of wake-ups one reconcile starts (each woken entity may leave
// a value of its own).
const (
	maxWake      = 10
	maxWakeDepth = 3
)

// wake reconciles the entities that wait for the values in ws.
func (x *Set) wake(ctx context.Context, ti *tableIndexes, ws []wakeup, depth int) error {
	if depth > maxWakeDepth {
		return nil
	}
	for _, w := range ws {
		v, err := DecodeValue(w.value)
		if err != nil {
			continue
		}
		f := storeadapter.ApplicationRows(storeadapter.And(storeadapter.PartitionEquals(w.pk), storeadapter.Compare(w.ix.Property, storeadapter.Eq, v)))
		if f.Err() != nil {
			continue // a value no filter can name (NaN): no entity can wait for it either
		}
		page, err := x.tables.Query(ctx, ti.source, storeadapter.Query{Filter: f, Select: []string{}, Top: maxWake})
		if err != nil {
			return fmt.Errorf("index: wake the entities waiting for %s %s in %s: %w", w.ix.Name, describe(w.value), w.pk, err)
		}
		for _, e := range page.Entities {
			out, err := x.reconcile(ctx, ti, e.PartitionKey, e.RowKey, false, nil)
			if err != nil {
				return err
			}
			if err := x.wake(ctx, ti, out.wake, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkKeys refuses keys that are the index kind's own rows.
func checkKeys(ti *tableIndexes, pk, rk string) error {
	if storeadapter.IsReserved(rk) {
		return fmt.Errorf("index: rk %q starts with %q, which is reserved for tablekeeper's own rows: %w",
			text.Truncate(rk, 60), storeadapter.ReservedPrefix, storeadapter.ErrInvalidInput)
	}
	return nil
}

// String summarises an outcome for a job's result.
func (o Outcome) String() string {
	s := "indexes unchanged"
	if o.Changed {
		s = "indexes updated"
	}
	if n := len(o.Conflicts); n > 0 {
		s += fmt.Sprintf(", %d conflict(s)", n)
	}
	if n := len(o.Unindexable); n > 0 {
		s += fmt.Sprintf(", %d value(s) cannot be indexed", n)
	}
	return s
}

// stray is an entry of an index that the key's membership record does not
// account for, found by rebuild's sweep, with the generation it holds
// and, for a rows index, the generation in its RowKey (row; see rowKey).
type stray struct {
	index, value string
	gen, row     int64
}

// values is the stray's value when it is an entry of ix, else nothing.
func (s *stray) values(ix *index) []string {
	if s == nil || s.index != ix.Name {
		return nil
	}
	return []string{s.value}
}

// rows is the stray's row when it is a row of the rows index or table
// list ix: a table list's line is killed by a legacy kill at its own
// generation (see markers).
func (s *stray) rows(ix *index) []rowRef {
	if s == nil || s.index != ix.Name {
		return nil
	}
	r := rowRef{value: s.value, gen: s.row, stray: true}
	if ix.Kind == KindList && s.row == 0 {
		r.gen, r.legacy = s.gen, true
	}
	return []rowRef{r}
}

// rekeys reports whether the stray makes a registration of the table
// list ix move the key to a marker of its own generation: a stray of the
// applied value target whose kill, at its generation, would hide the live
// entry (of generation live; 0: the key's line), as a dead entry hides
// every entry of the key at or below its generation (see markers). The
// new marker's generation is above the stray's (see reconcile).
func (s *stray) rekeys(ix *index, target string, live int64) bool {
	rs := s.rows(ix)
	return ix.Kind == KindList && len(rs) > 0 && s.value == target && (live == 0 || rs[0].gen >= live)
}

// reconcile is Reconcile; force re-registers and rewrites every index
// whatever the membership record says (rebuild), and s, when set, is an
// entry the entity must be removed from unless it has its value (rebuild's
// sweep of stale entries).
func (x *Set) reconcile(ctx context.Context, ti *tableIndexes, pk, rk string, force bool, s *stray) (Outcome, error) {
	if err := checkKeys(ti, pk, rk); err != nil {
		return Outcome{}, err
	}
	var out Outcome
	tooLarge := error(nil) // set when the partition copies did not fit one transaction
	for round := 1; ; round++ {
		e, rec, err := x.readEntity(ctx, ti.source, pk, rk)
		if err != nil {
			return out, err
		}
		m := readMembership(rec, ti)
		if err := m.known(); err != nil {
			return out, fmt.Errorf("index: %s %s/%s: %w", ti.source, pk, rk, err)
		}
		wants := map[string]want{}
		out.Unindexable, out.Conflicts, out.wake = nil, nil, nil
		register := false
		for _, ix := range ti.indexes {
			w := wantOf(ix, e)
			if tooLarge != nil && ix.partition() && ix.Kind == KindCopy && w.state != "" {
				w = want{problem: fmt.Errorf("index %s: %w", ix.Name, tooLarge)}
			}
			wants[ix.Name] = w
			if w.problem != nil {
				out.Unindexable = append(out.Unindexable, w.problem)
			}
			if force || w.state != m.applied[ix.Name] || len(s.values(ix)) > 0 {
				register = true
			}
		}
		settle := m.unsettled(ti)
		tried := false // the rows indexes still to settle were tried by proveRows
		seen := seenTag(e)
		if !register && (m.unfenced(e) || m.rewrite) {
			// The entity was written since the record's last write read
			// it: fence out a reconcile that read the record before and
			// an older version of the entity since (see step 2). A
			// format-1 record with rows to settle is written in format 2
			// the same way, before any row (see fromFormat1). The rows
			// the record's kills name are proven first when one read can
			// (see provenRows): the fence then carries their clear.
			fenced := m.clone()
			fenced.seen = seen
			if m.rewrite {
				// The format-1 record's rows to settle become kills here:
				// a generation of their own, which the rows they make dead
				// carry (the grace counts from there: see rowEntity).
				fenced.gen = max(m.gen+1, x.clock.Now().UnixMicro())
			}
			proven, err := x.proveRows(ctx, ti, pk, rk, m, nil)
			if err != nil {
				return out, fmt.Errorf("index: %s %s/%s: %w", ti.source, pk, rk, err)
			}
			fenced, _ = cleared(fenced, m, done{rows: proven})
			fenced = fenced.toWrite()
			tried = true // what is still to settle was not proven: no read again
			etag, err := x.tables.UpdateEntity(ctx, ti.source, fenced.entity(pk, rk), storeadapter.Replace, m.etag)
			if idempotent.Lost(err) && round < x.cfg.MaxConflicts {
				// Another write changed the record, which fenced it as
				// well: read both again at once, without the pause of a
				// lost registration (a hot entity's reconciles mostly fence
				// each other; pausing each loss slowed them by half).
				continue
			}
			if err != nil {
				return out, fmt.Errorf("index: %s %s/%s: fence: %w", ti.source, pk, rk, err)
			}
			m, m.etag = fenced, etag
			settle = m.unsettled(ti)
		}
		if !register && !settle {
			return out, nil
		}
		// The table copies and lists read the entries they will write
		// before registering (see readAhead): the values of the record's
		// generation found settled there are dropped, and the settle
		// writes from them. Not after a lost registration: reads between
		// the record's read and its registration widen the window another
		// reconcile of the entity registers in (big lists, hot entities);
		// without them the registration carries the values on and the
		// settle clears.
		var pre map[string]*ahead
		if round == 1 || !register {
			if pre, err = x.readAhead(ctx, ti, pk, rk, m, wants, register, force, s); err != nil {
				return out, fmt.Errorf("index: %s %s/%s: %w", ti.source, pk, rk, err)
			}
		}
		next, etag := m, m.etag
		// carried is set when the registration carries on a pending value
		// that is neither an index's old value nor its new one (not shown
		// settled: a crashed settle's, or one whose entry was pruned since,
		// see ahead): its settle then clears the record at once, so that
		// lazy never lets the record grow.
		carried := false
		changedRows := map[string]bool{} // the rows indexes this registration changes, written with the probe
		if register {
			next = m.declared(ti)
			next.gen = m.nextGen(x.clock.Now().UnixMicro())
			next.seen = seen
			if s != nil {
				// The stray entry's generation may be above this clock (a
				// worker whose clock ran ahead wrote it): its tombstone
				// must be above it to replace it.
				next.gen = max(next.gen, s.gen+1)
			}
			var ops []storeadapter.TableOp
			for _, ix := range ti.indexes {
				w := wants[ix.Name]
				old, target := stateValue(m.applied[ix.Name]), stateValue(w.state)
				unsettled := slices.DeleteFunc(slices.Clone(next.pending[ix.Name]), func(p pending) bool {
					return pre[ix.Name].settled(p.value)
				})
				carried = carried || slices.ContainsFunc(unsettled, func(p pending) bool { return p.value != old && p.value != target })
				if !force && w.state == m.applied[ix.Name] && len(s.values(ix)) == 0 {
					if !ix.partition() {
						next.pending[ix.Name] = unsettled
					}
					continue // this index is up to date (or only settling)
				}
				if ix.rowsKeyed() {
					st := next.rows[ix.Name]
					if force || w.state != m.applied[ix.Name] || s.rekeys(ix, target, st.live) {
						st = st.changed(old, target, next.gen, legacyGen(ix, m.gen))
					}
					st.kills = append(st.kills, s.rows(ix)...) // after every kill of the order: see rowRef.stray
					st.list = ix.Kind == KindList
					next.rows[ix.Name] = st
					next.applied[ix.Name] = w.state
					changedRows[ix.Name] = true
					continue
				}
				values := distinct(old, target, s.values(ix)...)
				if !ix.partition() {
					// The old value was made the value by a generation
					// up to m.gen: m.gen bounds its target.
					carried = carried || len(s.values(ix)) > 0
					ps := addPending(unsettled, old, m.gen)
					ps = addPending(ps, target, next.gen)
					for _, v := range s.values(ix) {
						ps = addPending(ps, v, 0)
					}
					next.applied[ix.Name] = w.state
					next.pending[ix.Name] = ps
					continue
				}
				state, pops, err := x.partitionOps(ctx, ix, pk, rk, values, w, &out)
				switch {
				case errors.Is(err, ErrConflict):
					out.Conflicts = append(out.Conflicts, err)
				case errors.Is(err, storeadapter.ErrTooLarge):
					out.Unindexable = append(out.Unindexable, err)
				case err != nil:
					return out, err
				}
				next.applied[ix.Name] = state
				ops = append(ops, pops...)
			}
			next = next.toWrite()
			record := recordOp(m, next.entity(pk, rk))
			if err := storeadapter.ValidateTransaction(append([]storeadapter.TableOp{record}, ops...)); len(ops) > 0 && errors.Is(err, storeadapter.ErrTooLarge) && tooLarge == nil {
				// The partition copies go together with the record, in
				// one transaction: when they do not fit, they are left
				// out (removed) and reported.
				tooLarge = fmt.Errorf("the entity's partition copies and lists do not fit one transaction together: %w", err)
				round--
				continue
			}
			etag, err = x.commit(ctx, ti.source, record, ops)
			if idempotent.Lost(err) && round < x.cfg.MaxConflicts {
				if err := x.pause(ctx, round); err != nil {
					return out, err
				}
				continue
			}
			if err != nil {
				return out, fmt.Errorf("index: %s %s/%s: register generation: %w", ti.source, pk, rk, err)
			}
			out.Changed = true
			out.gone = e == nil && m.held()
			if !m.exists {
				// No record fenced this registration: one that found
				// none and no change (the entity gone again, or without
				// indexed values) wrote nothing. The entity is read again:
				// written since, it is registered again (see step 3).
				now, err := getOptional(ctx, x.tables, ti.source, pk, rk)
				if err != nil {
					return out, fmt.Errorf("index: %s %s/%s: %w", ti.source, pk, rk, err)
				}
				if seenTag(now) != seen {
					if round >= x.cfg.MaxConflicts {
						return out, fmt.Errorf("index: %s %s/%s: the entity changed while it was first registered, %d times: %w", ti.source, pk, rk, round, storeadapter.ErrPreconditionFailed)
					}
					if err := x.pause(ctx, round); err != nil {
						return out, err
					}
					continue
				}
			}
		}
		return out, x.settle(ctx, ti, pk, rk, next, etag, wants, pre, register && !carried, changedRows, tried, &out)
	}
}

// done is what a settle made: per settled table copy and blob list the
// values it wrote as tombstones (tombstoned), the same for an index it
// could not settle (partial: a conflict), and per rows index and table
// list the state whose rows it proved as that state's settle leaves them
// (rows, with unproven false).
type done struct {
	tombstoned, partial map[string][]string
	rows                map[string]rowsState
}

func (d done) empty() bool { return len(d.tombstoned)+len(d.partial)+len(d.rows) == 0 }

// settle applies the pending values of the table copies and blob lists at
// the record's generation, and settles the rows indexes and table lists
// (see rowsState), then clears them from the record, unless deferred (m
// is this reconcile's registration, which carried no value but the old
// and new ones) and they are only those of indexes lazy leaves to the
// next reconcile. A rows index this registration changed (changedRows)
// is settled with its probe and left to the next reconcile (see
// lazyRows); one it did not change is proven with one read when it can
// be (provenRows; not when tried: proveRows tried already), else
// settled, and cleared.
// etag is the record's ETag after the registration, "" when unknown; pre
// holds the entries read before it (see readAhead).
func (x *Set) settle(ctx context.Context, ti *tableIndexes, pk, rk string, m membership, etag string, wants map[string]want, pre map[string]*ahead, deferred bool, changedRows map[string]bool, tried bool, out *Outcome) error {
	d := done{tombstoned: map[string][]string{}, partial: map[string][]string{}, rows: map[string]rowsState{}}
	if !tried {
		var err error
		if d.rows, err = x.proveRows(ctx, ti, pk, rk, m, changedRows); err != nil {
			return fmt.Errorf("index: %s %s/%s: %w", ti.source, pk, rk, err)
		}
	}
	eager := len(d.rows) > 0 // a proof is cleared at once
	for _, ix := range ti.indexes {
		if ix.rowsKeyed() {
			st := m.rows[ix.Name]
			if _, proven := d.rows[ix.Name]; st.idle() || proven {
				continue
			}
			value := stateValue(m.applied[ix.Name])
			if err := x.settleRows(ctx, ix, pk, rk, value, st, m.gen, changedRows[ix.Name]); err != nil {
				return fmt.Errorf("index: %s %s/%s: index %s: %w", ti.source, pk, rk, ix.Name, err)
			}
			eager = eager || !lazyRows(st, value, changedRows[ix.Name])
			st.unproven = false
			d.rows[ix.Name] = st
			continue
		}
		values := m.pending[ix.Name]
		if ix.partition() || len(values) == 0 {
			continue
		}
		a := pre[ix.Name]
		ws := slices.DeleteFunc(pendingWrites(ix, pk, rk, m, wants[ix.Name].content), func(w write) bool {
			return a.writtenAt(w.value, w.gen) // read in this round: needs no write
		})
		var res []applied
		var err error
		if ix.Kind == KindList {
			res, err = x.applyKillsFirst(ctx, ix, ws, a)
		} else {
			res, err = x.applyAll(ctx, ix, ws, a)
		}
		if err != nil {
			return fmt.Errorf("index: %s %s/%s: index %s: %w", ti.source, pk, rk, ix.Name, err)
		}
		if dead, ok := settled(ix, ws, res, out); ok {
			d.tombstoned[ix.Name] = dead
		} else if len(dead) > 0 {
			d.partial[ix.Name] = dead
		}
	}
	if d.empty() {
		return nil
	}
	out.Changed = true
	if deferred && !eager && len(d.partial) == 0 && lazy(ti, m, d.tombstoned) {
		return nil
	}
	return x.clear(ctx, ti, pk, rk, m, etag, d)
}

// lazyRows reports whether a rows index's settle of state st (applied
// value value) can leave its kills and its live row's doubt in the
// record: when this registration changed the index (a change; the next
// change's probe proves them, and an unchanged reconcile clears them
// with one read), the key is still in the index (the records of deleted
// entities hold nothing, and are dropped: see Sync), the kills are at
// most maxKills, and none is a stray (nothing but its own write proves
// it dead).
func lazyRows(st rowsState, value string, changed bool) bool {
	return changed && value != "" && len(st.kills) <= maxKills && !slices.ContainsFunc(st.kills, func(r rowRef) bool { return r.stray })
}

// proveRows proves, with one read each where it can (see provenRows), the
// rows indexes of m that have something to settle, but those of skip (a
// registration's changes, which its settle's probe proves), and returns
// the states proven (unproven false). A record read in format 1 names no
// row that a read could prove (see fromFormat1).
func (x *Set) proveRows(ctx context.Context, ti *tableIndexes, pk, rk string, m membership, skip map[string]bool) (map[string]rowsState, error) {
	proven := map[string]rowsState{}
	for _, ix := range ti.indexes {
		st := m.rows[ix.Name]
		if !ix.rowsKeyed() || st.idle() || m.rewrite || skip[ix.Name] {
			continue
		}
		ok, err := x.provenRows(ctx, ix, pk, rk, stateValue(m.applied[ix.Name]), st)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", ix.Name, err)
		}
		if ok {
			st.unproven = false
			proven[ix.Name] = st
		}
	}
	return proven, nil
}

// unsettled reports whether the record has values of the table copies and
// blob lists to settle, or rows of a rows index or table list.
func (m membership) unsettled(ti *tableIndexes) bool {
	for _, ix := range ti.indexes {
		if !ix.partition() && len(m.pending[ix.Name]) > 0 || !m.rows[ix.Name].idle() {
			return true
		}
	}
	return false
}

// lazy reports whether the clear after a registration's settle can be left
// to the entity's next reconcile: when every index it would clear is a
// table copy or a table or blob list the entity is still in. Their values
// stay in the record, though settled; the next change reads their entries
// anyway, to write them, and drops the values it finds settled (readAhead)
// in its own registration; an unchanged reconcile reads them and clears
// them. A change so costs no write more than its entries' own. A removal
// clears at once: the records of deleted entities hold nothing and are
// dropped (see Sync). So does a registration that carried on a value
// its reads did not show settled (a crashed settle's, or one whose
// tombstone was pruned after TombstoneGrace): a value nothing shows
// settled would otherwise stay in the record for ever.
func lazy(ti *tableIndexes, m membership, tombstoned map[string][]string) bool {
	for name := range tombstoned {
		ix := ti.lookup(name)
		if ix == nil || ix.partition() || stateValue(m.applied[name]) == "" {
			return false
		}
	}
	return true
}

// pendingWrites are the writes that settle a record's pending values of
// one external index at its generation: live for the applied value (with
// content, for a copy), tombstones for the others.
func pendingWrites(ix *index, pk, rk string, m membership, content map[string]any) []write {
	target := stateValue(m.applied[ix.Name])
	var ws []write
	for _, p := range m.pending[ix.Name] {
		w := write{value: p.value, pk: pk, rk: rk, gen: m.gen, live: p.value == target}
		if w.live {
			w.content = content
		}
		ws = append(ws, w)
	}
	return ws
}

// settled reads applyAll's answers for one key's writes: the values it
// wrote as tombstones, and whether every write was made (the index is
// settled for the key). Conflicts, lists at their limit and copies others
// waited for are added to out.
func settled(ix *index, ws []write, res []applied, out *Outcome) (dead []string, ok bool) {
	ok, dead = true, []string{}
	for i, w := range ws {
		if res[i].woke {
			out.wake = append(out.wake, wakeup{ix: ix, pk: w.pk, value: w.value})
		}
		switch err := res[i].err; {
		case errors.Is(err, ErrConflict):
			out.Conflicts = append(out.Conflicts, err)
			ok = false
		case errors.Is(err, storeadapter.ErrTooLarge): // a list at its limit: the other values and indexes go on
			out.Unindexable = append(out.Unindexable, fmt.Errorf("index %s value %s: %w", ix.Name, describe(w.value), err))
			ok = false
		case !w.live:
			dead = append(dead, w.value)
		}
	}
	return dead, ok
}

// clear removes from the membership record what the generation of m
// (gen) settled (d: per settled index, the values it wrote as
// tombstones; per rows index, the rows it proved). While the record is
// still at gen, every pending value of those indexes goes. When a later
// generation registered meanwhile, it carries the values on, and it will
// settle them too; but a value gen tombstoned that no generation after
// gen made the index's value (its target is below gen) needs no settling
// any more: a write of an older generation loses to gen's tombstone, and
// no later one writes it live. Removing those keeps the record small
// however long the reconciles of an entity overlap. The same goes for
// the values gen tombstoned of an index it could not settle (partial: a
// copy's value held by another entity, a list at its limit), whatever
// the record's generation: the value it could not write stays, and a
// conflict that lasts over many changes does not grow the record. A rows
// index loses the kills proven dead, and its live row's doubt when it is
// the one proven, whatever the generation (see rowsState.without).
// If-Match, a few rounds.
func (x *Set) clear(ctx context.Context, ti *tableIndexes, pk, rk string, m membership, etag string, d done) error {
	cur := m // the record as registered, when etag is its ETag
	for round := 1; ; round++ {
		if etag == "" {
			rec, err := getOptional(ctx, x.tables, ti.source, pk, memberRowKey(rk))
			if err != nil || rec == nil {
				return err
			}
			cur, etag = readMembership(rec, ti), rec.ETag
			if cur.known() != nil || cur.rewrite {
				return nil // a newer release's to settle, or an older one's registration since
			}
		}
		next, changed := cleared(cur, m, d)
		if !changed {
			return nil
		}
		_, err := x.tables.UpdateEntity(ctx, ti.source, next.entity(pk, rk), storeadapter.Replace, etag)
		if !idempotent.Lost(err) {
			return err
		}
		if round >= x.cfg.MaxConflicts {
			return nil // the next reconcile carries the values on
		}
		etag = ""
	}
}

// cleared is the record cur with what the generation of m settled (d)
// removed (see clear), and whether that changes it.
func cleared(cur, m membership, d done) (membership, bool) {
	next, changed := cur.clone(), false
	// drop removes an index's pending values: all of them, or those dead
	// that no generation from m's on made the index's value.
	drop := func(name string, dead []string, all bool) {
		kept := slices.DeleteFunc(next.pending[name], func(p pending) bool {
			return all || p.target < m.gen && slices.Contains(dead, p.value)
		})
		changed = changed || len(kept) != len(cur.pending[name])
		next.pending[name] = kept
	}
	for name, dead := range d.partial {
		drop(name, dead, false)
	}
	for name, dead := range d.tombstoned {
		drop(name, dead, cur.gen == m.gen)
	}
	for name, proven := range d.rows {
		st := cur.rows[name]
		after := st.without(proven, stateValue(cur.applied[name]) == stateValue(m.applied[name]))
		changed = changed || len(after.kills) != len(st.kills) || after.unproven != st.unproven
		next.rows[name] = after
	}
	return next, changed
}

// recordOp is the operation that writes the membership record next: an
// insert when m did not exist, else a replace If-Match of m's ETag.
func recordOp(m membership, next storeadapter.Entity) storeadapter.TableOp {
	if m.exists {
		return storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: next, IfMatch: m.etag}
	}
	return storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: next}
}

// commit writes the membership record (record, see recordOp) together
// with the partition indexes' ops, in one transaction, or alone when there
// are none. It returns the record's new ETag when it learns it ("" after a
// transaction, whose answer does not carry it).
func (x *Set) commit(ctx context.Context, table string, record storeadapter.TableOp, ops []storeadapter.TableOp) (string, error) {
	switch {
	case len(ops) > 0:
		return "", x.tables.Transact(ctx, table, append([]storeadapter.TableOp{record}, ops...))
	case record.Action == storeadapter.TxInsert:
		return x.tables.InsertEntity(ctx, table, record.Entity)
	}
	return x.tables.UpdateEntity(ctx, table, record.Entity, storeadapter.Replace, record.IfMatch)
}

// partitionOps reads a partition index's entries for values and returns
// the operations that leave the entity in the entry of w's value only,
// and the state to record. A copy whose value another entity holds is not
// written: the state is then "" and the error wraps ErrConflict.
func (x *Set) partitionOps(ctx context.Context, ix *index, pk, rk string, values []string, w want, out *Outcome) (string, []storeadapter.TableOp, error) {
	target, state := stateValue(w.state), w.state
	var ops []storeadapter.TableOp
	var problem error // a list at its limit (wraps ErrTooLarge) or a copy conflict (ErrConflict)
	if ix.Kind == KindList {
		for _, v := range values {
			l, err := readList(ctx, x.tables, ix.source, pk, listBase(ix, v))
			if err != nil {
				return "", nil, err
			}
			if v != target {
				l.remove(rk)
			} else if err := l.set(rk, rk); errors.Is(err, storeadapter.ErrTooLarge) {
				state, problem = "", fmt.Errorf("index %s: %w", ix.Name, err) // removed from the others all the same
			} else if err != nil {
				return "", nil, err
			}
			ops = append(ops, l.ops(false)...)
		}
		return state, ops, problem
	}
	for _, v := range values {
		row, err := getOptional(ctx, x.tables, ix.source, pk, copyRowKey(ix, v))
		if err != nil {
			return "", nil, err
		}
		op, conflict, woke := copyOp(ix, pk, rk, v, target, row, w.content)
		if op != nil {
			ops = append(ops, *op)
		}
		if conflict != nil {
			state, problem = "", conflict
		}
		if woke {
			out.wake = append(out.wake, wakeup{ix: ix, pk: pk, value: v})
		}
	}
	return state, ops, problem
}

// copyOp decides the write of one partition copy row, the row of value v
// as read (nil: none), for a key whose index now wants target ("": none)
// with content: the operation (nil: none), a conflict when v is target
// and another key holds it — the row is then marked waited (propWaited),
// so that its owner's leaving wakes this key — and woke when the key
// leaves a row other keys waited for. Reconcile and the batches decide
// with it alike.
func copyOp(ix *index, pk, rk, v, target string, row *storeadapter.Entity, content map[string]any) (op *storeadapter.TableOp, conflict error, woke bool) {
	owner, _ := propString(row, propOwner)
	waited, _ := propBool(row, propWaited)
	switch {
	case v == target && row != nil && owner != rk:
		conflict = fmt.Errorf("%w: index %s value %s of %s/%s is held by RowKey %q", ErrConflict, ix.Name, describe(v), pk, rk, owner)
		if !waited {
			op = &storeadapter.TableOp{Action: storeadapter.TxUpdateMerge, IfMatch: row.ETag,
				Entity: storeadapter.Entity{PartitionKey: pk, RowKey: row.RowKey, Properties: map[string]any{propWaited: true}}}
		}
	case v == target:
		e := storeadapter.Entity{PartitionKey: pk, RowKey: copyRowKey(ix, v), Properties: copyProperties(rk, content)}
		if waited { // still waited for: the owner keeps the value
			e.Properties[propWaited] = true
		}
		op = &storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e}
		if row != nil {
			op = &storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: e, IfMatch: row.ETag}
		}
	case row != nil && owner == rk:
		op = &storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: row.RowKey}, IfMatch: row.ETag}
		woke = waited
	}
	return op, conflict, woke
}

// readEntity reads an entity's membership record and then the entity
// (nil when missing; a missing table holds neither). The order is the
// convergence argument's (see Reconcile): the entity must be read after the
// record, so that a registration that wins the record's If-Match always
// saw a version of the entity at least as new as every earlier one did.
func (x *Set) readEntity(ctx context.Context, table, pk, rk string) (e, rec *storeadapter.Entity, err error) {
	if rec, err = getOptional(ctx, x.tables, table, pk, memberRowKey(rk)); err != nil {
		return nil, nil, err
	}
	e, err = getOptional(ctx, x.tables, table, pk, rk)
	return e, rec, err
}

// distinct returns a and b and more without "" and repeats, in order.
func distinct(a, b string, more ...string) []string {
	var out []string
	for _, v := range append([]string{a, b}, more...) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
