package localstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// maxScanPerPage bounds the entities one Query call examines, like the
// service's per-request time budget: a selective filter over a large table
// returns short (even empty) pages with a continuation token instead of
// scanning the whole table in one call.
const maxScanPerPage = 10 * storeadapter.MaxPageSize

// tableService implements storeadapter.Tables.
type tableService struct {
	s *Store

	mu      sync.RWMutex
	tables  map[string]*table    // by lower-case name: names are case-insensitive
	exact   map[string]*table    // by the name as created: the usual spelling, found without lower-casing
	deleted map[string]time.Time // lower-case name -> when it may be reused
}

// table is one table: rows ordered by (PartitionKey, RowKey), for
// queries, and by their keys in a map, for the point operations (a lookup
// in the map touches a few cache lines where a walk of the tree compares
// keys on each level). Both hold every row; only put changes them.
type table struct {
	name  string // as created
	mu    sync.RWMutex
	rows  *btree.BTreeG[item]
	byKey map[rowKey]*row
}

// rowKey is a row's keys, the map's key.
type rowKey struct{ pk, rk string }

// get returns the item of the row with the keys (a zero item: none).
func (t *table) get(pk, rk string) (item, bool) {
	r, ok := t.byKey[rowKey{pk, rk}]
	if !ok {
		return item{}, false
	}
	return r.item(), true
}

// item is one entry of a table's B-tree: the keys, held in the tree's nodes
// so that a search compares them without following a pointer per entry, and
// the row. A write that replaces an existing entity changes the row in place
// under the table's write lock, so it finds the entity in one walk of the
// tree; readers copy what they return under the read lock.
type item struct {
	pk, rk string
	r      *row
}

// row is one stored entity. Its properties are never shared with callers:
// writes store a copy and reads return one.
type row struct {
	pk, rk string
	props  map[string]any
	binary bool // props holds a []byte, which reads copy
	etag   string
	ts     time.Time
}

// itemLess orders rows as the service does: by PartitionKey, then RowKey,
// each in UTF-16 code-unit order (storeadapter.CompareUTF16).
func itemLess(a, b item) bool {
	if c := storeadapter.CompareUTF16(a.pk, b.pk); c != 0 {
		return c < 0
	}
	return storeadapter.LessUTF16(a.rk, b.rk)
}

func (r *row) item() item { return item{pk: r.pk, rk: r.rk, r: r} }

// entity returns a copy of the stored entity, or of the selected
// properties, that shares no memory a caller could change.
func (r *row) entity(sel []string) storeadapter.Entity {
	e := storeadapter.Entity{PartitionKey: r.pk, RowKey: r.rk, ETag: r.etag, Timestamp: r.ts}
	if sel == nil {
		// Values other than []byte are immutable: copying the map's
		// memory at once is cheaper than inserting entry by entry.
		e.Properties = maps.Clone(r.props)
		if r.binary {
			for k, v := range e.Properties {
				if b, ok := v.([]byte); ok {
					e.Properties[k] = bytes.Clone(b)
				}
			}
		}
		return e
	}
	e.Properties = make(map[string]any, len(sel))
	for _, name := range sel {
		if v, ok := r.props[name]; ok {
			e.Properties[name] = storeadapter.CloneValue(v)
		}
	}
	return e
}

// storedProps copies an entity's properties for storage, normalising
// times, and reports whether they hold a []byte. Like entity, it copies
// the map at once and then only the values that need it.
func storedProps(e storeadapter.Entity) (p map[string]any, binary bool) {
	p = maps.Clone(e.Properties)
	if p == nil {
		return make(map[string]any), false
	}
	for k, v := range p {
		switch x := v.(type) {
		case []byte:
			p[k], binary = bytes.Clone(x), true
		case time.Time:
			if t := storeadapter.DateTime(x); t != x {
				p[k] = t
			}
		}
	}
	return p, binary
}

// etag returns a new weak ETag, unique within the store.
func (ts *tableService) etag() string {
	var b [32]byte
	return string(append(ts.s.appendNext(append(b[:0], `W/"`...)), '"'))
}

