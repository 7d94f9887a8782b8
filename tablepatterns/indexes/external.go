package indexes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The table, rows and blob stores are outside the entity's partition, so
// their writes cannot share a transaction with the membership record.
// They are fenced by generations instead: every entry records, per
// source key, the generation of the reconcile that last wrote it and
// whether the key is present ("live") or was removed (a tombstone). A
// write of generation g changes an entry only if the entry's generation
// for that key is lower than g, so a reconcile that registered earlier
// (and so read an older version of the entity) can never undo a later
// one's write, whenever its requests arrive. Tombstones are what make a
// late write of an older generation lose after a removal; they are kept
// TombstoneGrace, pruned when their entry is next written and by rebuild.
// A rows index is fenced the other way round: its rows are keyed by
// generation, so that no two generations write one row live (see
// rowsState).

// ErrConflict is wrapped by the error of a reconcile when a copy index's
// value is held by another entity: the copy is never overwritten. It is
// retried (the other entity may be renamed meanwhile) and reported by
// Check.
var ErrConflict = errors.New("index: value held by another entity")

// member is one key's state in an entry of the table, rows or blob stores.
type member struct {
	gen  int64
	dead bool
	// written is the Timestamp of the row that holds the member (not of
	// a list's line).
	written time.Time
	// row is the generation in a rows index row's RowKey (format 2; see
	// rowKey), 0 for a format-1 row.
	row int64
	// proof marks a live list line flagged P: its settle made every other
	// value of the key dead first (see ahead).
	proof bool
	// folded marks a table list's marker its lines hold (see markers).
	folded bool
}

// newer reports whether a write of generation g should replace cur.
func newer(cur *member, g int64) bool { return cur == nil || cur.gen < g }

// listLine renders a member line of a table or blob list: key pair,
// generation, and "D" for a tombstone, "P" for a live member with proof,
// else "L".
func listLine(pk, rk string, m member) string {
	flag := "L"
	switch {
	case m.dead:
		flag = "D"
	case m.proof:
		flag = "P"
	}
	return pk + "\t" + rk + "\t" + strconv.FormatInt(m.gen, 10) + "\t" + flag
}

// parseListLine reads a member line of a table or blob list.
func parseListLine(line string) (pk, rk string, m member, err error) {
	f := strings.Split(line, "\t")
	if len(f) != 4 {
		return "", "", m, fmt.Errorf("index: list line %q: want 4 fields", text.Truncate(line, 60))
	}
	m.gen, err = strconv.ParseInt(f[2], 10, 64)
	m.dead, m.proof = f[3] == "D", f[3] == "P"
	return f[0], f[1], m, err
}

// write is one key's write to an external index: its entry of value made
// to hold the key live (with content, for a copy) or as a tombstone, at
// generation gen, unless the entry already holds a generation ≥ gen for
// that key.
type write struct {
	value   string
	pk, rk  string
	gen     int64
	live    bool
	content map[string]any
	// proof, for a live list line, flags it P (see applyKillsFirst).
	proof bool
}

// applied is what applyAll made of one write: err wraps ErrConflict (a
// copy's value live for another entity) or ErrTooLarge (a list at its
// limit) when the write could not be made; woke is set when the write
// took its key off a table copy other entities waited for (see wake).
type applied struct {
	err  error
	woke bool
}

