package instrument

import (
	"context"
	"io"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The wrappers below are one call each through Store.do (or call): the
// Call they describe, then the wrapped method.

type tables struct {
	s    *Store
	next storeadapter.Tables
}

func (t *tables) CreateTable(ctx context.Context, table string) error {
	return t.s.do(ctx, Call{Op: OpCreateTable, Name: table}, func() error { return t.next.CreateTable(ctx, table) })
}

func (t *tables) DeleteTable(ctx context.Context, table string) error {
	return t.s.do(ctx, Call{Op: OpDeleteTable, Name: table}, func() error { return t.next.DeleteTable(ctx, table) })
}

func (t *tables) ListTables(ctx context.Context, prefix, continuation string) ([]string, string, error) {
	r, err := call(t.s, ctx, Call{Op: OpListTables}, func() (pair[[]string, string], error) {
		names, next, err := t.next.ListTables(ctx, prefix, continuation)
		return pair[[]string, string]{names, next}, err
	})
	return r.a, r.b, err
}

func (t *tables) GetEntity(ctx context.Context, table, pk, rk string) (storeadapter.Entity, error) {
	return call(t.s, ctx, Call{Op: OpGetEntity, Name: table, PartitionKey: pk, RowKey: rk}, func() (storeadapter.Entity, error) { return t.next.GetEntity(ctx, table, pk, rk) })
}

func (t *tables) InsertEntity(ctx context.Context, table string, e storeadapter.Entity) (string, error) {
	return call(t.s, ctx, entityCall(OpInsertEntity, table, e), func() (string, error) { return t.next.InsertEntity(ctx, table, e) })
}

func (t *tables) UpsertEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode) (string, error) {
	return call(t.s, ctx, entityCall(OpUpsertEntity, table, e), func() (string, error) { return t.next.UpsertEntity(ctx, table, e, mode) })
}

func (t *tables) UpdateEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode, ifMatch string) (string, error) {
	return call(t.s, ctx, entityCall(OpUpdateEntity, table, e), func() (string, error) { return t.next.UpdateEntity(ctx, table, e, mode, ifMatch) })
}

func (t *tables) DeleteEntity(ctx context.Context, table, pk, rk, ifMatch string) error {
	return t.s.do(ctx, Call{Op: OpDeleteEntity, Name: table, PartitionKey: pk, RowKey: rk}, func() error { return t.next.DeleteEntity(ctx, table, pk, rk, ifMatch) })
}

func (t *tables) Query(ctx context.Context, table string, q storeadapter.Query) (storeadapter.Page, error) {
	return call(t.s, ctx, Call{Op: OpQuery, Name: table}, func() (storeadapter.Page, error) { return t.next.Query(ctx, table, q) })
}

func (t *tables) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	c := Call{Op: OpTransact, Name: table}
	if len(ops) > 0 {
		c.PartitionKey = ops[0].Entity.PartitionKey
	}
	return t.s.do(ctx, c, func() error { return t.next.Transact(ctx, table, ops) })
}

func entityCall(op Op, table string, e storeadapter.Entity) Call {
	return Call{Op: op, Name: table, PartitionKey: e.PartitionKey, RowKey: e.RowKey}
}

type queue struct {
	s    *Store
	next storeadapter.Queue
	name string
}

func (q *queue) Name() string { return q.next.Name() }

func (q *queue) Create(ctx context.Context) error {
	return q.s.do(ctx, q.call(OpCreateQueue, ""), func() error { return q.next.Create(ctx) })
}

func (q *queue) Delete(ctx context.Context) error {
	return q.s.do(ctx, q.call(OpDeleteQueue, ""), func() error { return q.next.Delete(ctx) })
}

func (q *queue) Send(ctx context.Context, text string, o storeadapter.SendOptions) (storeadapter.Sent, error) {
	return call(q.s, ctx, q.call(OpSend, ""), func() (storeadapter.Sent, error) { return q.next.Send(ctx, text, o) })
}

func (q *queue) Receive(ctx context.Context, n int, visibility time.Duration) ([]storeadapter.Message, error) {
	return call(q.s, ctx, q.call(OpReceive, ""), func() ([]storeadapter.Message, error) { return q.next.Receive(ctx, n, visibility) })
}

