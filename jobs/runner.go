package jobs

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

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Clock is the runner's time source; tests pass localstore.FakeClock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// Poisoner records failed attempts and parks messages; *poison.Mover is the
// implementation.
type Poisoner interface {
	RecordAttempt(ctx context.Context, f poison.Failure) error
	Move(ctx context.Context, f poison.Failure, popReceipt, reason string) error
	// Forget drops the failure record of a message that finally succeeded.
	Forget(ctx context.Context, messageID string) error
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
)

// Config configures a Runner. Zero fields take the documented defaults.
type Config struct {
	// Queue is the work queue. Required.
	Queue storeadapter.Queue
	// Registry decodes messages and names their handlers. Required.
	Registry *Registry
	// Poison records failures and parks messages. Required.
	Poison Poisoner
	// Logger receives one line per job; nil discards.
	Logger *slog.Logger
	// Clock drives lease renewal and backoff; nil is the wall clock.
	Clock Clock
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

	// Drain makes Run return once the queue is empty (no message visible
	// or invisible) and nothing is running: run-to-completion for
	// container jobs.
	Drain bool
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
	c.Host = cmp.Or(c.Host, "unknown")
	if c.Clock == nil {
		c.Clock = RealClock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Queue == nil || c.Registry == nil || c.Poison == nil:
		return errors.New("runner: Queue, Registry and Poison are required")
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return fmt.Errorf("runner: concurrency: must be 1-1024, got %d", c.Concurrency)
	case c.BatchSize < 1 || c.BatchSize > storeadapter.MaxReceiveCount:
		return fmt.Errorf("runner: batch size: must be 1-%d, got %d", storeadapter.MaxReceiveCount, c.BatchSize)
	case c.Visibility < 2*time.Second || c.Visibility > storeadapter.MaxVisibility:
		return fmt.Errorf("runner: visibility: must be 2s-7d, got %v", c.Visibility)
	case c.MaxDequeueCount < 1 || c.MaxDequeueCount > 1000:
		return fmt.Errorf("runner: max dequeue count: must be 1-1000, got %d", c.MaxDequeueCount)
	case c.RetryBase < 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("runner: retry delays: need 0 <= base (%v) <= max (%v)", c.RetryBase, c.RetryMax)
	case c.IdleMin <= 0 || c.IdleMax < c.IdleMin:
		return fmt.Errorf("runner: idle delays: need 0 < min (%v) <= max (%v)", c.IdleMin, c.IdleMax)
	case c.MaxMessages < 0 || c.MaxDuration < 0 || c.ShutdownGrace < 0:
		return errors.New("runner: max messages, max duration and shutdown grace must not be negative")
	}
	return nil
}

// Stats count what a runner did. Read them with Runner.Stats.
type Stats struct {
	Received  int64 // messages received
	Succeeded int64 // handled and deleted
	Retried   int64 // failed transiently, made visible again after a backoff
	Poisoned  int64 // moved to the poison queue
	LeaseLost int64 // lost the lease while running (another worker may have it)
	Released  int64 // received during shutdown and made visible again unstarted
}

// Runner polls the queue and runs jobs. Create it with NewRunner and call
// Run once.
type Runner struct {
	cfg   Config
	stats struct {
		received, succeeded, retried, poisoned, leaseLost, released atomic.Int64
	}
}

// NewRunner validates cfg and returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg}, nil
}

// Stats returns the runner's counters so far.
func (r *Runner) Stats() Stats {
	return Stats{Received: r.stats.received.Load(), Succeeded: r.stats.succeeded.Load(), Retried: r.stats.retried.Load(),
		Poisoned: r.stats.poisoned.Load(), LeaseLost: r.stats.leaseLost.Load(), Released: r.stats.released.Load()}
}

// Bounds on single storage calls the runner makes for itself (the SDK has
// no per-try timeout by default, and one hung connection must not hold a
// lease or a shutdown forever), and on the wait for cancelled handlers.
const (
	receiveTimeout = 30 * time.Second
	callTimeout    = 30 * time.Second
	abandonAfter   = 5 * time.Second
)

// callCtx returns a context for one acknowledgement call: not cancelled by
// shutdown, but bounded.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// errLeaseLost cancels a handler whose message lease could not be renewed.
var errLeaseLost = errors.New("lease on the message was lost")