// applyAll makes the entries of a table copy or blob list hold the writes,
// as few calls as the store allows: the writes to one entry (a list's
// value, a table copy's source partition) share one read and one write.
// (A rows index and a table list are written by settleRows and
// settleRowsAll.) a, when not nil, holds entries already read
// (see readAhead): their first write goes from them. It returns what it
// made of each write; any other error ends it.
func (x *Set) applyAll(ctx context.Context, ix *index, ws []write, a *ahead) ([]applied, error) {
	var pre ahead
	if a != nil {
		pre = *a
	}
	res := make([]applied, len(ws))
	groups := map[string][]int{} // entry group -> indexes in ws, in order
	var order []string
	for i, w := range ws {
		g := w.value
		if ix.Kind == KindCopy {
			g = w.pk
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range order {
		idx := groups[g]
		group := make([]write, len(idx))
		for j, i := range idx {
			group[j] = ws[i]
		}
		gres := make([]applied, len(group))
		var err error
		if ix.Kind == KindCopy {
			err = x.applyCopies(ctx, ix, g, group, gres, pre.copies)
		} else {
			err = x.applyBlob(ctx, ix, g, group, pre.blobs[g])
		}
		if errors.Is(err, storeadapter.ErrTooLarge) {
			for _, i := range idx {
				res[i].err = err
			}
			continue
		}
		if err != nil {
			return res, err
		}
		for j, r := range gres {
			res[idx[j]] = r
		}
	}
	return res, nil
}

// applyKillsFirst is applyAll for one key's writes to a table or blob
// list: the tombstones first, then the live line, flagged P when every
// tombstone was made (see ahead). A list at its limit that
// cannot take a tombstone so leaves the live line without the flag.
func (x *Set) applyKillsFirst(ctx context.Context, ix *index, ws []write, a *ahead) ([]applied, error) {
	res := make([]applied, len(ws))
	proof := true
	for _, live := range []bool{false, true} {
		var idx []int
		var part []write
		for i, w := range ws {
			if w.live == live {
				w.proof = live && proof
				idx, part = append(idx, i), append(part, w)
			}
		}
		r, err := x.applyAll(ctx, ix, part, a)
		for j, i := range idx {
			res[i] = r[j]
			proof = proof && r[j].err == nil
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// cas runs idempotent.UpdateCAS on an index table (created when missing),
// replacing the entity. With absent, the entity is expected not to exist
// (the entry of a value the key is new to): its first round inserts what
// modify makes of no entity, without reading, and reads only when the
// insert finds one. That guess, when wrong, costs its one call and
// leaves UpdateCAS's rounds whole (x.cfg.MaxConflicts, the first without
// a pause).
func (x *Set) cas(ctx context.Context, table, pk, rk string, absent bool, modify func(cur *storeadapter.Entity) (*storeadapter.Entity, error)) error {
	return idempotent.CreateOnMissing(ctx, idempotent.TableCreator(x.tables, table), func(ctx context.Context) error {
		if absent {
			e, err := modify(nil)
			if err != nil || e == nil {
				return err
			}
			if _, err = x.tables.InsertEntity(ctx, table, *e); err == nil || !idempotent.Lost(err) {
				return err
			}
		}
		_, err := idempotent.UpdateCAS(ctx, x.tables, table, pk, rk, modify, idempotent.CASOptions{Mode: storeadapter.Replace, Tries: x.cfg.MaxConflicts})
		return err
	})
}

// transactAll writes ops in as few transactions as Azure's limits allow
// (idempotent.Batches), creating the table on first use.
func (x *Set) transactAll(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	for _, batch := range idempotent.Batches(ops) {
		if err := idempotent.Transact(ctx, x.tables, table, batch); err != nil {
			return err
		}
	}
	return nil
}

func minUTF16(a, b string) string {
	if storeadapter.LessUTF16(b, a) {
		return b
	}
	return a
}

func maxUTF16(a, b string) string {
	if storeadapter.LessUTF16(a, b) {
		return b
	}
	return a
}

// graceCut is the generation below which tombstones may go: generations
// are microseconds since 1970 (see nextGen).
func (x *Set) graceCut() int64 {
	return x.clock.Now().Add(-time.Duration(x.cfg.TombstoneGrace)).UnixMicro()
}

// keepLine reports whether a list line is still needed: not a tombstone
// past the grace period.
func (x *Set) keepLine(cut int64) func(string) bool {
	return func(line string) bool {
		_, _, m, err := parseListLine(line)
		return err != nil || !m.dead || m.gen >= cut
	}
}
