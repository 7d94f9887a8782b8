package localstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Store is an in-memory storage account. Create one with New.
type Store struct {
	now       func() time.Time
	fault     func(op string) error
	tableWait time.Duration

	seq atomic.Uint64 // ETags, pop receipts and message ids

	calls sync.Map // operation name -> *atomic.Int64

	tables tableService

	queuesMu sync.Mutex
	queues   map[string]*queueState

	blobsMu    sync.Mutex
	containers map[string]*containerState
}

var (
	_ storeadapter.Store  = (*Store)(nil)
	_ storeadapter.Tables = (*tableService)(nil)
	_ storeadapter.Queue  = (*Queue)(nil)
	_ storeadapter.Blobs  = (*Container)(nil)
)

// DefaultTableDeleteDelay is how long a deleted table's name stays
// unavailable by default. Azure documents "at least 40 seconds".
const DefaultTableDeleteDelay = 40 * time.Second

// Options configure a Store. The zero value is a real-time store.
type Options struct {
	// Now returns the current time; nil means time.Now. Pass a clock.Fake's
	// Now to control visibility timeouts, expiry and delete delays in tests.
	Now func() time.Time
	// TableDeleteDelay is how long a deleted table's name cannot be reused
	// (ErrTableBeingDeleted). 0 means DefaultTableDeleteDelay; a negative
	// value frees the name at once.
	TableDeleteDelay time.Duration
	// Fault, if set, is called with the operation name (as Calls counts it)
	// before every call; a non-nil result is returned instead of running it.
	//
	// Fault is kept only until the jobs/ tests move to the store instrument
	// (storeadapter/instrument, whose Options.Fault sees every call with a
	// typed Op); do not add new uses.
	Fault func(op string) error
}

// New returns an empty store.
func New(o Options) *Store {
	s := &Store{
		now:        o.Now,
		fault:      o.Fault,
		tableWait:  o.TableDeleteDelay,
		queues:     make(map[string]*queueState),
		containers: make(map[string]*containerState),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.tableWait == 0 {
		s.tableWait = DefaultTableDeleteDelay
	}
	s.tables = tableService{s: s, tables: make(map[string]*table), exact: make(map[string]*table), deleted: make(map[string]time.Time)}
	return s
}

// Tables returns the table service.
func (s *Store) Tables() storeadapter.Tables { return &s.tables }

// Queue returns a handle on the named queue.
func (s *Store) Queue(name string) storeadapter.Queue { return &Queue{s: s, name: name} }

// Container returns a handle on the named blob container.
func (s *Store) Container(name string) storeadapter.Blobs { return &Container{s: s, name: name} }

// Calls returns how many calls each operation has received so far, such as
// {"GetEntity": 3, "Receive": 1}, failed calls included.
//
// Calls is kept only until the jobs/ tests move to the store instrument
// (storeadapter/instrument, whose Counts counts every call by typed Op);
// do not add new uses.
func (s *Store) Calls() map[string]int64 {
	out := make(map[string]int64)
	s.calls.Range(func(op, n any) bool {
		out[op.(string)] = n.(*atomic.Int64).Load()
		return true
	})
	return out
}

// begin counts a call, honours a cancelled context and runs the fault hook.
func (s *Store) begin(ctx context.Context, op string) error {
	n, ok := s.calls.Load(op)
	if !ok {
		n, _ = s.calls.LoadOrStore(op, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("localstore: %s: %w", op, err)
	}
	if s.fault != nil {
		if err := s.fault(op); err != nil {
			return fmt.Errorf("localstore: %s: %w", op, err)
		}
	}
	return nil
}

// time returns the store's current time, UTC with 100 ns precision.
func (s *Store) time() time.Time { return storeadapter.DateTime(s.now()) }

// next returns a store-unique sequence number as text.
func (s *Store) next() string { return strconv.FormatUint(s.seq.Add(1), 36) }
