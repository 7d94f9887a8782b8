package indexes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// A rows index keeps one row per key and value, keyed by the generation
// that made the value the key's (format 2): row (v, memberKey + " !" +
// the generation in genDigits digits), with tkGen (that generation) and
// tkDead. A row is written live only by an Insert of the registration
// that made v the value, so it never overwrites anything; every later
// write of it makes it dead. No write of a row needs a read, and none
// can undo a later generation's: a later one that made v the value again
// wrote a row of its own.
//
// The record says, per rows index (rowsState), which row is the live one
// (the applied value's, T_) and which rows must end dead (K_, the kills,
// in the order the registrations added them). A settle writes the kills
// dead in that order and then inserts the live row. So the existence of
// a row proves something: a live row was inserted after every kill
// registered before it was dead, and a kill's row created dead (it did
// not exist: an Upsert) after every kill before it was. A change's
// registration adds the old live row as the last kill; its settle first
// writes that row dead If-Match any (Replace, no read): when the row
// exists, every kill before it is dead already and only strays are
// written; when it does not, every kill is written dead, in order. Then
// the new live row is inserted (409: it is there, or a later generation
// made it dead). A change so costs its two reads, the registration and
// two blind writes: no clear. The record keeps the kills until a
// reconcile that changes nothing proves them with one read (provenRows)
// and clears them, or until they reach maxKills (the change's settle
// then clears at once).
//
// A format-1 row (memberKey alone, kept by releases before) is a kill of
// generation 0: written dead with tkGen the settling record's generation,
// which makes the compare-and-swap of a format-1 writer lose. Its
// existence proves nothing (format 1 had no order), so it is never the
// row a settle or a proof reads.

// rowRef is one row of a key in a rows index: its value and the
// generation in its RowKey (0: the format-1 row).
type rowRef struct {
	value string
	gen   int64
	// stray marks a row a rebuild's sweep found that the record did not
	// account for. It was not registered in order, so no other row's
	// existence proves it dead: every settle writes it.
	stray bool
	// legacy marks a table list's kill of the key's line in the list's
	// parts (see markers): a marker written dead at gen, which makes dead
	// the key's line of gen or below. Like a format-1 row, it was never
	// live, so its existence proves nothing.
	legacy bool
}

// rowsState is a rows index's part of a membership record (format 2), or
// a table list's (format 3, see markers).
type rowsState struct {
	// live is the generation in the RowKey of the applied value's row
	// (0: the format-1 row; a table list's line), unproven set while that
	// row may not exist.
	live     int64
	unproven bool
	// kills are the rows that must end dead, in the order registered.
	kills []rowRef
	// list marks a table list's state: a record naming its rows is
	// written in format 3 (see membership.toWrite).
	list bool
}

// maxKills is how many kills a change leaves in the record: a change's
// settle that ends with more clears them at once (one write).
const maxKills = 16

// idle reports whether the state needs no settle.
func (s rowsState) idle() bool { return !s.unproven && len(s.kills) == 0 }

func (s rowsState) clone() rowsState {
	s.kills = slices.Clone(s.kills)
	return s
}

// changed is s after a registration at gen that moves the index from the
// value old to target ("": none; a rebuild registers the same value
// again, and so moves the key to a row of its own generation): the old
// live row becomes the last kill, and target's row of gen the live one.
// legacy, above 0 for a table list, is the record's generation before the
// registration: a live part line (s.live 0) is killed by a marker of that
// generation, at or above the line's (see markers).
func (s rowsState) changed(old, target string, gen, legacy int64) rowsState {
	s = s.clone()
	if old != "" {
		kill := rowRef{value: old, gen: s.live}
		if s.live == 0 && legacy > 0 {
			kill.gen, kill.legacy = legacy, true
		}
		s.kills = append(s.kills, kill)
	}
	s.live, s.unproven = 0, false
	if target != "" {
		s.live, s.unproven = gen, true
	}
	s.list = s.list || legacy > 0
	return s
}

// legacyGen is what changed takes as legacy for index ix of a record at
// generation gen: gen for a table list, 0 for a rows index.
func legacyGen(ix *index, gen int64) int64 {
	if ix.Kind == KindList {
		return max(gen, 1)
	}
	return 0
}

// without is s less the kills proven dead and, when the live row proven
// is s's own (the same value and generation), its doubt: items name
// exact rows, and a dead row never becomes live, so what a settle proved
// holds for any later state of the record.
func (s rowsState) without(proven rowsState, sameValue bool) rowsState {
	s = s.clone()
	s.kills = slices.DeleteFunc(s.kills, func(r rowRef) bool {
		return slices.ContainsFunc(proven.kills, func(p rowRef) bool { return p.value == r.value && p.gen == r.gen })
	})
	if sameValue && s.live == proven.live && !proven.unproven {
		s.unproven = false
	}
	return s
}

