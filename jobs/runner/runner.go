package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Poisoner records failed attempts and parks messages; *poison.Mover is the
// implementation.
type Poisoner interface {
	RecordAttempt(ctx context.Context, f poison.Failure) error
	Move(ctx context.Context, f poison.Failure, popReceipt, reason string) error
	// Forget drops the failure record of a message that finally succeeded.
	Forget(ctx context.Context, messageID string) error
	// LastAttempt returns the latest attempt recorded for a message, and
	// false when none is.
	LastAttempt(ctx context.Context, messageID string) (poison.Attempt, bool, error)
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

	// Concurrency is how many messages run at once. Default 16, 1–1024.
	Concurrency int
	// BatchSize is how many messages one receive asks for. Default 32, 1–32.
	// The runner receives again once at least half a batch of slots is free.
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
	// the last message of this worker that ended retried, released, ack
	// failed or lease lost (each comes back to the queue), so a job that
	// ran longer than DrainQuiet and then failed is still retried by the
	// same drain. Default twice Visibility: a message another worker holds
	// is either deleted or visible again within one visibility timeout of
	// that worker's last renewal, even when the worker crashed; the second
	// timeout is a margin. Messages delayed longer (a retry whose backoff
	// exceeds DrainQuiet) are left to the next run, which the count keeps
	// scheduling.
	DrainQuiet time.Duration
	// ReceiveOutage is how long receives may fail without one success
	// before Run gives up and returns an error (a storage outage or a
	// broken endpoint: the container should exit 1). Default 2 min.
	ReceiveOutage time.Duration
	// MaxMessages stops Run after this many messages were handled
	// (finished, retried or poisoned). 0 means no limit.
	MaxMessages int
	// MaxDuration stops Run after this long. 0 means no limit.
	MaxDuration time.Duration
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
	case c.MaxMessages < 0 || c.MaxDuration < 0 || c.ShutdownGrace < 0 || c.DrainQuiet < 0 || c.ReceiveOutage < 0:
		return errors.New("runner: max messages, max duration, shutdown grace, drain quiet and receive outage must not be negative")
	}
	return nil
}

// Stats count what a runner did. Read them with Runner.Stats. Every
// received message ends in exactly one outcome, so once Run has returned,
// Received = Succeeded + Retried + Poisoned + LeaseLost + Released +
// AckFailed + Abandoned.
type Stats struct {
	Received  int64 // messages received
	Succeeded int64 // the job succeeded and the message is deleted
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
	// duration", "shutdown" or "receive failing"; "" while it runs.
	StopReason string
	// Left is, when a drain ended, the queue's approximate count at that
	// moment (none of them visible: held elsewhere, delayed, or expired and
	// not yet collected); -1 when it could not be read, 0 otherwise.
	Left int
}

// outcome is how one received message ended; see Stats.
type outcome int

const (
	succeeded outcome = iota
	retried
	poisoned
	leaseLost
	released
	ackFailed
	abandoned
	numOutcomes
)

// Runner polls the queue and runs jobs. Create it with New and call
// Run once.
type Runner struct {
	cfg   Config
	stats struct {
		received, receiveFailures atomic.Int64
		outcomes                  [numOutcomes]atomic.Int64
		running                   atomic.Int64
		mu                        sync.Mutex
		stopReason                string
		left                      int
		lastActivity              time.Time // see Config.DrainQuiet
		final                     bool      // set by abandon: outcomes are counted no more
	}
}

// New validates cfg and returns a runner.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg}, nil
}

// Stats returns the runner's counters so far.
func (r *Runner) Stats() Stats {
	o := &r.stats.outcomes
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	return Stats{Received: r.stats.received.Load(), Succeeded: o[succeeded].Load(), Retried: o[retried].Load(),
		Poisoned: o[poisoned].Load(), LeaseLost: o[leaseLost].Load(), Released: o[released].Load(),
		AckFailed: o[ackFailed].Load(), Abandoned: o[abandoned].Load(), ReceiveFailures: r.stats.receiveFailures.Load(),
		StopReason: r.stats.stopReason, Left: r.stats.left}
}

