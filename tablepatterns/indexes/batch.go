package indexes

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// A batch reconciles the keys of one chunk of a span at once: the same
// steps as Reconcile (see its doc comment), each key's steps in the same
// order and each write under the same condition, but the reads and writes
// of many keys shared:
//
//  1. Read the chunk (see readChunk): the keys of its entities, which
//     bound it; its membership records; then its entities. Every entity
//     is read after its record, as Reconcile requires.
//  2. Plan each key as Reconcile does: its wants, and whether it must
//     register (with force: always) or only settle.
//  3. Register, per partition, in transactions of up to 100 operations:
//     each key's record (If-Match the ETag read, or an insert) with its
//     partition stores' changes, and the fence of each key that registers
//     nothing but must be fenced (Reconcile's step 2: its record as it is,
//     with R, If-Match), computed as Reconcile computes them from
//     the entries read for the transaction (partition copies up to 14 a
//     query, lists up to 7): a copy another key holds is a conflict and
//     is not written, every write is If-Match the ETag read or an insert.
//     Two keys changing one copy row (one takes the value the other
//     leaves) never share a transaction: the second waits for the next,
//     which reads the row again. A transaction that fails — an entry or a
//     record changed since it was read, too large — rolls back whole,
//     and its keys go through Reconcile one by one. Then the entities of
//     the keys whose records the chunk's transactions inserted are read
//     again (see recheck: one query, two for a few keys of one
//     partition): a key whose entity was written since goes through
//     Reconcile (Reconcile's step 3).
//  4. Settle the external indexes' pending values of every registered key
//     with applyAll: one read and one write per value of a list, per value
//     partition of a rows index, per source partition of a table copy.
//  5. Clear the settled values from the records, If-Match of the records
//     read again after 3 (one query), in transactions; delete the records
//     of keys long gone (no entity, nothing held, generation older than
//     the tombstone grace). A transaction that fails goes key by key.
//  6. Keys whose copy value another key held go through Reconcile once
//     more: the holder may have moved on within the chunk. Then the
//     entities waiting for a copy value a key of the chunk left are woken
//     (see wake).
//
// Crash positions and interleavings are Reconcile's: each committed
// registration transaction is a set of whole per-key registrations, a
// crash after it leaves pending values any later reconcile of the key (or
// the next batch over it) settles, and a lost If-Match sends the key
// through Reconcile.

// defaultChunk is how many records, and how many entities, one chunk
// reads at most.
const defaultChunk = 1000

// item is one key of a chunk.
type item struct {
	Key
	rec, e   *storeadapter.Entity // as read; nil when missing
	m        membership
	wants    map[string]want
	register bool
	settle   bool
	// fence is set when the key registers nothing but its record must be
	// fenced (see Reconcile, step 2): written as it is, with R.
	fence    bool
	next     membership // the record as registered
	out      Outcome
	fallback bool // went through Reconcile
}

// SyncResult counts what Sync or one chunk of a rebuild did.
type SyncResult struct {
	// Entities is how many entities were read, Records how many membership
	// records.
	Entities, Records int
	// Registered is how many keys changed their indexes, Removed how many
	// of those were entities gone (deleted or moved) still indexed.
	Registered, Removed int
	// Dropped is how many membership records of long-gone entities were
	// deleted.
	Dropped int
	// Conflicts and Unindexable count keys not in an index for those
	// reasons (see Outcome).
	Conflicts, Unindexable int
	// Fallbacks is how many keys went through Reconcile one by one (a
	// batch write lost to another writer, a limit, a conflict, an entity
	// written since its record was first registered).
	Fallbacks int
}

func (r *SyncResult) add(o SyncResult) {
	r.Entities += o.Entities
	r.Records += o.Records
	r.Registered += o.Registered
	r.Removed += o.Removed
	r.Dropped += o.Dropped
	r.Conflicts += o.Conflicts
	r.Unindexable += o.Unindexable
	r.Fallbacks += o.Fallbacks
}

// Sync brings the indexes of every key of a span of a source table up to
// date, in batches: the entities of the span are reconciled as Reconcile
// would, and entities gone from it (deleted or moved, their membership
// records left) are removed from the indexes. The kinds that move or
// delete entities run it over the keys they removed; its cost is a few
// queries per thousand keys read plus the writes, shared per transaction
// and per index entry. A table without declared indexes has nothing to
// sync.
func (x *Set) Sync(ctx context.Context, table string, sp Span) (SyncResult, error) {
	var res SyncResult
	if !x.Declared(table) {
		return res, nil
	}
	ti, _ := x.indexes(table)
	for {
		items, end, err := x.readChunk(ctx, ti, sp)
		if err != nil {
			return res, err
		}
		r, err := x.syncChunk(ctx, ti, items, false)
		res.add(r)
		if err != nil || end == nil {
			return res, err
		}
		sp.After, sp.From = end, nil
	}
}