func (q *queue) Update(ctx context.Context, id, popReceipt, text string, visibility time.Duration) (storeadapter.Receipt, error) {
	return call(q.s, ctx, q.call(OpUpdate, id), func() (storeadapter.Receipt, error) { return q.next.Update(ctx, id, popReceipt, text, visibility) })
}

func (q *queue) DeleteMessage(ctx context.Context, id, popReceipt string) error {
	return q.s.do(ctx, q.call(OpDeleteMessage, id), func() error { return q.next.DeleteMessage(ctx, id, popReceipt) })
}

func (q *queue) Peek(ctx context.Context, n int) ([]storeadapter.Message, error) {
	return call(q.s, ctx, q.call(OpPeek, ""), func() ([]storeadapter.Message, error) { return q.next.Peek(ctx, n) })
}

func (q *queue) Clear(ctx context.Context) error {
	return q.s.do(ctx, q.call(OpClear, ""), func() error { return q.next.Clear(ctx) })
}

func (q *queue) ApproximateCount(ctx context.Context) (int, error) {
	return call(q.s, ctx, q.call(OpApproximateCount, ""), func() (int, error) { return q.next.ApproximateCount(ctx) })
}

func (q *queue) call(op Op, id string) Call { return Call{Op: op, Name: q.name, MessageID: id} }

type blobs struct {
	s    *Store
	next storeadapter.Blobs
	name string
}

func (b *blobs) Name() string { return b.next.Name() }

func (b *blobs) Create(ctx context.Context) error {
	return b.s.do(ctx, b.call(OpCreateContainer, ""), func() error { return b.next.Create(ctx) })
}

func (b *blobs) Put(ctx context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	return call(b.s, ctx, b.call(OpPut, name), func() (string, error) { return b.next.Put(ctx, name, data, o) })
}

func (b *blobs) Get(ctx context.Context, name string) ([]byte, storeadapter.BlobProps, error) {
	r, err := call(b.s, ctx, b.call(OpGet, name), func() (pair[[]byte, storeadapter.BlobProps], error) {
		data, props, err := b.next.Get(ctx, name)
		return pair[[]byte, storeadapter.BlobProps]{data, props}, err
	})
	return r.a, r.b, err
}

func (b *blobs) Properties(ctx context.Context, name string) (storeadapter.BlobProps, error) {
	return call(b.s, ctx, b.call(OpProperties, name), func() (storeadapter.BlobProps, error) { return b.next.Properties(ctx, name) })
}

func (b *blobs) Delete(ctx context.Context, name, ifMatch string) error {
	return b.s.do(ctx, b.call(OpDeleteBlob, name), func() error { return b.next.Delete(ctx, name, ifMatch) })
}

func (b *blobs) List(ctx context.Context, prefix, marker string) (storeadapter.BlobPage, error) {
	return call(b.s, ctx, b.call(OpList, ""), func() (storeadapter.BlobPage, error) { return b.next.List(ctx, prefix, marker) })
}

func (b *blobs) StageBlock(ctx context.Context, name, blockID string, data []byte) error {
	return b.s.do(ctx, b.call(OpStageBlock, name), func() error { return b.next.StageBlock(ctx, name, blockID, data) })
}

func (b *blobs) CommitBlocks(ctx context.Context, name string, blockIDs []string, o storeadapter.PutOptions) (string, error) {
	return call(b.s, ctx, b.call(OpCommitBlocks, name), func() (string, error) { return b.next.CommitBlocks(ctx, name, blockIDs, o) })
}

func (b *blobs) Open(ctx context.Context, name string) (io.ReadCloser, storeadapter.BlobProps, error) {
	r, err := call(b.s, ctx, b.call(OpOpen, name), func() (pair[io.ReadCloser, storeadapter.BlobProps], error) {
		rc, props, err := b.next.Open(ctx, name)
		return pair[io.ReadCloser, storeadapter.BlobProps]{rc, props}, err
	})
	return r.a, r.b, err
}

func (b *blobs) call(op Op, blob string) Call { return Call{Op: op, Name: b.name, Blob: blob} }
