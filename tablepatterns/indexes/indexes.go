package indexes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Set is the declared indexes of a config, bound to a store: the Go
// API of the index kind (reconcile, rebuild, lookup, check), which the
// worker and the CLI both use.
type Set struct {
	store  storeadapter.Store
	tables storeadapter.Tables
	cfg    Config
	byName map[string]*tableIndexes // lower-case source table -> its indexes
	// chunk is how many records, and how many entities, a batch reads at
	// once (defaultChunk; tests make it small).
	chunk int
	// clock is the clock of generations and tombstone ages.
	clock clock.Clock
}

// Open validates cfg (filling its defaults) and binds its indexes to
// store. clk is the clock of membership generations and tombstone ages;
// nil is the wall clock (the catalog passes the worker's).
func Open(store storeadapter.Store, clk clock.Clock, cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	byName, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	return &Set{store: store, tables: store.Tables(), cfg: cfg, byName: byName, clock: clock.Or(clk), chunk: defaultChunk}, nil
}

// Declared reports whether a source table has declared indexes. A nil
// Set has none.
func (x *Set) Declared(table string) bool {
	return x != nil && x.byName[strings.ToLower(table)] != nil
}

// Tables returns the source tables that have indexes, as declared.
func (x *Set) Tables() []string {
	var out []string
	for _, ti := range x.byName {
		out = append(out, ti.source)
	}
	slices.Sort(out)
	return out
}

// Names returns the names of a source table's indexes, in declaration
// order (nil when the table has none).
func (x *Set) Names(table string) []string {
	ti := x.byName[strings.ToLower(table)]
	if ti == nil {
		return nil
	}
	var out []string
	for _, ix := range ti.indexes {
		out = append(out, ix.Name)
	}
	return out
}

// Declaration returns the resolved declaration of an index: Store and
// Table are filled in as the index uses them.
func (x *Set) Declaration(table, name string) (Decl, error) {
	ix, err := x.index(table, name)
	if err != nil {
		return Decl{}, err
	}
	d := ix.Decl
	d.Store, d.Table = ix.Store, ix.table
	return d, nil
}

// indexes returns the indexes of a source table.
func (x *Set) indexes(table string) (*tableIndexes, error) {
	ti := x.byName[strings.ToLower(table)]
	if ti == nil {
		return nil, fmt.Errorf("index: table %s: no index is declared for it in this config (declared: %v): %w",
			table, x.Tables(), storeadapter.ErrInvalidInput)
	}
	return ti, nil
}

// index returns one index of a source table.
func (x *Set) index(table, name string) (*index, error) {
	ti, err := x.indexes(table)
	if err != nil {
		return nil, err
	}
	ix := ti.lookup(name)
	if ix == nil {
		return nil, fmt.Errorf("index: table %s has no index %q (declared: %v): %w", table, name, x.Names(table), storeadapter.ErrInvalidInput)
	}
	return ix, nil
}

// want is what an index should hold for an entity: its applied state
// ("" when the entity is not indexed), the copied properties of a copy,
// and why the value cannot be indexed, if so.
type want struct {
	state   string
	content map[string]any
	problem error
}

// wantOf computes an index's want from the entity (nil when it does not
// exist).
func wantOf(ix *index, e *storeadapter.Entity) want {
	if e == nil {
		return want{}
	}
	v, ok := e.Properties[ix.Property]
	if !ok || v == nil {
		return want{}
	}
	value, err := EncodeValue(v)
	if err != nil {
		return want{problem: fmt.Errorf("index %s: property %s: %w", ix.Name, ix.Property, err)}
	}
	if err := fitsIndex(ix, e.PartitionKey, e.RowKey, value); err != nil {
		return want{problem: fmt.Errorf("index %s: property %s value %s: %w", ix.Name, ix.Property, describe(value), err)}
	}
	if ix.Kind != KindCopy {
		return want{state: value}
	}
	content := map[string]any{}
	if len(ix.Properties) == 0 {
		for k, v := range e.Properties {
			if reservedProperty(k) {
				return want{problem: fmt.Errorf("index %s: property %s: names starting with %q are reserved for index bookkeeping, so the entity cannot be copied: %w",
					ix.Name, k, bookkeepingPrefix, storeadapter.ErrInvalidInput)}
			}
			content[k] = storeadapter.CloneValue(v)
		}
	} else {
		for _, k := range ix.Properties {
			if v, ok := e.Properties[k]; ok && v != nil {
				content[k] = storeadapter.CloneValue(v)
			}
		}
	}
	// The copy must fit an entity with its bookkeeping.
	probe := storeadapter.Entity{PartitionKey: strings.Repeat("p", 1), RowKey: value, Properties: maps.Clone(content)}
	probe.Properties[propOwner], probe.Properties[propGen], probe.Properties[propTombs] = e.RowKey, int64(0), strings.Repeat("x", 64)
	probe.Properties[propWaited] = true
	if err := storeadapter.ValidateEntity(probe); err != nil {
		return want{problem: fmt.Errorf("index %s: the copy would not fit an entity: %w", ix.Name, err)}
	}
	return want{state: value + "#" + contentHash(content), content: content}
}

