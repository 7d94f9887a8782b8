package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

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

// Runner polls the queue and runs jobs. Create it with New and call
// Run once.
type Runner struct {
	cfg Config
	// leftBehind counts handlers left behind at their maximum run time
	// that have not returned yet (see run).
	leftBehind atomic.Int64
	count      counter
	observers  []Observer
	mu         sync.Mutex
	held       map[*held]struct{} // received, no outcome yet
	final      bool               // set by abandon: outcomes are reported no more
	// stopReason and left are for Stats; lastActivity for Config.DrainQuiet.
	stopReason   string
	left         int
	lastActivity time.Time
	// loop is when the receive loop last completed a receive or a wait
	// (Unix nanoseconds on the Clock), and slotWait whether it now waits
	// for a running job to free a slot; see LastLoop.
	loop     atomic.Int64
	slotWait atomic.Bool
	// stopLoop ends Run's receive loop with the error Run is to return
	// (see fail); set by Run.
	stopLoop context.CancelCauseFunc
	failOnce sync.Once
	// failingSince is when storage began failing the caller's own calls
	// before Run; see StorageFailingSince.
	failingSince time.Time
}

// StorageFailingSince tells the runner, before Run, that storage has
// failed the caller's own calls since t (the worker's creation of the work
// queue at start): Run counts ReceiveOutage from t, not from its own first
// failed receive, so a process that never reached storage exits within
// ReceiveOutage of t. Run still tries at least one receive.
func (r *Runner) StorageFailingSince(t time.Time) { r.failingSince = t }

// New validates cfg and returns a runner.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, held: map[*held]struct{}{}}
	r.observers = append([]Observer{&r.count, logger{cfg.Logger}}, cfg.Observers...)
	return r, nil
}

// Stats returns the runner's counters so far.
func (r *Runner) Stats() Stats {
	e := &r.count.events
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Received: e[Received].Load(), Succeeded: e[Succeeded].Load(), Continued: e[Continued].Load(), Retried: e[Retried].Load(),
		Poisoned: e[Poisoned].Load(), LeaseLost: e[LeaseLost].Load(), Released: e[Released].Load(),
		AckFailed: e[AckFailed].Load(), Abandoned: e[Abandoned].Load(), ReceiveFailures: r.count.receiveFailures.Load(),
		StopReason: r.stopReason, Left: r.left}
}

// Running returns how many received messages the runner holds now, running
// or waiting for a slot.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// LastLoop returns when the receive loop last showed it is alive: a
// receive returned (messages, none or an error) or a wait between receives
// ended. While the loop waits for a running job to free a slot it returns
// the Clock's now: a loop blocked on its own jobs is alive (their leases
// are kept separately, and each job has a maximum run time) — unless every
// slot is held by a handler left behind at its maximum run time (it
// ignored its cancellation and may never return): then the loop is wedged
// and LastLoop stays at its last sign of life, so a health check fails
// and the process can be restarted. It is the zero time before Run starts. A health check compares it with a window
// longer than the longest wait, IdleMax, plus a receive's bound.
func (r *Runner) LastLoop() time.Time {
	if r.slotWait.Load() && r.leftBehind.Load() < int64(r.cfg.Concurrency) {
		return r.cfg.Clock.Now()
	}
	if n := r.loop.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// alive records that the loop completed a receive or a wait; see LastLoop.
func (r *Runner) alive() { r.loop.Store(r.cfg.Clock.Now().UnixNano()) }

// emit hands an event to every observer.
func (r *Runner) emit(ctx context.Context, e Event) {
	for _, o := range r.observers {
		r.observe(ctx, o, e)
	}
}

// observe hands one event to one observer. A panicking observer is logged
// and skipped: it must not turn the message's outcome into another one
// (processSafely's recovery would report a second outcome) or stop the
// other observers.
func (r *Runner) observe(ctx context.Context, o Observer, e Event) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(ctx, "an observer panicked; event skipped", "event", e.Type.String(), "msg_id", e.Message.ID, "panic", fmt.Sprint(p))
		}
	}()
	o.Observe(ctx, e)
}

// receive registers a message just received and reports it. Its
// envelope is decoded for the events (cheaply, and without failing the
// message: a failure is reported when the job runs).
func (r *Runner) receive(ctx context.Context, m storeadapter.Message) *held {
	h := &held{m: m, log: r.cfg.Logger.With("msg_id", m.ID, "dequeue_count", m.DequeueCount)}
	if env, err := jobs.DecodeEnvelope(m.Text); err == nil {
		h.env = env
		h.log = h.log.With("op_id", env.ID, "kind", env.Kind)
	}
	r.mu.Lock()
	r.held[h] = struct{}{}
	r.mu.Unlock()
	r.emit(ctx, h.event(Received))
	return h
}

