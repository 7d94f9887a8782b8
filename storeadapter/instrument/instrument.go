package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Op names a storage call after the interface method it calls. The
// methods Queue and Blobs share (Create, Delete) carry their resource in the
// name. A new interface method needs one constant here and its wrapper
// method below.
type Op string

// The operations of storeadapter.Tables.
const (
	OpCreateTable  Op = "CreateTable"
	OpDeleteTable  Op = "DeleteTable"
	OpListTables   Op = "ListTables"
	OpGetEntity    Op = "GetEntity"
	OpInsertEntity Op = "InsertEntity"
	OpUpsertEntity Op = "UpsertEntity"
	OpUpdateEntity Op = "UpdateEntity"
	OpDeleteEntity Op = "DeleteEntity"
	OpQuery        Op = "Query"
	OpTransact     Op = "Transact"
)

// The operations of storeadapter.Queue.
const (
	OpCreateQueue      Op = "CreateQueue" // Queue.Create
	OpDeleteQueue      Op = "DeleteQueue" // Queue.Delete
	OpSend             Op = "Send"
	OpReceive          Op = "Receive"
	OpUpdate           Op = "Update"
	OpDeleteMessage    Op = "DeleteMessage"
	OpPeek             Op = "Peek"
	OpClear            Op = "Clear"
	OpApproximateCount Op = "ApproximateCount"
)

// The operations of storeadapter.Blobs.
const (
	OpCreateContainer Op = "CreateContainer" // Blobs.Create
	OpPut             Op = "Put"
	OpGet             Op = "Get"
	OpProperties      Op = "Properties"
	OpDeleteBlob      Op = "DeleteBlob" // Blobs.Delete
	OpList            Op = "List"
	OpStageBlock      Op = "StageBlock"
	OpCommitBlocks    Op = "CommitBlocks"
	OpOpen            Op = "Open" // opening the blob; the reading after it is not timed
)

// Services of an Op, as Service names them.
const (
	ServiceTable = "table"
	ServiceQueue = "queue"
	ServiceBlob  = "blob"
)

// services maps each Op to its service; a new Op needs a line here too.
var services = map[Op]string{
	OpCreateTable: ServiceTable, OpDeleteTable: ServiceTable, OpListTables: ServiceTable, OpGetEntity: ServiceTable,
	OpInsertEntity: ServiceTable, OpUpsertEntity: ServiceTable, OpUpdateEntity: ServiceTable, OpDeleteEntity: ServiceTable,
	OpQuery: ServiceTable, OpTransact: ServiceTable,
	OpCreateQueue: ServiceQueue, OpDeleteQueue: ServiceQueue, OpSend: ServiceQueue, OpReceive: ServiceQueue, OpUpdate: ServiceQueue,
	OpDeleteMessage: ServiceQueue, OpPeek: ServiceQueue, OpClear: ServiceQueue, OpApproximateCount: ServiceQueue,
	OpCreateContainer: ServiceBlob, OpPut: ServiceBlob, OpGet: ServiceBlob, OpProperties: ServiceBlob, OpDeleteBlob: ServiceBlob,
	OpList: ServiceBlob, OpStageBlock: ServiceBlob, OpCommitBlocks: ServiceBlob, OpOpen: ServiceBlob,
}

// Service names the storage service an Op calls: "table", "queue" or
// "blob" ("" for an Op this package does not define).
func (o Op) Service() string { return services[o] }

// Call describes one storage call: its operation and, where the method has
// them, what it addresses.
type Call struct {
	Op Op
	// Name is the table, queue or container the call addresses; "" for
	// ListTables.
	Name string
	// PartitionKey and RowKey are the entity's keys in single-entity calls;
	// Transact has the partition of its first operation only.
	PartitionKey, RowKey string
	// Blob is the blob's name in Put, Get, Properties and DeleteBlob.
	Blob string
	// MessageID is the message's id in Update and DeleteMessage.
	MessageID string
}

