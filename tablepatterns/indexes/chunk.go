package indexes

import (
	"context"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

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
	if len(plain) <= fewKeys {
		return x.readRows(ctx, ti.source, pk, append(plain, hashed...))
	}
	recs, err := x.readRows(ctx, ti.source, pk, hashed)
	if err != nil {
		return nil, err
	}
	return recs, x.readSpanOf(ctx, ti.source, pk, plain, recs)
}

// fewKeys is how many RowKeys readRowKeys reads with point comparisons (two
// queries); more are read with one range query over their span.
const fewKeys = 2 * (storeadapter.MaxFilterComparisons - 1)

// readRowKeys reads the rows of a partition with those RowKeys (a missing
// one is not in the map) as readRecords reads records: few by point
// comparisons, many (a chunk's keys are contiguous) by their span.
func (x *Set) readRowKeys(ctx context.Context, table, pk string, rks []string) (map[string]*storeadapter.Entity, error) {
	if len(rks) <= fewKeys {
		return x.readRows(ctx, table, pk, rks)
	}
	rows := map[string]*storeadapter.Entity{}
	return rows, x.readSpanOf(ctx, table, pk, rks, rows)
}

// readSpanOf adds to rows those of the partition with the RowKeys rks
// (not empty), read with one range query from the least to the greatest.
func (x *Set) readSpanOf(ctx context.Context, table, pk string, rks []string, rows map[string]*storeadapter.Entity) error {
	lo, hi := rks[0], rks[0]
	want := make(map[string]bool, len(rks))
	for _, rk := range rks {
		lo, hi, want[rk] = minUTF16(lo, rk), maxUTF16(hi, rk), true
	}
	f := storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi))
	err := queryAll(ctx, x.tables, table, storeadapter.Query{Filter: f}, func(e storeadapter.Entity) error {
		if want[e.RowKey] {
			rows[e.RowKey] = &e
		}
		return nil
	})
	if err != nil && !idempotent.Missing(err) {
		return err
	}
	return nil
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