// tableKey counts a table-level call, validates the name and returns it
// case-folded: table names are case-insensitive.
func (ts *tableService) tableKey(ctx context.Context, op, name string) (string, error) {
	if err := ts.s.begin(ctx, op); err != nil {
		return "", err
	}
	if err := storeadapter.ValidateTableName(name); err != nil {
		return "", err
	}
	return strings.ToLower(name), nil
}

func (ts *tableService) CreateTable(ctx context.Context, name string) error {
	key, err := ts.tableKey(ctx, "CreateTable", name)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.tables[key]; ok {
		return fmt.Errorf("localstore: create table %s: %w", name, storeadapter.ErrAlreadyExists)
	}
	if until, ok := ts.deleted[key]; ok {
		if ts.s.clock.Now().Before(until) {
			return fmt.Errorf("localstore: create table %s: %w", name, storeadapter.ErrTableBeingDeleted)
		}
		delete(ts.deleted, key)
	}
	t := &table{name: name, rows: btree.NewG(32, itemLess), byKey: map[rowKey]*row{}}
	ts.tables[key], ts.exact[name] = t, t
	return nil
}

func (ts *tableService) DeleteTable(ctx context.Context, name string) error {
	key, err := ts.tableKey(ctx, "DeleteTable", name)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.tables[key]; !ok {
		return fmt.Errorf("localstore: delete table %s: %w", name, storeadapter.ErrTableNotFound)
	}
	delete(ts.exact, ts.tables[key].name)
	delete(ts.tables, key)
	if ts.s.tableWait > 0 {
		ts.deleted[key] = ts.s.clock.Now().Add(ts.s.tableWait)
	}
	return nil
}

func (ts *tableService) ListTables(ctx context.Context, prefix, continuation string) ([]string, string, error) {
	if err := ts.s.begin(ctx, "ListTables"); err != nil {
		return nil, "", err
	}
	ts.mu.RLock()
	names := make([]string, 0, len(ts.tables))
	for _, t := range ts.tables {
		if strings.HasPrefix(t.name, prefix) && storeadapter.CompareUTF16(t.name, continuation) >= 0 {
			names = append(names, t.name)
		}
	}
	ts.mu.RUnlock()
	slices.SortFunc(names, storeadapter.CompareUTF16)
	if len(names) > storeadapter.MaxPageSize {
		return names[:storeadapter.MaxPageSize], names[storeadapter.MaxPageSize], nil
	}
	return names, "", nil
}

// table returns the named table or ErrTableNotFound.
func (ts *tableService) table(op, name string) (*table, error) {
	if err := storeadapter.ValidateTableName(name); err != nil {
		return nil, err
	}
	ts.mu.RLock()
	t := ts.exact[name]
	if t == nil {
		t = ts.tables[strings.ToLower(name)]
	}
	ts.mu.RUnlock()
	if t == nil {
		return nil, fmt.Errorf("localstore: %s: table %s: %w", op, name, storeadapter.ErrTableNotFound)
	}
	return t, nil
}

func (ts *tableService) GetEntity(ctx context.Context, name, pk, rk string) (storeadapter.Entity, error) {
	if err := ts.s.begin(ctx, "GetEntity"); err != nil {
		return storeadapter.Entity{}, err
	}
	if err := validateKeys(pk, rk); err != nil {
		return storeadapter.Entity{}, err
	}
	t, err := ts.table("get entity", name)
	if err != nil {
		return storeadapter.Entity{}, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	it, ok := t.get(pk, rk)
	if !ok {
		return storeadapter.Entity{}, fmt.Errorf("localstore: get entity %s/%s: %w", pk, rk, storeadapter.ErrNotFound)
	}
	return it.r.entity(nil), nil
}

func validateKeys(pk, rk string) error {
	if err := storeadapter.ValidateKey("PartitionKey", pk); err != nil {
		return err
	}
	return storeadapter.ValidateKey("RowKey", rk)
}

func (ts *tableService) InsertEntity(ctx context.Context, name string, e storeadapter.Entity) (string, error) {
	return ts.write(ctx, "InsertEntity", name, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
}

func (ts *tableService) UpsertEntity(ctx context.Context, name string, e storeadapter.Entity, mode storeadapter.UpdateMode) (string, error) {
	if err := storeadapter.ValidateMode(mode); err != nil {
		return "", err
	}
	action := storeadapter.TxUpsertReplace
	if mode == storeadapter.Merge {
		action = storeadapter.TxUpsertMerge
	}
	return ts.write(ctx, "UpsertEntity", name, storeadapter.TableOp{Action: action, Entity: e})
}

func (ts *tableService) UpdateEntity(ctx context.Context, name string, e storeadapter.Entity, mode storeadapter.UpdateMode, ifMatch string) (string, error) {
	if err := storeadapter.ValidateMode(mode); err != nil {
		return "", err
	}
	action := storeadapter.TxUpdateReplace
	if mode == storeadapter.Merge {
		action = storeadapter.TxUpdateMerge
	}
	return ts.write(ctx, "UpdateEntity", name, storeadapter.TableOp{Action: action, Entity: e, IfMatch: ifMatch})
}

func (ts *tableService) DeleteEntity(ctx context.Context, name, pk, rk, ifMatch string) error {
	op := storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: rk}, IfMatch: ifMatch}
	_, err := ts.write(ctx, "DeleteEntity", name, op)
	return err
}