func formatKills(kills []rowRef) string {
	lines := make([]string, len(kills))
	for i, r := range kills {
		lines[i] = r.value + "\t" + strconv.FormatInt(r.gen, 10)
		if r.stray {
			lines[i] += "\ts"
		}
		if r.legacy {
			lines[i] += "\tl"
		}
	}
	return strings.Join(lines, "\n")
}

func parseKills(s string) []rowRef {
	var out []rowRef
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 || f[0] == "" {
			continue
		}
		gen, _ := strconv.ParseInt(f[1], 10, 64)
		out = append(out, rowRef{value: f[0], gen: gen, stray: slices.Contains(f[2:], "s"), legacy: slices.Contains(f[2:], "l")})
	}
	return out
}

// fromFormat1 reads the rows indexes' part of a format-1 record into
// format 2: every value pending becomes a kill of its format-1 row, and
// an applied value still pending gets a row of the record's generation
// (its format-1 row may be live or not; it is killed too). A settled
// applied value keeps its format-1 row, live. When that leaves anything
// to settle, rewrite is set: the record is written in format 2 (If-Match)
// before any row, so that a release before this one, which rewrites
// format-1 records, can no longer register over rows it does not know,
// and at a generation of its own, which the format-1 rows its settle
// makes dead carry (see rowEntity: the grace counts from there, not from
// the older release's registration, whose settler may still be running).
func (m *membership) fromFormat1(ti *tableIndexes) {
	for _, ix := range ti.indexes {
		if ix.Kind != KindRows {
			continue
		}
		var st rowsState
		delete(m.rows, ix.Name) // no format-1 record has T_, U_ or K_
		target := stateValue(m.applied[ix.Name])
		for _, p := range m.pending[ix.Name] {
			st.kills = append(st.kills, rowRef{value: p.value})
			if p.value == target {
				st.live, st.unproven = m.gen, true
			}
		}
		delete(m.pending, ix.Name)
		if !st.idle() {
			m.rows[ix.Name] = st
			m.rewrite = true
		}
	}
}

// rowKey is the RowKey of a key's row of generation gen (0: format 1).
func rowKey(pk, rk string, gen int64) string {
	if gen == 0 {
		return memberKey(pk, rk)
	}
	return fmt.Sprintf("%s%s%0*d", memberKey(pk, rk), keySep, genDigits, gen)
}

// rowGen is the generation in a rows index row's RowKey (0: a format-1
// row), which splitMemberKey has checked.
func rowGen(rowKey string) int64 {
	_, rest, _ := strings.Cut(rowKey, keySep)
	_, gen, _ := strings.Cut(rest, keySep)
	n, _ := strconv.ParseInt(gen, 10, 64)
	return n
}

// rowEntity is the row r of key (pk, rk) of ix, live or dead. A live
// row's tkGen is its own generation. A dead row's is the generation of the
// record whose settle made it dead (at), as a format-1 tombstone's was:
// TombstoneGrace counts from there, since a reconcile that read the
// record before that registration may still insert the row live until
// it has run its course (see prune); and the compare-and-swap of a
// format-1 writer of an older generation loses to it. A table list's row
// is a marker in the value's list partition, not folded (see markers).
func rowEntity(ix *index, pk, rk string, r rowRef, at int64, dead bool) storeadapter.Entity {
	gen := r.gen
	if dead {
		gen = at
	}
	e := storeadapter.Entity{PartitionKey: r.value, RowKey: rowKey(pk, rk, r.gen), Properties: map[string]any{propGen: gen, propDead: dead}}
	if ix.Kind == KindList {
		e.PartitionKey, e.RowKey = tableListPartition(ix, r.value), markerRowKey(pk, rk, r.gen)
		e.Properties[propFolded] = false
		if strings.HasPrefix(e.RowKey, markerHashPrefix) {
			e.Properties[propPK], e.Properties[propRK] = pk, rk
		}
	}
	return e
}

