package tablewrite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Mode is how the writer treats a row the table holds already.
type Mode int

// Modes.
const (
	// Insert adds rows the table lacks; existing ones are left as they
	// are and counted Skipped.
	Insert Mode = iota + 1
	// Replace upserts: inserts a missing row, replaces an existing one
	// whatever its ETag.
	Replace
)

// String returns "insert" or "replace".
func (m Mode) String() string {
	switch m {
	case Insert:
		return "insert"
	case Replace:
		return "replace"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DefaultPartitions is Options.Partitions when it is 0.
const DefaultPartitions = 8

// Options configure a Writer.
type Options struct {
	// Tables is the store written to. Required.
	Tables storeadapter.Tables
	// Table is the table written to. Required.
	Table string
	// Mode is Insert or Replace. Required.
	Mode Mode
	// Partitions bounds the partitions written at once, each with one
	// transaction in flight; 0 means DefaultPartitions (8).
	Partitions int
	// CreateTable creates the table when a write finds it missing, and
	// writes again. Without it the write fails with
	// storeadapter.ErrTableNotFound.
	CreateTable bool
}

// Counts are what a Writer has written so far.
type Counts struct {
	// Written counts rows inserted or replaced, Skipped rows Insert left
	// because the table held them already, Transactions the entity group
	// transactions committed.
	Written, Skipped, Transactions int64
}

// Writer writes entities given in key order to one table in entity group
// transactions (see the package doc). Add and Flush are called from one
// goroutine; Counts may be called from any.
type Writer struct {
	o   Options
	sem chan struct{} // one token per partition being written
	wg  sync.WaitGroup

	written, skipped, txs atomic.Int64

	mu  sync.Mutex
	err error // the first failure; later Adds and Flushes return it

	// Owned by the caller's goroutine.
	last    *storeadapter.Key      // the last key Added since the last Flush
	cur     []storeadapter.TableOp // the open batch, all of one partition
	curSize int                    // its payload, by storeadapter.BatchOpSize
	part    chan batch             // the open partition's sender, nil when none
}

// batch is one transaction's operations with the context of the Add that
// sent it.
type batch struct {
	ctx context.Context
	ops []storeadapter.TableOp
}

// New checks the options and returns a Writer.
func New(o Options) (*Writer, error) {
	switch {
	case o.Tables == nil:
		return nil, errors.New("tablewrite: Options.Tables is nil")
	case o.Mode != Insert && o.Mode != Replace:
		return nil, fmt.Errorf("tablewrite: Options.Mode must be Insert or Replace, got %d", int(o.Mode))
	case o.Partitions < 0:
		return nil, fmt.Errorf("tablewrite: Options.Partitions must be 0 (the default, %d) or more, got %d", DefaultPartitions, o.Partitions)
	}
	if err := storeadapter.ValidateTableName(o.Table); err != nil {
		return nil, fmt.Errorf("tablewrite: %w", err)
	}
	o.Partitions = cmp.Or(o.Partitions, DefaultPartitions)
	return &Writer{o: o, sem: make(chan struct{}, o.Partitions)}, nil
}

// Counts returns what has been written so far: rows whose batch has
// committed, not rows merely Added.
func (w *Writer) Counts() Counts {
	return Counts{Written: w.written.Load(), Skipped: w.skipped.Load(), Transactions: w.txs.Load()}
}

// Add buffers an entity and sends its partition's batch when it is full
// (storeadapter.MaxBatchOps operations, or storeadapter.MaxBatchBytes
// would be passed) or when the entity starts another partition. Entities
// must come in key order between Flushes; one that does not, or that
// breaks the service's rules (storeadapter.ValidateEntity), is refused with
// storeadapter.ErrInvalidInput or ErrTooLarge and nothing of it is sent.
// Add waits while Options.Partitions partitions are being written. Its
// ETag and Timestamp are not written. Add returns the first error of any
// batch sent before.
func (w *Writer) Add(ctx context.Context, e storeadapter.Entity) error {
	if err := w.failed(); err != nil {
		return err
	}
	k := storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
	if w.last != nil && w.last.Compare(k) >= 0 {
		return fmt.Errorf("tablewrite: %s/%s after %s/%s: entities must come in key order, each once: %w",
			k.PK, k.RK, w.last.PK, w.last.RK, storeadapter.ErrInvalidInput)
	}
	if err := storeadapter.ValidateEntity(e); err != nil {
		return fmt.Errorf("tablewrite: entity %s/%s: %w", k.PK, k.RK, err)
	}
	if len(w.cur) > 0 && w.cur[0].Entity.PartitionKey != k.PK {
		if err := w.send(ctx); err != nil {
			return err
		}
		w.endPartition()
	}
	e = storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, Properties: e.Properties}
	size := storeadapter.BatchOpSize(e)
	if len(w.cur) == storeadapter.MaxBatchOps || w.curSize+size > storeadapter.MaxBatchBytes {
		if err := w.send(ctx); err != nil {
			return err
		}
	}
	action := storeadapter.TxInsert
	if w.o.Mode == Replace {
		action = storeadapter.TxUpsertReplace
	}
	w.cur = append(w.cur, storeadapter.TableOp{Action: action, Entity: e})
	w.curSize += size
	w.last = &k
	return nil
}

// Flush sends what is buffered and waits until every batch sent has
// committed or failed. When it returns nil, every entity Added before is
// durable. It returns the first error of any batch. After it the key order
// starts again: the next Add may take any key.
func (w *Writer) Flush(ctx context.Context) error {
	err := w.send(ctx)
	w.endPartition()
	w.wg.Wait()
	w.last = nil
	return cmp.Or(w.failed(), err)
}

// send hands the open batch to its partition's sender, starting one (and
// waiting for a free slot) when the partition has none.
func (w *Writer) send(ctx context.Context) error {
	if len(w.cur) == 0 {
		return nil
	}
	if w.part == nil {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("tablewrite: waiting for a partition slot: %w", ctx.Err())
		}
		w.part = make(chan batch)
		w.wg.Add(1)
		go w.run(w.part)
	}
	select {
	case w.part <- batch{ctx: ctx, ops: w.cur}:
	case <-ctx.Done():
		return fmt.Errorf("tablewrite: waiting for partition %q: %w", w.cur[0].Entity.PartitionKey, ctx.Err())
	}
	w.cur, w.curSize = nil, 0
	return nil
}