// fitsIndex checks that the keys and names an entry of value would have
// are within Azure's limits.
func fitsIndex(ix *index, pk, rk, value string) error {
	var keys []string
	switch {
	case ix.partition() && ix.Kind == KindCopy:
		keys = []string{copyRowKey(ix, value)}
	case ix.partition():
		keys = []string{listBase(ix, value) + "0000"}
	case ix.Kind == KindRows:
		keys = []string{value, rowKey(pk, rk, math.MaxInt64)} // the longest: with a generation
	case ix.Kind == KindCopy:
		keys = []string{copyPartition(ix, pk), tableCopyRowKey(value)}
	case ix.Store == StoreBlob:
		if err := storeadapter.ValidateBlobName(blobListName(ix, value)); err != nil {
			return fmt.Errorf("its blob name: %w", err)
		}
	default:
		keys = []string{tableListPartition(ix, value)}
	}
	for _, k := range keys {
		if !fitsKey(k) {
			return fmt.Errorf("an index key would exceed %d characters: %w", storeadapter.MaxKeyChars, storeadapter.ErrTooLarge)
		}
	}
	return nil
}

// describe renders an encoded value for messages, decoded when it can be.
func describe(value string) string {
	if v, err := DecodeValue(value); err == nil {
		return storeadapter.Format(v)
	}
	return fmt.Sprintf("%q", text.Truncate(value, 60))
}

// queryAll runs a query to its last page, calling visit for each entity.
func queryAll(ctx context.Context, t storeadapter.Tables, table string, q storeadapter.Query, visit func(storeadapter.Entity) error) error {
	return paginate(q.Continuation, func(token string) (string, error) {
		q.Continuation = token
		page, err := t.Query(ctx, table, q)
		if err != nil {
			return "", err
		}
		for _, e := range page.Entities {
			if err := visit(e); err != nil {
				return "", err
			}
		}
		return page.Next, nil
	}, nil)
}

// pause waits before another round after a write lost to another worker:
// about 20 ms, doubling, drawn from [0.5, 1.5) of that.
func (x *Set) pause(ctx context.Context, round int) error {
	return clock.Sleep(ctx, nil, time.Duration(float64(idempotent.DefaultCASPause<<min(round-1, 8))*(0.5+rand.Float64())))
}

// paginate calls fetch with token and then with each next token it
// returns, until one is "", calling page (when not nil) with each next
// token after its page.
func paginate(token string, fetch func(token string) (next string, err error), page func(next string) error) error {
	for {
		next, err := fetch(token)
		if err != nil {
			return err
		}
		if page != nil {
			if err := page(next); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

// getOptional reads an entity, nil when it (or its table) is missing.
func getOptional(ctx context.Context, t storeadapter.Tables, table, pk, rk string) (*storeadapter.Entity, error) {
	e, err := t.GetEntity(ctx, table, pk, rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// Dropped counts what Drop deleted.
type Dropped struct {
	// Tables is how many index tables were deleted, Blobs how many blob
	// list blobs.
	Tables, Blobs int
}

// Drop deletes what a source table's indexes keep outside it, for a
// table about to be deleted whole (a day table): its index tables (each
// serves one source table: Config refuses to share them) with one
// DeleteTable each, and its blob lists (every blob under "<table>/<name>/"
// of their container). The partition stores, and a table copy kept in
// the source table, are rows of the source table and go with it. Not
// found is done, so Drop may run again after a crash; run it before the
// source table's DeleteTable, so that a redelivery that finds the source
// table still there drops again. A table without declared indexes has
// nothing to drop.
func (x *Set) Drop(ctx context.Context, table string) (Dropped, error) {
	var d Dropped
	if !x.Declared(table) {
		return d, nil
	}
	ti, _ := x.indexes(table)
	for _, ix := range ti.indexes {
		switch {
		case ix.Store == StoreBlob:
			c := x.store.Container(ix.Container)
			err := paginate("", func(marker string) (string, error) {
				page, err := c.List(ctx, blobListName(ix, ""), marker)
				if err != nil {
					return "", err
				}
				for _, b := range page.Blobs {
					if err := c.Delete(ctx, b.Name, ""); err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
						return "", err
					}
					d.Blobs++
				}
				return page.Next, nil
			}, nil)
			if err != nil && !idempotent.Missing(err) {
				return d, fmt.Errorf("index: drop the blob lists of %s index %s: %w", table, ix.Name, err)
			}
		case ix.table != "" && !strings.EqualFold(ix.table, table):
			err := x.tables.DeleteTable(ctx, ix.table)
			switch {
			case err == nil:
				d.Tables++
			case errors.Is(err, storeadapter.ErrTableNotFound), errors.Is(err, storeadapter.ErrTableBeingDeleted):
			default:
				return d, fmt.Errorf("index: drop index table %s of %s: %w", ix.table, table, err)
			}
		}
	}
	return d, nil
}
