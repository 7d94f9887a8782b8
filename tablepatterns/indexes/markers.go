package indexes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/text"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// A table list (format 3) keeps its members as rows keyed by generation,
// as a rows index does (see rowsState), and packs them into the lines of
// its parts for lookups:
//
//   - markers: one row per key and generation in the value's list
//     partition, RowKey markerPrefix + memberKey + keySep + the
//     generation (see rowKey), with tkGen and tkDead as a rows index's
//     rows and tkFolded. A reconcile writes them by the rows protocol
//     (see rowsState): a change costs its two reads, the registration, the
//     old marker written dead and the new one inserted, and no write of a
//     marker needs a read or contends with another key's;
//   - parts: the lines of the list (see list), which only the fold writes
//     (and releases before this one, which wrote every change there). The
//     fold (Prune) writes the markers not yet folded into the lines, and
//     marks them folded (tkFolded) in the same transaction, If-Match
//     every row it read and touching every part (see foldList).
//
// A key's entries in a list are its line and its markers; each is live or
// dead at a generation (a marker's is its RowKey's). The key is a member
// when its entry of the highest generation is live, a dead one winning a
// tie: a dead entry at g makes dead every entry of the key at g or below.
// A marker is written dead only by the kill of the marker of its own
// generation, or of a part line of that generation or below (a legacy
// kill, at the record's generation when it was registered, which is at
// or above the line's: every line of the key was written by one of its
// registrations), and every registration that later makes the value the
// key's has a higher generation than any kill registered before it. So a
// dead entry never hides a member, and every kill hides what it kills,
// whether the killed entry is a marker, the line the fold made of it, or a
// line a release before this one wrote.
//
// Lookups read the parts and the markers not yet folded, in one query of
// the list partition (Azure scans the partition's markers to select them);
// a folded marker is in the lines (its line, or one of a higher
// generation). Entries and Check read a list the same way (memberScan). A
// rebuild's sweep checks every marker as a rows index's row (one its key's
// record does not name is killed, folded or not) and the lines as members. A kill of a folded marker makes it dead and not
// folded again, and so visible, until the next fold writes its line dead.
// A dead marker is deleted (Prune) once it is folded and TombstoneGrace
// has passed since it was made dead: no reconcile can still insert it
// live, and its dead line, folded, stays until the grace has passed for
// that line's generation (see keepLine).
const markerPrefix = "m"

// propFolded marks a table list's marker whose entry the list's lines hold
// (see markers). Every write of a marker but the fold's sets it false, so
// that a lookup can select the markers to read by it.
const propFolded = "tkFolded"

// listsToRows reads the table lists' part of a record of format 1 or 2
// into format 3: every value still to settle becomes a legacy kill of the
// key's line in that value's list, at the record's generation (every line
// of the key was written at or below it); an applied value still to
// settle gets a marker one generation above, to be inserted after those
// kills. A settled applied value keeps its line as its live entry (T_
// 0). When that leaves anything to settle, rewrite is set: the record is
// written in format 3 (If-Match) before any marker, so that a release
// before this one, which would register the key's lists in their lines
// again, refuses it (ErrNewerFormat).
func (m *membership) listsToRows(ti *tableIndexes) {
	for _, ix := range ti.indexes {
		if ix.Kind != KindList || ix.Store != StoreTable {
			continue
		}
		ps := m.pending[ix.Name]
		delete(m.pending, ix.Name)
		if len(ps) == 0 {
			continue
		}
		st := rowsState{list: true}
		g := legacyGen(ix, m.gen)
		target := stateValue(m.applied[ix.Name])
		for _, p := range ps {
			st.kills = append(st.kills, rowRef{value: p.value, gen: g, legacy: true})
			if p.value == target {
				st.live, st.unproven = g+1, true
			}
		}
		m.rows[ix.Name] = st
		m.rewrite = true
	}
}

// isMarker reports whether a row of a table list's partition is a marker
// (the others are parts).
func isMarker(rowKey string) bool { return strings.HasPrefix(rowKey, markerPrefix) }

// markerEnd is the first RowKey after every marker's.
const markerEnd = "n"

// markerHashPrefix starts the RowKey of a marker of a key too long for
// its escaped pair (in an escaped key, "~" is followed by a hexadecimal
// digit, never "h"): the SHA-256 of the pair in hex follows it, and the
// marker holds the key in tkPK and tkRK.
const markerHashPrefix = markerPrefix + "~h"

// Properties of a marker with a hashed RowKey: its key.
const (
	propPK = "tkPK"
	propRK = "tkRK"
)

// markerRowKey is the RowKey of key (pk, rk)'s marker of generation gen:
// markerPrefix and the key's row key as a rows index's (rowKey), or, when
// that is too long for a RowKey, markerHashPrefix and a hash of the key.
// A key's markers sort next to each other, by generation, either way.
func markerRowKey(pk, rk string, gen int64) string {
	if k := markerPrefix + rowKey(pk, rk, gen); fitsKey(k) {
		return k
	}
	sum := sha256.Sum256([]byte(pk + "\t" + rk))
	return fmt.Sprintf("%s%s%s%0*d", markerHashPrefix, hex.EncodeToString(sum[:]), keySep, genDigits, gen)
}

