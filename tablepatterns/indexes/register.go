package indexes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// registerAll registers the items of one partition (batch step 3).
func (x *Set) registerAll(ctx context.Context, ti *tableIndexes, pk string, items []*item, force bool) error {
	var reg, fences []*item
	for _, it := range items {
		switch {
		case it.register:
			reg = append(reg, it)
		case it.fence:
			fences = append(fences, it)
		}
	}
	if err := x.fenceAll(ctx, ti, fences); err != nil {
		return err
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

// fenceAll writes the fences of items of one partition (see
// Set.Reconcile, step 2), up to a transaction's operations at once: each
// record as it is, with the entity's ETag as R, If-Match the record read
// (a format-1 record with rows to settle in format 2, at a generation of
// its own: see fromFormat1). A transaction that loses sends its keys
// through Reconcile, which reads them again.
func (x *Set) fenceAll(ctx context.Context, ti *tableIndexes, items []*item) error {
	for group := range slices.Chunk(items, storeadapter.MaxBatchOps) {
		ops := make([]storeadapter.TableOp, 0, len(group))
		for _, it := range group {
			next := it.m.clone()
			next.seen = seenTag(it.e)
			if it.m.rewrite { // see Reconcile's fence
				next.gen = max(it.m.gen+1, x.clock.Now().UnixMicro())
			}
			next = next.toWrite()
			it.next = next
			ops = append(ops, recordOp(it.m, next.entity(it.PK, it.RK)))
		}
		err := x.tables.Transact(ctx, ti.source, ops)
		if err == nil || !idempotent.Lost(err) {
			return err
		}
		for _, it := range group {
			if err := x.fallback(ctx, ti, it, false); err != nil {
				return err
			}
		}
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
		next.gen = it.m.nextGen(x.clock.Now().UnixMicro())
		// The chunk read the entity after its record (see chunk): the
		// version it read is kept, as a reconcile keeps it.
		next.seen = seenTag(it.e)
		for _, ix := range ti.indexes {
			w := it.wants[ix.Name]
			old := it.m.applied[ix.Name]
			if !force && w.state == old {
				continue
			}
			if ix.rowsKeyed() {
				next.rows[ix.Name] = next.rows[ix.Name].changed(stateValue(old), stateValue(w.state), next.gen, legacyGen(ix, it.m.gen))
				next.applied[ix.Name] = w.state
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
		it.next = next.toWrite()
		ops = append(ops, recordOp(it.m, it.next.entity(it.PK, it.RK)))
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

// recheck reads again, after their registrations, the entities of the
// items of a chunk whose records the batch inserted: no record fenced
// those registrations (see Set.Reconcile, step 3). A key whose entity was
// written since goes through Reconcile, which registers it again. One
// partition's are read as readRecords reads records (by RowKey, or their
// span); several partitions' with one query over the span from the first
// key to the last.
func (x *Set) recheck(ctx context.Context, ti *tableIndexes, items []*item, force bool) error {
	var inserted []*item
	var rks []string
	for _, it := range items {
		if it.register && it.settle && !it.fallback && !it.m.exists {
			inserted = append(inserted, it)
			rks = append(rks, it.RK)
		}
	}
	if len(inserted) == 0 {
		return nil
	}
	now := map[Key]*storeadapter.Entity{}
	lo, hi := inserted[0].Key, inserted[0].Key
	for _, it := range inserted[1:] {
		if it.Key.Compare(lo) < 0 {
			lo = it.Key
		}
		if it.Key.Compare(hi) > 0 {
			hi = it.Key
		}
	}
	if lo.PK == hi.PK {
		rows, err := x.readRowKeys(ctx, ti.source, lo.PK, rks)
		if err != nil {
			return err
		}
		for rk, e := range rows {
			now[Key{PK: lo.PK, RK: rk}] = e
		}
	} else {
		err := queryAll(ctx, x.tables, ti.source, storeadapter.Query{Filter: Span{From: &lo, Through: &hi}.filter("")}, func(e storeadapter.Entity) error {
			now[Key{PK: e.PartitionKey, RK: e.RowKey}] = &e
			return nil
		})
		if err != nil && !idempotent.Missing(err) {
			return err
		}
	}
	for _, it := range inserted {
		if seenTag(now[it.Key]) != seenTag(it.e) {
			if err := x.fallback(ctx, ti, it, force); err != nil {
				return err
			}
		}
	}
	return nil
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