// Running returns how many received messages the runner holds now, running
// or waiting for a slot.
func (r *Runner) Running() int { return int(r.stats.running.Load()) }

// end counts the outcome of one received message. An outcome that brings
// the message back to the queue restarts the drain's quiet period.
func (r *Runner) end(o outcome) {
	r.stats.mu.Lock()
	final := r.stats.final
	if !final {
		r.stats.outcomes[o].Add(1)
		r.stats.running.Add(-1)
	}
	r.stats.mu.Unlock()
	if !final && o != succeeded && o != poisoned {
		r.touch()
	}
}

// abandon counts the messages still held, whose handlers ignored their
// cancellation, as abandoned, and stops counting outcomes. It returns how
// many there were.
func (r *Runner) abandon() int64 {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	n := r.stats.running.Swap(0)
	r.stats.outcomes[abandoned].Add(n)
	r.stats.final = true
	return n
}

// touch records activity now; see Config.DrainQuiet.
func (r *Runner) touch() {
	now := r.cfg.Clock.Now()
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	if now.After(r.stats.lastActivity) {
		r.stats.lastActivity = now
	}
}

// stop records why Run returns.
func (r *Runner) stop(reason string, left int) {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	r.stats.stopReason, r.stats.left = reason, left
}

// Bounds on single storage calls the runner makes for itself (the SDK has
// no per-try timeout by default, and one hung connection must not hold a
// lease or a shutdown forever), on the retries of an acknowledgement, and
// on the wait for cancelled handlers.
const (
	receiveTimeout = 10 * time.Second
	callTimeout    = 30 * time.Second
	minCallTimeout = 2 * time.Second
	ackAttempts    = 4
	ackBackoff     = 250 * time.Millisecond
	abandonAfter   = 5 * time.Second
)

// boundedCtx returns a context for one storage call the runner makes for
// itself: not cancelled by shutdown, but bounded.
func boundedCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// acknowledge runs call, an acknowledgement that must end before the lease
// does at until, and retries it while it fails transiently: up to
// ackAttempts tries, ackBackoff apart and doubling, ±20 % jitter, each try
// bounded by the time left on the lease (at least minCallTimeout, at most
// callTimeout), and never a wait that would end past until. call learns
// whether it is a retry: an earlier try whose reply was lost may have done
// the work, which changes what a "not found" or "pop receipt mismatch"
// means.
func (r *Runner) acknowledge(until time.Time, call func(ctx context.Context, retry bool) error) error {
	clock := r.cfg.Clock
	wait := ackBackoff
	for try := 1; ; try++ {
		ctx, cancel := boundedCtx(min(max(until.Sub(clock.Now()), minCallTimeout), callTimeout))
		err := call(ctx, try > 1)
		cancel()
		if err == nil || try == ackAttempts || !storeadapter.IsTransient(err) {
			return err
		}
		d := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		if clock.Now().Add(d).After(until) {
			return err
		}
		<-clock.After(d)
		wait *= 2
	}
}

// errLeaseLost cancels a handler whose message lease could not be renewed.
var errLeaseLost = errors.New("lease on the message was lost")

