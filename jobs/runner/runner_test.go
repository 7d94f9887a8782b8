package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/test/syncbuf"
)

// fakePoisoner records what the runner asked for; Move deletes the
// original, as the real one does.
type fakePoisoner struct {
	q            storeadapter.Queue
	mu           sync.Mutex
	attempts     []poison.Failure
	moved        []string // reasons
	movedF       []poison.Failure
	forgotten    int
	forgetFaults int   // Forget fails transiently this many times first
	recordErr    error // RecordAttempt and RecordDropped fail with it when set
	drops        []poison.Drop
}

func (p *fakePoisoner) RecordAttempt(_ context.Context, f poison.Failure) error {
	return record(p, &p.attempts, f)
}

// record appends v to *list, or fails with p.recordErr when it is set.
func record[T any](p *fakePoisoner, list *[]T, v T) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recordErr != nil {
		return p.recordErr
	}
	*list = append(*list, v)
	return nil
}

func (p *fakePoisoner) Move(ctx context.Context, f poison.Failure, receipt, reason string) error {
	p.mu.Lock()
	p.moved = append(p.moved, reason)
	p.movedF = append(p.movedF, f)
	p.mu.Unlock()
	err := p.q.DeleteMessage(ctx, f.MessageID, receipt)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	return err
}

func (p *fakePoisoner) Forget(context.Context, string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgetFaults > 0 {
		p.forgetFaults--
		return fmt.Errorf("forget: %w", storeadapter.ErrUnavailable)
	}
	p.forgotten++
	return nil
}

func (p *fakePoisoner) LastAttempt(_ context.Context, id string) (poison.Attempt, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.attempts) - 1; i >= 0; i-- {
		if p.attempts[i].MessageID == id {
			return p.attempts[i].Attempt, true, nil
		}
	}
	return poison.Attempt{}, false, nil
}

func (p *fakePoisoner) RecordDropped(_ context.Context, d poison.Drop) error {
	return record(p, &p.drops, d)
}

// dropped returns the drops recorded.
func (p *fakePoisoner) dropped() []poison.Drop {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.drops)
}

func (p *fakePoisoner) reasons() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.moved...)
}

// failFirst returns a handler whose first run fails with err and the
// others succeed; runs counts them.
func failFirst(runs *atomic.Int64, err error) jobs.WorkFunc[testArgs] {
	return func(context.Context, *jobs.Job[testArgs]) error {
		if runs.Add(1) == 1 {
			return err
		}
		return nil
	}
}

// testArgs are the args of the "test" kind: an empty object.
type testArgs struct{}

func (testArgs) Kind() string    { return "test" }
func (testArgs) Validate() error { return nil }

type bundle struct {
	clock  *clock.Fake
	store  storeadapter.Store
	calls  *instrument.Counts // every call through store
	queue  storeadapter.Queue
	poison *fakePoisoner
	cfg    runner.Config
}

// setup returns a fake-clock store with a queue and a runner config whose
// registry has one kind, "test", running handle.
func setup(t *testing.T, handle jobs.WorkFunc[testArgs]) *bundle {
	t.Helper()
	return setupWorker(t, handle)
}

// setupWorker is setup with any worker of the "test" kind.
func setupWorker(t *testing.T, w jobs.Worker[testArgs]) *bundle {
	t.Helper()
	clock := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	calls := &instrument.Counts{}
	store := instrument.Wrap(localstore.New(localstore.Options{Clock: clock}), instrument.Options{Observers: []instrument.Observer{calls}})
	q := store.Queue("work")
	if err := q.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := jobs.NewRegistry(nil)
	if err := jobs.Register(reg, w); err != nil {
		t.Fatal(err)
	}
	p := &fakePoisoner{q: q}
	return &bundle{clock: clock, store: store, calls: calls, queue: q, poison: p, cfg: runner.Config{
		Queue: q, Registry: reg, Poison: p, Clock: clock,
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
func (b *bundle) start(t *testing.T) (*runner.Runner, func() error) {
	t.Helper()
	r, err := runner.New(b.cfg)
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
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan *jobs.Job[testArgs], 1)
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- job
			<-release
			return nil
		})
		b.cfg.MaxMessages = 1
		b.send(t, "op-1")
		start := b.clock.Now()
		r, errc := b.run(t)
		job := <-started
		// 96 s, more than three visibility timeouts.
		b.advanceUntil(t, 4*time.Second, 96*time.Second, func() bool { return b.clock.Now().Sub(start) >= 96*time.Second })
		if got, err := b.queue.Receive(context.Background(), 1, time.Second); err != nil || len(got) != 0 {
			t.Fatalf("another receive got %d messages (err %v) while the lease was kept; want none", len(got), err)
		}
		if n := b.calls.Snapshot()[instrument.OpUpdate].Calls; n < 3 {
			t.Fatalf("UpdateMessage called %d times in 96 s with a 30 s lease; want at least 3", n)
		}
		// The first receipt is stale now: only the newest can delete.
		if err := b.queue.DeleteMessage(context.Background(), job.Message.ID, job.Message.PopReceipt); !errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
			t.Fatalf("delete with the first receipt = %v, want ErrPopReceiptMismatch", err)
		}
		close(release)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.Succeeded != 1 {
			t.Fatalf("stats %+v; want the job succeeded", s)
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Fatalf("%d messages left after the job succeeded; want 0", n)
		}
	})
}

// TestLeaseLossCancelsHandler deletes a running message behind the
// runner's back: the next renewal fails and the handler's context ends.
func TestLeaseLossCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan *jobs.Job[testArgs], 1)
		h := &cancelled{}
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- job
			return h.Handle(ctx, job)
		})
		h.clock = b.clock
		b.cfg.MaxMessages = 1
		b.send(t, "op-1")
		start := b.clock.Now()
		r, errc := b.run(t)
		job := <-started
		if err := b.queue.DeleteMessage(context.Background(), job.Message.ID, job.Message.PopReceipt); err != nil {
			t.Fatal(err)
		}
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if took := h.at.Sub(start); took > 16*time.Second || !strings.Contains(fmt.Sprint(h.cause), "lease") {
			t.Fatalf("handler cancelled after %v with cause %v; want the lease-lost cause at the first renewal, 15 s", took, h.cause)
		}
		if s := r.Stats(); s.LeaseLost != 1 || s.Succeeded+s.Retried+s.Poisoned != 0 {
			t.Fatalf("stats %+v: a lost message must be counted lease lost, neither acknowledged, retried nor poisoned", s)
		}
	})
}

