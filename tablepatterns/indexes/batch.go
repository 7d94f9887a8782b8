package indexes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
//     partition stores' changes, computed as Reconcile computes them from
//     the entries read for the transaction (partition copies up to 14 a
//     query, lists up to 7): a copy another key holds is a conflict and
//     is not written, every write is If-Match the ETag read or an insert.
//     Two keys changing one copy row (one takes the value the other
//     leaves) never share a transaction: the second waits for the next,
//     which reads the row again. A transaction that fails — an entry or a
//     record changed since it was read, too large — rolls back whole,
//     and its keys go through Reconcile one by one.
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
	// batch write lost to another writer, a limit, a conflict).
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

// readChunk reads the next chunk of a span: the membership records of its
// keys, then its entities (see the batch steps), and the key it ends at
// (nil: the span's end). Three queries, each bounded: the keys of the
// next chunk of entities (keys only) give its end; the records are read
// up to there (fewer, and the chunk ends at the last record read, when
// there are more than a chunk of them); then the entities up to the
// chunk's end. Reading up to a bound keeps a chunk's queries to its own
// range however sparse the records or the entities are.
func (x *Set) readChunk(ctx context.Context, ti *tableIndexes, sp Span) ([]*item, *Key, error) {
	limit := x.chunk
	keys, more, err := readKeys(ctx, x.tables, ti.source, sp.filter(""), limit)
	if err != nil && !idempotent.Missing(err) {
		return nil, nil, err
	}
	var end *Key
	if more {
		last := keys[len(keys)-1]
		end = &Key{PK: last.PartitionKey, RK: last.RowKey}
	}
	recs, moreRecs, err := readUpTo(ctx, x.tables, ti.source, sp.through(end).filter(memberPrefix), limit)
	if err != nil && !idempotent.Missing(err) {
		return nil, nil, err
	}
	if moreRecs {
		last := recs[len(recs)-1]
		end = &Key{PK: last.PartitionKey, RK: strings.TrimPrefix(last.RowKey, memberPrefix)}
	}
	// Records of RowKeys too long for "~tk.m.<rk>" are named by a hash:
	// they are read by partition and kept when their key is in the chunk;
	// in one partition before the entities, across partitions after them
	// (once the chunk's end bounds the partitions), their entities then
	// read again.
	var hashed []storeadapter.Entity
	if sp.PK != nil {
		if hashed, err = x.readHashed(ctx, ti, storeadapter.PartitionEquals(*sp.PK)); err != nil {
			return nil, nil, err
		}
	}
	ents, moreEnts, err := readUpTo(ctx, x.tables, ti.source, sp.through(end).filter(""), limit)
	if err != nil && !idempotent.Missing(err) {
		return nil, nil, err
	}
	if moreEnts { // entities written since their keys were read
		last := ents[len(ents)-1]
		end = &Key{PK: last.PartitionKey, RK: last.RowKey}
	}
	in := func(k Key) bool { return end == nil || k.Compare(*end) <= 0 }
	late := map[Key]bool{}
	if sp.PK == nil {
		var fs []storeadapter.Filter
		for _, lo := range []*Key{sp.After, sp.From} {
			if lo != nil {
				fs = append(fs, storeadapter.Compare("PartitionKey", storeadapter.Ge, lo.PK))
			}
		}
		for _, hi := range []*Key{end, sp.Through, sp.Before} {
			if hi != nil {
				fs = append(fs, storeadapter.Compare("PartitionKey", storeadapter.Le, hi.PK))
				break
			}
		}
		if hashed, err = x.readHashed(ctx, ti, storeadapter.And(fs...)); err != nil {
			return nil, nil, err
		}
		for _, h := range hashed {
			rk, _ := h.Properties["Key"].(string)
			late[Key{PK: h.PartitionKey, RK: rk}] = true
		}
	}
	byKey := map[Key]*item{}
	get := func(k Key) *item {
		it := byKey[k]
		if it == nil {
			it = &item{Key: k}
			byKey[k] = it
		}
		return it
	}
	for i := range recs {
		if k := (Key{PK: recs[i].PartitionKey, RK: strings.TrimPrefix(recs[i].RowKey, memberPrefix)}); in(k) {
			get(k).rec = &recs[i]
		}
	}
	for i := range hashed {
		rk, _ := hashed[i].Properties["Key"].(string)
		if k := (Key{PK: hashed[i].PartitionKey, RK: rk}); rk != "" && sp.contains(k) && in(k) {
			get(k).rec = &hashed[i]
		}
	}
	for i := range ents {
		if k := (Key{PK: ents[i].PartitionKey, RK: ents[i].RowKey}); in(k) && !late[k] {
			get(k).e = &ents[i]
		}
	}
	for k := range late {
		if k.RK == "" || !sp.contains(k) || !in(k) {
			continue
		}
		// Its record was read after the entities: read the entity again
		// (whether the entities' query returned it or not), after its
		// record.
		if get(k).e, err = getOptional(ctx, x.tables, ti.source, k.PK, k.RK); err != nil {
			return nil, nil, err
		}
	}
	items := make([]*item, 0, len(byKey))
	for _, it := range byKey {
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b *item) int { return a.Key.Compare(b.Key) })
	return items, end, nil
}

