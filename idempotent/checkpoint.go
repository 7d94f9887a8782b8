package idempotent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Checkpoints store scan positions (continuation tokens) by operation id,
// so a redelivered message resumes a long scan where a crashed run left
// it. Each checkpoint is one entity: PartitionKey = operation id, RowKey =
// the step's name, property Token.
type Checkpoints struct {
	Tables storeadapter.Tables
	// Table holds the checkpoints; it is created on first save.
	Table string
}

const tokenProperty = "Token"

// Load returns the saved token of an operation's step, or "" when there is
// none (the scan starts from the beginning).
func (c Checkpoints) Load(ctx context.Context, opID, step string) (string, error) {
	e, err := c.Tables.GetEntity(ctx, c.Table, opID, step)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load checkpoint %s/%s: %w", opID, step, err)
	}
	tok, _ := e.Properties[tokenProperty].(string)
	return tok, nil
}

// Save records a token. Saving the same token twice is harmless.
func (c Checkpoints) Save(ctx context.Context, opID, step, token string) error {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	if err := Upsert(ctx, c.Tables, c.Table, e); err != nil {
		return fmt.Errorf("save checkpoint %s/%s: %w", opID, step, err)
	}
	return nil
}

// Clear removes a step's checkpoint once the scan has finished; a missing
// checkpoint (or table) is success.
func (c Checkpoints) Clear(ctx context.Context, opID, step string) error {
	if err := DeleteIfMatch(ctx, c.Tables, c.Table, opID, step, storeadapter.ETagAny); err != nil {
		return fmt.Errorf("clear checkpoint %s/%s: %w", opID, step, err)
	}
	return nil
}

// The conditional forms below serve a caller whose checkpoint is the
// register of an operation that several deliveries may run at once (see
// tableexport.Export): the first save is create-only and every later one
// is If-Match the ETag the caller last read or wrote, so two deliveries
// never overwrite each other's progress unseen. A lost race is an error
// wrapping storeadapter.ErrAlreadyExists (Create) or
// ErrPreconditionFailed (SaveIfMatch; ErrNotFound when the checkpoint was
// cleared): the caller reloads with LoadETag and decides.

// LoadETag returns the saved token of an operation's step and the
// checkpoint's ETag, or "" and "" when there is none.
func (c Checkpoints) LoadETag(ctx context.Context, opID, step string) (token, etag string, err error) {
	e, err := c.Tables.GetEntity(ctx, c.Table, opID, step)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("load checkpoint %s/%s: %w", opID, step, err)
	}
	tok, _ := e.Properties[tokenProperty].(string)
	return tok, e.ETag, nil
}

// Create saves the first token of a step only when the step has no
// checkpoint yet (creating the table when it is missing), and returns the
// new checkpoint's ETag. An existing checkpoint is left as it is and the
// error wraps storeadapter.ErrAlreadyExists.
func (c Checkpoints) Create(ctx context.Context, opID, step, token string) (etag string, err error) {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	err = CreateOnMissing(ctx, TableCreator(c.Tables, c.Table), func(ctx context.Context) error {
		var err error
		etag, err = c.Tables.InsertEntity(ctx, c.Table, e)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create checkpoint %s/%s: %w", opID, step, err)
	}
	return etag, nil
}

// WrittenAt returns the storage service's time of the checkpoint's last
// write (its Timestamp) while its ETag is still etag, the one the caller
// created or saved it with; changed reports a write since (the caller
// reloads; ErrNotFound when it is gone). A caller that derives a bound
// from its create's time (an export's mark, a purge's cut-off) so takes
// the service's clock, which rows' Timestamps are read by, not its own,
// and every delivery before its first save derives the same bound.
func (c Checkpoints) WrittenAt(ctx context.Context, opID, step, etag string) (at time.Time, changed bool, err error) {
	e, err := c.Tables.GetEntity(ctx, c.Table, opID, step)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the checkpoint %s/%s for its time: %w", opID, step, err)
	}
	return e.Timestamp, e.ETag != etag, nil
}

