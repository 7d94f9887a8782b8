package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The outbox row is the second half of the contract of a transactional
// enqueue (client.Tx), beside the envelope's OutboxRef: the producer writes
// it in the same entity group transaction as the application's entities,
// the runner reads it before it runs the job and deletes it once the job
// is done. docs/client.md describes the protocol.

// Properties of an outbox row. The row lives under the reserved RowKey
// prefix, so no scan of application data reads it.
const (
	// OutboxKind, OutboxQueue and OutboxMessage say which job the row
	// stands for: its kind, its work queue and the id of its first
	// message (what `enqueue outbox check` shows).
	OutboxKind    = "Kind"
	OutboxQueue   = "Queue"
	OutboxMessage = "MessageID"
	// OutboxWindow is the job's commit window in seconds.
	OutboxWindow = "WindowSeconds"
	// OutboxFenced marks a fence: a row the runner wrote where the
	// transaction's row was still missing after its window, so that the
	// transaction can no longer commit (its insert of the row fails).
	OutboxFenced = "Fenced"
)

// OutboxState is what an outbox row says of its job.
type OutboxState int

// The states of an outbox row.
const (
	// OutboxMissing: no row. The transaction has not committed yet, never
	// will, or the job ran and its row was deleted.
	OutboxMissing OutboxState = iota
	// OutboxCommitted: the transaction committed and the job has not
	// finished.
	OutboxCommitted
	// OutboxFence: the runner fenced the row after the window: the
	// transaction never committed and the job was dropped.
	OutboxFence
)

// String names a state.
func (s OutboxState) String() string {
	return [...]string{"missing", "committed", "fenced"}[s]
}

// OutboxRow returns the row a transaction writes for the job of envelope
// env (whose Outbox is set), sent as message messageID on queue: an insert,
// so a second transaction of the same operation, or one the runner has
// fenced, fails as a whole.
func OutboxRow(env Envelope, queue, messageID string) storeadapter.Entity {
	o := env.Outbox
	return storeadapter.Entity{PartitionKey: o.PK, RowKey: o.RK, Properties: map[string]any{
		OutboxKind: env.Kind, OutboxQueue: queue, OutboxMessage: messageID,
		OutboxWindow: int64(time.Duration(o.Window) / time.Second),
	}}
}

// OutboxEntry is an outbox row as read.
type OutboxEntry struct {
	State OutboxState
	// Row is the row read (its ETag and Timestamp included); zero when
	// the state is OutboxMissing.
	Row storeadapter.Entity
}

// ReadOutbox reads the outbox row o names. A missing table is a missing
// row: the transaction that would have created it never committed.
func ReadOutbox(ctx context.Context, tables storeadapter.Tables, o *OutboxRef) (OutboxEntry, error) {
	e, err := tables.GetEntity(ctx, o.Table, o.PK, o.RK)
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		return OutboxEntry{State: OutboxMissing}, nil
	case err != nil:
		return OutboxEntry{}, fmt.Errorf("outbox: read %s %s/%s: %w", o.Table, o.PK, o.RK, err)
	}
	return OutboxEntry{State: OutboxRowState(e), Row: e}, nil
}

// OutboxRowState is the state of a row that exists: OutboxFence or
// OutboxCommitted.
func OutboxRowState(e storeadapter.Entity) OutboxState {
	if fenced, _ := e.Properties[OutboxFenced].(bool); fenced {
		return OutboxFence
	}
	return OutboxCommitted
}

// OutboxRows selects the outbox rows of a table, of partition pk unless it
// is "": the reserved rows (storeadapter.ReservedRows) whose RowKeys
// start with OutboxPrefix. Without pk the service reads the whole table
// to find them.
func OutboxRows(pk string) storeadapter.Filter {
	f := storeadapter.ReservedRows(strings.TrimPrefix(OutboxPrefix, storeadapter.ReservedPrefix))
	if pk != "" {
		f = storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Eq, pk), f)
	}
	return f
}

// FenceOutbox writes a fence where o's row is missing: an insert, so it
// either takes the slot — and the transaction, whose insert of the same
// row would now fail, can never commit — or finds the row the transaction
// wrote meanwhile, which it returns (OutboxCommitted). A missing table is
// fenced by nothing: no transaction can have written to it, and one that
// creates it later finds no row of a job that was dropped long before;
// FenceOutbox then reports OutboxMissing.
func FenceOutbox(ctx context.Context, tables storeadapter.Tables, o *OutboxRef) (OutboxEntry, error) {
	fence := storeadapter.Entity{PartitionKey: o.PK, RowKey: o.RK, Properties: map[string]any{OutboxFenced: true}}
	etag, err := tables.InsertEntity(ctx, o.Table, fence)
	switch {
	case err == nil:
		fence.ETag = etag
		return OutboxEntry{State: OutboxFence, Row: fence}, nil
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return OutboxEntry{State: OutboxMissing}, nil
	case errors.Is(err, storeadapter.ErrAlreadyExists):
		return ReadOutbox(ctx, tables, o)
	}
	return OutboxEntry{}, fmt.Errorf("outbox: fence %s %s/%s: %w", o.Table, o.PK, o.RK, err)
}

// RemoveOutbox deletes the row read as e, If-Match its ETag. A row gone
// or changed since is no error: another delivery of the same operation
// removed it.
func RemoveOutbox(ctx context.Context, tables storeadapter.Tables, table string, e storeadapter.Entity) error {
	err := tables.DeleteEntity(ctx, table, e.PartitionKey, e.RowKey, e.ETag)
	if err == nil || errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPreconditionFailed) {
		return nil
	}
	return fmt.Errorf("outbox: delete %s %s/%s: %w", table, e.PartitionKey, e.RowKey, err)
}
