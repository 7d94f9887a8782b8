package runner

import (
	"context"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// maxReceivesInFlight bounds the receives Run keeps in flight at once,
// whatever the concurrency and batch size: 16 receives of 32 messages are
// 512 messages per round trip, about 50,000 a second at 10 ms.
const maxReceivesInFlight = 16

// prefetch is how many received messages may wait, leased, behind the
// concurrency running ones. Up to a batch of slots, half a batch (never
// more than the slots): a receive fetches many messages, not the few
// slots just freed, and with few slots and long jobs messages hidden here
// would wait long while other workers could run them. Past a batch of
// slots, a batch or half the slots, whichever is more: at 10 ms a call, a
// job of four calls frees a quarter of the slots during one receive's
// round trip, and the messages of the next receives must be there by then.
func prefetch(concurrency, batch int) int {
	if concurrency <= batch {
		return min(concurrency, batch/2)
	}
	return max(batch, concurrency/2)
}

// receivesInFlight is how many receives Run may have in flight at once
// when the queue keeps returning full batches: enough for a batch per
// batch of slots, at most maxReceivesInFlight.
func receivesInFlight(concurrency, batch int) int {
	return min(maxReceivesInFlight, (concurrency+batch-1)/batch)
}

// receives are the receive calls of one Run in flight. Only Run's loop
// uses one, except results, on which each receive reports.
type receives struct {
	r        *Runner
	results  chan receiveResult
	inFlight int // receives started and not yet reported
	asked    int // messages the receives in flight asked for
	// allowed is how many may be in flight now: 1 after a receive that
	// came back short (fewer messages than asked for, none, or an error),
	// doubled after each full one, up to most.
	allowed, most int
}

// receiveResult is what one receive reports.
type receiveResult struct {
	asked    int       // messages asked for; never 0
	received int       // messages returned
	began    time.Time // when the call began
	// held are the messages returned, leased, not started; nil after a
	// shutdown signal (they were released; see admit).
	held []*held
	err  error
}

func newReceives(r *Runner, most int) *receives {
	return &receives{r: r, results: make(chan receiveResult, most), allowed: 1, most: most}
}

// start receives up to n messages in a goroutine of its own, bounded by
// timeout, and reports on results. A receive is not cancelled by shutdown
// (loopCtx): once sent, the service has hidden the messages it returns,
// and abandoning the call would leave them hidden for a whole visibility
// timeout. What it returns after a shutdown signal is released (see admit).
func (rc *receives) start(ctx, loopCtx, handlerCtx context.Context, n int, timeout time.Duration) {
	rc.inFlight++
	rc.asked += n
	r := rc.r
	c := &r.cfg
	go func() {
		began := c.Clock.Now()
		rctx, cancel := boundedCtx(timeout)
		msgs, err := c.Queue.Receive(rctx, n, c.Visibility)
		cancel()
		got := receiveResult{asked: n, began: began, err: err}
		if err == nil {
			got.received, got.held = len(msgs), r.admit(ctx, loopCtx, handlerCtx, msgs, began)
		}
		rc.results <- got
	}()
}

// end accounts for a receive that reported.
func (rc *receives) end(got receiveResult) {
	rc.inFlight--
	rc.asked -= got.asked
	if got.err != nil || got.received < got.asked {
		rc.allowed = 1
	} else {
		rc.allowed = min(rc.most, 2*rc.allowed)
	}
}

// admit registers the messages a receive that began at began returned and
// keeps their leases from then on, while they wait and while they run;
// after a shutdown signal it releases them at once instead. It runs in the
// receive's goroutine, so that decoding the envelopes of a batch is not on
// the loop's path.
func (r *Runner) admit(ctx, loopCtx, handlerCtx context.Context, msgs []storeadapter.Message, began time.Time) []*held {
	hs := make([]*held, 0, len(msgs))
	for _, m := range msgs {
		h := r.receive(ctx, m)
		if loopCtx.Err() != nil {
			r.end(ctx, h, r.release(h, h.event(Released), m.PopReceipt, leaseEnd(began, r.cfg.Visibility, m.NextVisible)))
			continue
		}
		r.hold(handlerCtx, h, began)
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil
	}
	return hs
}

// releaseConcurrency bounds the releases of unstarted messages at
// shutdown made at once.
const releaseConcurrency = 32

// releaseAll makes held messages that never started visible again at once
// (or reports their leases lost), releaseConcurrency at a time: a shutdown
// may leave a prefetch of hundreds, and other workers should have them
// within a few round trips, not one after another.
func (r *Runner) releaseAll(ctx context.Context, hs []*held) {
	sem := make(chan struct{}, releaseConcurrency)
	var wg sync.WaitGroup
	for _, h := range hs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h.cancel(nil)
			if receipt, until, lost := h.lease.stop(); lost {
				r.end(ctx, h, h.event(LeaseLost))
			} else {
				r.end(ctx, h, r.release(h, h.event(Released), receipt, until))
			}
		})
	}
	wg.Wait()
}
