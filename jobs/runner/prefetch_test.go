package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// slowQueue makes each receive take latency on the fake clock, so that
// receives overlap, and counts them: how many in all, in flight now, and
// at most in flight at once.
type slowQueue struct {
	storeadapter.Queue
	clock   *clock.Fake
	latency time.Duration

	mu                       sync.Mutex
	receives, inFlight, most int
}

func (q *slowQueue) Receive(ctx context.Context, n int, visibility time.Duration) ([]storeadapter.Message, error) {
	q.mu.Lock()
	q.receives++
	q.inFlight++
	q.most = max(q.most, q.inFlight)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.inFlight--
		q.mu.Unlock()
	}()
	<-q.clock.After(q.latency)
	return q.Queue.Receive(ctx, n, visibility)
}

// counts returns the receives so far and the most in flight at once, and
// starts both again from 0.
func (q *slowQueue) counts() (receives, most int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	receives, most = q.receives, q.most
	q.receives, q.most = 0, q.inFlight
	return receives, most
}

// slowReceives makes b's runner receive through a slowQueue of 10 ms.
func (b *bundle) slowReceives() *slowQueue {
	q := &slowQueue{Queue: b.queue, clock: b.clock, latency: 10 * time.Millisecond}
	b.cfg.Queue = q
	return q
}

// sendN sends n messages op-0 … op-(n-1).
func (b *bundle) sendN(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		b.send(t, fmt.Sprintf("op-%d", i))
	}
}

// blocked returns a handler that waits until release is closed (or its
// context ends), and counts the runs.
func blocked(release <-chan struct{}, mu *sync.Mutex, runs map[string]int) jobs.WorkFunc[testArgs] {
	return func(ctx context.Context, job *jobs.Job[testArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestPrefetchedMessagesKeepTheirLease fills 64 slots with jobs that do
// not end and lets the 32 messages prefetched behind them wait more than
// three visibility timeouts: their leases are renewed as the running
// ones' are, no other receive gets any of them, and each then runs once
// and is deleted with its newest receipt.
func TestPrefetchedMessagesKeepTheirLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		runs := map[string]int{}
		b := setup(t, blocked(release, &mu, runs))
		b.cfg.Concurrency, b.cfg.Drain = 64, true
		b.sendN(t, 96)
		r, errc := b.run(t)
		b.advanceUntil(t, 10*time.Millisecond, time.Second, func() bool { return r.Running() == 96 })
		start := b.clock.Now()
		b.advanceUntil(t, 3*time.Second, 96*time.Second, func() bool { return b.clock.Now().Sub(start) >= 96*time.Second })
		if got, err := b.queue.Receive(context.Background(), 32, time.Second); err != nil || len(got) != 0 {
			t.Fatalf("another receive got %d messages (err %v) while 64 ran and 32 waited; want none", len(got), err)
		}
		if n := b.calls.Snapshot()[instrument.OpUpdate].Calls; n < 3*96 {
			t.Fatalf("UpdateMessage called %d times in 96 s with a 30 s lease on 96 messages; want at least %d", n, 3*96)
		}
		mu.Lock()
		if len(runs) != 64 {
			t.Errorf("%d jobs started with 64 slots; want 64", len(runs))
		}
		mu.Unlock()
		close(release)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Succeeded != 96 || s.Received != 96 || s.LeaseLost != 0 {
			t.Fatalf("stats %+v; want the 96 messages received once each and succeeded", s)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range runs {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", id, n)
			}
		}
	})
}

