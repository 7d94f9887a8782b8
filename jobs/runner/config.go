package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Poisoner records failed attempts and parks messages; *poison.Recorder is the
// implementation.
type Poisoner interface {
	RecordAttempt(ctx context.Context, f poison.Failure) error
	Move(ctx context.Context, f poison.Failure, popReceipt, reason string) error
	// Forget drops the failure record of a message that finally succeeded.
	Forget(ctx context.Context, messageID string) error
	// LastAttempt returns the latest attempt recorded for a message, and
	// false when none is.
	LastAttempt(ctx context.Context, messageID string) (poison.Attempt, bool, error)
	// RecordDropped records a job dropped because its transaction never
	// committed (see runOutbox), idempotently by operation id; the runner
	// logs a failure and goes on.
	RecordDropped(ctx context.Context, d poison.Drop) error
}

// Defaults of Config. Each is documented on its field too.
const (
	DefaultConcurrency     = 16
	DefaultBatchSize       = 32
	DefaultVisibility      = 30 * time.Second
	DefaultMaxDequeueCount = 5
	DefaultRetryBase       = 2 * time.Second
	DefaultRetryMax        = 10 * time.Minute
	DefaultIdleMin         = 100 * time.Millisecond
	DefaultIdleMax         = 30 * time.Second
	DefaultShutdownGrace   = 25 * time.Second
	DefaultReceiveOutage   = 2 * time.Minute
)

// Limits of Config, for callers that check settings themselves (the worker
// checks its flags against them).
const (
	MaxConcurrency     = 1024
	MinVisibility      = 2 * time.Second
	MaxMaxDequeueCount = 1000
)

// Config configures a Runner. Zero fields take the documented defaults.
type Config struct {
	// Queue is the work queue. Required.
	Queue storeadapter.Queue
	// Registry decodes messages and names their handlers. Required.
	Registry *jobs.Registry
	// Poison records failures and parks messages. Required.
	Poison Poisoner
	// Logger receives one line per job; nil discards.
	Logger *slog.Logger
	// Clock drives lease renewal and backoff; nil is the wall clock.
	Clock clock.Clock
	// Host names this worker in failure records; "" is "unknown".
	Host string
	// Tables is where the outbox rows of transactional enqueues live (the
	// applications' tables); a job with an outbox reference fails without
	// it. See runOutbox.
	Tables storeadapter.Tables
	// OutboxHold is how long after a dropped job's window its fence stays
	// (so that no late commit of its transaction can land): long enough
	// for any storage call the producer started within the window to end.
	// Default 15 min, 1 s-24 h.
	OutboxHold time.Duration

	// Concurrency is how many messages run at once. Default 16, 1–1024.
	Concurrency int
	// BatchSize is how many messages one receive asks for. Default 32, 1–32.
	// Half a batch (at most the concurrency) waits leased behind the
	// running messages, or, with more slots than a batch, a batch or half
	// the concurrency, whichever is more (see Run); the runner
	// receives again once half a batch fits, with up to one receive per
	// batch of slots in flight (at most 16) while the receives come back
	// full (see Run).
	BatchSize int
	// Visibility is the lease taken on each message and renewed at half
	// its length while the handler runs. Default 30 s, 2 s–7 d.
	Visibility time.Duration
	// MaxDequeueCount is how many deliveries a message gets before it is
	// poisoned. Default 5, 1–1000.
	MaxDequeueCount int64
	// RetryBase (z) and RetryMax bound the retry delay after a transient
	// failure on delivery x: rand(0.8z, 1.2z)·(2^x − 1), clamped to
	// [RetryBase, RetryMax]. Defaults 2 s and 10 min. The queue keeps whole
	// seconds.
	RetryBase, RetryMax time.Duration
	// IdleMin and IdleMax bound the jittered exponential wait between
	// receives that find the queue empty. Defaults 100 ms and 30 s.
	IdleMin, IdleMax time.Duration

	// Drain makes Run return once a receive finds no visible message,
	// nothing is running, and either the queue's approximate count is 0 or
	// DrainQuiet has passed since the last activity (see DrainQuiet):
	// run-to-completion for container jobs. Azure's count is "not lower than the actual number":
	// it includes messages other workers hold, messages delayed by a retry
	// backoff, and expired ones until the service collects them, so waiting
	// for 0 alone could wait forever.
	Drain bool
	// DrainQuiet is how long a drain waits, with nothing visible and
	// nothing running, for the messages the count still holds. It runs
	// from the last activity: the last receive that returned messages, or
	// the last message of this worker that ended continued, retried,
	// released, ack failed or lease lost (each comes back to the queue),
	// so a job that ran longer than DrainQuiet and then failed is still
	// retried by the same drain, and a job that continues is continued by
	// it (when its continuation's delay is shorter than DrainQuiet). Default twice Visibility: a message another worker holds
	// is either deleted or visible again within one visibility timeout of
	// that worker's last renewal, even when the worker crashed; the second
	// timeout is a margin. Messages delayed longer (a retry whose backoff
	// exceeds DrainQuiet) are left to the next run, which the count keeps
	// scheduling.
	DrainQuiet time.Duration
	// ReceiveOutage is how long receives may fail without one success
	// before Run gives up and returns an error (a storage outage or a
	// broken endpoint: the container should exit 1), counted from the
	// first failure, or from when the caller says storage began failing
	// (see Runner.StorageFailingSince). Run returns within it: each
	// receive during an outage is bounded by what is left of it, and
	// when too little is left for another (a quarter of ReceiveOutage, at
	// most 10 s, after the shortest idle wait), Run waits out the rest and
	// gives up. Default 2 min.
	ReceiveOutage time.Duration
	// MaxMessages stops Run after this many messages were handled
	// (finished, continued, retried or poisoned; each continuation is a
	// message of its own). 0 means no limit.
	MaxMessages int
	// MaxDuration stops Run after this long. 0 means no limit.
	MaxDuration time.Duration
	// Observers hear every step of every message (see Event), after the
	// runner's own logging and Stats.
	Observers []Observer

	// ShutdownGrace is how long running handlers may go on after Run's
	// context is cancelled (their leases still renewed) before their own
	// contexts are cancelled. Default 25 s.
	ShutdownGrace time.Duration
}

