package client

import (
	"context"
	"errors"
	"fmt"
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
)

// probeArgs is a job kind of these tests: its worker records that it ran.
type probeArgs struct {
	N int `json:"n"`
}

func (probeArgs) Kind() string    { return "probe" }
func (probeArgs) Validate() error { return nil }

const (
	txTable  = "Employees"
	txWindow = 30 * time.Second
	txHold   = time.Minute
)

var (
	errInjected = fmt.Errorf("injected: %w", storeadapter.ErrUnavailable)
	errCrashed  = errors.New("the process is dead")
)

// plan decides the faults of one side (the producer's or the worker's
// storage calls), counting its calls from 1.
type plan struct {
	clk *clock.Fake
	// at is the call the fault hits (0: none), mode how:
	//	fail        the call fails, not carried out (a transient error)
	//	lost        the call is carried out, its reply lost (a transient error)
	//	crash       the process dies before the call: it and every later call fail
	//	crash-after the process dies right after the call: every later call fails
	//	stall       the clock moves on by the window before the call
	at            int64
	mode          string
	before, after atomic.Int64
}

func (p *plan) options() instrument.Options {
	return instrument.Options{
		Fault: func(_ context.Context, c instrument.Call) error {
			i := p.before.Add(1)
			switch {
			case p.at == 0:
			case p.mode == "fail" && i == p.at:
				return errInjected
			case p.mode == "crash" && i >= p.at, p.mode == "crash-after" && i > p.at:
				return errCrashed
			case p.mode == "stall" && i == p.at:
				p.clk.Advance(txWindow)
			}
			return nil
		},
		After: func(_ context.Context, c instrument.Call, err error) error {
			if i := p.after.Add(1); p.mode == "lost" && i == p.at && err == nil {
				return errInjected
			}
			return err
		},
	}
}

// world is a store on a fake clock, a producer's client and a worker's
// runner on it, and the record of the probe jobs that ran.
type world struct {
	t        *testing.T
	clk      *clock.Fake
	raw      *localstore.Store
	producer *plan
	worker   *plan
	c        *Client
	mu       sync.Mutex
	ran      map[string]int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, clk: clock.NewFake(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)), ran: map[string]int{}}
	w.raw = localstore.New(localstore.Options{Clock: w.clk})
	w.producer, w.worker = &plan{clk: w.clk}, &plan{clk: w.clk}
	ctx := context.Background()
	if err := w.raw.Tables().CreateTable(ctx, txTable); err != nil {
		t.Fatal(err)
	}
	if err := w.raw.Queue("work").Create(ctx); err != nil {
		t.Fatal(err)
	}
	var err error
	w.c, err = New(Config{Store: instrument.Wrap(w.raw, w.producer.options()), Queue: "work", Window: txWindow, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.RegisterArgs[probeArgs](w.c.reg); err != nil {
		t.Fatal(err)
	}
	return w
}

// commit commits a Tx that inserts employee rk and enqueues two probe
// jobs, op-<rk>-a and op-<rk>-b.
func (w *world) commit(rk string) (TxResult, error) {
	tx := w.c.Tx(txTable, "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "Sales", RowKey: rk, Properties: map[string]any{"Name": "Jones"}}})
	tx.Enqueue(probeArgs{N: 1}, ID("op-"+rk+"-a"))
	tx.Enqueue(probeArgs{N: 2}, ID("op-"+rk+"-b"))
	return tx.Commit(context.Background())
}

// committed reports whether employee rk's transaction committed.
func (w *world) committed(rk string) bool {
	_, err := w.raw.Tables().GetEntity(context.Background(), txTable, "Sales", rk)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		w.t.Fatal(err)
	}
	return err == nil
}

// runner returns a draining runner on the worker's plan.
func (w *world) runner() *runner.Runner {
	w.t.Helper()
	s := instrument.Wrap(w.raw, w.worker.options())
	reg := jobs.NewRegistry(nil)
	err := jobs.Register(reg, jobs.WorkFunc[probeArgs](func(_ context.Context, job *jobs.Job[probeArgs]) error {
		w.mu.Lock()
		w.ran[job.ID]++
		w.mu.Unlock()
		return nil
	}))
	if err != nil {
		w.t.Fatal(err)
	}
	rec, err := poison.NewRecorder(poison.Config{Tables: s.Tables(), Source: s.Queue("work"), Poison: s.Queue("work-poison"), Blobs: s.Container("work-poison"), Clock: w.clk})
	if err != nil {
		w.t.Fatal(err)
	}
	r, err := runner.New(runner.Config{Queue: s.Queue("work"), Tables: s.Tables(), Registry: reg, Poison: rec, Clock: w.clk,
		Visibility: 10 * time.Second, RetryBase: time.Second, RetryMax: 5 * time.Second, MaxDequeueCount: 20,
		OutboxHold: txHold, Drain: true, DrainQuiet: 5 * time.Minute, IdleMax: time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// run runs r until it returns (a drain) or, with dieAfter, until that much
// clock time has passed (then it is stopped, as a killed worker stops),
// moving the fake clock a second at a time whenever everything waits.
func (w *world) run(r *runner.Runner, dieAfter time.Duration) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	start := w.clk.Now()
	for {
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil && dieAfter == 0 {
				w.t.Fatalf("the worker's drain: %v", err)
			}
			return
		default:
		}
		if dieAfter > 0 && w.clk.Now().Sub(start) >= dieAfter {
			cancel()
			<-done
			return
		}
		if w.clk.Now().Sub(start) > 30*time.Minute {
			w.t.Fatal("the worker did not drain within 30 minutes of clock time")
		}
		w.clk.Advance(time.Second)
	}
}

// check asserts the outbox's promise for employee rk: its jobs ran iff its
// transaction committed, and no outbox row is left.
func (w *world) check(rk, what string) {
	w.t.Helper()
	committed := w.committed(rk)
	for _, id := range []string{"op-" + rk + "-a", "op-" + rk + "-b"} {
		w.mu.Lock()
		n := w.ran[id]
		w.mu.Unlock()
		if committed != (n > 0) {
			w.t.Errorf("%s: transaction committed %v, but job %s ran %d times", what, committed, id, n)
		}
		e, err := jobs.ReadOutbox(context.Background(), w.raw.Tables(), &jobs.OutboxRef{Table: txTable, PK: "Sales", RK: jobs.OutboxPrefix + id})
		if err != nil {
			w.t.Fatal(err)
		}
		if e.State != jobs.OutboxMissing {
			w.t.Errorf("%s: job %s's outbox row is left (%v)", what, id, e.State)
		}
	}
	if n, err := w.raw.Queue("work").ApproximateCount(context.Background()); err != nil || n != 0 {
		w.t.Errorf("%s: %d messages left (%v)", what, n, err)
	}
}

// TestTxProducerFaults: a producer's storage call fails, loses its reply,
// stalls, or the producer dies before or after it, at every call of
// Commit in turn (send, send, transaction, update, update); then a worker
// drains. Every job whose transaction committed ran, no job whose
// transaction did not commit ran, and no outbox row is left.
func TestTxProducerFaults(t *testing.T) {
	for _, mode := range []string{"fail", "lost", "crash", "crash-after", "stall"} {
		for at := int64(1); at <= 5; at++ {
			t.Run(fmt.Sprintf("%s-%d", mode, at), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newWorld(t)
					w.producer.at, w.producer.mode = at, mode
					_, err := w.commit("e1")
					committed := w.committed("e1")
					if err == nil && !committed || errors.Is(err, ErrWindowSpent) && committed {
						t.Errorf("Commit = %v, but the transaction committed: %v", err, committed)
					}
					w.run(w.runner(), 0)
					w.check("e1", fmt.Sprintf("%s at call %d (Commit: %v)", mode, at, err))
				})
			})
		}
	}
}

