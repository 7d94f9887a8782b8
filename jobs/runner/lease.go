package runner

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

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

// newLease returns the lease of a message just received by a call that
// began at began.
func newLease(r *Runner, h *held, began time.Time) *lease {
	return &lease{r: r, h: h, receipt: h.m.PopReceipt, until: leaseEnd(began, r.cfg.Visibility, h.m.NextVisible),
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
			l.h.logger().WarnContext(ctx, "lease ran out without a successful renewal; cancelling the job", "err", failed)
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
				l.h.logger().WarnContext(ctx, "lease renewal reply probably lost: the failed renewal went through and changed the pop receipt; the lease is lost", "err", err, "earlier_err", failed)
			}
			l.lose(cancel)
			return
		default:
			wait, failed = min(c.Visibility/4, until.Sub(c.Clock.Now())), err
			l.h.logger().WarnContext(ctx, "lease renewal failed; retrying", "err", err, "retry_in", wait)
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

// backoffClock adapts Clock to backoff.Clock.
type backoffClock struct{ c clock.Clock }

func (b backoffClock) Now() time.Time { return b.c.Now() }

// stop ends renewal, waits for an in-flight renewal to finish, and returns
// the newest pop receipt, when the lease ends, and whether it was lost.
func (l *lease) stop() (receipt string, until time.Time, lost bool) {
	l.stopOnce.Do(func() { close(l.stopCh) })
	<-l.exited
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.receipt, l.until, l.lost
}