// cancelled is a handler that blocks until its context ends and records
// the cause and the clock time.
type cancelled struct {
	clock *clock.Fake
	cause error
	at    time.Time
}

func (c *cancelled) Handle(ctx context.Context, job *jobs.Job[testArgs]) error {
	<-ctx.Done()
	c.cause, c.at = context.Cause(ctx), c.clock.Now()
	return ctx.Err()
}

// TestLeaseLapseCancelsHandler: every renewal fails transiently. Once the
// clock passes the lease's end (30 s) the handler is cancelled: another
// worker may have the message by then.
func TestLeaseLapseCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &cancelled{}
		b := setup(t, h.Handle)
		h.clock = b.clock
		b.cfg.Queue = &faultyQueue{Queue: b.queue, updates: func(int) (bool, error) { return false, errInjected }}
		b.cfg.MaxMessages = 1
		start := b.clock.Now()
		b.send(t, "op-1")
		r, errc := b.run(t)
		if err := b.drive(t, errc, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if took := h.at.Sub(start); took > 30*time.Second || !strings.Contains(fmt.Sprint(h.cause), "lease") {
			t.Errorf("handler cancelled after %v with cause %v; want the lease-lost cause at the lease's end, 30 s", took, h.cause)
		}
		if s := r.Stats(); s.LeaseLost != 1 {
			t.Errorf("stats %+v; want the message counted as lease lost", s)
		}
	})
}

// TestLostRenewalReplyLogged: the first renewal goes through but its reply
// is lost; the next one finds the pop receipt changed. The lease is lost,
// and the log says the reply was probably lost.
func TestLostRenewalReplyLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &cancelled{}
		b := setup(t, h.Handle)
		h.clock = b.clock
		b.cfg.Queue = &faultyQueue{Queue: b.queue, updates: func(n int) (bool, error) {
			if n == 0 {
				return true, errInjected
			}
			return true, nil
		}}
		b.cfg.MaxMessages = 1
		logs := b.logTo()
		b.send(t, "op-1")
		r, errc := b.run(t)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if l := logs.lines("lease renewal reply probably lost"); len(l) != 1 || !strings.Contains(fmt.Sprint(h.cause), "lease") {
			t.Errorf("%d lines say the renewal reply was probably lost, handler cause %v; want 1 and the lease-lost cause", len(l), h.cause)
		}
		if s := r.Stats(); s.LeaseLost != 1 {
			t.Errorf("stats %+v; want the message counted as lease lost", s)
		}
	})
}

// TestPoisonConfirmsLease: the job fails permanently after its lease was
// taken by another worker, unnoticed so far (no renewal was due). The
// message must not be poisoned: it is live on the other worker.
func TestPoisonConfirmsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b *bundle
		b = setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			// Another worker's receive changes the pop receipt; the
			// message stays hidden for it.
			if _, err := b.queue.Update(ctx, job.Message.ID, job.Message.PopReceipt, job.Message.Text, time.Hour); err != nil {
				t.Errorf("taking the lease: %v", err)
			}
			return jobs.Permanentf("bad args")
		})
		pq := b.store.Queue("work-poison")
		pcfg := poison.Config{Tables: b.store.Tables(), Source: b.queue, Poison: pq,
			Blobs: b.store.Container("work-poison"), Clock: b.clock, Host: "w1"}
		rec, err := poison.NewRecorder(pcfg)
		if err != nil {
			t.Fatal(err)
		}
		insp, err := poison.NewInspector(pcfg)
		if err != nil {
			t.Fatal(err)
		}
		b.cfg.Poison, b.cfg.MaxMessages = rec, 1
		b.send(t, "op-1")
		r, errc := b.run(t)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.LeaseLost != 1 || s.Poisoned != 0 {
			t.Errorf("stats %+v; want the message counted as lease lost, not poisoned", s)
		}
		recs, err := insp.List(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := pq.ApproximateCount(context.Background())
		if len(recs) != 0 || n != 0 {
			t.Errorf("%d poison records (%+v) and %d poison messages; want none for a message another worker holds", len(recs), recs, n)
		}
	})
}

// TestStorageErrorsRetried: storage errors that may clear up without the
// message changing are retried, not poisoned: a table name still being
// deleted (409, but transient) and a refused credential (a role
// assignment still propagating).
func TestStorageErrorsRetried(t *testing.T) {
	for name, cause := range map[string]error{"table being deleted": storeadapter.ErrTableBeingDeleted, "forbidden": storeadapter.ErrForbidden} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
				return fmt.Errorf("write target: %w", cause)
			})
			b.send(t, "op-1")
			r, stop := b.start(t)
			defer stop()
			waitFor(t, func() bool { return r.Stats().Retried == 1 })
			if p := r.Stats().Poisoned; p != 0 {
				t.Fatalf("%v was poisoned (%d), want it retried", cause, p)
			}
		})
	}
}

// TestSuccessAfterRetryForgetsFailures: a message that fails once and then
// succeeds has its failure record dropped.
func TestSuccessAfterRetryForgetsFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, failFirst(new(atomic.Int64), errors.New("storage hiccup")))
		b.cfg.IdleMax = time.Second
		b.send(t, "op-1")
		r, stop := b.start(t)
		defer stop()
		synctest.Wait()
		if s := r.Stats(); s.Retried != 1 {
			t.Fatalf("stats %+v; want the first delivery retried", s)
		}
		b.advanceUntil(t, 100*time.Millisecond, 100*time.Second, func() bool { return r.Stats().Succeeded == 1 })
		synctest.Wait()
		b.poison.mu.Lock()
		defer b.poison.mu.Unlock()
		if b.poison.forgotten != 1 {
			t.Errorf("failure record forgotten %d times; want 1", b.poison.forgotten)
		}
	})
}

