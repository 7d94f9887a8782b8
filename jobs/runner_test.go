package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// fakePoisoner records what the runner asked for; Move deletes the
// original, as the real one does.
type fakePoisoner struct {
	q         storeadapter.Queue
	mu        sync.Mutex
	attempts  []poison.Failure
	moved     []string // reasons
	forgotten int
}

func (p *fakePoisoner) RecordAttempt(_ context.Context, f poison.Failure) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts = append(p.attempts, f)
	return nil
}

func (p *fakePoisoner) Move(ctx context.Context, f poison.Failure, receipt, reason string) error {
	p.mu.Lock()
	p.moved = append(p.moved, reason)
	p.mu.Unlock()
	return p.q.DeleteMessage(ctx, f.MessageID, receipt)
}

func (p *fakePoisoner) Forget(context.Context, string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgotten++
	return nil
}

func (p *fakePoisoner) reasons() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.moved...)
}

type bundle struct {
	clock  *localstore.FakeClock
	store  *localstore.Store
	queue  storeadapter.Queue
	poison *fakePoisoner
	cfg    jobs.Config
}

// setup returns a fake-clock store with a queue and a runner config whose
// registry has one kind, "test", running handle.
func setup(t *testing.T, handle jobs.HandlerFunc) *bundle {
	t.Helper()
	clock := localstore.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	store := localstore.New(localstore.Options{Now: clock.Now})
	q := store.Queue("work")
	if err := q.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	kind := jobs.Kind{Name: "test", Handler: handle, ParseArgs: func(raw json.RawMessage) (any, error) { return string(raw), nil }}
	p := &fakePoisoner{q: q}
	return &bundle{clock: clock, store: store, queue: q, poison: p, cfg: jobs.Config{
		Queue: q, Registry: jobs.NewRegistry(nil, kind), Poison: p, Clock: clock,
		Concurrency: 4, Visibility: 30 * time.Second, RetryBase: time.Second, RetryMax: time.Minute, ShutdownGrace: time.Minute,
	}}
}

func (b *bundle) send(t *testing.T, id string) {
	t.Helper()
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: "test", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.queue.Send(context.Background(), text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
}

// start runs a runner in the background; stop cancels it and returns
// Run's error.
func (b *bundle) start(t *testing.T) (*jobs.Runner, func() error) {
	t.Helper()
	r, err := jobs.NewRunner(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-errc })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return r, stop
}

// TestLeaseRenewal keeps a slow handler's message invisible well past its
// first visibility timeout and deletes it with the newest pop receipt.
func TestLeaseRenewal(t *testing.T) {
	release := make(chan struct{})
	started := make(chan jobs.Job, 1)
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		started <- job
		<-release
		return nil
	})
	b.send(t, "op-1")
	r, stop := b.start(t)
	job := <-started
	for range 6 { // 6 × 16 s = 96 s, more than three visibility timeouts
		b.clock.BlockUntilTimers(2) // the lease keeper's and the idle poll's
		b.clock.Advance(16 * time.Second)
	}
	b.clock.BlockUntilTimers(2)
	if got, err := b.queue.Receive(context.Background(), 1, time.Second); err != nil || len(got) != 0 {
		t.Fatalf("another receive got %d messages (err %v) while the lease was kept; want none", len(got), err)
	}
	if b.store.Calls()["UpdateMessage"] < 3 {
		t.Fatalf("UpdateMessage called %d times in 96 s with a 30 s lease; want at least 3", b.store.Calls()["UpdateMessage"])
	}
	// The first receipt is stale now: only the newest can delete.
	if err := b.queue.DeleteMessage(context.Background(), job.Message.ID, job.Message.PopReceipt); !errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
		t.Fatalf("delete with the first receipt = %v, want ErrPopReceiptMismatch", err)
	}
	close(release)
	waitFor(t, func() bool { return r.Stats().Succeeded == 1 })
	if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
		t.Fatalf("%d messages left after the job succeeded; want 0", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseLossCancelsHandler deletes a running message behind the
// runner's back: the next renewal fails and the handler's context ends.
func TestLeaseLossCancelsHandler(t *testing.T) {
	started := make(chan jobs.Job, 1)
	cancelled := make(chan error, 1)
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		started <- job
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	})
	b.send(t, "op-1")
	r, stop := b.start(t)
	job := <-started
	if err := b.queue.DeleteMessage(context.Background(), job.Message.ID, job.Message.PopReceipt); err != nil {
		t.Fatal(err)
	}
	b.clock.BlockUntilTimers(2)
	b.clock.Advance(16 * time.Second)
	if cause := <-cancelled; cause == nil || !strings.Contains(cause.Error(), "lease") {
		t.Fatalf("handler context cause = %v, want the lease-lost cause", cause)
	}
	waitFor(t, func() bool { return r.Stats().LeaseLost == 1 })
	if s := r.Stats(); s.Succeeded+s.Retried+s.Poisoned != 0 {
		t.Fatalf("stats %+v: a lost message must be neither acknowledged, retried nor poisoned", s)
	}
	stop()
}