// endPartition lets the open partition's sender finish.
func (w *Writer) endPartition() {
	if w.part != nil {
		close(w.part)
		w.part = nil
	}
}

// run writes one partition's batches in order, then frees its slot. After
// a failure it drops what it is given, so that Add never waits on it.
func (w *Writer) run(ch <-chan batch) {
	defer w.wg.Done()
	defer func() { <-w.sem }()
	for b := range ch {
		if w.failed() != nil {
			continue
		}
		if err := w.write(b.ctx, b.ops); err != nil {
			w.fail(err)
		}
	}
}

// write commits one batch. In Insert mode, a batch refused because a row
// exists is inserted again row by row.
func (w *Writer) write(ctx context.Context, ops []storeadapter.TableOp) error {
	err := w.createOnMissing(ctx, func(ctx context.Context) error {
		return w.o.Tables.Transact(ctx, w.o.Table, ops)
	})
	switch {
	case err == nil:
		w.written.Add(int64(len(ops)))
		w.txs.Add(1)
		return nil
	case w.o.Mode == Insert && errors.Is(err, storeadapter.ErrAlreadyExists):
		return w.oneByOne(ctx, ops)
	}
	return fmt.Errorf("tablewrite: write %d rows of partition %q to %s: %w", len(ops), ops[0].Entity.PartitionKey, w.o.Table, err)
}

// oneByOne inserts each row of a batch on its own; a row that exists is
// Skipped.
func (w *Writer) oneByOne(ctx context.Context, ops []storeadapter.TableOp) error {
	for _, op := range ops {
		err := w.createOnMissing(ctx, func(ctx context.Context) error {
			_, err := w.o.Tables.InsertEntity(ctx, w.o.Table, op.Entity)
			return err
		})
		switch {
		case err == nil:
			w.written.Add(1)
		case errors.Is(err, storeadapter.ErrAlreadyExists):
			w.skipped.Add(1)
		default:
			return fmt.Errorf("tablewrite: insert %s/%s into %s: %w", op.Entity.PartitionKey, op.Entity.RowKey, w.o.Table, err)
		}
	}
	return nil
}

func (w *Writer) createOnMissing(ctx context.Context, do func(context.Context) error) error {
	if !w.o.CreateTable {
		return do(ctx)
	}
	return idempotent.CreateOnMissing(ctx, idempotent.TableCreator(w.o.Tables, w.o.Table), do)
}

func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}