// TestMaxMessages stops after exactly MaxMessages, even below half a batch.
func TestMaxMessages(t *testing.T) {
	b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
	for i := range 6 {
		b.send(t, fmt.Sprintf("op-%d", i))
	}
	b.cfg.MaxMessages = 3
	r, err := runner.New(b.cfg)
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
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return errors.New("storage hiccup") })
		b.cfg.MaxDequeueCount = 3
		b.cfg.IdleMax = time.Second // so a poll follows every clock step below
		b.send(t, "op-1")
		r, stop := b.start(t)
		defer stop()
		for x := int64(1); x < 3; x++ {
			// The clock stands still between the failure and this point.
			synctest.Wait()
			if s := r.Stats(); s.Retried != x {
				t.Fatalf("stats %+v; want %d retried", s, x)
			}
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
			// Step until the runner polls it again.
			b.advanceUntil(t, 100*time.Millisecond, 10*time.Second, func() bool { return r.Stats().Received > x })
			if elapsed := b.clock.Now().Sub(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)); elapsed > 10*time.Second {
				t.Fatalf("message took %v of clock time to come back after failure %d", elapsed, x)
			}
		}
		synctest.Wait()
		if s := r.Stats(); s.Poisoned != 1 {
			t.Fatalf("stats %+v; want the third delivery poisoned", s)
		}
		if got := len(b.poison.attempts); got != 2 {
			t.Fatalf("%d attempts recorded before poisoning; want 2", got)
		}
		if reasons := b.poison.reasons(); !strings.Contains(reasons[0], "dequeue count 3") || !strings.Contains(reasons[0], "storage hiccup") {
			t.Fatalf("poison reason %q should give the dequeue count and the last error", reasons[0])
		}
	})
}

// TestRetryDelay checks the formula's bounds and growth.
func TestRetryDelay(t *testing.T) {
	base, maxDelay := time.Second, time.Minute
	for x := int64(1); x <= 8; x++ {
		want := float64(base) * float64(int64(1)<<x-1)
		lo, hi := time.Duration(0.8*want), time.Duration(1.2*want)
		lo, hi = min(max(lo, base), maxDelay), min(max(hi, base), maxDelay)
		for range 200 {
			if d := runner.RetryDelay(x, base, maxDelay); d < lo || d > hi {
				t.Fatalf("RetryDelay(%d) = %v, want within [%v, %v]", x, d, lo, hi)
			}
		}
	}
	if d := runner.RetryDelay(1000, base, maxDelay); d != maxDelay {
		t.Fatalf("RetryDelay(1000) = %v, want the cap %v", d, maxDelay)
	}
}

// TestPoisonOnFirstDelivery: malformed messages, permanent errors, storage
// requests the service refused (4xx) and panics go to the poison queue at
// once, and the worker keeps running.
func TestPoisonOnFirstDelivery(t *testing.T) {
	b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
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
	for _, text := range []string{"not base64 at all!", `{"v":1,"id":"x","kind":"test","args":{},"extra":1}`, `{"v":2,"id":"x","kind":"test","args":{}}`,
		`{"v":1e400,"id":"x","kind":"test","args":{}}`} {
		if _, err := b.queue.Send(context.Background(), text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, stop := b.start(t)
	waitFor(t, func() bool { s := r.Stats(); return s.Poisoned == 7 && s.Succeeded == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v after bad messages; want nil", err)
	}
	all := strings.Join(b.poison.reasons(), "\n")
	for _, want := range []string{"write to target: too large", "target table name is not allowed", "handler panic: boom", "neither JSON nor base64", "extra: unknown field", "v: must be 1",
		"v: must be an integer from -9223372036854775808 to 9223372036854775807, got 1e400"} {
		if !strings.Contains(all, want) {
			t.Errorf("poison reasons lack %q:\n%s", want, all)
		}
	}
	if r.Stats().Retried != 0 {
		t.Errorf("retried %d times; permanent failures must not be retried", r.Stats().Retried)
	}
}

// TestCredentialRefusedStopsTheRunner: a job whose storage call fails
// because the credential was refused (an expired SAS, a token that cannot
// be had) is not the message's fault and will not get better by retrying:
// the message is handed back at once with no attempt recorded, nothing is
// retried or poisoned, the runner stops receiving, and Run returns the
// error (the worker exits 1) instead of running the queue message by
// message into the poison queue.
func TestCredentialRefusedStopsTheRunner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			ran.Add(1)
			return fmt.Errorf("archive: read source: %w", storeadapter.ErrAuthentication)
		})
		b.cfg.Concurrency, b.cfg.BatchSize = 1, 1
		for _, id := range []string{"op-a", "op-b", "op-c"} {
			b.send(t, id)
		}
		r, errc := b.run(t)
		err := b.drive(t, errc, time.Second)
		if !errors.Is(err, storeadapter.ErrAuthentication) {
			t.Fatalf("Run = %v; want the credential's error", err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.StopReason != "credential refused" || s.Released != 1 || s.Retried != 0 || s.Poisoned != 0 || ran.Load() != 1 {
			t.Errorf("stats %+v, %d jobs ran; want one job run and released, nothing retried or poisoned, stop reason \"credential refused\"", s, ran.Load())
		}
		if len(b.poison.attempts) != 0 {
			t.Errorf("%d attempts recorded; a refused credential is not the message's failure", len(b.poison.attempts))
		}
		msgs, err := b.queue.Receive(context.Background(), 32, time.Second)
		if err != nil || len(msgs) != 3 {
			t.Fatalf("after the stop, a receive got %d messages (err %v); want all 3 visible", len(msgs), err)
		}
	})
}

// TestDrain returns once the queue is empty and every message handled.
func TestDrain(t *testing.T) {
	b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		b.send(t, "op-"+id)
	}
	b.cfg.Drain = true
	r, err := runner.New(b.cfg)
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

// TestShutdownLetsRunningJobFinish cancels Run while a job runs: Run
// waits for it (it has not returned while the job still runs, after the
// shutdown began), the job finishes within the grace period and its
// message is deleted. A second message, received but waiting for the one
// slot, is released unstarted, and its outcome carries ClassNone, so a
// metrics observer never counts it as a success.
func TestShutdownLetsRunningJobFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 2)
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		obs := &events{}
		b.cfg.Observers, b.cfg.Concurrency = []runner.Observer{obs}, 1
		b.send(t, "op-1")
		b.send(t, "op-2")
		r, stop := b.start(t)
		<-started
		synctest.Wait() // op-2 waits behind op-1, received and held
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		synctest.Wait() // the shutdown has begun: Run waits for the job
		select {
		case err := <-errc:
			t.Fatalf("Run returned (%v) while its job still ran", err)
		default:
		}
		if n := r.Running(); n != 1 {
			t.Fatalf("Running = %d during the shutdown, want the 1 job", n)
		}
		close(release)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.Succeeded != 1 || s.Released != 1 || s.StopReason != "shutdown" {
			t.Fatalf("stats %+v; want the running job to finish during shutdown and the waiting one released", s)
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 1 {
			t.Fatalf("%d messages left; want the finished job's deleted and the released one back", n)
		}
		obs.releasedUnstarted(t)
	})
}

