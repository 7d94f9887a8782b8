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
	return CreateOnMissing(ctx, TableCreator(t, table), func(ctx context.Context) error {
		_, err := t.UpsertEntity(ctx, table, e, storeadapter.Replace)
		return err
	})
}

// Transact runs a transaction, creating the table first when it is
// missing (see Upsert).
func Transact(ctx context.Context, t storeadapter.Tables, table string, ops []storeadapter.TableOp) error {
	return CreateOnMissing(ctx, TableCreator(t, table), func(ctx context.Context) error {
		return t.Transact(ctx, table, ops)
	})
}

// Missing reports whether err says that the table, queue or blob container
// an operation addressed does not exist (not merely the entity, message or
// blob in it).
func Missing(err error) bool {
	return errors.Is(err, storeadapter.ErrTableNotFound) || errors.Is(err, storeadapter.ErrQueueNotFound) ||
		errors.Is(err, storeadapter.ErrContainerNotFound)
}

// CreateOnMissing runs do; when it fails because the table, queue or blob
// container it writes to is missing (see Missing), it runs create and then
// do once more. create must succeed when the thing exists already
// (EnsureTable, Queue.Create and Blobs.Create do), because another worker
// may create it at the same moment. There is no check-then-act query: the
// error of do itself tells a missing table from a missing entity, so two
// workers racing to create one table both end with their write done.
func CreateOnMissing(ctx context.Context, create, do func(context.Context) error) error {
	err := do(ctx)
	if !Missing(err) {
		return err
	}
	if cerr := create(ctx); cerr != nil {
		return cerr
	}
	return do(ctx)
}

// TableCreator returns the create step of CreateOnMissing for a table.
func TableCreator(t storeadapter.Tables, table string) func(context.Context) error {
	return func(ctx context.Context) error { return EnsureTable(ctx, t, table) }
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