// readRecords reads the membership records of items of one chunk's
// partition, by RowKey: those of a few keys up to 14 a query, those of
// many (a chunk's keys are contiguous) with one range query over their
// span.
func (x *Set) readRecords(ctx context.Context, ti *tableIndexes, pk string, items []*item) (map[string]*storeadapter.Entity, error) {
	var plain, hashed []string
	for _, it := range items {
		if rk := memberRowKey(it.RK); strings.HasPrefix(rk, memberHashPrefix) {
			hashed = append(hashed, rk)
		} else {
			plain = append(plain, rk)
		}
	}
	const few = 2 * (storeadapter.MaxFilterComparisons - 1)
	if len(plain) <= few {
		return x.readRows(ctx, ti.source, pk, append(plain, hashed...))
	}
	recs, err := x.readRows(ctx, ti.source, pk, hashed)
	if err != nil {
		return nil, err
	}
	lo, hi := plain[0], plain[0]
	for _, rk := range plain[1:] {
		lo, hi = minUTF16(lo, rk), maxUTF16(hi, rk)
	}
	f := storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi))
	err = queryAll(ctx, x.tables, ti.source, storeadapter.Query{Filter: f}, func(e storeadapter.Entity) error {
		recs[e.RowKey] = &e
		return nil
	})
	if err != nil && !idempotent.Missing(err) {
		return nil, err
	}
	return recs, nil
}