// releasedUnstarted checks that every Released event heard is of a
// message that did not run: class none.
func (o *events) releasedUnstarted(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.all {
		if e.Type == runner.Released && e.Class != runner.ClassNone {
			t.Errorf("an unstarted message's Released event has class %v, want none", e.Class)
		}
	}
}

// TestShutdownGraceExpiryCancelsHandlers: a job still running when the
// grace period ends is cancelled; its message is released at once (visible
// again, no attempt counted) and Run returns.
func TestShutdownGraceExpiryCancelsHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &cancelled{}
		started := make(chan struct{}, 1)
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- struct{}{}
			return h.Handle(ctx, job)
		})
		h.clock = b.clock
		b.send(t, "op-1")
		r, stop := b.start(t)
		<-started
		begun := b.clock.Now()
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		if err := b.drive(t, errc, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if took := h.at.Sub(begun); took < b.cfg.ShutdownGrace || took > b.cfg.ShutdownGrace+5*time.Second || !errors.Is(h.cause, context.Canceled) {
			t.Errorf("handler cancelled %v after the shutdown with cause %v; want the grace period, %v, and context.Canceled", took, h.cause, b.cfg.ShutdownGrace)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Released != 1 || s.Retried+s.Poisoned+s.Abandoned != 0 {
			t.Errorf("stats %+v; want the cancelled job's message released", s)
		}
		if got, err := b.queue.Receive(context.Background(), 1, time.Second); err != nil || len(got) != 1 {
			t.Errorf("receive after the shutdown got %d messages (err %v); want the released one, visible at once", len(got), err)
		}
		if len(b.poison.attempts) != 0 {
			t.Errorf("%d attempts recorded; a job cancelled by shutdown counts none", len(b.poison.attempts))
		}
	})
}

// TestTransientRenewalFailureRetried: the first renewal fails transiently;
// the keeper tries again before the lease ends, the lease holds, and the
// job succeeds.
func TestTransientRenewalFailureRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b *bundle
		b = setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			select { // longer than a visibility timeout
			case <-b.clock.After(40 * time.Second):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		b.cfg.Queue = &faultyQueue{Queue: b.queue, updates: func(n int) (bool, error) {
			if n == 0 {
				return false, errInjected
			}
			return true, nil
		}}
		b.cfg.MaxMessages = 1
		logs := b.logTo()
		b.send(t, "op-1")
		r, errc := b.run(t)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.Succeeded != 1 || s.LeaseLost != 0 {
			t.Errorf("stats %+v; want the job succeeded, its lease kept", s)
		}
		if l := logs.lines("lease renewal failed; retrying"); len(l) != 1 {
			t.Errorf("%d lines say a renewal failed; want 1", len(l))
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Errorf("%d messages left; want the job's deleted with the renewed receipt", n)
		}
	})
}

// slowWorker is a test kind's worker with a maximum run time whose jobs
// wait for their context, or, when stubborn, ignore it until released.
type slowWorker struct {
	maxRunTime time.Duration
	stubborn   bool
	release    chan struct{}
	cause      error
}

func (w *slowWorker) MaxRunTime() time.Duration { return w.maxRunTime }

func (w *slowWorker) Work(ctx context.Context, job *jobs.Job[testArgs]) error {
	if w.stubborn {
		<-w.release
		return nil
	}
	<-ctx.Done()
	w.cause = context.Cause(ctx)
	return ctx.Err()
}

// events is an observer that records every event.
type events struct {
	mu  sync.Mutex
	all []runner.Event
}

func (o *events) Observe(_ context.Context, e runner.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, e)
}

// types returns the event types recorded, compacting repeated lease
// renewals into one.
func (o *events) types() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	for _, e := range o.all {
		if n := e.Type.String(); len(names) == 0 || names[len(names)-1] != n {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

// TestMaxRunTimeCancelsHandler: a job past its kind's maximum run time is
// cancelled with that cause and retried as a transient failure; its lease
// is renewed until then, and no longer. Observers see each step.
func TestMaxRunTimeCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &slowWorker{maxRunTime: 2 * time.Minute}
		b := setupWorker(t, w)
		obs := &events{}
		b.cfg.Observers = []runner.Observer{obs}
		b.cfg.MaxMessages = 1
		logs := b.logTo()
		b.send(t, "op-1")
		start := b.clock.Now()
		r, errc := b.run(t)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fmt.Sprint(w.cause), "maximum run time") {
			t.Errorf("handler cause %v; want the maximum run time", w.cause)
		}
		if s := r.Stats(); s.Retried != 1 {
			t.Errorf("stats %+v; want the job retried", s)
		}
		if l := logs.lines("job failed; will retry"); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["err"]), "maximum run time") {
			t.Errorf("retry lines %v; want one naming the maximum run time", l)
		}
		if got, want := obs.types(), "received, started, lease renewed, finished, retried"; got != want {
			t.Errorf("events %q, want %q", got, want)
		}
		for _, e := range obs.all {
			if e.Type == runner.LeaseRenewed && e.Message.ID == "" {
				t.Errorf("a lease renewal event without its message: %+v", e)
			}
			if e.Type == runner.Finished && (e.Class != runner.ClassTransient || e.Duration != 2*time.Minute || e.Envelope.ID != "op-1") {
				t.Errorf("finished event %+v; want class transient after 2m for op-1", e)
			}
		}
		if last := b.clock.Now().Sub(start); last > 3*time.Minute {
			t.Errorf("Run ended %v after the start; want soon after the 2 min maximum", last)
		}
	})
}

// TestMaxRunTimeLeavesStubbornHandler: a handler that ignores the
// cancellation at its maximum run time is left behind: its message is
// retried and no longer kept hidden, so it cannot hold its lease forever.
func TestMaxRunTimeLeavesStubbornHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &slowWorker{maxRunTime: time.Minute, stubborn: true, release: make(chan struct{})}
		b := setupWorker(t, w)
		b.cfg.MaxMessages = 1
		logs := b.logTo()
		b.send(t, "op-1")
		r, errc := b.run(t)
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.Retried != 1 {
			t.Errorf("stats %+v; want the job retried", s)
		}
		if l := logs.lines("job failed; will retry"); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["err"]), "left behind") {
			t.Errorf("retry lines %v; want one saying the handler was left behind", l)
		}
		renewals := b.calls.Snapshot()[instrument.OpUpdate].Calls
		b.clock.Advance(10 * time.Minute)
		synctest.Wait()
		if n := b.calls.Snapshot()[instrument.OpUpdate].Calls; n != renewals {
			t.Errorf("%d more updates after the job was left behind; want its lease no longer renewed", n-renewals)
		}
		close(w.release)
		synctest.Wait()
	})
}