// end reports the outcome of one received message, unless Run has given
// up on it (see abandon). An outcome that brings the message back to the
// queue restarts the drain's quiet period.
func (r *Runner) end(ctx context.Context, h *held, e Event) {
	r.mu.Lock()
	final := r.final
	delete(r.held, h)
	r.mu.Unlock()
	if final {
		return
	}
	r.emit(ctx, e)
	if e.Type != Succeeded && e.Type != Poisoned {
		r.touch()
	}
}

// abandon reports the messages still held, whose handlers ignored their
// cancellation, as abandoned, and stops reporting outcomes. It returns how
// many there were.
func (r *Runner) abandon(ctx context.Context) int {
	r.mu.Lock()
	left := r.held
	r.held, r.final = nil, true
	r.mu.Unlock()
	for h := range left {
		r.emit(ctx, h.event(Abandoned))
	}
	return len(left)
}

// touch records activity now; see Config.DrainQuiet.
func (r *Runner) touch() {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.After(r.lastActivity) {
		r.lastActivity = now
	}
}

// fail stops Run's receive loop for err, which Run returns once the
// running jobs have had their shutdown grace: a condition no message can
// get past (see ClassCredential). The first call wins.
func (r *Runner) fail(err error) {
	r.failOnce.Do(func() {
		r.mu.Lock()
		stop := r.stopLoop
		r.mu.Unlock()
		if stop != nil {
			stop(err)
		}
	})
}