// Run receives and runs messages until ctx is cancelled (graceful
// shutdown: no more receives, running handlers get ShutdownGrace to finish,
// received-but-unstarted messages are made visible at once) or, with Drain,
// until the queue is drained (see Config.Drain), or until MaxMessages or
// MaxDuration. It returns nil then; Stats says why it stopped. Message-level
// failures never end it; it returns an error only when the queue cannot be
// used at all: missing, forbidden, or every receive failing for
// ReceiveOutage.
//
// Every failed receive is logged with its backoff. After one, the runner
// asks for one message at a time until a visibility timeout has passed
// without another failure (the messages the failed receive hid are visible
// again by then, a bad one among them, and a receive of one hides no good
// message with it); then each receive that returns messages doubles the
// batch back to BatchSize. So one message that makes every batch holding
// it fail (Azurite answers 500 for some text Azure refuses) cannot stop the
// rest of the queue, and costs the others at most one extra delivery.
func (r *Runner) Run(ctx context.Context) error {
	c := &r.cfg
	// Handlers run under their own context, so a shutdown signal does not
	// cancel them at once: it is cancelled ShutdownGrace after ctx ends.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	stopCtx := ctx
	if c.MaxDuration > 0 {
		var cancel context.CancelFunc
		stopCtx, cancel = context.WithTimeout(ctx, c.MaxDuration)
		defer cancel()
	}

	var wg sync.WaitGroup
	slots := make(chan struct{}, c.Concurrency)
	done := make(chan struct{}, c.Concurrency) // one token per finished message
	idle := &backoff.ExponentialBackOff{InitialInterval: c.IdleMin, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: c.IdleMax, MaxElapsedTime: 0, Stop: backoff.Stop, Clock: backoffClock{c.Clock}}
	idle.Reset()
	var handled atomic.Int64
	var pending []*held // received, leased, not started yet
	// Up to half a batch (at most Concurrency) waits behind the running
	// messages, so the next ones start at once and a receive fetches
	// many messages, not the few slots just freed.
	capacity := c.Concurrency + min(c.BatchSize/2, c.Concurrency)
	batch := c.BatchSize       // 1 after a failed receive; see above
	var lastFailure time.Time  // when a receive last failed
	failures := 0              // receives failed in a row
	var failingSince time.Time // when the first of them started
	r.touch()
	err := func() error {
		for stopCtx.Err() == nil {
			for len(pending) > 0 && len(slots) < c.Concurrency {
				h := pending[0]
				pending = pending[1:]
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.processSafely(handlerCtx, h)
					handled.Add(1)
					<-slots
					select { // wake the loop if it waits; never block
					case done <- struct{}{}:
					default:
					}
				}()
			}
			held := len(slots) + len(pending)
			n := min(batch, capacity-held)
			if c.MaxMessages > 0 {
				n = min(n, c.MaxMessages-int(handled.Load())-held)
				if n <= 0 && held == 0 {
					r.stop("max messages", 0)
					return nil
				}
			}
			if n <= 0 || held > 0 && n < min(batch, capacity)/2 {
				r.waitOne(stopCtx, done) // receive once half a batch fits
				continue
			}
			// A receive is not cancelled by shutdown: once sent, the service
			// has hidden the messages it returns, and abandoning the call
			// would leave them hidden for a whole visibility timeout. What
			// it returns after a shutdown signal is released below.
			began := c.Clock.Now()
			rctx, cancel := boundedCtx(receiveTimeout)
			msgs, err := c.Queue.Receive(rctx, n, c.Visibility)
			cancel()
			if err != nil {
				if stopCtx.Err() != nil {
					return nil
				}
				r.stats.receiveFailures.Add(1)
				if !storeadapter.IsTransient(err) {
					return fmt.Errorf("runner: receive from %s: %w", c.Queue.Name(), err)
				}
				if failures++; failures == 1 {
					failingSince = began
				}
				if failing := c.Clock.Now().Sub(failingSince); failing >= c.ReceiveOutage {
					return fmt.Errorf("runner: receive from %s failed %d times in a row for %v: %w", c.Queue.Name(), failures, failing.Round(time.Second), err)
				}
				if n > 1 {
					// It may have hidden good messages with a bad one: they
					// are visible again within a visibility timeout, so the
					// drain's quiet period starts again. A failed receive of
					// one message hid only that one, which cannot be had.
					r.touch()
				}
				batch, lastFailure = 1, c.Clock.Now()
				// The last try comes when the outage limit is reached.
				wait := min(idle.NextBackOff(), failingSince.Add(c.ReceiveOutage).Sub(c.Clock.Now()))
				c.Logger.WarnContext(ctx, "receive failed; backing off", "queue", c.Queue.Name(), "err", err,
					"failures_in_a_row", failures, "retry_in", wait, "next_batch", batch)
				r.sleep(stopCtx, wait, done)
				continue
			}
			failures = 0
			if len(msgs) == 0 {
				if c.Drain && held == 0 {
					if left, ok := r.drained(ctx); ok {
						r.stop("drained", left)
						return nil
					}
				}
				r.sleep(stopCtx, idle.NextBackOff(), done)
				continue
			}
			idle.Reset()
			if c.Clock.Now().Sub(lastFailure) >= c.Visibility {
				batch = min(c.BatchSize, 2*batch)
			}
			r.touch()
			r.stats.received.Add(int64(len(msgs)))
			r.stats.running.Add(int64(len(msgs)))
			for _, m := range msgs {
				if stopCtx.Err() != nil {
					r.end(r.release(newHeld(r, m).log, m, m.PopReceipt, leaseEnd(began, c.Visibility, m.NextVisible)))
					continue
				}
				pending = append(pending, r.hold(handlerCtx, m))
			}
		}
		return nil
	}()
	switch {
	case err != nil:
		r.stop("receive failing", 0)
	case ctx.Err() != nil:
		r.stop("shutdown", 0)
	case stopCtx.Err() != nil:
		r.stop("max duration", 0)
	}
	// Messages received but never started go back to the queue at once.
	for _, h := range pending {
		h.cancel(nil)
		if receipt, until, lost := h.lease.stop(); lost {
			r.end(leaseLost)
		} else {
			r.end(r.release(h.log, h.m, receipt, until))
		}
	}

	// Shutdown: give running handlers the grace period, then cancel them.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-c.Clock.After(c.ShutdownGrace):
		c.Logger.WarnContext(ctx, "shutdown grace period over; cancelling running jobs", "running", len(slots))
		cancelHandlers()
		select {
		case <-finished:
		case <-c.Clock.After(abandonAfter):
			// A handler that ignores its context is left behind and its
			// message counted as abandoned; see Stats.Abandoned.
			c.Logger.ErrorContext(ctx, "jobs ignored cancellation; leaving them behind", "abandoned", r.abandon())
		}
	}
	return err
}