// write runs one single-entity operation.
func (ts *tableService) write(ctx context.Context, opName, name string, op storeadapter.TableOp) (string, error) {
	if err := ts.s.begin(ctx, opName); err != nil {
		return "", err
	}
	if err := storeadapter.ValidateOp(op); err != nil {
		return "", err
	}
	t, err := ts.table(opName, name)
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, found := t.get(op.Entity.PartitionKey, op.Entity.RowKey)
	if op.Action == storeadapter.TxDelete && op.IfMatch == storeadapter.ETagAny {
		// Only existence matters.
		if !found {
			return "", fmt.Errorf("localstore: %s %s/%s: %w", opName, op.Entity.PartitionKey, op.Entity.RowKey, storeadapter.ErrNotFound)
		}
		t.put(old, row{}, false)
		return "", nil
	}
	next, keep, err := ts.apply(op, old.r)
	if err != nil {
		return "", fmt.Errorf("localstore: %s %s/%s: %w", opName, op.Entity.PartitionKey, op.Entity.RowKey, err)
	}
	t.put(old, next, keep)
	return next.etag, nil
}

// put stores next in place of old (a zero item: none), or removes old if
// keep is false.
func (t *table) put(old item, next row, keep bool) {
	switch {
	case !keep:
		t.rows.Delete(old)
		delete(t.byKey, rowKey{old.pk, old.rk})
	case old.r != nil:
		*old.r = next
	default:
		r := new(row)
		*r = next
		t.rows.ReplaceOrInsert(r.item())
		t.byKey[rowKey{r.pk, r.rk}] = r
	}
}

// apply computes the row that op leaves in place of old (nil: none); keep
// is false when it leaves none. It checks existence and ETag conditions
// and returns a sentinel error when they fail; it changes nothing.
func (ts *tableService) apply(op storeadapter.TableOp, old *row) (next row, keep bool, err error) {
	e := op.Entity
	switch op.Action {
	case storeadapter.TxInsert:
		if old != nil {
			return row{}, false, storeadapter.ErrAlreadyExists
		}
	case storeadapter.TxUpdateReplace, storeadapter.TxUpdateMerge, storeadapter.TxDelete:
		if old == nil {
			return row{}, false, storeadapter.ErrNotFound
		}
		if op.IfMatch != storeadapter.ETagAny && op.IfMatch != old.etag {
			return row{}, false, storeadapter.ErrPreconditionFailed
		}
		if op.Action == storeadapter.TxDelete {
			return row{}, false, nil
		}
	}
	props, binary := storedProps(e)
	if old != nil && (op.Action == storeadapter.TxUpsertMerge || op.Action == storeadapter.TxUpdateMerge) {
		// The old values are the store's own and never change: the merged
		// row may share them.
		merged := maps.Clone(old.props)
		maps.Copy(merged, props)
		props, binary = merged, binary || old.binary
		if len(props) > storeadapter.MaxCustomProperties {
			return row{}, false, fmt.Errorf("%w: merge leaves %d properties, more than %d", storeadapter.ErrTooLarge, len(props), storeadapter.MaxCustomProperties)
		}
		if n := storeadapter.EntitySize(storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, Properties: props}); n > storeadapter.MaxEntityBytes {
			return row{}, false, fmt.Errorf("%w: merge leaves an entity of %d bytes, more than %d", storeadapter.ErrTooLarge, n, storeadapter.MaxEntityBytes)
		}
	}
	return row{pk: e.PartitionKey, rk: e.RowKey, props: props, binary: binary, etag: ts.etag(), ts: ts.timestamp(old)}, true, nil
}