// stop records why Run returns.
func (r *Runner) stop(reason string, left int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopReason, r.left = reason, left
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

// Run receives and runs messages until ctx is cancelled (graceful
// shutdown: no more receives, running handlers get ShutdownGrace to finish,
// received-but-unstarted messages are made visible at once) or, with Drain,
// until the queue is drained (see Config.Drain), or until MaxMessages or
// MaxDuration. It returns nil then; Stats says why it stopped. Message-level
// failures never end it; it returns an error only when the queue cannot be
// used at all: missing, forbidden, every receive failing for
// ReceiveOutage, or storage refusing the credential (see classify); or
// when a drain would end with messages left that the service failed to
// return (see drainIncomplete).
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
	// loopCtx ends the receive loop: shutdown, MaxDuration, or fail.
	loopCtx, stopLoop := context.WithCancelCause(stopCtx)
	defer stopLoop(nil)
	r.mu.Lock()
	r.stopLoop = stopLoop
	r.mu.Unlock()

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
	batch := c.BatchSize           // 1 after a failed receive; see above
	var lastFailure time.Time      // when a receive last failed
	failures := 0                  // receives failed in a row
	failingSince := r.failingSince // when the outage started; zero when none
	// Receives the service failed with an internal error (HTTP 500; see
	// storeadapter.ErrServiceFailed): how many, how many of one message,
	// the last. A message the service cannot return fails every receive
	// that would return it; a drain must not end as a success while it is
	// on the queue (see drainIncomplete).
	var sf serviceFailures
	// lastTry is the least time a receive gets during an outage: with
	// less of the outage left (after a wait of at least IdleMin), none is
	// tried (see ReceiveOutage).
	lastTry := min(receiveTimeout, c.ReceiveOutage/4)
	r.touch()
	r.alive()
	err := func() error {
		for loopCtx.Err() == nil {
			wake := func() {
				select { // wake the loop if it waits; never block
				case done <- struct{}{}:
				default:
				}
			}
			// A handler left behind at its maximum run time still runs:
			// it takes a slot's place until it returns, so stuck handlers
			// cannot pile up past Concurrency. Run does not wait for it.
			for len(pending) > 0 && len(slots)+int(r.leftBehind.Load()) < c.Concurrency {
				h := pending[0]
				pending = pending[1:]
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.processSafely(handlerCtx, h)
					handled.Add(1)
					if h.leftBehind != nil {
						r.leftBehind.Add(1)
						go func() {
							<-h.leftBehind
							r.leftBehind.Add(-1)
							c.Logger.Info("a handler left behind at its maximum run time has returned", "msg_id", h.m.ID, "op_id", h.env.ID, "kind", h.env.Kind)
							wake()
						}()
					}
					<-slots
					wake()
				}()
			}
			held := len(slots) + len(pending)
			n := min(batch, capacity-held-int(r.leftBehind.Load()))
			if c.MaxMessages > 0 {
				n = min(n, c.MaxMessages-int(handled.Load())-held)
				if n <= 0 && held == 0 {
					r.stop("max messages", 0)
					return nil
				}
			}
			if n <= 0 || held > 0 && n < min(batch, capacity)/2 {
				r.waitOne(loopCtx, done) // receive once half a batch fits
				continue
			}
			// A receive is not cancelled by shutdown: once sent, the service
			// has hidden the messages it returns, and abandoning the call
			// would leave them hidden for a whole visibility timeout. What
			// it returns after a shutdown signal is released below.
			began := c.Clock.Now()
			// A receive that fails is the start of an outage, so it is
			// bounded by ReceiveOutage as well.
			timeout := min(receiveTimeout, c.ReceiveOutage)
			if !failingSince.IsZero() {
				// During an outage a receive ends within it (the wait
				// below leaves it at least lastTry).
				timeout = min(timeout, max(failingSince.Add(c.ReceiveOutage).Sub(began), lastTry))
			}
			rctx, cancel := boundedCtx(timeout)
			msgs, err := c.Queue.Receive(rctx, n, c.Visibility)
			cancel()
			r.alive()
			if err != nil {
				if loopCtx.Err() != nil {
					return nil
				}
				r.count.receiveFailures.Add(1)
				if !storeadapter.IsTransient(err) {
					return fmt.Errorf("runner: receive from %s: %w", c.Queue.Name(), err)
				}
				if failures++; failingSince.IsZero() {
					failingSince = began
				}
				if errors.Is(err, storeadapter.ErrServiceFailed) {
					sf.count, sf.last = sf.count+1, c.Clock.Now()
					if n == 1 {
						// One message, and the service answered with an
						// error: not an outage but that message.
						sf.single++
						c.Logger.ErrorContext(ctx, "the queue service failed to return a message (HTTP 500 on a receive of one): "+
							"the queue holds a message it cannot return; the failed receive hid it for the visibility timeout, "+
							"and every receive that would return it fails the same way",
							"queue", c.Queue.Name(), "err", err, "times", sf.single)
					}
				}
				if left := failingSince.Add(c.ReceiveOutage).Sub(c.Clock.Now()); left < lastTry+c.IdleMin {
					// No other receive, after the shortest wait, would end
					// within the outage: wait out its rest (a shutdown cuts
					// it short), then give up.
					r.sleep(loopCtx, left, nil)
					if loopCtx.Err() != nil {
						return nil
					}
					return fmt.Errorf("runner: receive from %s failed %d times in a row for %v: %w", c.Queue.Name(), failures,
						c.Clock.Now().Sub(failingSince).Round(time.Second), err)
				}
				if n > 1 {
					// It may have hidden good messages with a bad one: they
					// are visible again within a visibility timeout, so the
					// drain's quiet period starts again. A failed receive of
					// one message hid only that one, which cannot be had.
					r.touch()
				}
				batch, lastFailure = 1, c.Clock.Now()
				// The last try starts early enough to end within the outage.
				wait := min(idle.NextBackOff(), failingSince.Add(c.ReceiveOutage).Sub(c.Clock.Now())-lastTry)
				c.Logger.WarnContext(ctx, "receive failed; backing off", "queue", c.Queue.Name(), "err", err,
					"failures_in_a_row", failures, "retry_in", wait, "next_batch", batch)
				r.sleep(loopCtx, wait, done)
				continue
			}
			failures, failingSince = 0, time.Time{}
			if len(msgs) == 0 {
				if c.Drain && held == 0 {
					if left, ok, err := r.drained(ctx, sf); ok {
						if err != nil {
							r.stop("drain incomplete", left)
							return err
						}
						r.stop("drained", left)
						return nil
					}
				}
				r.sleep(loopCtx, idle.NextBackOff(), done)
				continue
			}
			idle.Reset()
			if c.Clock.Now().Sub(lastFailure) >= c.Visibility {
				batch = min(c.BatchSize, 2*batch)
			}
			r.touch()
			for _, m := range msgs {
				h := r.receive(ctx, m)
				if loopCtx.Err() != nil {
					r.end(ctx, h, r.release(h, h.event(Released), m.PopReceipt, leaseEnd(began, c.Visibility, m.NextVisible)))
					continue
				}
				r.hold(handlerCtx, h)
				pending = append(pending, h)
			}
		}
		return nil
	}()
	switch {
	case errors.Is(err, errDrainIncomplete): // stop recorded with the count
	case errors.Is(err, storeadapter.ErrAuthentication):
		r.stop("credential refused", 0)
	case err != nil:
		r.stop("receive failing", 0)
	case ctx.Err() != nil:
		r.stop("shutdown", 0)
	case stopCtx.Err() != nil:
		r.stop("max duration", 0)
	case loopCtx.Err() != nil: // fail stopped it
		err = fmt.Errorf("runner: a job on %s: %w", c.Queue.Name(), context.Cause(loopCtx))
		r.stop("credential refused", 0)
	}
	// Messages received but never started go back to the queue at once.
	for _, h := range pending {
		h.cancel(nil)
		if receipt, until, lost := h.lease.stop(); lost {
			r.end(ctx, h, h.event(LeaseLost))
		} else {
			r.end(ctx, h, r.release(h, h.event(Released), receipt, until))
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
			c.Logger.ErrorContext(ctx, "jobs ignored cancellation; leaving them behind", "abandoned", r.abandon(ctx))
		}
	}
	return err
}

