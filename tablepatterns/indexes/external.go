package indexes

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

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
}

// newer reports whether a write of generation g should replace cur.
func newer(cur *member, g int64) bool { return cur == nil || cur.gen < g }

// listLine renders a member line of a table or blob list: key pair,
// generation, and "D" for a tombstone.
func listLine(pk, rk string, m member) string {
	flag := "L"
	if m.dead {
		flag = "D"
	}
	return pk + "\t" + rk + "\t" + strconv.FormatInt(m.gen, 10) + "\t" + flag
}

// parseListLine reads a member line of a table or blob list.
func parseListLine(line string) (pk, rk string, m member, err error) {
	f := strings.Split(line, "\t")
	if len(f) != 4 {
		return "", "", m, fmt.Errorf("index: list line %q: want 4 fields", storeadapter.Truncate(line, 60))
	}
	m.gen, err = strconv.ParseInt(f[2], 10, 64)
	m.dead = f[3] == "D"
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
}

// applied is what applyAll made of one write: err wraps ErrConflict (a
// copy's value live for another entity) or ErrTooLarge (a list at its
// limit) when the write could not be made; woke is set when the write
// took its key off a table copy other entities waited for (see wake).
type applied struct {
	err  error
	woke bool
}

// applyAll makes the entries of an external index hold the writes, as
// few calls as the store allows: the writes to one entry (a list's value,
// a rows index's value partition, a table copy's source partition) share
// one read and one write. It returns what it made of each write; any
// other error ends it.
func (x *Set) applyAll(ctx context.Context, ix *index, ws []write) ([]applied, error) {
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
		switch {
		case ix.Kind == KindRows:
			err = x.applyRows(ctx, ix, g, group)
		case ix.Kind == KindCopy:
			err = x.applyCopies(ctx, ix, g, group, gres)
		case ix.Store == StoreBlob:
			err = x.applyBlob(ctx, ix, g, group)
		default:
			var errs []error
			errs, err = x.applyTableList(ctx, ix, g, group)
			for j, e := range errs {
				gres[j].err = e
			}
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

// cas runs idempotent.UpdateCAS on an index table (created when missing),
// replacing the entity. With absent, the entity is expected not to exist
// (the entry of a value the key is new to): its first round inserts what
// modify makes of no entity, without reading, and reads only when the
// insert finds one.
func (x *Set) cas(ctx context.Context, table, pk, rk string, absent bool, modify func(cur *storeadapter.Entity) (*storeadapter.Entity, error)) error {
	return idempotent.CreateOnMissing(ctx, idempotent.TableCreator(x.tables, table), func(ctx context.Context) error {
		if absent {
			e, err := modify(nil)
			if err != nil || e == nil {
				return err
			}
			_, err = x.tables.InsertEntity(ctx, table, *e)
			if !errors.Is(err, storeadapter.ErrAlreadyExists) {
				return err
			}
		}
		_, err := idempotent.UpdateCAS(ctx, x.tables, table, pk, rk, modify, idempotent.CASOptions{Mode: storeadapter.Replace, Tries: x.cfg.MaxConflicts})
		return err
	})
}

// applyRows writes the entries of one value of a rows index (one row
// per key in the value's partition). One write goes by compare-and-swap,
// inserting first when it is live (the common case: a key new to the
// value); several share one range read of their rows and transactions of
// up to 100 writes, each If-Match the row read (an insert where there was
// none), and go one by one when a transaction loses to another writer.
func (x *Set) applyRows(ctx context.Context, ix *index, value string, ws []write) error {
	if len(ws) > 1 {
		err := x.applyRowsBatch(ctx, ix, value, ws)
		if err == nil || !idempotent.Lost(err) {
			return err
		}
	}
	for _, w := range ws {
		err := x.cas(ctx, ix.table, value, memberKey(w.pk, w.rk), w.live, func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
			return rowsEntry(cur, w), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// rowsEntry is the row a write makes of cur (nil: none), nil when cur
// already holds a generation ≥ the write's.
func rowsEntry(cur *storeadapter.Entity, w write) *storeadapter.Entity {
	if cur != nil {
		if gen, _ := cur.Properties[propGen].(int64); gen >= w.gen {
			return nil
		}
	}
	return &storeadapter.Entity{PartitionKey: w.value, RowKey: memberKey(w.pk, w.rk), Properties: map[string]any{propGen: w.gen, propDead: !w.live}}
}

// applyRowsBatch is applyRows for several writes: one range query of the
// writes' rows, then transactions.
func (x *Set) applyRowsBatch(ctx context.Context, ix *index, value string, ws []write) error {
	lo, hi := memberKey(ws[0].pk, ws[0].rk), memberKey(ws[0].pk, ws[0].rk)
	for _, w := range ws[1:] {
		k := memberKey(w.pk, w.rk)
		lo, hi = minUTF16(lo, k), maxUTF16(hi, k)
	}
	rows := map[string]*storeadapter.Entity{}
	f := storeadapter.And(storeadapter.PartitionEquals(value), storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi))
	err := queryAll(ctx, x.tables, ix.table, storeadapter.Query{Filter: f}, func(e storeadapter.Entity) error {
		rows[e.RowKey] = &e
		return nil
	})
	if err != nil && !idempotent.Missing(err) {
		return err
	}
	var ops []storeadapter.TableOp
	for _, w := range ws {
		cur := rows[memberKey(w.pk, w.rk)]
		next := rowsEntry(cur, w)
		switch {
		case next == nil:
		case cur == nil:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: *next})
		default:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: *next, IfMatch: cur.ETag})
		}
		rows[memberKey(w.pk, w.rk)] = nil // a key written twice in one batch: the first write decides
	}
	return x.transactAll(ctx, ix.table, ops)
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
// one when a transaction loses to another writer. It returns, per write,
// the conflict when the value is live for another entity.
func (x *Set) applyCopies(ctx context.Context, ix *index, pk string, ws []write, res []applied) error {
	if len(ws) > 1 {
		err := x.applyCopiesBatch(ctx, ix, pk, ws, res)
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
// values read up to 14 a query, the writes applied in order (two writes to
// one value make one op), then transactions.
func (x *Set) applyCopiesBatch(ctx context.Context, ix *index, pk string, ws []write, res []applied) error {
	ppk := copyPartition(ix, pk)
	var keys []string
	for _, w := range ws {
		keys = append(keys, tableCopyRowKey(w.value))
	}
	rows, err := x.readRows(ctx, ix.table, ppk, keys)
	if err != nil {
		return err
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

// graceCut is the generation below which tombstones may go: generations
// are microseconds since 1970 (see nextGen).
func (x *Set) graceCut() int64 {
	return x.now().Add(-time.Duration(x.cfg.TombstoneGrace)).UnixMicro()
}

// keepLine reports whether a list line is still needed: not a tombstone
// past the grace period.
func (x *Set) keepLine(cut int64) func(string) bool {
	return func(line string) bool {
		_, _, m, err := parseListLine(line)
		return err != nil || !m.dead || m.gen >= cut
	}
}

// tableListPartition is the PartitionKey of a table list's parts.
func tableListPartition(ix *index, value string) string { return ix.Name + "_" + value }

// tableListBase is the RowKey base of a table list's parts.
const tableListBase = "p"

// applyTableList writes the lines of writes to one value's table list:
// one read of its parts and one transaction, again while it loses to
// another writer. Tombstones go first, so that removals make room; a
// line that does not fit (the list at its limit) is left out, its error
// returned for its write, and the others are written.
func (x *Set) applyTableList(ctx context.Context, ix *index, value string, ws []write) ([]error, error) {
	ppk := tableListPartition(ix, value)
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(b2i(ws[a].live), b2i(ws[b].live)) })
	for try := 1; ; try++ {
		errs := make([]error, len(ws))
		l, err := readList(ctx, x.tables, ix.table, ppk, tableListBase)
		if err != nil {
			return errs, err
		}
		for _, i := range order {
			w := ws[i]
			key := w.pk + "\t" + w.rk
			if cur, ok := lineMember(l.line(key)); ok && !newer(&cur, w.gen) {
				continue
			}
			err := l.set(key, listLine(w.pk, w.rk, member{gen: w.gen, dead: !w.live}))
			if errors.Is(err, storeadapter.ErrTooLarge) {
				errs[i] = err
				continue
			}
			if err != nil {
				return errs, err
			}
		}
		l.prune(x.keepLine(x.graceCut()))
		ops := l.ops(true)
		if len(ops) == 0 {
			return errs, nil
		}
		err = idempotent.Transact(ctx, x.tables, ix.table, ops)
		if err == nil || !idempotent.Lost(err) || try >= x.cfg.MaxConflicts {
			return errs, err
		}
		if err := x.pause(ctx, try); err != nil {
			return errs, err
		}
	}
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lineMember reads the member of a list line ("" is none).
func lineMember(line string) (member, bool) {
	if line == "" {
		return member{}, false
	}
	_, _, m, err := parseListLine(line)
	return m, err == nil
}

// blobListName is the blob of a blob list's value.
func blobListName(ix *index, value string) string { return ix.source + "/" + ix.Name + "/" + value }

// applyBlob writes the lines of writes to one value's blob list: one get
// and one put If-Match, again while it loses to another writer.
func (x *Set) applyBlob(ctx context.Context, ix *index, value string, ws []write) error {
	c := x.store.Container(ix.Container)
	name := blobListName(ix, value)
	for try := 1; ; try++ {
		lines, etag, err := readBlobList(ctx, c, name)
		if err != nil {
			return err
		}
		changed := false
		for _, w := range ws {
			key := w.pk + "\t" + w.rk
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+"\t") })
			if i >= 0 {
				if cur, ok := lineMember(lines[i]); ok && !newer(&cur, w.gen) {
					continue
				}
				lines = slices.Delete(lines, i, i+1)
			}
			lines, changed = append(lines, listLine(w.pk, w.rk, member{gen: w.gen, dead: !w.live})), true
		}
		if !changed {
			return nil
		}
		keep := x.keepLine(x.graceCut())
		lines = slices.DeleteFunc(lines, func(l string) bool { return !keep(l) })
		slices.Sort(lines)
		o := storeadapter.PutOptions{ContentType: "text/plain; charset=utf-8", IfMatch: etag, IfNoneMatchAny: etag == ""}
		err = idempotent.CreateOnMissing(ctx, c.Create, func(ctx context.Context) error {
			_, err := c.Put(ctx, name, []byte(strings.Join(lines, "\n")+"\n"), o)
			return err
		})
		if err == nil || !idempotent.Lost(err) || try >= x.cfg.MaxConflicts {
			return err
		}
		if err := x.pause(ctx, try); err != nil {
			return err
		}
	}
}

// readBlobList reads a blob list's lines and ETag ("" when missing).
func readBlobList(ctx context.Context, c storeadapter.Blobs, name string) ([]string, string, error) {
	data, props, err := c.Get(ctx, name)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var lines []string
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(line) > 0 {
			lines = append(lines, string(line))
		}
	}
	return lines, props.ETag, nil
}