// drained reports whether a drain may end now that a receive found nothing
// and nothing runs: the queue's approximate count is 0, or DrainQuiet has
// passed since the last activity. It returns the count (-1 when it could
// not be read), and logs why the drain ends.
func (r *Runner) drained(ctx context.Context) (int, bool) {
	c := &r.cfg
	cctx, cancel := boundedCtx(callTimeout)
	n, err := c.Queue.ApproximateCount(cctx)
	cancel()
	r.stats.mu.Lock()
	quiet := c.Clock.Now().Sub(r.stats.lastActivity)
	r.stats.mu.Unlock()
	switch {
	case err == nil && n == 0:
		c.Logger.InfoContext(ctx, "queue drained", "queue", c.Queue.Name(), "invisible", 0)
		return 0, true
	case quiet < c.DrainQuiet:
		return 0, false
	case err != nil:
		c.Logger.WarnContext(ctx, "queue drained: nothing visible for the quiet period; its message count could not be read",
			"queue", c.Queue.Name(), "quiet", c.DrainQuiet, "err", err)
		return -1, true
	}
	c.Logger.InfoContext(ctx, "queue drained: nothing visible for the quiet period; the count still holds messages that are invisible (held elsewhere, delayed, or expired and not yet collected)",
		"queue", c.Queue.Name(), "invisible", n, "quiet", c.DrainQuiet)
	return n, true
}