// Run receives and runs messages until ctx is cancelled (graceful
// shutdown: no more receives, running handlers get ShutdownGrace to finish,
// received-but-unstarted messages are made visible at once) or, with Drain,
// until the queue is empty, or until MaxMessages or MaxDuration. It returns
// nil then. Message-level failures never end it; it returns an error only
// when the queue cannot be used at all (missing, forbidden, or failing for
// longer than the idle backoff's ceiling several times over).
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
	failures := 0
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
			n := min(c.BatchSize, capacity-held)
			if c.MaxMessages > 0 {
				n = min(n, c.MaxMessages-int(handled.Load())-held)
				if n <= 0 && held == 0 {
					return nil
				}
			}
			if n <= 0 || held > 0 && n < min(c.BatchSize, capacity)/2 {
				r.waitOne(stopCtx, done) // receive once half a batch fits
				continue
			}
			// A receive is not cancelled by shutdown: once sent, the service
			// has hidden the messages it returns, and abandoning the call
			// would leave them hidden for a whole visibility timeout. What
			// it returns after a shutdown signal is released below.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(stopCtx), receiveTimeout)
			msgs, err := c.Queue.Receive(rctx, n, c.Visibility)
			cancel()
			if err != nil {
				if stopCtx.Err() != nil {
					return nil
				}
				if !storeadapter.IsTransient(err) {
					return fmt.Errorf("runner: receive from %s: %w", c.Queue.Name(), err)
				}
				if failures++; failures > 10 {
					return fmt.Errorf("runner: receive from %s failed %d times in a row: %w", c.Queue.Name(), failures, err)
				}
				c.Logger.WarnContext(ctx, "receive failed; backing off", "queue", c.Queue.Name(), "err", err)
				r.sleep(stopCtx, idle.NextBackOff(), done)
				continue
			}
			failures = 0
			if len(msgs) == 0 {
				if c.Drain && held == 0 {
					n, err := c.Queue.ApproximateCount(stopCtx)
					if err == nil && n == 0 {
						return nil
					}
				}
				r.sleep(stopCtx, idle.NextBackOff(), done)
				continue
			}
			idle.Reset()
			r.stats.received.Add(int64(len(msgs)))
			for _, m := range msgs {
				if stopCtx.Err() != nil {
					r.release(m, m.PopReceipt)
					continue
				}
				pending = append(pending, r.hold(handlerCtx, m))
			}
		}
		return nil
	}()
	// Messages received but never started go back to the queue at once.
	for _, h := range pending {
		h.cancel(nil)
		if receipt, lost := h.lease.stop(); !lost {
			r.release(h.m, receipt)
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
			// A handler that ignores its context is left behind; its
			// message reappears once its lease lapses.
			c.Logger.ErrorContext(ctx, "jobs ignored cancellation; leaving them behind", "running", len(slots))
		}
	}
	return err
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

// release makes an unstarted message visible again at once.
func (r *Runner) release(m storeadapter.Message, receipt string) {
	ctx, cancel := callCtx()
	defer cancel()
	if _, err := r.cfg.Queue.Update(ctx, m.ID, receipt, m.Text, 0); err != nil {
		r.cfg.Logger.Warn("could not release an unstarted message; it reappears when its lease expires", "msg_id", m.ID, "err", err)
		return
	}
	r.stats.released.Add(1)
}

// held is a received message whose lease is kept from the moment it
// arrived, whether it runs yet or waits for a slot.
type held struct {
	m      storeadapter.Message
	lease  *lease
	ctx    context.Context // the handler's; cancelled when the lease is lost
	cancel context.CancelCauseFunc
}