// TestShutdownReleasesPrefetched stops a runner whose 64 slots are busy
// and 32 messages wait behind them: the waiting ones are visible again at
// once (the clock does not move), released unstarted, while the running
// ones finish in the grace period.
func TestShutdownReleasesPrefetched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		runs := map[string]int{}
		b := setup(t, blocked(release, &mu, runs))
		obs := &events{}
		b.cfg.Concurrency, b.cfg.Observers = 64, []runner.Observer{obs}
		b.sendN(t, 96)
		r, stop := b.start(t)
		b.advanceUntil(t, 10*time.Millisecond, time.Second, func() bool { return r.Running() == 96 })
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		synctest.Wait() // the shutdown has begun: Run waits for the 64 jobs
		if n := r.Running(); n != 64 {
			t.Fatalf("Running = %d during the shutdown, want the 64 jobs", n)
		}
		got, err := b.queue.Receive(context.Background(), 32, time.Second)
		if err != nil || len(got) != 32 {
			t.Fatalf("during the shutdown, without the clock moving, a receive got %d messages (err %v); want the 32 that waited", len(got), err)
		}
		mu.Lock()
		for _, m := range got {
			env, err := jobs.DecodeEnvelope(m.Text)
			if err != nil || runs[env.ID] != 0 {
				t.Errorf("released message %s (err %v) ran %d times; want an unstarted one", env.ID, err, runs[env.ID])
			}
		}
		mu.Unlock()
		close(release)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Succeeded != 64 || s.Released != 32 || s.StopReason != "shutdown" {
			t.Fatalf("stats %+v; want the 64 running jobs finished and the 32 waiting released", s)
		}
		obs.releasedUnstarted(t)
	})
}

// TestReceivesInFlightBounded drains 3,000 messages with 256 slots and
// receives of 10 ms: several receives overlap, never more than one per
// batch of slots (8), and every message runs once.
func TestReceivesInFlightBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(context.Context, *jobs.Job[testArgs]) error { return nil })
		q := b.slowReceives()
		b.cfg.Concurrency = 256
		b.sendN(t, 3000)
		s := b.drain(t, 10*time.Millisecond)
		if s.Succeeded != 3000 || s.Received != 3000 {
			t.Fatalf("stats %+v; want 3000 messages received once each and succeeded", s)
		}
		receives, most := q.counts()
		if most < 2 || most > 8 {
			t.Fatalf("at most %d receives in flight at once; want several, and at most 256/32 = 8", most)
		}
		// 3000 messages in batches of at least half of 32, the drain's
		// empty receives and the short ones at the end.
		if receives > 3000/16+10 {
			t.Fatalf("%d receives for 3000 messages; want at most %d", receives, 3000/16+10)
		}
	})
}

// TestIdleQueuePolledOnce: after a burst that had several receives in
// flight, an empty queue is polled by one receive at a time, with the idle
// backoff between them (IdleMin 100 ms doubling to IdleMax 1 s), not by a
// receive per batch of slots.
func TestIdleQueuePolledOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(context.Context, *jobs.Job[testArgs]) error { return nil })
		q := b.slowReceives()
		b.cfg.Concurrency, b.cfg.IdleMin, b.cfg.IdleMax = 512, 100*time.Millisecond, time.Second
		b.sendN(t, 2000)
		r, stop := b.start(t)
		b.advanceUntil(t, 10*time.Millisecond, time.Minute, func() bool { return r.Stats().Succeeded == 2000 })
		if _, most := q.counts(); most < 2 {
			t.Fatalf("at most %d receives in flight during the burst; want several", most)
		}
		// The receives the burst had in flight return within 10 ms.
		b.clock.Advance(20 * time.Millisecond)
		synctest.Wait()
		q.counts()
		start := b.clock.Now()
		b.advanceUntil(t, 10*time.Millisecond, time.Minute, func() bool { return b.clock.Now().Sub(start) >= time.Minute })
		receives, most := q.counts()
		// 100, 200, 400, 800 ms, then at least 0.8 s apart (±20 %
		// jitter), each after a receive of 10 ms.
		if most != 1 || receives > 4+60/0.8+1 {
			t.Fatalf("idle for a minute: %d receives, at most %d in flight; want one at a time, at most %d", receives, most, int(4+60/0.8+1))
		}
		if receives < 60/1.2-5 {
			t.Fatalf("idle for a minute: %d receives; want the queue polled about once a second (IdleMax)", receives)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
