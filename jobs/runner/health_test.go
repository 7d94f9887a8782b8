package runner_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs/runner"
)

// TestLastLoopStaleWhenLeftBehindHoldEverySlot: with every slot taken by
// a handler that ignored its cancellation at its maximum run time (left
// behind), the loop can never run anything again: LastLoop must go stale,
// so /healthz fails and liveness restarts the wedged worker.
func TestLastLoopStaleWhenLeftBehindHoldEverySlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &slowWorker{maxRunTime: time.Minute, stubborn: true, release: make(chan struct{})}
		b := setupWorker(t, w)
		b.cfg.Concurrency = 1
		b.send(t, "op-stuck")
		b.send(t, "op-next")
		r, err := runner.New(b.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		// Two hours: far past the 1 min maximum run time and the 5 s
		// abandon wait. Nothing else can run with Concurrency 1.
		for range 2 * 60 * 60 {
			synctest.Wait()
			b.clock.Advance(time.Second)
		}
		synctest.Wait()
		s := r.Stats()
		t.Logf("stats after 2h: %+v, running %d", s, r.Running())
		// The worker is wedged: nothing succeeded in 2 h. A health window
		// like the worker's (2 x IdleMax + 40 s) must see a stale LastLoop.
		const window = 2*runner.DefaultIdleMax + 40*time.Second
		if s.Succeeded == 0 {
			if age := b.clock.Now().Sub(r.LastLoop()); age <= window {
				t.Errorf("worker wedged behind a left-behind handler for 2h (stats %+v), but LastLoop is %v old (<= %v): /healthz would answer 200", s, age, window)
			}
		}
		close(w.release)
		cancel()
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