// hold starts keeping a received message's lease.
func (r *Runner) hold(ctx context.Context, m storeadapter.Message) *held {
	h := &held{m: m, lease: newLease(r, m)}
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
			r.cfg.Logger.ErrorContext(ctx, "panic while processing a message; it will be delivered again", "msg_id", h.m.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	r.process(ctx, h)
}

// process runs one held message and acknowledges it.
func (r *Runner) process(ctx context.Context, h *held) {
	c := &r.cfg
	m, lease, hctx := h.m, h.lease, h.ctx
	defer h.cancel(nil)
	start := c.Clock.Now()

	log := c.Logger.With("msg_id", m.ID, "dequeue_count", m.DequeueCount)
	var job Job
	var err error
	if m.DequeueCount > c.MaxDequeueCount {
		err = fmt.Errorf("delivered %d times, more than the maximum %d, without finishing (the worker may have crashed or lost the lease each time)", m.DequeueCount, c.MaxDequeueCount)
		job.Message = m
	} else if hctx.Err() != nil {
		err = context.Cause(hctx) // lost its lease, or shut down, while waiting for a slot
	} else {
		var k Kind
		if job, k, err = c.Registry.Decode(hctx, m); err == nil {
			log = log.With("op_id", job.ID, "kind", job.Kind)
			err = safeHandle(hctx, k.Handler, job)
		} else if job.ID != "" {
			log = log.With("op_id", job.ID, "kind", job.Kind)
		}
	}
	receipt, lost := lease.stop()
	dur := c.Clock.Now().Sub(start)
	log = log.With("duration", dur)
	if lost {
		r.stats.leaseLost.Add(1)
		log.WarnContext(ctx, "lease lost; the message will be delivered again", "err", err)
		return
	}

	actx, cancelAck := callCtx() // acknowledge even while shutting down
	defer cancelAck()
	if err != nil && ctx.Err() != nil {
		// The shutdown grace period ran out: not the job's fault. Hand the
		// message back at once, without counting an attempt.
		log.WarnContext(actx, "job cancelled by shutdown; releasing the message", "err", err)
		r.release(m, receipt)
		return
	}
	if err == nil {
		if derr := c.Queue.DeleteMessage(actx, m.ID, receipt); derr != nil && !errors.Is(derr, storeadapter.ErrNotFound) {
			log.WarnContext(ctx, "job done but the message could not be deleted; it will run again", "err", derr)
			return
		}
		r.stats.succeeded.Add(1)
		log.InfoContext(ctx, "job done")
		if m.DequeueCount > 1 { // earlier attempts left a failure record
			if ferr := c.Poison.Forget(actx, m.ID); ferr != nil {
				log.WarnContext(ctx, "could not drop the failure record", "err", ferr)
			}
		}
		return
	}

	f := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: job.ID, Kind: job.Kind,
		Attempt: poison.Attempt{DequeueCount: m.DequeueCount, Time: start, Duration: dur, Host: c.Host, Error: err.Error()}}
	permanent := IsPermanent(err) || clientError(err)
	switch {
	case permanent || m.DequeueCount >= c.MaxDequeueCount:
		reason := "permanent: " + err.Error()
		if !permanent {
			reason = fmt.Sprintf("dequeue count %d reached the maximum %d; last error: %v", m.DequeueCount, c.MaxDequeueCount, err)
		}
		if perr := c.Poison.Move(actx, f, receipt, reason); perr != nil {
			log.ErrorContext(ctx, "could not move the message to the poison queue; it will be delivered again", "err", err, "poison_err", perr)
			return
		}
		r.stats.poisoned.Add(1)
		log.WarnContext(ctx, "job poisoned", "reason", reason)
	default:
		if rerr := c.Poison.RecordAttempt(actx, f); rerr != nil {
			log.WarnContext(ctx, "could not record the failed attempt", "err", rerr)
		}
		delay := RetryDelay(m.DequeueCount, c.RetryBase, c.RetryMax)
		if _, uerr := c.Queue.Update(actx, m.ID, receipt, m.Text, delay); uerr != nil {
			log.WarnContext(ctx, "could not schedule the retry; the message reappears when its lease expires", "err", uerr)
		}
		r.stats.retried.Add(1)
		log.WarnContext(ctx, "job failed; will retry", "err", err, "retry_in", delay)
	}
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

// safeHandle runs a handler, turning a panic into a permanent error.
func safeHandle(ctx context.Context, h Handler, job Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanentf("handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	if err = h.Handle(ctx, job); err != nil && context.Cause(ctx) == errLeaseLost {
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
	m        storeadapter.Message
	mu       sync.Mutex
	receipt  string
	lost     bool
	stopCh   chan struct{}
	stopOnce sync.Once
	exited   chan struct{}
}

func newLease(r *Runner, m storeadapter.Message) *lease {
	return &lease{r: r, m: m, receipt: m.PopReceipt, stopCh: make(chan struct{}), exited: make(chan struct{})}
}

// keep renews the lease at half the visibility timeout until stopped. Each
// renewal returns a new pop receipt, which replaces the old one. When the
// message is gone or another receive took it, the lease is lost and the
// handler's context is cancelled. A transient failure is retried at the
// next tick, a quarter timeout later.
func (l *lease) keep(ctx context.Context, cancel context.CancelCauseFunc) {
	defer close(l.exited)
	c := &l.r.cfg
	wait := c.Visibility / 2
	for {
		select {
		case <-l.stopCh:
			return
		case <-c.Clock.After(wait):
		}
		l.mu.Lock()
		receipt := l.receipt
		l.mu.Unlock()
		uctx, endCall := context.WithTimeout(context.WithoutCancel(ctx), max(c.Visibility/4, time.Second))
		rc, err := c.Queue.Update(uctx, l.m.ID, receipt, l.m.Text, c.Visibility)
		endCall()
		switch {
		case err == nil:
			l.mu.Lock()
			l.receipt = rc.PopReceipt
			l.mu.Unlock()
			wait = c.Visibility / 2
		case errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch):
			l.mu.Lock()
			l.lost = true
			l.mu.Unlock()
			cancel(errLeaseLost)
			return
		default:
			c.Logger.WarnContext(ctx, "lease renewal failed; retrying", "msg_id", l.m.ID, "err", err)
			wait = c.Visibility / 4
		}
	}
}

// stop ends renewal, waits for an in-flight renewal to finish, and returns
// the newest pop receipt and whether the lease was lost.
func (l *lease) stop() (string, bool) {
	l.stopOnce.Do(func() { close(l.stopCh) })
	<-l.exited
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.receipt, l.lost
}

// backoffClock adapts Clock to backoff.Clock.
type backoffClock struct{ c Clock }

func (b backoffClock) Now() time.Time { return b.c.Now() }