// unfolded selects a table list's markers not folded (see markers).
func unfolded() storeadapter.Filter {
	return storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, markerPrefix),
		storeadapter.Compare("RowKey", storeadapter.Lt, markerEnd), storeadapter.Compare(propFolded, storeadapter.Eq, false))
}

// listRead selects what a lookup reads of a table list's partition pk:
// its parts and its markers not folded.
func listRead(pk string) storeadapter.Filter {
	return storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Or(partRange(tableListBase), unfolded()))
}

// markerEntry reads a marker: its key, and its entry (generation: its
// RowKey's; see markers).
func markerEntry(e storeadapter.Entity) (pk, rk string, m member, err error) {
	mk := strings.TrimPrefix(e.RowKey, markerPrefix)
	if hashed, ok := strings.CutPrefix(e.RowKey, markerHashPrefix); ok {
		var okPK, okRK bool
		pk, okPK = e.Properties[propPK].(string)
		rk, okRK = e.Properties[propRK].(string)
		if _, gen, _ := strings.Cut(hashed, keySep); !okPK || !okRK || len(gen) != genDigits {
			return "", "", m, fmt.Errorf("index: list marker %q: no key", text.Truncate(e.RowKey, 60))
		}
		mk = "x" + keySep + hashed // a key pair with the generation, for rowGen
	} else if pk, rk, err = splitMemberKey(mk); err != nil {
		return "", "", m, err
	}
	return pk, rk, rowMember(e, mk), nil
}

// rowMember is the entry of a rows index's row, or of a table list's
// marker, whose row key (after any prefix) is rowKey.
func rowMember(e storeadapter.Entity, rowKey string) member {
	m := member{row: rowGen(rowKey), dead: isDead(e), written: e.Timestamp}
	m.gen, _ = e.Properties[propGen].(int64)
	m.folded, _ = propBool(&e, propFolded)
	return m
}

// entryGen is the generation of a table list's entry that decides between
// a key's entries (see markers): a marker's RowKey's, a line's own.
func entryGen(m member) int64 {
	if m.row > 0 {
		return m.row
	}
	return m.gen
}

// wins reports whether entry m decides over cur, the key's deciding entry
// so far (see markers): a higher generation, or a dead one at the same.
func wins(m, cur member) bool {
	g, c := entryGen(m), entryGen(cur)
	return g > c || g == c && m.dead && !cur.dead
}

// readTableList reads a table list's entries as a lookup does (one query:
// its parts and markers not folded) and returns its members' lines, one
// per key (see markers), a marker's at its RowKey's generation.
func (x *Set) readTableList(ctx context.Context, ix *index, value string) ([]string, error) {
	var lines []string
	f := &memberScan{visit: func(en Entry) error {
		m := en.member()
		m.gen = entryGen(m)
		lines = append(lines, listLine(en.PK, en.RK, m))
		return nil
	}}
	err := queryAll(ctx, x.tables, ix.table, storeadapter.Query{Filter: listRead(tableListPartition(ix, value))}, func(e storeadapter.Entity) error {
		return x.visitRow(ix, ix.Name+"_", e, func(v string, k Key, m member) error {
			return f.add(Entry{Encoded: v, Key: k, Gen: m.gen, Dead: m.dead, row: m.row, folded: m.folded})
		})
	})
	if err != nil && !idempotent.Missing(err) {
		return nil, err
	}
	if err := f.flush(); err != nil {
		return nil, err
	}
	return lines, nil
}

// memberScan folds a table list's entries as scanEntries visits them, one
// value's after another, and visits the members (live or dead, as
// decided) of each value once its entries are all seen. As a lookup, it
// reads the lines and the markers not folded: a folded marker is in the
// lines (see markers).
type memberScan struct {
	value string
	visit func(Entry) error
	best  map[Key]Entry // the value's deciding entry of each key
	order []Key
}

func (f *memberScan) add(en Entry) error {
	if en.folded {
		return nil
	}
	if en.Encoded != f.value {
		if err := f.flush(); err != nil {
			return err
		}
		f.value = en.Encoded
	}
	if f.best == nil {
		f.best = map[Key]Entry{}
	}
	cur, ok := f.best[en.Key]
	if !ok {
		f.order = append(f.order, en.Key)
	}
	if !ok || wins(en.member(), cur.member()) {
		f.best[en.Key] = en
	}
	return nil
}

// member is what of en decides between a key's entries (see wins).
func (en Entry) member() member { return member{gen: en.Gen, dead: en.Dead, row: en.row} }

// flush visits the members of the value seen so far.
func (f *memberScan) flush() error {
	for _, k := range f.order {
		if err := f.visit(f.best[k]); err != nil {
			return err
		}
	}
	f.best, f.order = nil, nil
	return nil
}

// foldRound is how many markers foldList reads at once, and foldParts how
// many parts one of its transactions writes at most: 16 parts of
// partBytes of lines, 3 MiB, stay within a transaction's 4 MiB beside
// the markers' operations.
const (
	foldRound = 1000
	foldParts = 16
)

