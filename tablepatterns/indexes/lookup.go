package indexes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Key is a source entity's key.
type Key = storeadapter.Key

// Match is one result of Lookup.
type Match struct {
	Key
	// Entity is set with LookupOptions.Entities: for a copy index the
	// copy (the index's own row, without its bookkeeping properties, under
	// the source entity's keys), else the source entity as it is now; nil
	// when it no longer exists.
	Entity *storeadapter.Entity `json:"entity,omitempty"`
}

// LookupOptions refine Lookup.
type LookupOptions struct {
	// PK limits the results to one partition; the partition stores
	// require it (they are kept per partition).
	PK *string
	// Entities also returns the entities.
	Entities bool
}

// Lookup returns the keys of the entities an index lists under value (a
// string, bool, int32, int64, float64, time.Time, storeadapter.GUID or
// []byte: the property's type), in key order, reading the index only: a
// partition copy or the table copy of one partition is one point read, a
// list one range query (or one blob), a rows index one partition query.
func (x *Set) Lookup(ctx context.Context, table, name string, value any, o LookupOptions) ([]Match, error) {
	ix, err := x.index(table, name)
	if err != nil {
		return nil, err
	}
	v, err := EncodeValue(value)
	if err != nil {
		return nil, fmt.Errorf("index: lookup %s.%s: %w", table, ix.Name, err)
	}
	if ix.partition() && o.PK == nil {
		return nil, fmt.Errorf("index: lookup %s.%s: the index is kept in each partition: give the partition key (pk): %w", table, ix.Name, storeadapter.ErrInvalidInput)
	}
	var out []Match
	add := func(k Key, copied *storeadapter.Entity) {
		if o.PK == nil || *o.PK == k.PK {
			out = append(out, Match{Key: k, Entity: copied})
		}
	}
	switch {
	case ix.Kind == KindCopy && ix.partition():
		row, err := getOptional(ctx, x.tables, ix.source, *o.PK, copyRowKey(ix, v))
		if err != nil {
			return nil, err
		}
		if owner, _ := propString(row, propOwner); owner != "" {
			add(Key{PK: *o.PK, RK: owner}, row)
		}
	case ix.Kind == KindCopy:
		f := storeadapter.And(storeadapter.KeyPrefix("PartitionKey", ix.Name+"_"), storeadapter.Compare("RowKey", storeadapter.Eq, tableCopyRowKey(v)))
		if o.PK != nil {
			f = storeadapter.And(storeadapter.PartitionEquals(copyPartition(ix, *o.PK)), storeadapter.Compare("RowKey", storeadapter.Eq, tableCopyRowKey(v)))
		}
		err := queryAll(ctx, x.tables, ix.table, storeadapter.Query{Filter: f}, func(e storeadapter.Entity) error {
			if owner, _ := propString(&e, propOwner); owner != "" {
				add(Key{PK: strings.TrimPrefix(e.PartitionKey, ix.Name+"_"), RK: owner}, &e)
			}
			return nil
		})
		if err != nil && !idempotent.Missing(err) {
			return nil, err
		}
	case ix.Kind == KindList && ix.partition():
		l, err := readList(ctx, x.tables, ix.source, *o.PK, listBase(ix, v))
		if err != nil {
			return nil, err
		}
		for _, rk := range l.lines() {
			add(Key{PK: *o.PK, RK: rk}, nil)
		}
	case ix.Kind == KindRows:
		f := storeadapter.And(storeadapter.PartitionEquals(v), storeadapter.Compare(propDead, storeadapter.Eq, false))
		if o.PK != nil {
			lo := EscapeKey(*o.PK) + keySep
			f = storeadapter.And(f, storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Lt, EscapeKey(*o.PK)+" \""))
		}
		var last Key // a key's rows are next to each other (see genDigits): one match each
		err := queryAll(ctx, x.tables, ix.table, storeadapter.Query{Filter: f, Select: []string{propDead}}, func(e storeadapter.Entity) error {
			pk, rk, err := splitMemberKey(e.RowKey)
			if err != nil {
				return err
			}
			if k := (Key{PK: pk, RK: rk}); len(out) == 0 || k != last {
				last = k
				add(k, nil)
			}
			return nil
		})
		if err != nil && !idempotent.Missing(err) {
			return nil, err
		}
	default:
		lines, err := x.listLines(ctx, ix, v)
		if err != nil {
			return nil, err
		}
		for _, line := range lines {
			if pk, rk, m, err := parseListLine(line); err == nil && !m.dead {
				add(Key{PK: pk, RK: rk}, nil)
			}
		}
	}
	slices.SortFunc(out, func(a, b Match) int { return a.Key.Compare(b.Key) })
	if !o.Entities {
		for i := range out {
			out[i].Entity = nil
		}
		return out, nil
	}
	for i := range out {
		if out[i].Entity != nil { // a copy
			c := stripBookkeeping(*out[i].Entity)
			c.PartitionKey, c.RowKey = out[i].PK, out[i].RK
			out[i].Entity = &c
			continue
		}
		if out[i].Entity, err = getOptional(ctx, x.tables, ix.source, out[i].PK, out[i].RK); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// listLines reads the member lines of a table or blob list (a table
// list's folded: one per key, see markers).
func (x *Set) listLines(ctx context.Context, ix *index, v string) ([]string, error) {
	if ix.Store == StoreBlob {
		lines, _, err := readBlobList(ctx, x.store.Container(ix.Container), blobListName(ix, v))
		if idempotent.Missing(err) {
			return nil, nil
		}
		return lines, err
	}
	return x.readTableList(ctx, ix, v)
}

func propString(e *storeadapter.Entity, name string) (string, bool) {
	if e == nil {
		return "", false
	}
	s, ok := e.Properties[name].(string)
	return s, ok
}

// stripBookkeeping returns a copy's entity without the bookkeeping
// properties.
func stripBookkeeping(e storeadapter.Entity) storeadapter.Entity {
	c := e.Clone()
	for k := range c.Properties {
		if reservedProperty(k) {
			delete(c.Properties, k)
		}
	}
	return c
}

// Entry is one entry of an index as Entries visits it.
type Entry struct {
	// Value is the indexed value, Encoded its key text.
	Value   any
	Encoded string
	Key
	// Dead marks a tombstone (visited only by the rebuild's sweep), Gen
	// the generation of the entry's last write (table, rows and blob
	// stores).
	Dead bool
	Gen  int64
	// written is the Timestamp of the entry's row (not of a list's line).
	written time.Time
	row     int64 // see member.row
	folded  bool  // see member.folded
}

// Entries visits every entry of an index (live ones only), page by page:
// memory does not grow with the index. For the partition stores it scans
// the source table's reserved rows.
func (x *Set) Entries(ctx context.Context, table, name string, visit func(Entry) error) error {
	ix, err := x.index(table, name)
	if err != nil {
		return err
	}
	return x.scanMembers(ctx, ix, func(e Entry) error {
		if e.Dead {
			return nil
		}
		return visit(e)
	})
}

// scanMembers visits every entry of an index as scanEntries does, but a
// table list's as its members (one per key, the entry that decides: see
// markers), each value's once all its entries are read.
func (x *Set) scanMembers(ctx context.Context, ix *index, visit func(Entry) error) error {
	if ix.Kind != KindList || ix.Store != StoreTable {
		return x.scanEntries(ctx, ix, nil, "", visit, nil)
	}
	f := &memberScan{visit: visit}
	if err := x.scanEntries(ctx, ix, nil, "", f.add, nil); err != nil {
		return err
	}
	return f.flush()
}

// scanEntries visits every entry of an index, tombstones included,
// starting at a continuation token (a query's or a blob listing's), and
// calls page with the token of the next page after each page ("" after
// the last). With pk, the partition stores and a table copy read that
// partition's entries only (the others visit every entry).
func (x *Set) scanEntries(ctx context.Context, ix *index, pk *string, token string, visit func(Entry) error, page func(next string) error) error {
	entry := func(value string, k Key, m member) error {
		v, err := DecodeValue(value)
		if err != nil {
			return fmt.Errorf("index %s: entry of %s/%s: %w", ix.Name, k.PK, k.RK, err)
		}
		return visit(Entry{Value: v, Encoded: value, Key: k, Dead: m.dead, Gen: m.gen, written: m.written, row: m.row, folded: m.folded})
	}
	if ix.Store == StoreBlob {
		return x.scanBlobs(ctx, ix, token, entry, page)
	}
	table, q := ix.table, storeadapter.Query{Continuation: token}
	var prefix string
	switch {
	case ix.partition():
		table = ix.source
		prefix = copyPrefix
		if ix.Kind == KindList {
			prefix = listPrefix
		}
		prefix += ix.Name + "_"
		q.Filter = storeadapter.KeyPrefix("RowKey", prefix)
		if pk != nil {
			q.Filter = storeadapter.And(storeadapter.PartitionEquals(*pk), q.Filter)
		}
	case ix.Kind == KindCopy:
		prefix = ix.Name + "_"
		q.Filter = storeadapter.And(storeadapter.KeyPrefix("PartitionKey", prefix), storeadapter.KeyPrefix("RowKey", tableCopyPrefix))
		if pk != nil {
			q.Filter = storeadapter.And(storeadapter.PartitionEquals(copyPartition(ix, *pk)), storeadapter.KeyPrefix("RowKey", tableCopyPrefix))
		}
	case ix.Kind != KindRows:
		prefix = ix.Name + "_"
		q.Filter = storeadapter.KeyPrefix("PartitionKey", prefix)
	}
	err := paginate(token, func(token string) (string, error) {
		q.Continuation = token
		p, err := x.tables.Query(ctx, table, q)
		if err != nil {
			return "", err
		}
		for _, e := range p.Entities {
			if err := x.visitRow(ix, prefix, e, entry); err != nil {
				return "", err
			}
		}
		return p.Next, nil
	}, page)
	if idempotent.Missing(err) { // an index never written
		return nilPage(page)
	}
	return err
}

func nilPage(page func(string) error) error {
	if page == nil {
		return nil
	}
	return page("")
}

// visitRow visits the entries of one index row.
func (x *Set) visitRow(ix *index, prefix string, e storeadapter.Entity, entry func(string, Key, member) error) error {
	switch {
	case ix.Kind == KindRows:
		pk, rk, err := splitMemberKey(e.RowKey)
		if err != nil {
			return err
		}
		return entry(e.PartitionKey, Key{PK: pk, RK: rk}, rowMember(e, e.RowKey))
	case ix.Kind == KindCopy && ix.partition():
		owner, _ := propString(&e, propOwner)
		return entry(strings.TrimPrefix(e.RowKey, prefix), Key{PK: e.PartitionKey, RK: owner}, member{written: e.Timestamp})
	case ix.Kind == KindCopy:
		pk, value := strings.TrimPrefix(e.PartitionKey, prefix), strings.TrimPrefix(e.RowKey, tableCopyPrefix)
		if owner, _ := propString(&e, propOwner); owner != "" {
			gen, _ := e.Properties[propGen].(int64)
			if err := entry(value, Key{PK: pk, RK: owner}, member{gen: gen, written: e.Timestamp}); err != nil {
				return err
			}
		}
		for rk, gen := range parseTombs(e.Properties[propTombs]) {
			if err := entry(value, Key{PK: pk, RK: rk}, member{gen: gen, dead: true}); err != nil {
				return err
			}
		}
		return nil
	case ix.partition(): // a partition list part
		value, _, ok := strings.Cut(strings.TrimPrefix(e.RowKey, prefix), keySep)
		if !ok {
			return fmt.Errorf("index %s: list part %s/%s: no part number", ix.Name, e.PartitionKey, e.RowKey)
		}
		for _, rk := range partLines(e) {
			if err := entry(value, Key{PK: e.PartitionKey, RK: rk}, member{}); err != nil {
				return err
			}
		}
		return nil
	case isMarker(e.RowKey): // a table list's marker
		pk, rk, m, err := markerEntry(e)
		if err != nil {
			return err
		}
		return entry(strings.TrimPrefix(e.PartitionKey, prefix), Key{PK: pk, RK: rk}, m)
	default: // a table list part
		value := strings.TrimPrefix(e.PartitionKey, prefix)
		for _, line := range partLines(e) {
			if err := visitLine(value, line, entry); err != nil {
				return err
			}
		}
		return nil
	}
}

// visitLine visits one line of a table or blob list.
func visitLine(value, line string, entry func(string, Key, member) error) error {
	pk, rk, m, err := parseListLine(line)
	if err != nil {
		return err
	}
	return entry(value, Key{PK: pk, RK: rk}, m)
}

// partLines returns the lines of a list part entity.
func partLines(e storeadapter.Entity) []string {
	var out []string
	for i := 0; ; i++ {
		s, ok := e.Properties[fmt.Sprintf("L%d", i)].(string)
		if !ok {
			return out
		}
		for line := range strings.SplitSeq(s, "\n") {
			if line != "" {
				out = append(out, line)
			}
		}
	}
}

// scanBlobs visits the entries of a blob list index, a listing page at a
// time.
func (x *Set) scanBlobs(ctx context.Context, ix *index, marker string, entry func(string, Key, member) error, page func(string) error) error {
	c := x.store.Container(ix.Container)
	prefix := blobListName(ix, "")
	err := paginate(marker, func(marker string) (string, error) {
		p, err := c.List(ctx, prefix, marker)
		if err != nil {
			return "", err
		}
		for _, b := range p.Blobs {
			lines, _, err := readBlobList(ctx, c, b.Name)
			if err != nil {
				return "", err
			}
			for _, line := range lines {
				if err := visitLine(strings.TrimPrefix(b.Name, prefix), line, entry); err != nil {
					return "", err
				}
			}
		}
		return p.Next, nil
	}, page)
	if idempotent.Missing(err) {
		return nilPage(page)
	}
	return err
}