// syncChunk reconciles the items of one chunk (see the batch steps); with
// force it registers every key whatever its record says (rebuild).
func (x *Set) syncChunk(ctx context.Context, ti *tableIndexes, items []*item, force bool) (SyncResult, error) {
	var res SyncResult
	byPK := map[string][]*item{}
	var pks []string
	for _, it := range items {
		if it.e != nil {
			res.Entities++
		}
		if it.rec != nil {
			res.Records++
		}
		x.plan(ti, it, force)
		if err := it.m.known(); err != nil {
			return res, fmt.Errorf("index: %s %s/%s: %w", ti.source, it.PK, it.RK, err)
		}
		if !it.register && !it.settle && !it.fence {
			continue
		}
		if _, ok := byPK[it.PK]; !ok {
			pks = append(pks, it.PK)
		}
		byPK[it.PK] = append(byPK[it.PK], it)
	}
	for _, pk := range pks {
		if err := x.registerAll(ctx, ti, pk, byPK[pk], force); err != nil {
			return res, err
		}
	}
	if err := x.recheck(ctx, ti, items, force); err != nil {
		return res, err
	}
	var work []*item
	for _, pk := range pks {
		for _, it := range byPK[pk] {
			if !it.fallback {
				work = append(work, it)
			}
		}
	}
	settledBy, err := x.settleAll(ctx, ti, work)
	if err != nil {
		return res, err
	}
	if err := x.clearAll(ctx, ti, items, settledBy, &res); err != nil {
		return res, err
	}
	var wake []wakeup
	for _, it := range items {
		if len(it.out.Conflicts) > 0 { // the holder may have moved on within the chunk
			if err := x.fallback(ctx, ti, it, force); err != nil {
				return res, err
			}
		}
		switch {
		case !it.register && !it.fallback:
		case it.fallback && it.out.gone || !it.fallback && it.e == nil && it.m.held():
			// A fallback's own reads decide (the recheck may have found
			// the entity deleted since the chunk read it).
			res.Registered++
			res.Removed++
		case it.register || it.out.Changed:
			res.Registered++
		}
		res.Conflicts += min(len(it.out.Conflicts), 1)
		res.Unindexable += min(len(it.out.Unindexable), 1)
		if it.fallback {
			res.Fallbacks++
		}
		wake = append(wake, it.out.wake...)
	}
	return res, x.wake(ctx, ti, wake, 1)
}

// held reports whether a record says anything is indexed or pending.
func (m membership) held() bool {
	for _, s := range m.applied {
		if s != "" {
			return true
		}
	}
	for _, ps := range m.pending {
		if len(ps) > 0 {
			return true
		}
	}
	for _, st := range m.rows {
		if !st.idle() {
			return true
		}
	}
	return false
}

// plan computes an item's wants and what it needs, as Reconcile does.
func (x *Set) plan(ti *tableIndexes, it *item, force bool) {
	it.m = readMembership(it.rec, ti)
	it.wants = map[string]want{}
	for _, ix := range ti.indexes {
		w := wantOf(ix, it.e)
		it.wants[ix.Name] = w
		if w.problem != nil {
			it.out.Unindexable = append(it.out.Unindexable, w.problem)
		}
		// A rebuild registers every entity, and every key still holding
		// something, but not the empty records of long-gone entities
		// (they are dropped once past the grace).
		if w.state != it.m.applied[ix.Name] || force && (it.e != nil || it.m.held()) {
			it.register = true
		}
	}
	it.settle = it.m.unsettled(ti)
	it.next = it.m
	// A format-1 record with rows to settle is written in format 2 before
	// them, as a fence is (see fromFormat1).
	it.fence = !it.register && (it.m.unfenced(it.e) || it.m.rewrite)
}

// fallback reconciles one key through Reconcile.
func (x *Set) fallback(ctx context.Context, ti *tableIndexes, it *item, force bool) error {
	it.fallback = true
	err := retryTransient(ctx, func() (err error) {
		it.out, err = x.reconcile(ctx, ti, it.PK, it.RK, force, nil)
		return err
	})
	if errors.Is(err, storeadapter.ErrTooLarge) { // a list at its limit
		it.out.Unindexable = append(it.out.Unindexable, err)
		return nil
	}
	return err
}