// TestLeftBehindHandlerHoldsItsSlot: with Concurrency 1, a handler left
// behind at its maximum run time still runs, so the next message does not
// start until it returns; then it does, and Run is never held up by it.
func TestLeftBehindHandlerHoldsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &stuckOnce{release: make(chan struct{}), started: make(chan string, 4)}
		b := setupWorker(t, w)
		b.cfg.Concurrency, b.cfg.MaxMessages = 1, 2
		b.send(t, "op-stuck")
		r, errc := b.run(t)
		if got := <-w.started; got != "op-stuck" {
			t.Fatalf("first job %s, want op-stuck", got)
		}
		b.send(t, "op-next")
		// Past the maximum run time, the abandon wait and far beyond.
		for range 600 {
			synctest.Wait()
			b.clock.Advance(time.Second)
		}
		synctest.Wait()
		if s := r.Stats(); s.Retried != 1 {
			t.Errorf("stats %+v; want op-stuck retried once it was left behind", s)
		}
		select {
		case got := <-w.started:
			t.Fatalf("%s started while the left-behind handler still ran with Concurrency 1", got)
		default:
		}
		close(w.release)
		var err error
		b.advanceUntil(t, time.Second, time.Hour, func() bool {
			select {
			case err = <-errc:
				return true
			default:
				return false
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-w.started; got != "op-next" {
			t.Errorf("second job %s, want op-next once the left-behind handler returned", got)
		}
	})
}

// stuckOnce ignores its cancellation on its first job until release, and
// runs every other job at once.
type stuckOnce struct {
	release chan struct{}
	started chan string
	calls   atomic.Int32
}

func (w *stuckOnce) MaxRunTime() time.Duration { return time.Minute }

func (w *stuckOnce) Work(ctx context.Context, job *jobs.Job[testArgs]) error {
	w.started <- job.ID
	if w.calls.Add(1) == 1 {
		<-w.release
	}
	return nil
}

// TestTraceParentOnContext: the envelope's traceparent reaches the handler.
func TestTraceParentOnContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		var got string
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			got = jobs.TraceParent(ctx)
			return nil
		})
		text, err := jobs.Encode(jobs.Envelope{V: 1, ID: "op-1", Kind: "test", Args: json.RawMessage(`{}`), TraceParent: tp})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.queue.Send(context.Background(), text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
		b.drain(t, time.Second)
		if got != tp {
			t.Fatalf("TraceParent(ctx) = %q, want %q", got, tp)
		}
	})
}

// TestAbandonedJobsCounted: a handler ignores cancellation at shutdown.
// Run gives up on it after the grace period and returns with every
// received message in one outcome: the ignored one counts as abandoned.
func TestAbandonedJobsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			close(started)
			<-release
			return nil
		})
		b.send(t, "op-stubborn")
		r, stop := b.start(t)
		<-started
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Abandoned != 1 || s.StopReason != "shutdown" {
			t.Errorf("stats %+v; want the running job counted as abandoned", s)
		}
		close(release) // the handler ends late: the final counts stay
		synctest.Wait()
		if late := r.Stats(); late != s {
			t.Errorf("stats changed after Run returned: %+v, then %+v", s, late)
		}
	})
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

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct{ syncbuf.Buffer }

// lines returns the JSON log lines whose msg starts with prefix.
func (b *syncBuffer) lines(prefix string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(fmt.Sprint(m["msg"]), prefix) {
			out = append(out, m)
		}
	}
	return out
}

// logTo makes the runner log JSON into a buffer it returns.
func (b *bundle) logTo() *syncBuffer {
	buf := &syncBuffer{}
	b.cfg.Logger = slog.New(slog.NewJSONHandler(buf, nil))
	return buf
}

// run starts a runner on b.cfg and returns it with the channel Run's
// error arrives on.
func (b *bundle) run(t *testing.T) (*runner.Runner, <-chan error) {
	t.Helper()
	r, err := runner.New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	return r, errc
}

// advanceUntil moves the fake clock on in steps until cond holds. Before
// each look at cond it waits until every goroutine of the bubble is blocked
// (synctest.Wait): the clock never moves while the runner works, so every
// run of a test sees the same clock times. It fails the test once limit of
// clock time has passed (a runner stuck on anything but the clock gets
// there at once). Call it inside synctest.Test.
func (b *bundle) advanceUntil(t *testing.T, step, limit time.Duration, cond func() bool) {
	t.Helper()
	for moved := time.Duration(0); ; moved += step {
		synctest.Wait()
		if cond() {
			return
		}
		if moved >= limit {
			t.Fatalf("condition not reached within %v of clock time", limit)
		}
		b.clock.Advance(step)
	}
}

// drive moves the fake clock on in steps (the runner waits on it for
// backoffs, retries and leases) until Run's error arrives on errc, and
// returns it; see advanceUntil. It fails the test if Run has not returned
// within 3 h of clock time.
func (b *bundle) drive(t *testing.T, errc <-chan error, step time.Duration) error {
	t.Helper()
	var err error
	b.advanceUntil(t, step, 3*time.Hour, func() bool {
		select {
		case err = <-errc:
			return true
		default:
			return false
		}
	})
	return err
}

// drain runs a runner on b.cfg (with Drain) to its end, driving the clock,
// fails the test unless Run returns nil and every received message ended
// in one outcome, and returns the runner's stats.
func (b *bundle) drain(t *testing.T, step time.Duration) runner.Stats {
	t.Helper()
	b.cfg.Drain = true
	r, errc := b.run(t)
	if err := b.drive(t, errc, step); err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	checkAddsUp(t, s)
	return s
}

// checkAddsUp checks that every received message ended in one outcome.
func checkAddsUp(t *testing.T, s runner.Stats) {
	t.Helper()
	if sum := s.Succeeded + s.Continued + s.Retried + s.Poisoned + s.LeaseLost + s.Released + s.AckFailed + s.Abandoned; sum != s.Received {
		t.Errorf("stats %+v: outcomes add up to %d, but %d messages were received", s, sum, s.Received)
	}
}