// TestTransientStorageErrorRetried: a table name still being deleted (409,
// but transient) is retried, not poisoned.
func TestTransientStorageErrorRetried(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		return fmt.Errorf("create target: %w", storeadapter.ErrTableBeingDeleted)
	})
	b.send(t, "op-1")
	r, stop := b.start(t)
	defer stop()
	waitFor(t, func() bool { return r.Stats().Retried == 1 })
	if p := r.Stats().Poisoned; p != 0 {
		t.Fatalf("a transient storage error was poisoned (%d)", p)
	}
}

// TestForbiddenRetried: a refused credential (a role assignment still
// propagating) is retried, not poisoned.
func TestForbiddenRetried(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		return fmt.Errorf("write target: %w", storeadapter.ErrForbidden)
	})
	b.send(t, "op-1")
	r, stop := b.start(t)
	defer stop()
	waitFor(t, func() bool { return r.Stats().Retried == 1 })
	if p := r.Stats().Poisoned; p != 0 {
		t.Fatalf("a forbidden storage call was poisoned (%d)", p)
	}
}

// TestSuccessAfterRetryForgetsFailures: a message that fails once and then
// succeeds has its failure record dropped.
func TestSuccessAfterRetryForgetsFailures(t *testing.T) {
	var calls atomic.Int32
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		if calls.Add(1) == 1 {
			return errors.New("storage hiccup")
		}
		return nil
	})
	b.cfg.IdleMax = time.Second
	b.send(t, "op-1")
	r, stop := b.start(t)
	defer stop()
	waitFor(t, func() bool { return r.Stats().Retried == 1 })
	for i := 0; r.Stats().Succeeded == 0; i++ {
		if i == 1000 {
			t.Fatal("the retried message did not come back within 100 s of clock time")
		}
		b.clock.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, func() bool { b.poison.mu.Lock(); defer b.poison.mu.Unlock(); return b.poison.forgotten == 1 })
}

// TestMaxMessages stops after exactly MaxMessages, even below half a batch.
func TestMaxMessages(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error { return nil })
	for i := range 6 {
		b.send(t, fmt.Sprintf("op-%d", i))
	}
	b.cfg.MaxMessages = 3
	r, err := jobs.NewRunner(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Succeeded != 3 {
		t.Fatalf("stats %+v; want exactly 3 handled", s)
	}
	if n, _ := b.queue.ApproximateCount(context.Background()); n != 3 {
		t.Fatalf("%d messages left, want 3", n)
	}
	if msgs, _ := b.queue.Peek(context.Background(), 32); len(msgs) != 3 {
		t.Fatalf("%d messages visible after the run, want all 3 left (none held)", len(msgs))
	}
}

// TestRetryBackoffGrows fails a message transiently and checks it comes
// back only after a delay that grows with its dequeue count, then is
// poisoned at the threshold with every attempt recorded.
func TestRetryBackoffGrows(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error { return errors.New("storage hiccup") })
	b.cfg.MaxDequeueCount = 3
	b.cfg.IdleMax = time.Second // so a poll follows every clock step below
	b.send(t, "op-1")
	r, stop := b.start(t)
	defer stop()
	for x := int64(1); x < 3; x++ {
		// The clock stands still between the failure and this point.
		waitFor(t, func() bool { return r.Stats().Retried == x })
		nominal := float64(time.Second) * float64(int64(1)<<x-1)
		lo := time.Duration(0.8 * nominal).Truncate(time.Second) // the queue keeps whole seconds
		if lo >= time.Second {
			b.clock.Advance(lo - time.Millisecond)
			if msgs, _ := b.queue.Peek(context.Background(), 1); len(msgs) != 0 {
				t.Fatalf("after failure %d the message came back before %v", x, lo)
			}
		} else if msgs, _ := b.queue.Peek(context.Background(), 1); len(msgs) != 0 {
			t.Fatalf("after failure %d the message is visible at once; want a delay", x)
		}
		for r.Stats().Received == x { // step until the runner polls it again
			b.clock.Advance(100 * time.Millisecond)
			time.Sleep(time.Millisecond)
		}
		if elapsed := b.clock.Now().Sub(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)); elapsed > 10*time.Second {
			t.Fatalf("message took %v of clock time to come back after failure %d", elapsed, x)
		}
	}
	waitFor(t, func() bool { return r.Stats().Poisoned == 1 })
	if got := len(b.poison.attempts); got != 2 {
		t.Fatalf("%d attempts recorded before poisoning; want 2", got)
	}
	if reasons := b.poison.reasons(); !strings.Contains(reasons[0], "dequeue count 3") || !strings.Contains(reasons[0], "storage hiccup") {
		t.Fatalf("poison reason %q should give the dequeue count and the last error", reasons[0])
	}
}