// drained reports whether a drain may end now that a receive found nothing
// and nothing runs: the queue's approximate count is 0, or DrainQuiet has
// passed since the last activity. It returns the count (-1 when it could
// not be read), and logs why the drain ends; or, when it ends with
// messages left that the service failed to return, the error to end it
// with (see drainIncomplete).
func (r *Runner) drained(ctx context.Context, sf serviceFailures) (int, bool, error) {
	c := &r.cfg
	cctx, cancel := boundedCtx(callTimeout)
	n, err := c.Queue.ApproximateCount(cctx)
	cancel()
	r.mu.Lock()
	quiet := c.Clock.Now().Sub(r.lastActivity)
	r.mu.Unlock()
	switch {
	case err == nil && n == 0:
		c.Logger.InfoContext(ctx, "queue drained", "queue", c.Queue.Name(), "invisible", 0)
		return 0, true, nil
	case quiet < c.DrainQuiet:
		return 0, false, nil
	}
	left := n
	if err != nil {
		left = -1
	}
	if ierr := r.drainIncomplete(left, sf); ierr != nil {
		return left, true, ierr
	}
	switch {
	case err != nil:
		c.Logger.WarnContext(ctx, "queue drained: nothing visible for the quiet period; its message count could not be read",
			"queue", c.Queue.Name(), "quiet", c.DrainQuiet, "err", err)
		return -1, true, nil
	}
	c.Logger.InfoContext(ctx, "queue drained: nothing visible for the quiet period; the count still holds messages that are invisible (held elsewhere, delayed, or expired and not yet collected)",
		"queue", c.Queue.Name(), "invisible", n, "quiet", c.DrainQuiet)
	return n, true, nil
}

// errDrainIncomplete is wrapped by the error of a drain that ended with
// messages left that the service failed to return (see drainIncomplete).
var errDrainIncomplete = errors.New("drain incomplete")

// serviceFailures are the receives of a Run that the service failed with
// an internal error (HTTP 500; see storeadapter.ErrServiceFailed).
type serviceFailures struct {
	count  int       // how many
	single int       // how many of them asked for one message
	last   time.Time // the last one's end
}

// drainIncomplete returns the error that ends a drain, which would
// otherwise end as a success, when the queue still holds messages (left,
// -1 when the count could not be read) and the service failed receives with
// an internal error lately (see storeadapter.ErrServiceFailed): a message
// the service cannot return fails every receive that would return it, is
// hidden by each for the visibility timeout, and would stay on the queue
// unseen while the drain reports success. Lately is within a visibility
// timeout (the message is visible again by then), the idle wait (a poll
// comes by then) and the quiet period of the drain's end; an older failure
// was a passing one. It returns nil otherwise.
func (r *Runner) drainIncomplete(left int, sf serviceFailures) error {
	c := &r.cfg
	if left == 0 || sf.count == 0 || c.Clock.Now().Sub(sf.last) > c.Visibility+c.IdleMax+c.DrainQuiet {
		return nil
	}
	count := fmt.Sprintf("its approximate count is still %d", left)
	if left < 0 {
		count = "its message count could not be read"
	}
	which := "a message the service cannot return may be among what is left"
	if sf.single > 0 {
		which = fmt.Sprintf("%d of them receiving one message: the queue holds a message the service cannot return", sf.single)
	}
	return fmt.Errorf("runner: %w: queue %s: %s, and %d receives failed with a service error (HTTP 500), the last %v ago, %s "+
		"(Azurite answers 500 to every receive that would return text it cannot write, such as a raw U+0001, which Azure refuses at send); "+
		"such a message stays on the queue, hidden after each failed receive, until it expires or the queue is cleared",
		errDrainIncomplete, c.Queue.Name(), count, sf.count, c.Clock.Now().Sub(sf.last).Round(time.Second), which)
}

// waitOne waits for a running message to finish, or for ctx.
func (r *Runner) waitOne(ctx context.Context, done <-chan struct{}) {
	r.slotWait.Store(true)
	defer func() { r.alive(); r.slotWait.Store(false) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sleep waits d, cut short by ctx or a finished message (which frees a
// slot but also means the queue may have more).
func (r *Runner) sleep(ctx context.Context, d time.Duration, done <-chan struct{}) {
	defer r.alive()
	select {
	case <-r.cfg.Clock.After(d):
	case <-ctx.Done():
	case <-done:
	}
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
			l.r.emit(ctx, l.h.event(LeaseRenewed))
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