// TestTxWorkerFaults: with a transaction committed and one that never
// was (its messages sent, the producer dead before the transaction), a
// worker dies before or after each of its first storage calls in turn, or
// a call of it fails or loses its reply; a second worker then drains.
// Both promises hold.
func TestTxWorkerFaults(t *testing.T) {
	for _, mode := range []string{"fail", "lost", "crash", "crash-after"} {
		for at := int64(1); at <= 12; at++ {
			t.Run(fmt.Sprintf("%s-%d", mode, at), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newWorld(t)
					if _, err := w.commit("ok"); err != nil {
						t.Fatal(err)
					}
					w.producer.at, w.producer.mode = 3, "crash" // dies before its transaction
					if _, err := w.commit("lost"); err == nil {
						t.Fatal("a Commit whose transaction never ran succeeded")
					}
					w.worker.at, w.worker.mode = at, mode
					first := w.runner()
					if mode == "crash" || mode == "crash-after" {
						w.run(first, 2*time.Minute) // it dies: stopped once its calls fail
					} else {
						w.run(first, 0)
					}
					w.worker.at = 0
					w.run(w.runner(), 0)
					what := fmt.Sprintf("worker %s at call %d", mode, at)
					w.check("ok", what)
					w.check("lost", what)
				})
			})
		}
	}
}

// TestTxCommitAfterFence: a transaction held up past its window loses to
// the worker's fence: the worker drops the jobs, the late transaction
// fails as a whole (the application's write too), and Commit says why.
func TestTxCommitAfterFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		fenced := make(chan struct{})
		w.producer.mode = "hold"
		hold := w.producer.options()
		inner := hold.Fault
		hold.Fault = func(ctx context.Context, c instrument.Call) error {
			if c.Op == instrument.OpTransact {
				<-fenced // the call is on its way; the service sees it late
			}
			return inner(ctx, c)
		}
		var err error
		w.c.cfg.Store = instrument.Wrap(w.raw, hold)
		w.c.queue = w.c.cfg.Store.Queue("work")
		done := make(chan struct{})
		go func() { _, err = w.commit("late"); close(done) }()
		synctest.Wait()
		r := w.runner()
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { r.Run(ctx); close(stopped) }()
		for {
			synctest.Wait()
			e, rerr := jobs.ReadOutbox(context.Background(), w.raw.Tables(), &jobs.OutboxRef{Table: txTable, PK: "Sales", RK: jobs.OutboxPrefix + "op-late-a"})
			if rerr != nil {
				t.Fatal(rerr)
			}
			if e.State == jobs.OutboxFence {
				break
			}
			w.clk.Advance(time.Second)
		}
		close(fenced)
		<-done
		if !errors.Is(err, storeadapter.ErrAlreadyExists) || w.committed("late") {
			t.Errorf("a transaction after the fence: Commit = %v, committed %v; want ErrAlreadyExists and nothing written", err, w.committed("late"))
		}
		cancel()
		<-stopped
		w.run(w.runner(), 0)
		w.check("late", "a commit after the fence")
	})
}