// TestRetryDelay checks the formula's bounds and growth.
func TestRetryDelay(t *testing.T) {
	base, maxDelay := time.Second, time.Minute
	for x := int64(1); x <= 8; x++ {
		want := float64(base) * float64(int64(1)<<x-1)
		lo, hi := time.Duration(0.8*want), time.Duration(1.2*want)
		lo, hi = min(max(lo, base), maxDelay), min(max(hi, base), maxDelay)
		for range 200 {
			if d := jobs.RetryDelay(x, base, maxDelay); d < lo || d > hi {
				t.Fatalf("RetryDelay(%d) = %v, want within [%v, %v]", x, d, lo, hi)
			}
		}
	}
	if d := jobs.RetryDelay(1000, base, maxDelay); d != maxDelay {
		t.Fatalf("RetryDelay(1000) = %v, want the cap %v", d, maxDelay)
	}
}

// TestPoisonOnFirstDelivery: malformed messages, permanent errors, storage
// requests the service refused (4xx) and panics go to the poison queue at
// once, and the worker keeps running.
func TestPoisonOnFirstDelivery(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		switch job.ID {
		case "op-permanent":
			return jobs.Permanentf("target table name is not allowed")
		case "op-panic":
			panic("boom")
		case "op-4xx":
			return fmt.Errorf("archive: write to target: %w", storeadapter.ErrTooLarge)
		}
		return nil
	})
	b.send(t, "op-4xx")
	b.send(t, "op-permanent")
	b.send(t, "op-panic")
	b.send(t, "op-ok")
	for _, text := range []string{"not base64 at all!", `{"v":1,"id":"x","kind":"test","args":{},"extra":1}`, `{"v":2,"id":"x","kind":"test","args":{}}`} {
		if _, err := b.queue.Send(context.Background(), text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, stop := b.start(t)
	waitFor(t, func() bool { s := r.Stats(); return s.Poisoned == 6 && s.Succeeded == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v after bad messages; want nil", err)
	}
	all := strings.Join(b.poison.reasons(), "\n")
	for _, want := range []string{"write to target: too large", "target table name is not allowed", "handler panic: boom", "neither JSON nor base64", "extra: unknown field", "v: must be 1"} {
		if !strings.Contains(all, want) {
			t.Errorf("poison reasons lack %q:\n%s", want, all)
		}
	}
	if r.Stats().Retried != 0 {
		t.Errorf("retried %d times; permanent failures must not be retried", r.Stats().Retried)
	}
}

// TestDrain returns once the queue is empty and every message handled.
func TestDrain(t *testing.T) {
	b := setup(t, func(ctx context.Context, job jobs.Job) error { return nil })
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		b.send(t, "op-"+id)
	}
	b.cfg.Drain = true
	r, err := jobs.NewRunner(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Succeeded != 6 {
		t.Fatalf("drain handled %+v; want 6 succeeded", s)
	}
}

// TestShutdownLetsRunningJobFinish cancels Run while a job runs: the job
// finishes within the grace period and its message is deleted.
func TestShutdownLetsRunningJobFinish(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	b := setup(t, func(ctx context.Context, job jobs.Job) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	b.send(t, "op-1")
	r, stop := b.start(t)
	<-started
	errc := make(chan error, 1)
	go func() { errc <- stop() }()
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Succeeded != 1 {
		t.Fatalf("stats %+v; want the running job to finish during shutdown", s)
	}
}

// waitFor polls cond (the runner works in other goroutines) for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}
