package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

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
// envelope is decoded for the events, once (the job decodes its arguments
// from it; see process), without failing the message: a failure is
// reported when the job runs.
func (r *Runner) receive(ctx context.Context, m storeadapter.Message) *held {
	h := &held{m: m, base: r.cfg.Logger}
	env, err := jobs.DecodeEnvelope(m.Text)
	if h.envErr = err; err == nil {
		h.env = env // else the zero envelope
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

// stop records why Run returns.
func (r *Runner) stop(reason string, left int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopReason, r.left = reason, left
}
