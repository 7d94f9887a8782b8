package indexes

import (
	"context"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Span selects the keys of a source table, in (PartitionKey, RowKey)
// order: the entities and the membership records of those keys.
type Span struct {
	// PK, when set, limits the span to one partition.
	PK *string
	// After excludes its key and every key before it; From includes its
	// key instead. Both nil: from the first key (of PK's partition, with
	// PK).
	After, From *Key
	// Through includes its key and ends the span there; Before excludes
	// its key instead. Both nil: to the last key.
	Through, Before *Key
}

// Partition is the span of one partition, or of its RowKey range [from,
// to) when from or to is set ("" is open).
func Partition(pk, from, to string) Span {
	sp := Span{PK: &pk}
	if from != "" {
		sp.From = &Key{PK: pk, RK: from}
	}
	if to != "" {
		sp.Before = &Key{PK: pk, RK: to}
	}
	return sp
}

// Within is the span of the keys of r (a table, a partition, or its
// RowKey range [RKFrom, RKTo)) after the key after (exclusive; nil: from
// r's start) through the key through (inclusive; nil: to r's end). The
// kinds that write or delete a range a page at a time sync each page's
// span with it: after is the position they saved last, through the page's
// last key, and nil on the last page.
func Within(r storeadapter.Range, after, through *Key) Span {
	sp := Span{PK: r.PK, After: after, Through: through}
	from, to := r.Bounds()
	if after == nil && r.PK != nil && from != "" {
		sp.From = &Key{PK: *r.PK, RK: from}
	}
	if through == nil && r.PK != nil && to != "" {
		sp.Before = &Key{PK: *r.PK, RK: to}
	}
	return sp
}

// contains reports whether k lies in the span.
func (sp Span) contains(k Key) bool {
	switch {
	case sp.PK != nil && k.PK != *sp.PK:
		return false
	case sp.After != nil && k.Compare(*sp.After) <= 0:
		return false
	case sp.From != nil && k.Compare(*sp.From) < 0:
		return false
	case sp.Through != nil && k.Compare(*sp.Through) > 0:
		return false
	case sp.Before != nil && k.Compare(*sp.Before) >= 0:
		return false
	}
	return true
}

// through returns the span ended at end (inclusive), or the span itself
// when end is nil.
func (sp Span) through(end *Key) Span {
	if end != nil {
		sp.Through = end
	}
	return sp
}

// filter selects the rows that stand for the span's keys: with prefix ""
// the application's entities (storeadapter.ApplicationRows), else the
// rows whose RowKeys are prefix and a key's RowKey (membership records,
// memberPrefix), in the prefix's own RowKey range. It holds at most 14
// comparisons (Azure allows 15).
func (sp Span) filter(prefix string) storeadapter.Filter {
	var base storeadapter.Filter
	if prefix == "" {
		base = storeadapter.ApplicationRows(storeadapter.Filter{})
	} else {
		base = storeadapter.KeyPrefix("RowKey", prefix)
	}
	fs := []storeadapter.Filter{base}
	if sp.PK != nil {
		fs = append(fs, storeadapter.PartitionEquals(*sp.PK))
	}
	// A bound across partitions is "PartitionKey ge (le) its partition,
	// and either another partition or the RowKey within it": the top-level
	// range on PartitionKey lets the service start (and stop) the scan
	// there instead of at the table's start.
	bound := func(k *Key, rkOp, pkOp storeadapter.Op) {
		if k == nil {
			return
		}
		rk := storeadapter.Compare("RowKey", rkOp, prefix+k.RK)
		if sp.PK != nil {
			fs = append(fs, rk)
			return
		}
		outer := storeadapter.Ge
		if pkOp == storeadapter.Lt {
			outer = storeadapter.Le
		}
		fs = append(fs, storeadapter.Compare("PartitionKey", outer, k.PK), storeadapter.Or(storeadapter.Compare("PartitionKey", pkOp, k.PK), rk))
	}
	bound(sp.After, storeadapter.Gt, storeadapter.Gt)
	bound(sp.From, storeadapter.Ge, storeadapter.Gt)
	bound(sp.Through, storeadapter.Le, storeadapter.Lt)
	bound(sp.Before, storeadapter.Lt, storeadapter.Lt)
	return storeadapter.And(fs...)
}

// readUpTo reads the rows of a query from its start until it has at
// least limit or the query ends; more reports that it did not end.
func readUpTo(ctx context.Context, t storeadapter.Tables, table string, f storeadapter.Filter, limit int) (rows []storeadapter.Entity, more bool, err error) {
	return readQuery(ctx, t, table, storeadapter.Query{Filter: f}, limit)
}

// readKeys is readUpTo reading keys only (no custom property).
func readKeys(ctx context.Context, t storeadapter.Tables, table string, f storeadapter.Filter, limit int) (rows []storeadapter.Entity, more bool, err error) {
	return readQuery(ctx, t, table, storeadapter.Query{Filter: f, Select: []string{}}, limit)
}

func readQuery(ctx context.Context, t storeadapter.Tables, table string, q storeadapter.Query, limit int) (rows []storeadapter.Entity, more bool, err error) {
	for {
		q.Top = min(limit-len(rows), storeadapter.MaxPageSize)
		page, err := t.Query(ctx, table, q)
		if err != nil {
			return rows, false, err
		}
		rows = append(rows, page.Entities...)
		if q.Continuation = page.Next; q.Continuation == "" {
			return rows, false, nil
		}
		if len(rows) >= limit {
			return rows, true, nil
		}
	}
}