// faultyQueue wraps a queue: receive, when set, may fail a receive after
// the service hid the batch (as Azurite does for a message it cannot
// render). With flakyAcks, the first update of each message fails, and
// of each message's deletes the first fails and the second is carried out
// but answers an error, as when the reply is lost. Otherwise updates, when
// set, decides each update of a message by its number (0 first): whether
// it is carried out, and the error it answers.
type faultyQueue struct {
	storeadapter.Queue
	receive   func(msgs []storeadapter.Message) error
	flakyAcks bool
	updates   func(n int) (apply bool, err error)
	mu        sync.Mutex
	calls     map[string]int // "op id" -> calls so far
}

// call counts a call of op on message id and returns how many came before.
func (q *faultyQueue) call(op, id string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.calls == nil {
		q.calls = map[string]int{}
	}
	q.calls[op+" "+id]++
	return q.calls[op+" "+id] - 1
}

var errInjected = fmt.Errorf("injected: connection reset: %w", storeadapter.ErrUnavailable)

func (q *faultyQueue) Receive(ctx context.Context, n int, vis time.Duration) ([]storeadapter.Message, error) {
	msgs, err := q.Queue.Receive(ctx, n, vis)
	if err == nil && q.receive != nil {
		if err = q.receive(msgs); err != nil {
			return nil, err
		}
	}
	return msgs, err
}

func (q *faultyQueue) Update(ctx context.Context, id, receipt, text string, vis time.Duration) (storeadapter.Receipt, error) {
	if q.flakyAcks && q.call("update", id) == 0 {
		return storeadapter.Receipt{}, errInjected
	}
	if q.updates == nil {
		return q.Queue.Update(ctx, id, receipt, text, vis)
	}
	apply, err := q.updates(q.call("update", id))
	if apply {
		rc, uerr := q.Queue.Update(ctx, id, receipt, text, vis)
		if err == nil {
			return rc, uerr
		}
	}
	return storeadapter.Receipt{}, err
}

func (q *faultyQueue) DeleteMessage(ctx context.Context, id, receipt string) error {
	if !q.flakyAcks {
		return q.Queue.DeleteMessage(ctx, id, receipt)
	}
	switch q.call("delete", id) {
	case 0:
		return errInjected
	case 1:
		if err := q.Queue.DeleteMessage(ctx, id, receipt); err != nil {
			return err
		}
		return errInjected
	}
	return q.Queue.DeleteMessage(ctx, id, receipt)
}

// TestLostDeleteReplyCountsSucceeded: a delete whose reply is lost is
// retried; its 404 means done, so the message counts as succeeded, and a
// failure record that cannot be dropped at once is dropped on a retry.
func TestLostDeleteReplyCountsSucceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			if calls.Add(1) == 1 {
				return fmt.Errorf("read source: %w", storeadapter.ErrUnavailable)
			}
			return nil
		})
		b.cfg.Queue = &faultyQueue{Queue: b.queue, flakyAcks: true}
		b.poison.forgetFaults = 1
		logs := b.logTo()
		b.send(t, "op-1")
		s := b.drain(t, 100*time.Millisecond)
		if s.Succeeded != 1 || s.Retried != 1 || s.AckFailed != 0 {
			t.Errorf("stats %+v; want 1 retried, then 1 succeeded although the delete's reply was lost", s)
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Errorf("%d messages left; want 0", n)
		}
		if b.poison.forgotten != 1 {
			t.Errorf("failure record forgotten %d times; want 1 (the first try failed)", b.poison.forgotten)
		}
		if l := logs.lines("job done but"); len(l) != 0 {
			t.Errorf("logged %v; the delete was retried and went through", l)
		}
	})
}

// TestOutcomesAddUpUnderFaults fails the first update and delete of every
// message, loses the reply of its second delete, and checks that every
// message ends in exactly one outcome: each good message succeeds once, each failing one is
// poisoned once, and the queue ends empty.
func TestOutcomesAddUpUnderFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			switch {
			case strings.HasPrefix(job.ID, "flaky"):
				return fmt.Errorf("target: %w", storeadapter.ErrUnavailable)
			case strings.HasPrefix(job.ID, "bad"):
				return jobs.Permanentf("bad args")
			}
			return nil
		})
		b.cfg.Queue = &faultyQueue{Queue: b.queue, flakyAcks: true}
		b.cfg.MaxDequeueCount = 3
		want := map[string]int{"ok": 20, "flaky": 5, "bad": 5}
		for prefix, k := range want {
			for i := range k {
				b.send(t, fmt.Sprintf("%s-%d", prefix, i))
			}
		}
		s := b.drain(t, 500*time.Millisecond)
		if s.Succeeded != int64(want["ok"]) || s.Poisoned != int64(want["flaky"]+want["bad"]) {
			t.Errorf("stats %+v; want %d succeeded and %d poisoned", s, want["ok"], want["flaky"]+want["bad"])
		}
		if left, _ := b.queue.ApproximateCount(context.Background()); left != 0 || s.StopReason != "drained" || s.Left != 0 {
			t.Errorf("%d messages left, stop reason %q, Left %d; want an empty, drained queue", left, s.StopReason, s.Left)
		}
	})
}

// TestOverDeliveredPoisonKeepsContext: a message past the maximum dequeue
// count is poisoned with its op id and kind and with the last recorded
// error in the reason.
func TestOverDeliveredPoisonKeepsContext(t *testing.T) {
	b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
		t.Errorf("handler ran for a message past the maximum dequeue count")
		return nil
	})
	b.cfg.MaxDequeueCount = 2
	b.send(t, "op-stuck")
	for range 2 { // two deliveries that crashed, say
		msgs, err := b.queue.Receive(context.Background(), 1, time.Second)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %d messages, %v", len(msgs), err)
		}
		b.poison.attempts = append(b.poison.attempts, poison.Failure{MessageID: msgs[0].ID,
			Attempt: poison.Attempt{DequeueCount: msgs[0].DequeueCount, Host: "w1", Error: "write target: HTTP 503 ServerBusy"}})
		b.clock.Advance(time.Second)
	}
	logs := b.logTo()
	r, stop := b.start(t)
	waitFor(t, func() bool { return r.Stats().Poisoned == 1 })
	stop()
	f := b.poison.movedF[0]
	if f.OpID != "op-stuck" || f.Kind != "test" {
		t.Errorf("poisoned with op id %q and kind %q; want op-stuck and test", f.OpID, f.Kind)
	}
	if reason := b.poison.reasons()[0]; !strings.Contains(reason, "delivered 3 times") || !strings.Contains(reason, "HTTP 503 ServerBusy") {
		t.Errorf("reason %q should give the delivery count and the last recorded error", reason)
	}
	if l := logs.lines("job poisoned"); len(l) != 1 || l[0]["op_id"] != "op-stuck" || l[0]["kind"] != "test" {
		t.Errorf("job poisoned lines %v; want one with op_id and kind", l)
	}
}

