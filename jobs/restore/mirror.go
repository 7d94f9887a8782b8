package restore

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// target walks the target's application rows in a scope in key order, a
// page at a time: the right side of the merge join of a mirror (and of
// Plan). Memory holds one page.
type target struct {
	tables storeadapter.Tables
	table  string
	filter storeadapter.Filter
	page   []storeadapter.Entity
	next   string
	done   bool
}

// newTarget starts after the key after (nil: at the scope's start). The
// filter leaves tablekeeper's reserved rows out (Range.Filter uses
// storeadapter.ApplicationRows), so a mirror never deletes them.
func newTarget(tables storeadapter.Tables, scope storeadapter.Range, after *storeadapter.Key) *target {
	return &target{tables: tables, table: scope.Table, filter: scope.Filter(after)}
}

// peek returns the next row without taking it; false at the end. A
// missing table has no rows.
func (t *target) peek(ctx context.Context) (storeadapter.Entity, bool, error) {
	for len(t.page) == 0 {
		if t.done {
			return storeadapter.Entity{}, false, nil
		}
		p, err := t.tables.Query(ctx, t.table, storeadapter.Query{Filter: t.filter, Select: []string{"PartitionKey"}, Continuation: t.next})
		if errors.Is(err, storeadapter.ErrTableNotFound) {
			t.done = true
			continue
		}
		if err != nil {
			return storeadapter.Entity{}, false, fmt.Errorf("restore: read %s: %w", t.table, err)
		}
		t.page, t.next, t.done = p.Entities, p.Next, p.Next == ""
	}
	return t.page[0], true, nil
}

func (t *target) pop() { t.page = t.page[1:] }

// upTo hands every target row before k to extra, and reports whether the
// target holds k itself (which it takes).
func (t *target) upTo(ctx context.Context, k *storeadapter.Key, extra func(storeadapter.Entity) error) (bool, error) {
	for {
		e, ok, err := t.peek(ctx)
		if err != nil || !ok {
			return false, err
		}
		c := 1
		if k != nil {
			c = (storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}).Compare(*k)
		}
		if c > 0 {
			return false, nil
		}
		t.pop()
		if c == 0 {
			return true, nil
		}
		if err := extra(e); err != nil {
			return false, err
		}
	}
}

// rest hands every remaining target row to extra.
func (t *target) rest(ctx context.Context, extra func(storeadapter.Entity) error) error {
	for {
		e, ok, err := t.peek(ctx)
		if err != nil || !ok {
			return err
		}
		t.pop()
		if err := extra(e); err != nil {
			return err
		}
	}
}

// deleter deletes rows in entity group transactions of one partition,
// each delete If-Match the ETag the scan read, so a row the application
// wrote since is kept. A batch that fails because a row changed or went is
// done again row by row: a row gone is deleted already, a changed one is
// kept (counted Kept).
type deleter struct {
	tables        storeadapter.Tables
	table         string
	ops           []storeadapter.TableOp
	deleted, kept int64
}

func (d *deleter) add(ctx context.Context, e storeadapter.Entity) error {
	if len(d.ops) > 0 && (len(d.ops) == storeadapter.MaxBatchOps || d.ops[0].Entity.PartitionKey != e.PartitionKey) {
		if err := d.flush(ctx); err != nil {
			return err
		}
	}
	d.ops = append(d.ops, storeadapter.TableOp{Action: storeadapter.TxDelete,
		Entity: storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, IfMatch: e.ETag})
	return nil
}

func (d *deleter) flush(ctx context.Context) error {
	if len(d.ops) == 0 {
		return nil
	}
	ops := d.ops
	d.ops = nil
	err := d.tables.Transact(ctx, d.table, ops)
	switch {
	case err == nil:
		d.deleted += int64(len(ops))
		return nil
	case !idempotent.Lost(err):
		return fmt.Errorf("restore: mirror: delete %d rows of partition %q: %w", len(ops), ops[0].Entity.PartitionKey, err)
	}
	for _, op := range ops {
		err := idempotent.DeleteIfMatch(ctx, d.tables, d.table, op.Entity.PartitionKey, op.Entity.RowKey, op.IfMatch)
		switch {
		case err == nil:
			d.deleted++
		case errors.Is(err, storeadapter.ErrPreconditionFailed):
			d.kept++
		default:
			return fmt.Errorf("restore: mirror: delete %s/%s: %w", op.Entity.PartitionKey, op.Entity.RowKey, err)
		}
	}
	return nil
}