// readHashed reads the records named by a hash (of RowKeys longer than
// 506 characters, which are rare) that f selects.
func (x *Set) readHashed(ctx context.Context, ti *tableIndexes, f storeadapter.Filter) ([]storeadapter.Entity, error) {
	var out []storeadapter.Entity
	err := queryAll(ctx, x.tables, ti.source, storeadapter.Query{Filter: storeadapter.And(f, storeadapter.KeyPrefix("RowKey", memberHashPrefix))}, func(e storeadapter.Entity) error {
		out = append(out, e)
		return nil
	})
	if err != nil && !idempotent.Missing(err) {
		return nil, err
	}
	return out, nil
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
		if !it.register && !it.settle {
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
	var work []*item
	for _, pk := range pks {
		for _, it := range byPK[pk] {
			if !it.fallback {
				work = append(work, it)
			}
		}
	}
	tombstoned, err := x.settleAll(ctx, ti, work)
	if err != nil {
		return res, err
	}
	if err := x.clearAll(ctx, ti, items, tombstoned, &res); err != nil {
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
		case it.e == nil && it.m.held():
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
	return false
}

// plan computes an item's wants and what it needs, as Reconcile does.
func (x *Set) plan(ti *tableIndexes, it *item, force bool) {
	it.m = readMembership(it.rec)
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
		if !ix.partition() && len(it.m.pending[ix.Name]) > 0 {
			it.settle = true
		}
	}
	it.next = it.m
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

// registerAll registers the items of one partition (batch step 3).
func (x *Set) registerAll(ctx context.Context, ti *tableIndexes, pk string, items []*item, force bool) error {
	var reg []*item
	for _, it := range items {
		if it.register {
			reg = append(reg, it)
		}
	}
	// Keys that move between the same lists go together, so each
	// transaction touches few list parts.
	slices.SortStableFunc(reg, func(a, b *item) int { return strings.Compare(listKey(ti, a), listKey(ti, b)) })
	for len(reg) > 0 {
		n := x.groupSize(ti, reg)
		var deferred []*item
		for {
			var err error
			deferred, err = x.registerGroup(ctx, ti, pk, reg[:n], force)
			if errors.Is(err, storeadapter.ErrTooLarge) && n > 1 {
				n /= 2
				continue
			}
			if err == nil {
				break
			}
			if !idempotent.Lost(err) && !errors.Is(err, storeadapter.ErrTooLarge) {
				return err
			}
			for _, it := range reg[:n] { // the transaction rolled back: key by key
				if err := x.fallback(ctx, ti, it, force); err != nil {
					return err
				}
			}
			deferred = nil
			break
		}
		// Items left out because another item of the group changes one of
		// their copy rows go first in the next group, which reads those
		// rows again.
		reg = append(deferred, reg[n:]...)
	}
	return nil
}

// listKey orders items by the partition lists they change.
func listKey(ti *tableIndexes, it *item) string {
	var b strings.Builder
	for _, ix := range ti.indexes {
		if ix.partition() && ix.Kind == KindList {
			b.WriteString(stateValue(it.wants[ix.Name].state))
			b.WriteByte(0)
			b.WriteString(stateValue(it.m.applied[ix.Name]))
			b.WriteByte(0)
		}
	}
	return b.String()
}

// groupSize is how many of the first items fit one transaction by count:
// each takes its record and up to two rows per partition copy, and the
// list parts are counted once per distinct value.
func (x *Set) groupSize(ti *tableIndexes, items []*item) int {
	ops, size := 0, 0
	lists := map[string]bool{}
	for i, it := range items {
		add, bytes := 1, 0
		for _, ix := range ti.indexes {
			if !ix.partition() {
				continue
			}
			for _, v := range distinct(stateValue(it.m.applied[ix.Name]), stateValue(it.wants[ix.Name].state)) {
				if ix.Kind == KindCopy {
					add++
					continue
				}
				if k := ix.Name + "\x00" + v; !lists[k] {
					lists[k] = true
					add += 2 // a part, and one it may spill into
				}
			}
			if c := it.wants[ix.Name].content; c != nil {
				bytes += storeadapter.BatchOpSize(storeadapter.Entity{Properties: c})
			}
		}
		if i > 0 && (ops+add > storeadapter.MaxBatchOps || size+bytes > storeadapter.MaxBatchBytes/2) {
			return i
		}
		ops, size = ops+add, size+bytes
	}
	return len(items)
}

// registerGroup registers items of one partition in one transaction. It
// reads the partition copies and lists the items change (copies up to 14,
// lists up to 7 a query), computes each item's next record and partition
// changes exactly as Reconcile does — a copy held by another key is a
// conflict and is not written, every write is If-Match the ETag read or an
// insert — and commits. An item that would change a copy row another item
// of the group changes is left out and returned, to go in the next group
// (the transaction can hold one operation per row); the first item is
// never left out, so every round makes progress.
func (x *Set) registerGroup(ctx context.Context, ti *tableIndexes, pk string, items []*item, force bool) (deferred []*item, err error) {
	lists, err := x.readLists(ctx, ti, pk, items)
	if err != nil {
		return nil, err
	}
	copies, err := x.readRows(ctx, ti.source, pk, copyRowKeys(ti, items, force))
	if err != nil {
		return nil, err
	}
	var ops []storeadapter.TableOp
	var members []*item
	writes := map[string]storeadapter.TableOp{} // RowKey -> the write of a partition copy
	for _, it := range items {
		rks := copyRowKeys(ti, []*item{it}, force)
		if slices.ContainsFunc(rks, func(rk string) bool { _, ok := writes[rk]; return ok }) {
			deferred = append(deferred, it)
			continue
		}
		next := it.m.declared(ti)
		next.gen = max(it.m.gen+1, x.now().UnixMicro())
		for _, ix := range ti.indexes {
			w := it.wants[ix.Name]
			old := it.m.applied[ix.Name]
			if !force && w.state == old {
				continue
			}
			if !ix.partition() {
				ps := addPending(slices.Clone(it.m.pending[ix.Name]), stateValue(old), it.m.gen)
				next.applied[ix.Name] = w.state
				next.pending[ix.Name] = addPending(ps, stateValue(w.state), next.gen)
				continue
			}
			target, state := stateValue(w.state), w.state
			for _, v := range distinct(stateValue(old), target) {
				if ix.Kind == KindList {
					l := lists[listBase(ix, v)]
					if v != target {
						l.remove(it.RK)
					} else if err := l.set(it.RK, it.RK); err != nil {
						return nil, err // a list at its limit: Reconcile decides, key by key
					}
					continue
				}
				op, conflict, woke := copyOp(ix, pk, it.RK, v, target, copies[copyRowKey(ix, v)], w.content)
				if op != nil {
					writes[op.Entity.RowKey] = *op
				}
				if conflict != nil {
					state = ""
					it.out.Conflicts = append(it.out.Conflicts, conflict)
				}
				if woke {
					it.out.wake = append(it.out.wake, wakeup{ix: ix, pk: pk, value: v})
				}
			}
			next.applied[ix.Name] = state
		}
		it.next = next
		ops = append(ops, recordOp(it.m, next.entity(it.PK, it.RK)))
		members = append(members, it)
	}
	for _, k := range slices.Sorted(maps.Keys(writes)) {
		ops = append(ops, writes[k])
	}
	for _, base := range slices.Sorted(maps.Keys(lists)) {
		ops = append(ops, lists[base].ops(false)...)
	}
	if err := storeadapter.ValidateTransaction(ops); err != nil {
		return nil, err
	}
	if err := x.tables.Transact(ctx, ti.source, ops); err != nil {
		return nil, err
	}
	for _, it := range members {
		it.settle = true
	}
	return deferred, nil
}

// copyRowKeys are the partition copy rows the items' registrations read
// and may write: per partition copy index that registers, the rows of
// the old and the new value.
func copyRowKeys(ti *tableIndexes, items []*item, force bool) []string {
	var out []string
	for _, it := range items {
		for _, ix := range ti.indexes {
			if !ix.partition() || ix.Kind != KindCopy {
				continue
			}
			old, want := it.m.applied[ix.Name], it.wants[ix.Name].state
			if !force && want == old {
				continue
			}
			for _, v := range distinct(stateValue(old), stateValue(want)) {
				out = append(out, copyRowKey(ix, v))
			}
		}
	}
	return out
}

// copyProperties are a partition copy's properties: the copied content
// and its owner.
func copyProperties(rk string, content map[string]any) map[string]any {
	props := map[string]any{propOwner: rk}
	for k, v := range content {
		props[k] = v
	}
	return props
}

// readLists reads the partition lists items change, up to seven a query,
// by RowKey base.
func (x *Set) readLists(ctx context.Context, ti *tableIndexes, pk string, items []*item) (map[string]*list, error) {
	lists := map[string]*list{}
	var bases []string
	for _, it := range items {
		for _, ix := range ti.indexes {
			if !ix.partition() || ix.Kind != KindList {
				continue
			}
			for _, v := range distinct(stateValue(it.m.applied[ix.Name]), stateValue(it.wants[ix.Name].state)) {
				if b := listBase(ix, v); lists[b] == nil {
					lists[b] = &list{pk: pk, base: b}
					bases = append(bases, b)
				}
			}
		}
	}
	const perQuery = (storeadapter.MaxFilterComparisons - 1) / 2
	for len(bases) > 0 {
		n := min(len(bases), perQuery)
		var ranges []storeadapter.Filter
		for _, b := range bases[:n] {
			ranges = append(ranges, partRange(b))
		}
		bases = bases[n:]
		err := queryAll(ctx, x.tables, ti.source, storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Or(ranges...))}, func(e storeadapter.Entity) error {
			for base, l := range lists {
				if strings.HasPrefix(e.RowKey, base) {
					return l.addPart(e)
				}
			}
			return nil
		})
		if err != nil && !idempotent.Missing(err) {
			return nil, err
		}
	}
	return lists, nil
}