// Validate fills defaults and checks ranges. It never panics.
func (c *Config) Validate() error {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Visibility = cmp.Or(c.Visibility, DefaultVisibility)
	c.MaxDequeueCount = cmp.Or(c.MaxDequeueCount, DefaultMaxDequeueCount)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.IdleMin = cmp.Or(c.IdleMin, DefaultIdleMin)
	c.IdleMax = cmp.Or(c.IdleMax, DefaultIdleMax)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.DrainQuiet = cmp.Or(c.DrainQuiet, 2*c.Visibility)
	c.ReceiveOutage = cmp.Or(c.ReceiveOutage, DefaultReceiveOutage)
	c.OutboxHold = cmp.Or(c.OutboxHold, DefaultOutboxHold)
	c.Host = cmp.Or(c.Host, "unknown")
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Queue == nil || c.Registry == nil || c.Poison == nil:
		return errors.New("runner: Queue, Registry and Poison are required")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("runner: concurrency: must be 1-%d, got %d", MaxConcurrency, c.Concurrency)
	case c.BatchSize < 1 || c.BatchSize > storeadapter.MaxReceiveCount:
		return fmt.Errorf("runner: batch size: must be 1-%d, got %d", storeadapter.MaxReceiveCount, c.BatchSize)
	case c.Visibility < MinVisibility || c.Visibility > storeadapter.MaxVisibility:
		return fmt.Errorf("runner: visibility: must be 2s-7d, got %v", c.Visibility)
	case c.MaxDequeueCount < 1 || c.MaxDequeueCount > MaxMaxDequeueCount:
		return fmt.Errorf("runner: max dequeue count: must be 1-%d, got %d", MaxMaxDequeueCount, c.MaxDequeueCount)
	case c.RetryBase < 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("runner: retry delays: need 0 <= base (%v) <= max (%v)", c.RetryBase, c.RetryMax)
	case c.IdleMin <= 0 || c.IdleMax < c.IdleMin:
		return fmt.Errorf("runner: idle delays: need 0 < min (%v) <= max (%v)", c.IdleMin, c.IdleMax)
	case c.OutboxHold < time.Second || c.OutboxHold > 24*time.Hour:
		return fmt.Errorf("runner: outbox hold: must be 1s-24h, got %v", c.OutboxHold)
	case c.MaxMessages < 0 || c.MaxDuration < 0 || c.ShutdownGrace < 0 || c.DrainQuiet < 0 || c.ReceiveOutage < 0:
		return errors.New("runner: max messages, max duration, shutdown grace, drain quiet and receive outage must not be negative")
	}
	return nil
}

// Stats count what a runner did. Read them with Runner.Stats. Every
// received message ends in exactly one outcome, so once Run has returned,
// Received = Succeeded + Continued + Retried + Poisoned + LeaseLost +
// Released + AckFailed + Abandoned.
type Stats struct {
	Received  int64 // messages received
	Succeeded int64 // the job succeeded and the message is deleted
	// Continued counts deliveries whose job saved its progress and asked
	// to continue later: the operation was re-sent as a new message and
	// the delivered one deleted. A job that continues k times and then
	// succeeds counts k here and 1 in Succeeded (Received counts k+1).
	Continued int64
	Retried   int64 // the job failed transiently; the message comes back after a backoff
	Poisoned  int64 // moved to the poison queue
	LeaseLost int64 // the lease was lost (another worker may have the message)
	Released  int64 // handed back unstarted (shutdown), or cancelled by shutdown
	// AckFailed counts messages whose outcome could not be acknowledged
	// (the delete, retry, poison move or release kept failing, or
	// processing panicked): each reappears when its lease runs out and runs
	// again.
	AckFailed int64
	// Abandoned counts messages whose handlers ignored the cancellation at
	// the end of the shutdown grace period and still ran when Run returned.
	// Their leases are renewed while the handlers run (and the process
	// lives); then each message is deleted or reappears. How they end is
	// not counted: the counts are final once Run has returned.
	Abandoned int64
	// ReceiveFailures counts failed receive calls (not messages).
	ReceiveFailures int64
	// StopReason says why Run returned: "drained", "max messages", "max
	// duration", "shutdown", "receive failing", "credential refused"
	// (storage refused the credential, on a receive or in a job: see
	// classify) or "drain incomplete" (a drain would have ended with
	// messages left that the service failed to return; Run returns an
	// error); "" while it runs.
	StopReason string
	// Left is, when a drain ended (or was incomplete), the queue's
	// approximate count at that moment (none of them visible: held
	// elsewhere, delayed, or expired and not yet collected; or, when
	// incomplete, hidden by the receives the service failed); -1 when it
	// could not be read, 0 otherwise.
	Left int
}
