package idempotent

import (
	"context"
	"errors"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// EnsureTable creates a table unless it exists. A name that is still
// being deleted returns ErrTableBeingDeleted, which is transient: retry
// later.
func EnsureTable(ctx context.Context, t storeadapter.Tables, table string) error {
	err := t.CreateTable(ctx, table)
	if errors.Is(err, storeadapter.ErrAlreadyExists) {
		return nil
	}
	return err
}

// DeleteIfMatch deletes an entity if its ETag still matches. A missing
// entity is success (the delete already happened), so a retried delete
// converges; a changed ETag returns ErrPreconditionFailed so the caller can
// re-read instead of losing a concurrent update.
func DeleteIfMatch(ctx context.Context, t storeadapter.Tables, table, pk, rk, etag string) error {
	err := t.DeleteEntity(ctx, table, pk, rk, etag)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	return err
}

// Upsert replaces an entity, creating its table first when it is missing:
// the first write to a new table costs one extra call, later ones none.
func Upsert(ctx context.Context, t storeadapter.Tables, table string, e storeadapter.Entity) error {
	_, err := t.UpsertEntity(ctx, table, e, storeadapter.Replace)
	if errors.Is(err, storeadapter.ErrNotFound) {
		if err = EnsureTable(ctx, t, table); err == nil {
			_, err = t.UpsertEntity(ctx, table, e, storeadapter.Replace)
		}
	}
	return err
}

// Transact runs a transaction, creating the table first when it is
// missing (see Upsert).
func Transact(ctx context.Context, t storeadapter.Tables, table string, ops []storeadapter.TableOp) error {
	err := t.Transact(ctx, table, ops)
	if errors.Is(err, storeadapter.ErrNotFound) && tableMissing(ctx, t, table) {
		if err = EnsureTable(ctx, t, table); err == nil {
			err = t.Transact(ctx, table, ops)
		}
	}
	return err
}

// tableMissing tells a missing table from a missing entity after a
// transaction failed with ErrNotFound.
func tableMissing(ctx context.Context, t storeadapter.Tables, table string) bool {
	_, err := t.Query(ctx, table, storeadapter.Query{Top: 1})
	return errors.Is(err, storeadapter.ErrNotFound)
}

// Batches splits operations into entity group transactions that satisfy
// Azure's rules: one partition each, at most 100 operations, at most one
// operation per entity (a later operation on the same row starts a new
// batch, so order is kept), and within the 4 MiB payload limit. Order is
// kept within each partition.
func Batches(ops []storeadapter.TableOp) [][]storeadapter.TableOp {
	var out [][]storeadapter.TableOp
	open := map[string]int{} // partition -> index in out of its open batch
	rows := map[string]map[string]bool{}
	sizes := map[string]int{}
	for _, op := range ops {
		pk := op.Entity.PartitionKey
		size := storeadapter.BatchOpSize(op.Entity)
		i, ok := open[pk]
		if !ok || len(out[i]) == storeadapter.MaxBatchOps || rows[pk][op.Entity.RowKey] || sizes[pk]+size > storeadapter.MaxBatchBytes {
			out = append(out, nil)
			i = len(out) - 1
			open[pk], rows[pk], sizes[pk] = i, map[string]bool{}, 0
		}
		out[i] = append(out[i], op)
		rows[pk][op.Entity.RowKey] = true
		sizes[pk] += size
	}
	return out
}