// timestamp returns the Timestamp of a write that replaces old (nil: an
// insert): the store's time, but at least 100 ns after old's, so an
// entity's Timestamp grows with every write even on a clock that stands
// still, as on Azure, where the ETag derives from it.
func (ts *tableService) timestamp(old *row) time.Time {
	now := ts.s.time()
	if old != nil && !now.After(old.ts) {
		return old.ts.Add(100 * time.Nanosecond)
	}
	return now
}

func (ts *tableService) Transact(ctx context.Context, name string, ops []storeadapter.TableOp) error {
	if err := ts.s.begin(ctx, "Transact"); err != nil {
		return err
	}
	if err := storeadapter.ValidateTransaction(ops); err != nil {
		return err
	}
	t, err := ts.table("transact", name)
	if errors.Is(err, storeadapter.ErrTableNotFound) {
		// Azure fails the batch's first operation: "0:The table specified
		// does not exist." (docs/azure-behaviour.md, "Issue 18 decisions").
		return &storeadapter.TransactionError{Index: 0, Err: err}
	}
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	olds := make([]item, len(ops))
	nexts := make([]row, len(ops))
	keeps := make([]bool, len(ops))
	for i, op := range ops {
		olds[i], _ = t.get(op.Entity.PartitionKey, op.Entity.RowKey)
		if nexts[i], keeps[i], err = ts.apply(op, olds[i].r); err != nil {
			return &storeadapter.TransactionError{Index: i, Err: fmt.Errorf("localstore: transact %s/%s: %w", op.Entity.PartitionKey, op.Entity.RowKey, err)}
		}
	}
	for i := range ops {
		t.put(olds[i], nexts[i], keeps[i])
	}
	return nil
}

func (ts *tableService) Query(ctx context.Context, name string, q storeadapter.Query) (storeadapter.Page, error) {
	if err := ts.s.begin(ctx, "Query"); err != nil {
		return storeadapter.Page{}, err
	}
	if err := storeadapter.ValidateQuery(q); err != nil {
		return storeadapter.Page{}, err
	}
	f, err := parseFilter(q.Filter.String())
	if err != nil {
		return storeadapter.Page{}, err
	}
	start, err := decodeToken(q.Continuation)
	if err != nil {
		return storeadapter.Page{}, err
	}
	t, err := ts.table("query", name)
	if err != nil {
		return storeadapter.Page{}, err
	}
	top := cmp.Or(q.Top, storeadapter.MaxPageSize)
	b := keyBounds(f)
	if start == nil || itemLess(start.item(), b.lo.item()) {
		start = b.lo
	}

	page := storeadapter.Page{Entities: make([]storeadapter.Entity, 0, min(top, 64))}
	scanned := 0
	t.mu.RLock()
	defer t.mu.RUnlock()
	t.rows.AscendGreaterOrEqual(start.item(), func(it item) bool {
		r := it.r
		if b.beyond(r) {
			return false
		}
		if len(page.Entities) == top || scanned == maxScanPerPage {
			page.Next = encodeToken(r)
			return false
		}
		scanned++
		if f.match(r) {
			page.Entities = append(page.Entities, r.entity(q.Select))
		}
		return true
	})
	return page, nil
}

// Continuation tokens name the next row: base64url(pk) "." base64url(rk).
func encodeToken(r *row) string {
	return base64.RawURLEncoding.EncodeToString([]byte(r.pk)) + "." + base64.RawURLEncoding.EncodeToString([]byte(r.rk))
}

func decodeToken(tok string) (*row, error) {
	if tok == "" {
		return nil, nil
	}
	p, r, ok := strings.Cut(tok, ".")
	pk, err1 := base64.RawURLEncoding.DecodeString(p)
	rk, err2 := base64.RawURLEncoding.DecodeString(r)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: continuation token %q is not one this store issued", storeadapter.ErrInvalidInput, tok)
	}
	return &row{pk: string(pk), rk: string(rk)}, nil
}
