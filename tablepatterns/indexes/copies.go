package indexes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// copyPartition is the PartitionKey of a table copy of an entity of
// partition pk.
func copyPartition(ix *index, pk string) string { return ix.Name + "_" + pk }

// applyCopies writes the copy rows of a table copy index for writes of
// keys of source partition pk: PartitionKey "<name>_<pk>", RowKey
// "~tk.t." and the encoded value (tableCopyRowKey). A live row holds the
// copied properties, the owner's RowKey (tkOwner) and its generation
// (tkGen); tkTombs lists "gen\trk" of keys removed from the value within
// the grace period, whoever owns it now. One write goes by
// compare-and-swap (inserting first when live); several share reads of
// their rows (up to 14 values a query) and transactions, and go one by
// one when a transaction loses to another writer. rows, when not nil,
// are the rows of the writes' values already read: the writes go in one
// transaction from them, however many. It returns, per write, the conflict
// when the value is live for another entity.
func (x *Set) applyCopies(ctx context.Context, ix *index, pk string, ws []write, res []applied, rows map[string]*storeadapter.Entity) error {
	if len(ws) > 1 || rows != nil {
		err := x.applyCopiesBatch(ctx, ix, pk, ws, res, rows)
		if err == nil || !idempotent.Lost(err) {
			return err
		}
	}
	ppk := copyPartition(ix, pk)
	for i, w := range ws {
		err := x.cas(ctx, ix.table, ppk, tableCopyRowKey(w.value), w.live, func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
			var next *storeadapter.Entity
			next, res[i].err, res[i].woke = x.copyEntry(ix, cur, w)
			return next, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// copyEntry is the copy row a write makes of cur (nil: none): nil when a
// later generation was there; with the conflict, when the value is live
// for another entity — the row marked waited (propWaited) unless it is
// already, so that its owner's leaving wakes the writer's key; woke when
// the write takes its key, the owner, off a row others waited for.
func (x *Set) copyEntry(ix *index, cur *storeadapter.Entity, w write) (next *storeadapter.Entity, conflict error, woke bool) {
	owner, ownerGen, tombs := "", int64(0), map[string]int64{}
	var props map[string]any
	waited, _ := propBool(cur, propWaited)
	if cur != nil {
		owner, _ = cur.Properties[propOwner].(string)
		ownerGen, _ = cur.Properties[propGen].(int64)
		tombs = parseTombs(cur.Properties[propTombs])
		props = cur.Properties
	}
	if tombs[w.rk] >= w.gen || owner == w.rk && ownerGen >= w.gen {
		return nil, nil, false // a later generation was here
	}
	if w.live && owner != "" && owner != w.rk {
		conflict = fmt.Errorf("%w: index %s value %s of %s/%s is held by RowKey %q", ErrConflict, ix.Name, describe(w.value), w.pk, w.rk, owner)
		if waited {
			return nil, conflict, false
		}
		marked := cur.Clone()
		marked.ETag = ""
		marked.Properties[propWaited] = true
		next = &marked
		return next, conflict, false
	}
	x.pruneTombs(tombs)
	next = &storeadapter.Entity{PartitionKey: copyPartition(ix, w.pk), RowKey: tableCopyRowKey(w.value), Properties: map[string]any{}}
	switch {
	case w.live:
		maps.Copy(next.Properties, w.content)
		next.Properties[propOwner], next.Properties[propGen] = w.rk, w.gen
		if waited { // still waited for: the owner keeps the value
			next.Properties[propWaited] = true
		}
		delete(tombs, w.rk)
	default:
		woke = waited && owner == w.rk
		if owner != "" && owner != w.rk { // keep the other owner's copy
			for k, v := range props {
				if k != propTombs {
					next.Properties[k] = v
				}
			}
		}
		tombs[w.rk] = w.gen
	}
	if len(tombs) > 0 {
		next.Properties[propTombs] = formatTombs(tombs)
	}
	return next, nil, woke
}

// applyCopiesBatch is applyCopies for several writes: the rows of their
// values read up to 14 a query (unless rows holds them), the writes
// applied in order (two writes to one value make one op), then
// transactions.
func (x *Set) applyCopiesBatch(ctx context.Context, ix *index, pk string, ws []write, res []applied, rows map[string]*storeadapter.Entity) error {
	if rows == nil {
		var keys []string
		for _, w := range ws {
			keys = append(keys, tableCopyRowKey(w.value))
		}
		var err error
		if rows, err = x.readRows(ctx, ix.table, copyPartition(ix, pk), keys); err != nil {
			return err
		}
	}
	type row struct {
		read *storeadapter.Entity // as read (nil: none)
		cur  *storeadapter.Entity // after the writes so far
	}
	state := map[string]*row{}
	var order []string
	for i, w := range ws {
		k := tableCopyRowKey(w.value)
		r := state[k]
		if r == nil {
			r = &row{read: rows[k], cur: rows[k]}
			state[k] = r
			order = append(order, k)
		}
		var next *storeadapter.Entity
		next, res[i].err, res[i].woke = x.copyEntry(ix, r.cur, w)
		if next != nil {
			next.ETag = ""
			r.cur = next
		}
	}
	var ops []storeadapter.TableOp
	for _, k := range order {
		r := state[k]
		switch {
		case r.cur == r.read:
		case r.read == nil:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: *r.cur})
		default:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: *r.cur, IfMatch: r.read.ETag})
		}
	}
	return x.transactAll(ctx, ix.table, ops)
}

// readRows reads the rows of one partition with the given RowKeys (up to
// 14 a query: Azure allows 15 comparisons in a filter), by RowKey; a
// missing table holds none.
func (x *Set) readRows(ctx context.Context, table, pk string, rks []string) (map[string]*storeadapter.Entity, error) {
	rows := map[string]*storeadapter.Entity{}
	rks = slices.Compact(slices.Sorted(slices.Values(rks)))
	const perQuery = storeadapter.MaxFilterComparisons - 1
	for len(rks) > 0 {
		n := min(len(rks), perQuery)
		var eqs []storeadapter.Filter
		for _, rk := range rks[:n] {
			eqs = append(eqs, storeadapter.Compare("RowKey", storeadapter.Eq, rk))
		}
		rks = rks[n:]
		err := queryAll(ctx, x.tables, table, storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Or(eqs...))}, func(e storeadapter.Entity) error {
			rows[e.RowKey] = &e
			return nil
		})
		if idempotent.Missing(err) {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// parseTombs reads a tkTombs property.
func parseTombs(v any) map[string]int64 {
	out := map[string]int64{}
	s, _ := v.(string)
	for line := range strings.SplitSeq(s, "\n") {
		gen, rk, ok := strings.Cut(line, "\t")
		if n, err := strconv.ParseInt(gen, 10, 64); ok && err == nil {
			out[rk] = n
		}
	}
	return out
}

func formatTombs(tombs map[string]int64) string {
	var lines []string
	for _, rk := range slices.Sorted(maps.Keys(tombs)) {
		lines = append(lines, strconv.FormatInt(tombs[rk], 10)+"\t"+rk)
	}
	return strings.Join(lines, "\n")
}

// pruneTombs drops tombstones older than the grace period.
func (x *Set) pruneTombs(tombs map[string]int64) {
	cut := x.graceCut()
	maps.DeleteFunc(tombs, func(_ string, gen int64) bool { return gen < cut })
}