// foldList folds the markers of one value's table list into its lines
// (see markers): it reads up to foldRound markers not folded (the dead
// ones of those first; then the next foldRound, until none is left), and
// for each transaction reads the parts and writes as many
// of those markers into the lines as fit one transaction beside the parts,
// the parts and the markers' tkFolded together, If-Match every row read
// (every part touched, so that two folds never both add a key's line,
// each to another part). A transaction that loses (a marker written
// since, a part another writer changed) makes it read the markers again,
// up to MaxConflicts times in a row; then the rest is left to the next
// fold. A live marker the list has no room for stays as it is (lookups
// read it). It returns how many markers it folded; when stop (nil: never)
// asks it to stop after a transaction with markers left, errFoldStopped
// too.
func (x *Set) foldList(ctx context.Context, ix *index, value string, stop func() bool) (int, error) {
	pk := tableListPartition(ix, value)
	folded, lost := 0, 0
	for {
		var marks []storeadapter.Entity
		q := storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(pk), unfolded()), Top: foldRound}
		more := false // markers past those read
		for {
			p, err := x.tables.Query(ctx, ix.table, q)
			if err != nil {
				return folded, err
			}
			marks = append(marks, p.Entities...)
			if q.Continuation, more = p.Next, p.Next != ""; !more || len(marks) >= foldRound {
				break // a short page with a token (Azure's time limit) is read on
			}
		}
		slices.SortStableFunc(marks, func(a, b storeadapter.Entity) int { return b2i(isDead(b)) - b2i(isDead(a)) })
		again := false // a transaction lost: the markers are read again
		for len(marks) > 0 && !again {
			n, rest, err := x.foldSome(ctx, ix, pk, marks)
			switch {
			case idempotent.Lost(err):
				if lost++; lost >= x.cfg.MaxConflicts {
					return folded, nil
				}
				again = true
			case err != nil:
				return folded, err
			case n == 0:
				return folded, nil // no room for the rest
			default:
				folded, lost, marks = folded+n, 0, rest
				if (len(marks) > 0 || more) && stop != nil && stop() {
					return folded, errFoldStopped // after a transaction: each delivery makes progress
				}
			}
		}
		if !again && !more {
			return folded, nil
		}
	}
}

// errFoldStopped is foldList's error when stop asked it to stop.
var errFoldStopped = errors.New("index: fold stopped")

// foldSome folds the first of marks into the lines of list partition pk,
// as many as fit one transaction with the parts they change: one read of
// the parts, one transaction. It returns how many it folded and the
// markers after those it tried (a live one with no room in the list is
// tried and left).
func (x *Set) foldSome(ctx context.Context, ix *index, pk string, marks []storeadapter.Entity) (int, []storeadapter.Entity, error) {
	l, err := readList(ctx, x.tables, ix.table, pk, tableListBase)
	if err != nil {
		return 0, nil, err
	}
	cut := x.graceCut()
	l.pruneAll(x.keepLine(cut), foldParts-1) // a fold writes anyway: expired tombstones go
	var ops []storeadapter.TableOp
	i := 0
	// Each marker adds its own operation, and may make one more part
	// dirty (every part is in the transaction, changed or touched; a new
	// one may be added).
	for ; i < len(marks) && len(ops)+len(l.parts)+2 <= storeadapter.MaxBatchOps && dirtyParts(l) < foldParts; i++ {
		e := marks[i]
		mpk, mrk, m, err := markerEntry(e)
		if err != nil {
			return 0, nil, err
		}
		key := mpk + "\t" + mrk
		if cur, ok := lineMember(l.line(key)); !ok || wins(m, cur) {
			m.gen = entryGen(m)
			if m.dead && m.gen < cut { // an expired tombstone: no line (see keepLine)
				l.remove(key)
				ops = append(ops, foldOp(pk, e))
				continue
			}
			err := l.set(key, listLine(mpk, mrk, m))
			if errors.Is(err, storeadapter.ErrTooLarge) {
				continue // no room: lookups read the marker
			}
			if err != nil {
				return 0, nil, err
			}
		}
		ops = append(ops, foldOp(pk, e))
	}
	if len(ops) == 0 {
		return 0, marks[i:], nil
	}
	if err := x.tables.Transact(ctx, ix.table, append(l.ops(true), ops...)); err != nil {
		return 0, nil, err
	}
	return len(ops), marks[i:], nil
}

// foldOp marks marker e of list partition pk folded, If-Match as read.
func foldOp(pk string, e storeadapter.Entity) storeadapter.TableOp {
	return storeadapter.TableOp{Action: storeadapter.TxUpdateMerge, IfMatch: e.ETag,
		Entity: storeadapter.Entity{PartitionKey: pk, RowKey: e.RowKey, Properties: map[string]any{propFolded: true}}}
}

// dirtyParts is how many of l's parts a write would change.
func dirtyParts(l *list) int {
	n := 0
	for _, p := range l.parts {
		if p.dirty {
			n++
		}
	}
	return n
}

// isDead reports whether a marker (or a rows index's row) is dead.
func isDead(e storeadapter.Entity) bool {
	dead, _ := propBool(&e, propDead)
	return dead
}
