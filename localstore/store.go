package localstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Store is an in-memory storage account. Create one with New.
type Store struct {
	clock     clock.Clock
	tableWait time.Duration

	seq atomic.Uint64 // ETags, pop receipts and message ids

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
	// Clock is the service's clock; nil is the wall clock. Pass a
	// clock.Fake to control visibility timeouts, expiry and delete delays
	// in tests.
	Clock clock.Clock
	// TableDeleteDelay is how long a deleted table's name cannot be reused
	// (ErrTableBeingDeleted). 0 means DefaultTableDeleteDelay; a negative
	// value frees the name at once.
	TableDeleteDelay time.Duration
}

// New returns an empty store.
func New(o Options) *Store {
	s := &Store{
		clock:      clock.Or(o.Clock),
		tableWait:  o.TableDeleteDelay,
		queues:     make(map[string]*queueState),
		containers: make(map[string]*containerState),
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

// begin honours a cancelled context before a call, as a service call
// would. op names the call in the error. Counting, timing and failing
// calls is the store instrument's work (storeadapter/instrument).
func (s *Store) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("localstore: %s: %w", op, err)
	}
	return nil
}

// time returns the store's current time, UTC with 100 ns precision.
func (s *Store) time() time.Time { return storeadapter.DateTime(s.clock.Now()) }

// next returns a store-unique sequence number as text.
func (s *Store) next() string { return strconv.FormatUint(s.seq.Add(1), 36) }

// appendNext appends a store-unique sequence number as text to b.
func (s *Store) appendNext(b []byte) []byte { return strconv.AppendUint(b, s.seq.Add(1), 36) }
