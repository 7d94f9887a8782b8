package indexes

import (
	"context"
	"fmt"
	"slices"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ahead is what a reconcile read of one index's entries before it
// registered. Before it registers, a reconcile reads the entries it
// will write of its table copy and blob list indexes (the
// settle writes from them: reads it would make anyway), and learns from them
// which of the values pending in the membership record its generation g
// has settled already, so that the registration does not carry them on
// and the clear after a settle can be left to the next reconcile (see
// lazy):
//
//   - a table copy's values are read in one query, and each is shown
//     settled by its own row: the row holds the key, live or as a
//     tombstone, at exactly g. Only g's settle writes that, and no write
//     of an older generation replaces it;
//   - a blob list's values are one read each, so the applied value's list is
//     read first: its line of the key, live at exactly g and flagged P,
//     shows every pending value settled. A settle writes its values dead
//     first and the live one last (applyKillsFirst), and flags it P only
//     when every dead write was made; every settler of g writes the values
//     of the record as registered at g, less those a clear removed, which
//     were settled. Nothing else writes P (a Sync's batches write L).
//     Without it, each pending value's list is read, and shown settled by
//     a line of the key at exactly g: one read, where carrying the value
//     on would cost a read and a write.
//
// Values shown settled at an older or a later generation are carried: a
// later one is another registration's, which makes this one's If-Match
// lose, or one whose record was lost, which a rebuild repairs.
type ahead struct {
	gen    int64                           // the record's generation when read
	rk     string                          // the key's RowKey
	key    string                          // the key's list key: pk, a tab, rk
	proven []string                        // pending values shown settled at gen
	copies map[string]*storeadapter.Entity // a table copy's rows, by RowKey
	blobs  map[string]*blobList            // a blob list, by value
}

// blobList is a blob list as read: its lines and ETag ("" when missing).
type blobList struct {
	lines []string
	etag  string
}

// settled reports whether value was shown settled at the record's
// generation (a nil ahead shows nothing).
func (a *ahead) settled(value string) bool {
	return a != nil && slices.Contains(a.proven, value)
}

// writtenAt reports whether a write of value at gen is one that was shown
// made: gen is the record's generation as read, and value settled at it.
func (a *ahead) writtenAt(value string, gen int64) bool {
	return a != nil && a.gen == gen && a.settled(value)
}

// member reads the key's member in the entry of value as read, and
// whether the entry was read.
func (a *ahead) member(ix *index, value string) (m member, found, read bool) {
	if ix.Kind == KindCopy {
		row, ok := a.copies[tableCopyRowKey(value)]
		if !ok {
			return m, false, a.copies != nil // readRows lists only the rows there are
		}
		owner, _ := row.Properties[propOwner].(string)
		if gen, _ := row.Properties[propGen].(int64); owner == a.rk {
			return member{gen: gen}, true, true
		}
		gen, ok := parseTombs(row.Properties[propTombs])[a.rk]
		return member{gen: gen, dead: true}, ok, true
	}
	b, ok := a.blobs[value]
	if !ok {
		return m, false, false
	}
	i := blobLine(b.lines, a.key)
	if i < 0 {
		return m, false, true
	}
	m, found = lineMember(b.lines[i])
	return m, found, true
}

// readAhead reads, for each table copy and blob list index of
// the entity with values pending in m, the entries of those values and,
// when the reconcile registers a change of the index, of its old and new
// values and s's (see ahead), by index name. An index with nothing pending
// reads nothing here: its settle reads what it writes after the
// registration, so that the window between the record's read and its
// registration stays short (a reconcile that lost its registration to
// another of the same entity reads nothing ahead either: see reconcile).
func (x *Set) readAhead(ctx context.Context, ti *tableIndexes, pk, rk string, m membership, wants map[string]want, register, force bool, s *stray) (map[string]*ahead, error) {
	pre := map[string]*ahead{}
	for _, ix := range ti.indexes {
		if ix.partition() || ix.rowsKeyed() {
			continue
		}
		if len(m.pending[ix.Name]) == 0 {
			continue // nothing to show settled: the settle reads what it writes
		}
		var pendingValues, writes []string
		for _, p := range m.pending[ix.Name] {
			pendingValues = append(pendingValues, p.value)
		}
		old := stateValue(m.applied[ix.Name])
		if register && (force || wants[ix.Name].state != m.applied[ix.Name] || len(s.values(ix)) > 0) {
			writes = distinct(old, stateValue(wants[ix.Name].state), s.values(ix)...)
		}
		a := &ahead{gen: m.gen, rk: rk, key: pk + "\t" + rk, blobs: map[string]*blobList{}}
		var err error
		if ix.Kind == KindCopy {
			err = a.readCopies(ctx, x, ix, pk, append(writes, pendingValues...))
		} else {
			err = a.readLists(ctx, x, ix, old, pendingValues, writes)
		}
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", ix.Name, err)
		}
		pre[ix.Name] = a
	}
	return pre, nil
}

// readCopies reads a table copy's rows of values (up to 14 a query) and
// takes as settled each pending value whose row shows it.
func (a *ahead) readCopies(ctx context.Context, x *Set, ix *index, pk string, values []string) error {
	keys := make([]string, len(values))
	for i, v := range values {
		keys[i] = tableCopyRowKey(v)
	}
	var err error
	if a.copies, err = x.readRows(ctx, ix.table, copyPartition(ix, pk), keys); err != nil {
		return err
	}
	a.proveEach(ix, values)
	return nil
}

// readLists reads a list index's entries: the applied value's first, whose
// P line shows every pending value settled; then those of the values to
// write and, without that line, of every pending value, which each show
// their own.
func (a *ahead) readLists(ctx context.Context, x *Set, ix *index, old string, pendingValues, writes []string) error {
	if a.gen > 0 && old != "" && slices.Contains(pendingValues, old) {
		if err := a.readList(ctx, x, ix, old); err != nil {
			return err
		}
		if m, found, _ := a.member(ix, old); found && m.proof && !m.dead && m.gen == a.gen {
			a.proven = slices.Clone(pendingValues)
		}
	}
	more := writes
	if a.proven == nil {
		more = append(slices.Clone(writes), pendingValues...)
	}
	for _, v := range distinct("", "", more...) {
		if _, _, read := a.member(ix, v); !read {
			if err := a.readList(ctx, x, ix, v); err != nil {
				return err
			}
		}
	}
	if a.proven == nil {
		a.proveEach(ix, pendingValues)
	}
	return nil
}

// readList reads one value's blob list into a.
func (a *ahead) readList(ctx context.Context, x *Set, ix *index, value string) error {
	lines, etag, err := readBlobList(ctx, x.store.Container(ix.Container), blobListName(ix, value))
	if err == nil {
		a.blobs[value] = &blobList{lines: lines, etag: etag}
	}
	return err
}

// proveEach takes as settled each pending value whose entry, read, holds
// the key at exactly the record's generation.
func (a *ahead) proveEach(ix *index, pendingValues []string) {
	for _, v := range pendingValues {
		if m, found, _ := a.member(ix, v); found && a.gen > 0 && m.gen == a.gen {
			a.proven = append(a.proven, v)
		}
	}
}