// waitOne waits for a running message to finish, or for ctx.
func (r *Runner) waitOne(ctx context.Context, done <-chan struct{}) {
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sleep waits d, cut short by ctx or a finished message (which frees a
// slot but also means the queue may have more).
func (r *Runner) sleep(ctx context.Context, d time.Duration, done <-chan struct{}) {
	select {
	case <-r.cfg.Clock.After(d):
	case <-ctx.Done():
	case <-done:
	}
}

// release makes a message visible again at once and returns the outcome:
// released, or lease lost / ack failed when that did not work.
func (r *Runner) release(log *slog.Logger, m storeadapter.Message, receipt string, until time.Time) outcome {
	err := r.acknowledge(until, func(ctx context.Context, retry bool) error {
		_, err := r.cfg.Queue.Update(ctx, m.ID, receipt, m.Text, 0)
		return doneOnRetry(err, retry)
	})
	if err != nil {
		o := ackOutcome(err)
		log.Warn("could not release the message; it reappears when its lease expires", "outcome", o, "err", err)
		return o
	}
	return released
}

// doneOnRetry treats a message gone or a pop receipt changed as success on
// a retry of an update or delete: the earlier try whose reply was lost did
// the work.
func doneOnRetry(err error, retry bool) error {
	if retry && (errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch)) {
		return nil
	}
	return err
}

// ackOutcome is the outcome of a message whose acknowledgement failed with
// err: lease lost when the message is gone or another receive took it,
// ack failed otherwise.
func ackOutcome(err error) outcome {
	if errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
		return leaseLost
	}
	return ackFailed
}

// String names an outcome as Stats and the logs do.
func (o outcome) String() string {
	return [...]string{"succeeded", "retried", "poisoned", "lease lost", "released", "ack failed", "abandoned"}[o]
}