// settleAll settles the pending values of the external indexes of the
// items (batch step 4) and returns, per item, the values each settled
// index wrote as tombstones (see clear); an index missing from an item's
// map is not settled for it.
func (x *Set) settleAll(ctx context.Context, ti *tableIndexes, items []*item) (map[*item]map[string][]string, error) {
	tombstoned := map[*item]map[string][]string{}
	for _, ix := range ti.indexes {
		if ix.partition() {
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
		res, err := x.applyAll(ctx, ix, ws)
		if err != nil {
			return nil, fmt.Errorf("index: %s index %s: %w", ti.source, ix.Name, err)
		}
		span = append(span, len(ws))
		for i, it := range owner {
			lo, hi := span[i], span[i+1]
			if dead, ok := settled(ix, ws[lo:hi], res[lo:hi], &it.out); ok {
				if tombstoned[it] == nil {
					tombstoned[it] = map[string][]string{}
				}
				tombstoned[it][ix.Name] = dead
			}
		}
	}
	return tombstoned, nil
}

// clearAll clears the settled values from the items' records and deletes
// the records of long-gone entities (batch step 5): the records are read
// again (their ETags changed at registration), then written per partition
// in transactions; a transaction that fails goes key by key.
func (x *Set) clearAll(ctx context.Context, ti *tableIndexes, items []*item, tombstoned map[*item]map[string][]string, res *SyncResult) error {
	cut := x.graceCut()
	byPK := map[string][]*item{}
	var pks []string
	for _, it := range items {
		if it.fallback || len(tombstoned[it]) == 0 && !(it.e == nil && it.rec != nil && !it.register && !it.m.held() && it.m.gen < cut) {
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
			if dead := tombstoned[it]; len(dead) > 0 {
				if next, ok := cleared(readMembership(cur), it.next, dead); ok {
					ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: next.entity(it.PK, it.RK), IfMatch: cur.ETag})
				}
				it.out.Changed = true
				continue
			}
			if m := readMembership(cur); !m.held() && m.gen < cut {
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
			if dead := tombstoned[it]; len(dead) > 0 {
				if err := x.clear(ctx, ti.source, it.PK, it.RK, it.next, "", dead); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
