package indexes

import (
	"bytes"
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

// apply makes one entry of an external index hold key (pk, rk) live
// (with content, for a copy) or as a tombstone, at generation g, unless
// the entry already holds a generation ≥ g for it. It returns an error
// wrapping ErrConflict when a copy's value is live for another entity.
func (x *Set) apply(ctx context.Context, ix *index, value, pk, rk string, g int64, live bool, content map[string]any) error {
	switch {
	case ix.Kind == KindRows:
		return x.applyRows(ctx, ix, value, pk, rk, g, live)
	case ix.Kind == KindCopy:
		return x.applyCopy(ctx, ix, value, pk, rk, g, live, content)
	case ix.Store == StoreBlob:
		return x.applyBlob(ctx, ix, value, pk, rk, g, live)
	default:
		return x.applyTableList(ctx, ix, value, pk, rk, g, live)
	}
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

func (x *Set) applyRows(ctx context.Context, ix *index, value, pk, rk string, g int64, live bool) error {
	return x.cas(ctx, ix.table, value, memberKey(pk, rk), live, func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		if cur != nil {
			gen, _ := cur.Properties[propGen].(int64)
			if gen >= g {
				return nil, nil
			}
		}
		return &storeadapter.Entity{PartitionKey: value, RowKey: memberKey(pk, rk), Properties: map[string]any{propGen: g, propDead: !live}}, nil
	})
}

// copyPartition is the PartitionKey of a table copy of an entity of
// partition pk.
func copyPartition(ix *index, pk string) string { return ix.Name + "_" + pk }

// applyCopy writes one copy row of a table copy index: PartitionKey
// "<name>_<pk>", RowKey "~tk.t." and the encoded value (tableCopyRowKey). A live row holds the copied
// properties, the owner's RowKey (tkOwner) and its generation (tkGen);
// tkTombs lists "gen\trk" of keys removed from the value within the grace
// period, whoever owns it now.
func (x *Set) applyCopy(ctx context.Context, ix *index, value, pk, rk string, g int64, live bool, content map[string]any) error {
	ppk := copyPartition(ix, pk)
	var conflict error
	err := x.cas(ctx, ix.table, ppk, tableCopyRowKey(value), live, func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		conflict = nil
		owner, ownerGen, tombs := "", int64(0), map[string]int64{}
		var props map[string]any
		if cur != nil {
			owner, _ = cur.Properties[propOwner].(string)
			ownerGen, _ = cur.Properties[propGen].(int64)
			tombs = parseTombs(cur.Properties[propTombs])
			props = cur.Properties
		}
		if tombs[rk] >= g || owner == rk && ownerGen >= g {
			return nil, nil // a later generation was here
		}
		x.pruneTombs(tombs)
		next := &storeadapter.Entity{PartitionKey: ppk, RowKey: tableCopyRowKey(value), Properties: map[string]any{}}
		switch {
		case live && owner != "" && owner != rk:
			conflict = fmt.Errorf("%w: index %s value %s of %s/%s is held by RowKey %q", ErrConflict, ix.Name, describe(value), pk, rk, owner)
			return nil, nil
		case live:
			maps.Copy(next.Properties, content)
			next.Properties[propOwner], next.Properties[propGen] = rk, g
			delete(tombs, rk)
		default:
			if owner != "" && owner != rk { // keep the other owner's copy
				for k, v := range props {
					if k != propTombs {
						next.Properties[k] = v
					}
				}
			}
			tombs[rk] = g
		}
		if len(tombs) > 0 {
			next.Properties[propTombs] = formatTombs(tombs)
		}
		return next, nil
	})
	return errors.Join(err, conflict)
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

func (x *Set) applyTableList(ctx context.Context, ix *index, value, pk, rk string, g int64, live bool) error {
	ppk := tableListPartition(ix, value)
	key := pk + "\t" + rk
	for try := 1; ; try++ {
		l, err := readList(ctx, x.tables, ix.table, ppk, tableListBase)
		if err != nil {
			return err
		}
		if cur, ok := lineMember(l.line(key)); ok && !newer(&cur, g) {
			return nil
		}
		if err := l.set(key, listLine(pk, rk, member{gen: g, dead: !live})); err != nil {
			return err
		}
		l.prune(x.keepLine(x.graceCut()))
		err = idempotent.Transact(ctx, x.tables, ix.table, l.ops(true))
		if err == nil || !idempotent.Lost(err) || try >= x.cfg.MaxConflicts {
			return err
		}
		if err := x.pause(ctx, try); err != nil {
			return err
		}
	}
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

func (x *Set) applyBlob(ctx context.Context, ix *index, value, pk, rk string, g int64, live bool) error {
	c := x.store.Container(ix.Container)
	name := blobListName(ix, value)
	key := pk + "\t" + rk
	for try := 1; ; try++ {
		lines, etag, err := readBlobList(ctx, c, name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+"\t") })
		if i >= 0 {
			if cur, ok := lineMember(lines[i]); ok && !newer(&cur, g) {
				return nil
			}
			lines = slices.Delete(lines, i, i+1)
		}
		keep := x.keepLine(x.graceCut())
		lines = slices.DeleteFunc(append(lines, listLine(pk, rk, member{gen: g, dead: !live})), func(l string) bool { return !keep(l) })
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