// badText stands for a message the service stores but cannot return.
const badText = "bad-message"

// TestReceiveBatchShrinksPastBadMessage: every receive whose batch holds
// one bad message fails after hiding the batch. The runner logs each
// failure with its backoff and shrinks the batch, so the other messages
// still run and the drain ends.
func TestReceiveBatchShrinksPastBadMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
		for i := range 20 {
			b.send(t, fmt.Sprintf("op-%d", i))
			if i == 3 {
				if _, err := b.queue.Send(context.Background(), badText, storeadapter.SendOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		b.cfg.Queue = &faultyQueue{Queue: b.queue, receive: func(msgs []storeadapter.Message) error {
			for _, m := range msgs {
				if m.Text == badText {
					return fmt.Errorf("receive: 500 InternalError: %w", storeadapter.ErrUnavailable)
				}
			}
			return nil
		}}
		logs := b.logTo()
		s := b.drain(t, 500*time.Millisecond)
		if s.Succeeded != 20 || s.StopReason != "drained" || s.Left != 1 {
			t.Errorf("stats %+v; want the 20 good messages succeeded and a drain that ends with the bad one left", s)
		}
		failed := logs.lines("receive failed")
		if int64(len(failed)) != s.ReceiveFailures || len(failed) == 0 {
			t.Fatalf("%d receive failures logged, %d counted; want every one logged", len(failed), s.ReceiveFailures)
		}
		if failed[0]["retry_in"] == nil || failed[0]["next_batch"] == nil {
			t.Errorf("receive failure line %v lacks retry_in or next_batch", failed[0])
		}
	})
}

// TestDrainEndsWithInvisibleLeftovers: the count still holds a message
// another worker keeps and an expired one; the drain ends once nothing has
// been visible for DrainQuiet and says how many were left.
func TestDrainEndsWithInvisibleLeftovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
		ctx := context.Background()
		b.send(t, "op-elsewhere")
		if msgs, err := b.queue.Receive(ctx, 1, 24*time.Hour); err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %d, %v", len(msgs), err)
		}
		if _, err := b.queue.Send(ctx, "expiring", storeadapter.SendOptions{VisibilityDelay: time.Minute, TTL: time.Minute + time.Second}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			b.send(t, fmt.Sprintf("op-%d", i))
		}
		b.cfg.DrainQuiet = 5 * time.Minute
		logs := b.logTo()
		start := b.clock.Now()
		// The expiring message is visible for one second, [1m, 1m1s): 7 s
		// steps of the clock (…, 56 s, 63 s, …) never land in it, so it expires
		// unseen whatever the runner's poll times are.
		s := b.drain(t, 7*time.Second)
		if s.Succeeded != 3 || s.StopReason != "drained" || s.Left != 2 {
			t.Errorf("stats %+v; want 3 succeeded and a drain that ends with 2 left (one held elsewhere, one expired)", s)
		}
		if took := b.clock.Now().Sub(start); took < 5*time.Minute || took > 6*time.Minute {
			t.Errorf("the drain ended after %v of clock time; want the quiet period, 5 min", took)
		}
		if l := logs.lines("queue drained"); len(l) != 1 || l[0]["invisible"] != 2.0 {
			t.Errorf("drain lines %v; want one saying 2 invisible", l)
		}
	})
}

// TestDrainWaitsForOwnRetry: a job that runs longer than DrainQuiet and
// then fails transiently is retried by the same drain. The quiet period
// runs from the failure, not from the message's arrival.
func TestDrainWaitsForOwnRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var b *bundle
		b = setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			if calls.Add(1) > 1 {
				return nil
			}
			select {
			case <-b.clock.After(3 * time.Minute):
			case <-ctx.Done():
				return ctx.Err()
			}
			return fmt.Errorf("write target: %w", storeadapter.ErrUnavailable)
		})
		b.send(t, "op-slow")
		s := b.drain(t, time.Second)
		if s.Retried != 1 || s.Succeeded != 1 || s.StopReason != "drained" || s.Left != 0 {
			t.Errorf("stats %+v; want the retry run by the same drain: 1 retried, 1 succeeded, nothing left", s)
		}
	})
}

// unreturnable is a queue whose service fails every receive that would
// return the message with text "UNRETURNABLE" (HTTP 500), after hiding
// the messages it took, as Azurite does for text it cannot write.
type unreturnable struct{ storeadapter.Queue }

func (q unreturnable) Receive(ctx context.Context, n int, visibility time.Duration) ([]storeadapter.Message, error) {
	msgs, err := q.Queue.Receive(ctx, n, visibility)
	for _, m := range msgs {
		if m.Text == "UNRETURNABLE" {
			return nil, fmt.Errorf("azstore: receive from queue work: %w (HTTP 500 )", storeadapter.ErrServiceFailed)
		}
	}
	return msgs, err
}

// TestDrainWithUnreturnableMessage: a message the service fails every
// receive of (Azurite's HTTP 500 for a raw U+0001) does not let a drain
// report success while it stays on the queue: the runner receives one
// message at a time after the failure, so the good messages around it
// run, says that the queue holds a message it cannot return, and Run
// returns an error saying so (the worker exits 1), with the count left.
func TestDrainWithUnreturnableMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
		b.send(t, "op-a")
		if _, err := b.queue.Send(context.Background(), "UNRETURNABLE", storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
		b.send(t, "op-b")
		b.send(t, "op-c")
		b.cfg.Queue, b.cfg.Visibility, b.cfg.IdleMax = unreturnable{b.queue}, 2*time.Second, time.Second
		logs := b.logTo()
		b.cfg.Drain = true
		r, errc := b.run(t)
		err := b.drive(t, errc, 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "drain incomplete: queue work: its approximate count is still 1") ||
			!strings.Contains(err.Error(), "receiving one message: the queue holds a message the service cannot return") {
			t.Fatalf("Run = %v; want the drain incomplete, naming the message the service cannot return", err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Succeeded != 3 || s.StopReason != "drain incomplete" || s.Left != 1 {
			t.Errorf("stats %+v; want the 3 good messages run, stop reason \"drain incomplete\", 1 left", s)
		}
		if len(logs.lines("the queue service failed to return a message (HTTP 500 on a receive of one): "+
			"the queue holds a message it cannot return; the failed receive hid it for the visibility timeout, "+
			"and every receive that would return it fails the same way")) == 0 {
			t.Errorf("no line says the queue holds a message the service cannot return")
		}
	})
}