// settleAll settles the pending values of the external indexes of the
// items (batch step 4) and returns, per item, what it settled (see
// done); an index missing from an item's is not settled for it. The rows
// indexes are settled without probes (settleRowsAll).
func (x *Set) settleAll(ctx context.Context, ti *tableIndexes, items []*item) (map[*item]done, error) {
	settledBy := map[*item]done{}
	of := func(it *item) done {
		d, ok := settledBy[it]
		if !ok {
			d = done{tombstoned: map[string][]string{}, rows: map[string]rowsState{}}
			settledBy[it] = d
		}
		return d
	}
	for _, ix := range ti.indexes {
		if ix.partition() {
			continue
		}
		if ix.rowsKeyed() {
			var work []rowsWork
			var owner []*item
			for _, it := range items {
				if st := it.next.rows[ix.Name]; it.settle && !st.idle() {
					work = append(work, rowsWork{pk: it.PK, rk: it.RK, value: stateValue(it.next.applied[ix.Name]), s: st, at: it.next.gen})
					owner = append(owner, it)
				}
			}
			if len(work) == 0 {
				continue
			}
			if err := x.settleRowsAll(ctx, ix, work); err != nil {
				return nil, fmt.Errorf("index: %s index %s: %w", ti.source, ix.Name, err)
			}
			for i, it := range owner {
				st := work[i].s
				st.unproven = false
				of(it).rows[ix.Name] = st
			}
			continue
		}
		var ws []write
		var owner []*item
		var span []int // per item with writes: its first write and the next item's
		for _, it := range items {
			if !it.settle || len(it.next.pending[ix.Name]) == 0 {
				continue
			}
			span = append(span, len(ws))
			ws = append(ws, pendingWrites(ix, it.PK, it.RK, it.next, it.wants[ix.Name].content)...)
			owner = append(owner, it)
		}
		if len(ws) == 0 {
			continue
		}
		res, err := x.applyAll(ctx, ix, ws, nil)
		if err != nil {
			return nil, fmt.Errorf("index: %s index %s: %w", ti.source, ix.Name, err)
		}
		span = append(span, len(ws))
		for i, it := range owner {
			lo, hi := span[i], span[i+1]
			if dead, ok := settled(ix, ws[lo:hi], res[lo:hi], &it.out); ok {
				of(it).tombstoned[ix.Name] = dead
			}
		}
	}
	return settledBy, nil
}

// clearAll clears the settled values from the items' records and deletes
// the records of long-gone entities (batch step 5): the records are read
// again (their ETags changed at registration), then written per partition
// in transactions; a transaction that fails goes key by key.
func (x *Set) clearAll(ctx context.Context, ti *tableIndexes, items []*item, settledBy map[*item]done, res *SyncResult) error {
	cut := x.graceCut()
	byPK := map[string][]*item{}
	var pks []string
	for _, it := range items {
		if it.fallback || settledBy[it].empty() && !(it.e == nil && it.rec != nil && !it.register && !it.m.held() && it.m.gen < cut) {
			continue
		}
		if _, ok := byPK[it.PK]; !ok {
			pks = append(pks, it.PK)
		}
		byPK[it.PK] = append(byPK[it.PK], it)
	}
	for _, pk := range pks {
		group := byPK[pk]
		recs, err := x.readRecords(ctx, ti, pk, group)
		if err != nil {
			return err
		}
		var ops []storeadapter.TableOp
		var dropped []*item
		for _, it := range group {
			cur := recs[memberRowKey(it.RK)]
			if cur == nil {
				continue
			}
			m := readMembership(cur, ti)
			if m.known() != nil || m.rewrite { // a newer release's to clear, or an older one registered since
				continue
			}
			if d := settledBy[it]; !d.empty() {
				if next, ok := cleared(m, it.next, d); ok {
					ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: next.entity(it.PK, it.RK), IfMatch: cur.ETag})
				}
				it.out.Changed = true
				continue
			}
			if !m.held() && m.gen < cut {
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: cur.RowKey}, IfMatch: cur.ETag})
				dropped = append(dropped, it)
			}
		}
		err = x.transactAll(ctx, ti.source, ops)
		if err == nil {
			res.Dropped += len(dropped)
			continue
		}
		if !idempotent.Lost(err) {
			return err
		}
		for _, it := range group { // some record changed meanwhile: key by key
			if d := settledBy[it]; !d.empty() {
				if err := x.clear(ctx, ti, it.PK, it.RK, it.next, "", d); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