// settleRows settles one key's rows index in state s of a record at
// generation at, whose applied value is value: the kills dead, in order,
// then the live row inserted. With probe (a change's own settle), the
// last kill is first written dead If-Match any: when it exists, every
// kill before it but the strays is dead already (see the type's doc).
func (x *Set) settleRows(ctx context.Context, ix *index, pk, rk, value string, s rowsState, at int64, probe bool) error {
	return idempotent.CreateOnMissing(ctx, idempotent.TableCreator(x.tables, ix.table), func(ctx context.Context) error {
		kills := s.kills
		if n := len(kills); probe && n > 0 && kills[n-1].proves() {
			_, err := x.tables.UpdateEntity(ctx, ix.table, rowEntity(ix, pk, rk, kills[n-1], at, true), storeadapter.Replace, storeadapter.ETagAny)
			switch {
			case err == nil:
				kills = slices.DeleteFunc(slices.Clone(kills[:n-1]), func(r rowRef) bool { return !r.stray })
			case idempotent.Missing(err) || !errors.Is(err, storeadapter.ErrNotFound):
				return err
			}
		}
		for _, r := range kills {
			if _, err := x.tables.UpsertEntity(ctx, ix.table, rowEntity(ix, pk, rk, r, at, true), storeadapter.Replace); err != nil {
				return err
			}
		}
		if value == "" || !s.unproven {
			return nil
		}
		_, err := x.tables.InsertEntity(ctx, ix.table, rowEntity(ix, pk, rk, rowRef{value: value, gen: s.live}, at, false))
		if errors.Is(err, storeadapter.ErrAlreadyExists) {
			return nil // inserted, or made dead by a later generation
		}
		return err
	})
}

// provenRows reports, from one read, whether the rows of state s (applied
// value value) are as its settle leaves them: the live row exists (it
// was inserted after every kill was dead), or, with no value, the last
// kill exists dead (written dead after every kill before it was). Strays
// and format-1 rows prove nothing: a state with a stray, or whose row to
// read is a format-1 one, is never proven by a read.
func (x *Set) provenRows(ctx context.Context, ix *index, pk, rk, value string, s rowsState) (bool, error) {
	if slices.ContainsFunc(s.kills, func(r rowRef) bool { return r.stray }) {
		return false, nil
	}
	r, dead := rowRef{value: value, gen: s.live}, false
	if value == "" {
		if len(s.kills) == 0 {
			return true, nil
		}
		r, dead = s.kills[len(s.kills)-1], true
	}
	if !r.proves() {
		return false, nil
	}
	at := rowEntity(ix, pk, rk, r, 0, false)
	e, err := getOptional(ctx, x.tables, ix.table, at.PartitionKey, at.RowKey)
	if err != nil || e == nil {
		if idempotent.Missing(err) {
			return false, nil
		}
		return false, err
	}
	return !dead || isDead(*e), nil
}

// proves reports whether r's existence proves anything (see rowsState):
// a row of format 2 that was registered in order, not a format-1 row, a
// stray or a table list's legacy kill.
func (r rowRef) proves() bool { return r.gen > 0 && !r.stray && !r.legacy }

// rowsWork is one key's rows index settle in a batch.
type rowsWork struct {
	pk, rk, value string
	s             rowsState
	at            int64
}

// settleRowsAll settles many keys' rows index at once (batch step 4),
// without probes: every key's kills written dead in rounds (the r-th
// kill of every key in round r, blind upserts in transactions per value
// partition), so each key's are written in order, then the live rows
// inserted in transactions; one that fails (a row there already) goes
// row by row, and an insert that finds its row is done.
func (x *Set) settleRowsAll(ctx context.Context, ix *index, work []rowsWork) error {
	return idempotent.CreateOnMissing(ctx, idempotent.TableCreator(x.tables, ix.table), func(ctx context.Context) error {
		for r := 0; ; r++ {
			var ops []storeadapter.TableOp
			for _, w := range work {
				if r < len(w.s.kills) {
					ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: rowEntity(ix, w.pk, w.rk, w.s.kills[r], w.at, true)})
				}
			}
			if len(ops) == 0 {
				break
			}
			if err := x.transactAll(ctx, ix.table, ops); err != nil {
				return err
			}
		}
		var ops []storeadapter.TableOp
		for _, w := range work {
			if w.value != "" && w.s.unproven {
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: rowEntity(ix, w.pk, w.rk, rowRef{value: w.value, gen: w.s.live}, w.at, false)})
			}
		}
		for _, batch := range idempotent.Batches(ops) {
			err := x.tables.Transact(ctx, ix.table, batch)
			if err == nil || !errors.Is(err, storeadapter.ErrAlreadyExists) {
				if err != nil {
					return err
				}
				continue
			}
			for _, op := range batch {
				if _, err := x.tables.InsertEntity(ctx, ix.table, op.Entity); err != nil && !errors.Is(err, storeadapter.ErrAlreadyExists) {
					return err
				}
			}
		}
		return nil
	})
}