// TestReceiveOutageEndsRun: every receive fails. The first failure is
// logged at once with its backoff, every later one too, and Run returns an
// error once receives have failed for ReceiveOutage.
func TestReceiveOutageEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
		store := instrument.Wrap(localstore.New(localstore.Options{Clock: clock}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
			if c.Op == instrument.OpReceive {
				return fmt.Errorf("dial tcp 127.0.0.1:1: connection refused: %w", storeadapter.ErrUnavailable)
			}
			return nil
		}})
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
		q := store.Queue("work")
		if err := q.Create(context.Background()); err != nil {
			t.Fatal(err)
		}
		b.clock, b.cfg.Clock, b.cfg.Queue, b.cfg.Drain, b.cfg.ReceiveOutage = clock, clock, q, true, time.Minute
		logs := b.logTo()
		r, errc := b.run(t)
		waitFor(t, func() bool { return len(logs.lines("receive failed")) == 1 }) // the clock has not moved
		if l := logs.lines("receive failed")[0]; l["retry_in"] == nil || !strings.Contains(fmt.Sprint(l["err"]), "connection refused") {
			t.Errorf("first receive failure line %v; want the error and retry_in", l)
		}
		err := b.drive(t, errc, time.Second)
		if err == nil || !strings.Contains(err.Error(), "in a row for 1m") {
			t.Errorf("Run = %v; want an error saying receives failed for 1m", err)
		}
		if took := clock.Now().Sub(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)); took > time.Minute+time.Second {
			t.Errorf("Run ended after %v of failing receives; want about the 1m limit", took)
		}
		if s := r.Stats(); s.StopReason != "receive failing" || int(s.ReceiveFailures) != len(logs.lines("receive failed"))+1 {
			t.Errorf("stats %+v with %d failure lines; want stop reason \"receive failing\" and every failure but the last (reported by Run) logged", s, len(logs.lines("receive failed")))
		}
	})
}

// TestHungReceivesEndWithinOutage: receives that never answer (an endpoint
// that accepts connections and stays silent) are each bounded by what is
// left of the outage, so Run returns within ReceiveOutage, counted from the
// first failure or, when the caller says storage failed before Run (the
// worker's queue creation at start), from then. On the wall clock: the
// bound of a receive is real time.
func TestHungReceivesEndWithinOutage(t *testing.T) {
	for _, before := range []time.Duration{0, 700 * time.Millisecond} {
		t.Run(fmt.Sprintf("failing %v before Run", before), func(t *testing.T) {
			hung := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
				if c.Op == instrument.OpReceive {
					<-ctx.Done()
					return fmt.Errorf("no answer: %w: %w", storeadapter.ErrUnavailable, ctx.Err())
				}
				return nil
			}})
			b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
			b.cfg.Clock, b.cfg.Queue, b.cfg.Drain, b.cfg.ReceiveOutage = clock.Real{}, hung.Queue("work"), true, 2*time.Second
			r, err := runner.New(b.cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if before > 0 {
				r.StorageFailingSince(start.Add(-before))
			}
			errc := make(chan error, 1)
			go func() { errc <- r.Run(context.Background()) }()
			select {
			case err := <-errc:
				took := time.Since(start)
				if err == nil || !strings.Contains(err.Error(), "failed") {
					t.Fatalf("Run = %v; want the outage's error", err)
				}
				if limit := b.cfg.ReceiveOutage - before + 300*time.Millisecond; took > limit || took < b.cfg.ReceiveOutage-before-300*time.Millisecond {
					t.Errorf("Run returned after %v; want about %v (the outage, counted from %v before Run)", took.Round(time.Millisecond), b.cfg.ReceiveOutage-before, before)
				}
			case <-time.After(8 * time.Second):
				t.Fatal("Run has not returned 8 s into a 2 s receive outage")
			}
		})
	}
}

// TestSetResultLogged: what a handler reports with SetResult appears on its
// "job done" line, with its op id and kind.
func TestSetResultLogged(t *testing.T) {
	b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
		jobs.SetResult(ctx, "moved 3 entities")
		return nil
	})
	logs := b.logTo()
	b.send(t, "op-1")
	jobs.SetResult(context.Background(), "outside a job: ignored")
	r, stop := b.start(t)
	waitFor(t, func() bool { return r.Stats().Succeeded == 1 })
	stop()
	l := logs.lines("job done")
	if len(l) != 1 || l[0]["result"] != "moved 3 entities" || l[0]["op_id"] != "op-1" || l[0]["kind"] != "test" {
		t.Errorf("job done lines %v; want one with result, op_id and kind", l)
	}
}

// TestLastLoop: LastLoop is zero before Run, follows the idle polls of an
// empty queue (never older than one IdleMax wait plus the step), and while
// the loop waits for a running job to free a slot it is the clock's now,
// however long that job runs.
func TestLastLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			<-release
			return nil
		})
		b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.IdleMax = 1, 1, 2*time.Second
		r, err := runner.New(b.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !r.LastLoop().IsZero() {
			t.Fatalf("LastLoop before Run = %v, want zero", r.LastLoop())
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		for range 20 { // 10 s of idle polls
			b.clock.Advance(500 * time.Millisecond)
			synctest.Wait()
			if age := b.clock.Now().Sub(r.LastLoop()); age > b.cfg.IdleMax+500*time.Millisecond {
				t.Fatalf("idle loop: LastLoop is %v old, want at most IdleMax (%v) plus the step", age, b.cfg.IdleMax)
			}
		}
		b.send(t, "op-1")
		b.send(t, "op-2")
		b.advanceUntil(t, 500*time.Millisecond, time.Minute, func() bool { return r.Running() == 1 })
		for range 10 { // 10 min with the only slot taken: the loop waits for it
			b.clock.Advance(time.Minute)
			synctest.Wait()
			if got := r.LastLoop(); !got.Equal(b.clock.Now()) {
				t.Fatalf("waiting for a slot: LastLoop = %v, want now (%v)", got, b.clock.Now())
			}
		}
		close(release)
		cancel()
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