// Observer hears every call once it has returned: how long it took as its
// caller saw it (injected latency included) and the error it returned
// (nil on success). Observe is called from the caller's goroutine, possibly
// from many at once, and must not block.
type Observer interface {
	Observe(c Call, took time.Duration, err error)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(c Call, took time.Duration, err error)

// Observe calls f.
func (f ObserverFunc) Observe(c Call, took time.Duration, err error) { f(c, took, err) }

// Options say what the wrapper does around each call. The zero value only
// passes calls through.
type Options struct {
	// Observers hear every call, in order, after it returns.
	Observers []Observer
	// Latency, if set, gives a delay to add before each call (0 for none),
	// as a round trip to the service would. A context that ends during the
	// delay ends the call with an error wrapping ctx.Err(); the wrapped
	// store is not called. See Fixed.
	Latency func(c Call) time.Duration
	// Fault, if set, is called before each call, after its latency. A
	// non-nil error is returned as it is instead of calling the wrapped
	// store; the hook may also block, so a test can hold a call at a
	// chosen point. It runs on the caller's goroutine.
	Fault func(ctx context.Context, c Call) error
	// After, if set, is called once the wrapped store has answered, with
	// its error; what it returns is what the caller gets. A test replaces
	// a success by an error here to lose the reply of a call that did its
	// work (the crash of a caller right after a write, a timeout after the
	// service acted).
	After func(ctx context.Context, c Call, err error) error
}

// Fixed is an Options.Latency that delays every call by d.
func Fixed(d time.Duration) func(Call) time.Duration {
	return func(Call) time.Duration { return d }
}

// Store wraps a storeadapter.Store. It is safe for concurrent use if the
// wrapped store, the hooks and the observers are.
type Store struct {
	next storeadapter.Store
	o    Options
}

var (
	_ storeadapter.Store  = (*Store)(nil)
	_ storeadapter.Tables = (*tables)(nil)
	_ storeadapter.Queue  = (*queue)(nil)
	_ storeadapter.Blobs  = (*blobs)(nil)
)

// Wrap returns next with every call passing through o.
func Wrap(next storeadapter.Store, o Options) *Store { return &Store{next: next, o: o} }

// Tables returns the wrapped table service.
func (s *Store) Tables() storeadapter.Tables { return &tables{s: s, next: s.next.Tables()} }

// Queue returns a handle on the named queue of the wrapped store.
func (s *Store) Queue(name string) storeadapter.Queue {
	return &queue{s: s, next: s.next.Queue(name), name: name}
}

// Container returns a handle on the named container of the wrapped store.
func (s *Store) Container(name string) storeadapter.Blobs {
	return &blobs{s: s, next: s.next.Container(name), name: name}
}

// do runs one call: its latency, its fault hook, fn, then the observers.
func (s *Store) do(ctx context.Context, c Call, fn func() error) error {
	start := time.Now()
	err := s.before(ctx, c)
	if err == nil {
		err = fn()
		if s.o.After != nil {
			err = s.o.After(ctx, c, err)
		}
	}
	if len(s.o.Observers) > 0 {
		took := time.Since(start)
		for _, ob := range s.o.Observers {
			ob.Observe(c, took, err)
		}
	}
	return err
}

func (s *Store) before(ctx context.Context, c Call) error {
	if s.o.Latency != nil {
		if d := s.o.Latency(c); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("instrument: %s: %w", c.Op, ctx.Err())
			}
		}
	}
	if s.o.Fault != nil {
		return s.o.Fault(ctx, c)
	}
	return nil
}

// call is do for a method that returns a value.
func call[T any](s *Store, ctx context.Context, c Call, fn func() (T, error)) (T, error) {
	var v T
	err := s.do(ctx, c, func() (err error) {
		v, err = fn()
		return err
	})
	return v, err
}

// pair carries a method's two results through call.
type pair[A, B any] struct {
	a A
	b B
}

// Expected reports whether err is one of the service's definite answers
// that idempotent code handles as a normal outcome, not a failure: not found
// (an entity, message or blob that is not there, or the table, queue or
// container a first write creates on demand), already exists (a create of
// something that is there), precondition failed (a compare-and-swap that
// lost a round, a conditional delete of something changed since) and pop
// receipt mismatch (a message another receive took). Counts and the
// worker's metrics count them apart from the failures (every other error),
// so that an error count means trouble. When such an answer does fail the
// caller, the caller's outcome says so (a job retried or poisoned).
func Expected(err error) bool {
	return err != nil && (errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrAlreadyExists) ||
		errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrPopReceiptMismatch))
}