// SaveIfMatch replaces a step's token only while the checkpoint still has
// the ETag etag, and returns its new ETag. A checkpoint changed meanwhile
// is left as it is and the error wraps storeadapter.ErrPreconditionFailed
// (ErrNotFound when it is gone).
func (c Checkpoints) SaveIfMatch(ctx context.Context, opID, step, token, etag string) (string, error) {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	newETag, err := c.Tables.UpdateEntity(ctx, c.Table, e, storeadapter.Replace, etag)
	if err != nil {
		return "", fmt.Errorf("save checkpoint %s/%s: %w", opID, step, err)
	}
	return newETag, nil
}

// Pruned is what Prune found and deleted.
type Pruned struct {
	// Found counts the checkpoints last written before the cut-off,
	// Deleted those deleted (0 in a dry run), Raced those written again
	// since they were read (left alone).
	Found, Deleted, Raced int
}

// Prune deletes the checkpoints last written (by the service's Timestamp)
// before cut: done ones that a late redelivery would have read, and those
// of operations abandoned midway. It is safe once no message of their
// operations can be delivered any more — a queue message lives at most 7
// days (storeadapter.DefaultTTL) from its send, and every delivery of a
// long operation saves its checkpoint — so cut should be at least 8 days
// back. Deletes are If-Match the ETag read, in transactions of up to 100
// per operation; a checkpoint written again meanwhile is left. With
// dryRun nothing is deleted. Memory holds one page.
func (c Checkpoints) Prune(ctx context.Context, cut time.Time, dryRun bool) (Pruned, error) {
	return c.deleteWhere(ctx, storeadapter.Compare("Timestamp", storeadapter.Lt, cut), dryRun)
}

// ClearOperation deletes every checkpoint of an operation (all its
// steps), each If-Match the ETag read, so a checkpoint a run of the
// operation saves meanwhile stays; with dryRun it only counts them. The
// poison purge clears abandoned operations with it.
func (c Checkpoints) ClearOperation(ctx context.Context, opID string, dryRun bool) (Pruned, error) {
	return c.deleteWhere(ctx, storeadapter.PartitionEquals(opID), dryRun)
}

// DeleteRead deletes rows of table, each If-Match the ETag it was read
// with, in transactions of up to 100 of one partition, and one by one
// where a transaction loses (a row written or deleted since, which is
// left). It returns how many it deleted.
func DeleteRead(ctx context.Context, t storeadapter.Tables, table string, rows []storeadapter.Entity) (int, error) {
	ops := make([]storeadapter.TableOp, len(rows))
	for i, e := range rows {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, IfMatch: e.ETag}
	}
	n := 0
	for _, batch := range Batches(ops) {
		err := t.Transact(ctx, table, batch)
		if err == nil {
			n += len(batch)
			continue
		}
		if !Lost(err) {
			return n, fmt.Errorf("delete %d rows of %s: %w", len(batch), batch[0].Entity.PartitionKey, err)
		}
		for _, op := range batch {
			err := t.DeleteEntity(ctx, table, op.Entity.PartitionKey, op.Entity.RowKey, op.IfMatch)
			switch {
			case err == nil:
				n++
			case !Lost(err):
				return n, fmt.Errorf("delete %s/%s: %w", op.Entity.PartitionKey, op.Entity.RowKey, err)
			}
		}
	}
	return n, nil
}

// deleteWhere deletes the checkpoints f selects, page by page, If-Match in
// transactions of up to 100 per operation (one by one when one was written
// again meanwhile).
func (c Checkpoints) deleteWhere(ctx context.Context, f storeadapter.Filter, dryRun bool) (Pruned, error) {
	var p Pruned
	q := storeadapter.Query{Filter: f, Select: []string{}}
	for {
		page, err := c.Tables.Query(ctx, c.Table, q)
		if errors.Is(err, storeadapter.ErrTableNotFound) {
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("delete checkpoints: %w", err)
		}
		p.Found += len(page.Entities)
		if !dryRun {
			deleted, err := DeleteRead(ctx, c.Tables, c.Table, page.Entities)
			p.Deleted += deleted
			p.Raced += len(page.Entities) - deleted
			if err != nil {
				return p, fmt.Errorf("delete checkpoints: %w", err)
			}
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return p, nil
		}
	}
}