// held is a received message whose lease is kept from the moment it
// arrived, whether it runs yet or waits for a slot.
type held struct {
	m     storeadapter.Message
	env   jobs.Envelope // zero when the text does not decode
	log   *slog.Logger
	lease *lease
	// ctx is the handler's; cancelled when the lease is lost.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// newHeld returns a held message with its logger, which carries op_id and
// kind whenever the envelope decodes (decoding it is cheap and cannot
// fail the message: a failure is reported when the job runs).
func newHeld(r *Runner, m storeadapter.Message) *held {
	h := &held{m: m, log: r.cfg.Logger.With("msg_id", m.ID, "dequeue_count", m.DequeueCount)}
	if env, err := jobs.DecodeEnvelope(m.Text); err == nil {
		h.env = env
		h.log = h.log.With("op_id", env.ID, "kind", env.Kind)
	}
	return h
}

// hold starts keeping a received message's lease.
func (r *Runner) hold(ctx context.Context, m storeadapter.Message) *held {
	h := newHeld(r, m)
	h.lease = newLease(r, h)
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	go h.lease.keep(h.ctx, h.cancel)
	return h
}

// processSafely runs process and survives a panic outside the handler
// (in decoding, poisoning or acknowledging): the lease is dropped and the
// message reappears after its visibility timeout.
func (r *Runner) processSafely(ctx context.Context, h *held) {
	defer func() {
		if p := recover(); p != nil {
			h.cancel(nil)
			h.lease.stop()
			r.end(ackFailed)
			h.log.ErrorContext(ctx, "panic while processing a message; it will be delivered again", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	r.end(r.process(ctx, h))
}

// process runs one held message, acknowledges it and returns its outcome.
func (r *Runner) process(ctx context.Context, h *held) outcome {
	c := &r.cfg
	m, lease, log := h.m, h.lease, h.log
	defer h.cancel(nil)
	start := c.Clock.Now()
	hctx, res := jobs.WithResult(jobs.WithTraceParent(h.ctx, h.env.TraceParent))

	task := &jobs.Task{Envelope: h.env, Message: m}
	var err error
	overDelivered := m.DequeueCount > c.MaxDequeueCount
	if overDelivered {
		err = fmt.Errorf("delivered %d times, more than the maximum %d, without finishing (the worker may have crashed, lost the lease or failed to acknowledge each time)", m.DequeueCount, c.MaxDequeueCount)
	} else if hctx.Err() != nil {
		err = context.Cause(hctx) // lost its lease, or shut down, while waiting for a slot
	} else {
		if task, err = c.Registry.Decode(hctx, m); err == nil {
			err = r.handle(hctx, task)
		}
	}
	receipt, until, lost := lease.stop()
	log = log.With("duration", c.Clock.Now().Sub(start))
	if text := res.Text(); text != "" {
		log = log.With("result", text)
	}
	if lost {
		log.WarnContext(ctx, "lease lost; the message will be delivered again", "err", err)
		return leaseLost
	}
	if err != nil && ctx.Err() != nil {
		// The shutdown grace period ran out: not the job's fault. Hand the
		// message back at once, without counting an attempt.
		log.WarnContext(ctx, "job cancelled by shutdown; releasing the message", "err", err)
		return r.release(log, m, receipt, until)
	}
	if err == nil {
		return r.succeed(ctx, log, m, receipt, until)
	}

	f := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: task.ID, Kind: task.Kind,
		Attempt: poison.Attempt{DequeueCount: m.DequeueCount, Time: start, Duration: c.Clock.Now().Sub(start), Host: c.Host, Error: err.Error()}}
	permanent := jobs.IsPermanent(err) || clientError(err)
	if !permanent && m.DequeueCount < c.MaxDequeueCount {
		return r.retry(ctx, log, f, err, receipt, until)
	}
	var reason string
	switch {
	case permanent:
		reason = "permanent: " + err.Error()
	case overDelivered:
		reason = err.Error() + "; " + r.lastError(m.ID, until)
	default:
		reason = fmt.Sprintf("dequeue count %d reached the maximum %d; last error: %v", m.DequeueCount, c.MaxDequeueCount, err)
	}
	// Move writes the record and sends the poison message before it
	// deletes the original: confirm the lease first (see confirmLease).
	receipt, until, lerr := r.confirmLease(m, receipt, until)
	if lerr != nil {
		o := ackOutcome(lerr)
		log.WarnContext(ctx, "could not confirm the lease before poisoning; not poisoned, the message will be delivered again", "outcome", o, "err", err, "lease_err", lerr)
		return o
	}
	if perr := r.acknowledge(until, func(ctx context.Context, _ bool) error { return c.Poison.Move(ctx, f, receipt, reason) }); perr != nil {
		o := ackOutcome(perr)
		log.ErrorContext(ctx, "could not move the message to the poison queue; it will be delivered again", "outcome", o, "err", err, "poison_err", perr)
		return o
	}
	log.WarnContext(ctx, "job poisoned", "reason", reason)
	return poisoned
}

// confirmLease renews a message's lease right before it is poisoned and
// returns the new receipt and lease end. The keeper notices a lost lease
// only at its next renewal, and Move parks the message before its last
// step, the delete, can find the receipt stale: without this check, a
// message whose lease lapsed unnoticed would be poisoned while it is live
// on another worker. An error wrapping ErrNotFound or
// ErrPopReceiptMismatch means the lease is lost (also on a retry: a try
// whose reply was lost changed the receipt, and the new one is unknown).
func (r *Runner) confirmLease(m storeadapter.Message, receipt string, until time.Time) (string, time.Time, error) {
	c := &r.cfg
	began := c.Clock.Now()
	var rc storeadapter.Receipt
	err := r.acknowledge(until, func(ctx context.Context, _ bool) error {
		var err error
		rc, err = c.Queue.Update(ctx, m.ID, receipt, m.Text, c.Visibility)
		return err
	})
	if err != nil {
		return receipt, until, err
	}
	return rc.PopReceipt, leaseEnd(began, c.Visibility, rc.NextVisible), nil
}

// succeed deletes the message of a job that succeeded, then drops its
// failure record if earlier deliveries left one.
func (r *Runner) succeed(ctx context.Context, log *slog.Logger, m storeadapter.Message, receipt string, until time.Time) outcome {
	c := &r.cfg
	err := r.acknowledge(until, func(actx context.Context, retry bool) error {
		err := c.Queue.DeleteMessage(actx, m.ID, receipt)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return nil // deleted already: by an earlier try whose reply was lost, or by another worker
		}
		return err
	})
	if err != nil {
		o := ackOutcome(err)
		log.WarnContext(ctx, "job done but the message could not be deleted; it will run again", "outcome", o, "err", err)
		return o
	}
	log.InfoContext(ctx, "job done")
	if m.DequeueCount > 1 { // earlier attempts may have left a failure record
		// Past the lease too: the message is gone, nobody else will.
		ferr := r.acknowledge(c.Clock.Now().Add(c.Visibility), func(actx context.Context, _ bool) error { return c.Poison.Forget(actx, m.ID) })
		if ferr != nil {
			log.WarnContext(ctx, "could not drop the failure record of the succeeded message; poison purge removes it once it is older than the queue's message time to live", "err", ferr)
		}
	}
	return succeeded
}

// retry records a transient failure and hides the message for the retry
// backoff.
func (r *Runner) retry(ctx context.Context, log *slog.Logger, f poison.Failure, jobErr error, receipt string, until time.Time) outcome {
	c := &r.cfg
	if rerr := r.acknowledge(until, func(actx context.Context, _ bool) error { return c.Poison.RecordAttempt(actx, f) }); rerr != nil {
		log.WarnContext(ctx, "could not record the failed attempt", "err", rerr)
	}
	delay := RetryDelay(f.Attempt.DequeueCount, c.RetryBase, c.RetryMax)
	err := r.acknowledge(until, func(actx context.Context, retry bool) error {
		_, err := c.Queue.Update(actx, f.MessageID, receipt, f.Text, delay)
		return doneOnRetry(err, retry)
	})
	if err != nil {
		o := ackOutcome(err)
		log.WarnContext(ctx, "job failed, and its retry could not be scheduled; the message reappears when its lease expires", "outcome", o, "err", jobErr, "ack_err", err)
		return o
	}
	log.WarnContext(ctx, "job failed; will retry", "err", jobErr, "retry_in", delay)
	return retried
}

// lastError describes the last failed attempt recorded for a message, for
// the reason of a message poisoned by its delivery count. A failure to read
// the record is described, never returned: it must not stop the move.
func (r *Runner) lastError(messageID string, until time.Time) string {
	var a poison.Attempt
	var found bool
	err := r.acknowledge(until, func(ctx context.Context, _ bool) error {
		var err error
		a, found, err = r.cfg.Poison.LastAttempt(ctx, messageID)
		return err
	})
	switch {
	case err != nil:
		return fmt.Sprintf("last error unknown: the failure record could not be read (%v)", err)
	case !found:
		return "no failed attempt was recorded"
	}
	return fmt.Sprintf("last recorded error (delivery %d on %s): %s", a.DequeueCount, a.Host, a.Error)
}

// clientError reports whether err is a storage request the service refused
// for what it asked: invalid input or too large (400, 413). Retrying the
// same request cannot succeed, so the message is poisoned at once, as
// DESIGN asks of 4xx. Other 4xx that escape a handler (404, 409, 412,
// 401/403) are retried: they may depend on what others do meanwhile, a
// role assignment still propagating or a lease that lapses, and a handler
// that knows better returns a Permanent error itself.
func clientError(err error) bool {
	return !storeadapter.IsTransient(err) && (errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge))
}

// handle runs a task's handler, turning a panic into a permanent error.
func (r *Runner) handle(ctx context.Context, task *jobs.Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jobs.Permanentf("handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	h, _ := r.cfg.Registry.Handler(task.Kind)
	if h == nil {
		return jobs.Permanentf("envelope: kind: %q has no worker here", task.Kind)
	}
	if err = h.Handle(ctx, task); err != nil && context.Cause(ctx) == errLeaseLost {
		err = fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	return err
}

// RetryDelay is the visibility delay before delivery x+1 after a transient
// failure on delivery x: rand(0.8·base, 1.2·base)·(2^x − 1), clamped to
// [base, max]. It grows with the dequeue count, and the ±20 % jitter keeps
// many failing messages from returning in lockstep.
func RetryDelay(dequeueCount int64, base, maxDelay time.Duration) time.Duration {
	x := min(max(dequeueCount, 1), 62)
	z := float64(base) * (0.8 + 0.4*rand.Float64())
	y := z * (math.Exp2(float64(x)) - 1)
	if y >= float64(maxDelay) {
		return maxDelay
	}
	return time.Duration(math.Max(y, float64(base)))
}

// lease keeps one message invisible while its handler runs.
type lease struct {
	r        *Runner
	h        *held
	mu       sync.Mutex
	receipt  string
	until    time.Time // when the message becomes visible again, at the latest
	lost     bool
	stopCh   chan struct{}
	stopOnce sync.Once
	exited   chan struct{}
}

// newLease returns the lease of a message just received.
func newLease(r *Runner, h *held) *lease {
	return &lease{r: r, h: h, receipt: h.m.PopReceipt, until: leaseEnd(r.cfg.Clock.Now(), r.cfg.Visibility, h.m.NextVisible),
		stopCh: make(chan struct{}), exited: make(chan struct{})}
}

// leaseEnd is when a message hidden for visibility by a call that began at
// began becomes visible again, at the latest: the service hid it at some
// moment after began, and says when in nextVisible (by its own clock, zero
// when unknown), so the earlier of the two is safe under clock skew.
func leaseEnd(began time.Time, visibility time.Duration, nextVisible time.Time) time.Time {
	until := began.Add(visibility)
	if !nextVisible.IsZero() && nextVisible.Before(until) {
		return nextVisible
	}
	return until
}

// keep renews the lease at half the visibility timeout until stopped. Each
// renewal returns a new pop receipt, which replaces the old one. When the
// message is gone or another receive took it, the lease is lost and the
// handler's context is cancelled. A transient failure is retried a quarter
// timeout later, but never past the lease's end: once the clock reaches
// it without a successful renewal, the message may be visible and taken
// by another worker, so the lease is lost too. A pop receipt mismatch
// right after a failed renewal most likely means that renewal went through
// and only its reply was lost; the lease is lost either way (the new
// receipt is unknown), and the log says so.
func (l *lease) keep(ctx context.Context, cancel context.CancelCauseFunc) {
	defer close(l.exited)
	c := &l.r.cfg
	m := l.h.m
	wait := c.Visibility / 2
	var failed error // the last renewal's error, nil when it succeeded
	for {
		select {
		case <-l.stopCh:
			return
		case <-c.Clock.After(wait):
		}
		l.mu.Lock()
		receipt, until := l.receipt, l.until
		l.mu.Unlock()
		began := c.Clock.Now()
		if !began.Before(until) {
			l.h.log.WarnContext(ctx, "lease ran out without a successful renewal; cancelling the job", "err", failed)
			l.lose(cancel)
			return
		}
		uctx, endCall := boundedCtx(max(c.Visibility/4, time.Second))
		rc, err := c.Queue.Update(uctx, m.ID, receipt, m.Text, c.Visibility)
		endCall()
		switch {
		case err == nil:
			l.mu.Lock()
			l.receipt, l.until = rc.PopReceipt, leaseEnd(began, c.Visibility, rc.NextVisible)
			l.mu.Unlock()
			wait, failed = c.Visibility/2, nil
		case errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch):
			if failed != nil && errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
				l.h.log.WarnContext(ctx, "lease renewal reply probably lost: the failed renewal went through and changed the pop receipt; the lease is lost", "err", err, "earlier_err", failed)
			}
			l.lose(cancel)
			return
		default:
			wait, failed = min(c.Visibility/4, until.Sub(c.Clock.Now())), err
			l.h.log.WarnContext(ctx, "lease renewal failed; retrying", "err", err, "retry_in", wait)
		}
	}
}

// lose marks the lease lost and cancels the handler.
func (l *lease) lose(cancel context.CancelCauseFunc) {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	cancel(errLeaseLost)
}

// stop ends renewal, waits for an in-flight renewal to finish, and returns
// the newest pop receipt, when the lease ends, and whether it was lost.
func (l *lease) stop() (receipt string, until time.Time, lost bool) {
	l.stopOnce.Do(func() { close(l.stopCh) })
	<-l.exited
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.receipt, l.until, l.lost
}

// backoffClock adapts Clock to backoff.Clock.
type backoffClock struct{ c clock.Clock }

func (b backoffClock) Now() time.Time { return b.c.Now() }
