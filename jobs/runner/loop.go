package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

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
// Messages wait behind the running ones, leased (see prefetch), and
// several receives may be in flight at once (see receivesInFlight): one
// after a receive that came back short, empty or failed, twice as many
// after each full one. An empty queue is polled by one receive at a time,
// IdleMin to IdleMax apart.
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
	running := newSlotGoroutines(c.Concurrency, &wg)
	defer running.close()
	wake := func() {
		select { // wake the loop if it waits; never block
		case done <- struct{}{}:
		default:
		}
	}
	idle := &backoff.ExponentialBackOff{InitialInterval: c.IdleMin, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: c.IdleMax, MaxElapsedTime: 0, Stop: backoff.Stop, Clock: backoffClock{c.Clock}}
	idle.Reset()
	var handled atomic.Int64
	var pending []*held // received, leased, not started yet
	capacity := c.Concurrency + prefetch(c.Concurrency, c.BatchSize)
	rc := newReceives(r, receivesInFlight(c.Concurrency, c.BatchSize))
	var wait <-chan time.Time      // while set, no receive starts: an idle or failure backoff
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
			// A handler left behind at its maximum run time still runs:
			// it takes a slot's place until it returns, so stuck handlers
			// cannot pile up past Concurrency. Run does not wait for it.
			for len(pending) > 0 && len(slots)+int(r.leftBehind.Load()) < c.Concurrency {
				h := pending[0]
				pending[0] = nil
				pending = pending[1:]
				slots <- struct{}{}
				running.start(func() {
					r.processSafely(handlerCtx, h)
					handled.Add(1)
					if h.leftBehind != nil {
						r.leftBehind.Add(1)
						go func() {
							<-h.leftBehind
							r.leftBehind.Add(-1)
							h.logger().Info("a handler left behind at its maximum run time has returned")
							wake()
						}()
					}
					<-slots
					wake()
				})
			}
			// What is held or asked for already: running, waiting, and
			// what the receives in flight may return.
			held := len(slots) + len(pending)
			claimed := held + rc.asked
			n := min(batch, capacity-claimed-int(r.leftBehind.Load()))
			if c.MaxMessages > 0 {
				n = min(n, c.MaxMessages-int(handled.Load())-claimed)
				if n <= 0 && held == 0 && rc.inFlight == 0 {
					r.stop("max messages", 0)
					return nil
				}
			}
			// Receive once half a batch fits (at once when nothing is
			// held), unless a backoff runs or enough receives are out.
			if wait == nil && rc.inFlight < rc.allowed && n > 0 && (claimed == 0 || n >= min(batch, capacity)/2) {
				// A receive that fails is the start of an outage, so it is
				// bounded by ReceiveOutage as well.
				timeout := min(receiveTimeout, c.ReceiveOutage)
				if !failingSince.IsZero() {
					// During an outage a receive ends within it (the wait
					// below leaves it at least lastTry).
					timeout = min(timeout, max(failingSince.Add(c.ReceiveOutage).Sub(c.Clock.Now()), lastTry))
				}
				rc.start(ctx, loopCtx, handlerCtx, n, timeout)
				continue
			}
			var got receiveResult
			// Waiting for a slot alone: see LastLoop.
			r.slotWait.Store(rc.inFlight == 0 && wait == nil)
			select {
			case got = <-rc.results:
			case <-done:
			case <-wait:
				wait = nil
			case <-loopCtx.Done():
			}
			r.slotWait.Store(false)
			r.alive()
			if got.asked == 0 {
				// A finished message frees a slot but also means the queue
				// may have more: it cuts a backoff short.
				wait = nil
				continue
			}
			rc.end(got)
			if err := got.err; err != nil {
				if loopCtx.Err() != nil {
					return nil
				}
				r.count.receiveFailures.Add(1)
				if !storeadapter.IsTransient(err) {
					return fmt.Errorf("runner: receive from %s: %w", c.Queue.Name(), err)
				}
				if failures++; failingSince.IsZero() {
					failingSince = got.began
				}
				if errors.Is(err, storeadapter.ErrServiceFailed) {
					sf.count, sf.last = sf.count+1, c.Clock.Now()
					if got.asked == 1 {
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
					r.sleep(loopCtx, left)
					if loopCtx.Err() != nil {
						return nil
					}
					return fmt.Errorf("runner: receive from %s failed %d times in a row for %v: %w", c.Queue.Name(), failures,
						c.Clock.Now().Sub(failingSince).Round(time.Second), err)
				}
				if got.asked > 1 {
					// It may have hidden good messages with a bad one: they
					// are visible again within a visibility timeout, so the
					// drain's quiet period starts again. A failed receive of
					// one message hid only that one, which cannot be had.
					r.touch()
				}
				batch, lastFailure = 1, c.Clock.Now()
				// The last try starts early enough to end within the outage.
				d := min(idle.NextBackOff(), failingSince.Add(c.ReceiveOutage).Sub(c.Clock.Now())-lastTry)
				c.Logger.WarnContext(ctx, "receive failed; backing off", "queue", c.Queue.Name(), "err", err,
					"failures_in_a_row", failures, "retry_in", d, "next_batch", batch)
				wait = c.Clock.After(d)
				continue
			}
			failures, failingSince = 0, time.Time{}
			if len(got.held) == 0 {
				if c.Drain && len(slots)+len(pending) == 0 && rc.inFlight == 0 {
					if left, ok, err := r.drained(ctx, sf); ok {
						if err != nil {
							r.stop("drain incomplete", left)
							return err
						}
						r.stop("drained", left)
						return nil
					}
				}
				wait = c.Clock.After(idle.NextBackOff())
				continue
			}
			idle.Reset()
			wait = nil
			if c.Clock.Now().Sub(lastFailure) >= c.Visibility {
				batch = min(c.BatchSize, 2*batch)
			}
			r.touch()
			pending = append(pending, got.held...)
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
	// Messages received but never started go back to the queue at once;
	// then those of the receives still in flight (they are not cancelled:
	// see receives.start), as each returns.
	r.releaseAll(ctx, pending)
	for rc.inFlight > 0 {
		got := <-rc.results
		rc.end(got)
		r.releaseAll(ctx, got.held)
	}

	// Shutdown: give running handlers the grace period, then cancel them.
	running.close()
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

// sleep waits d, cut short by ctx.
func (r *Runner) sleep(ctx context.Context, d time.Duration) {
	defer r.alive()
	select {
	case <-r.cfg.Clock.After(d):
	case <-ctx.Done():
	}
}
