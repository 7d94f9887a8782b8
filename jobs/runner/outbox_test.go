package runner_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

const outboxTable = "Employees"

// outboxBundle is setup with the outbox table and a runner that reads it.
func outboxBundle(t *testing.T, handle jobs.WorkFunc[testArgs]) *bundle {
	t.Helper()
	b := setup(t, handle)
	if err := b.store.Tables().CreateTable(context.Background(), outboxTable); err != nil {
		t.Fatal(err)
	}
	b.cfg.Tables = b.store.Tables()
	b.cfg.OutboxHold = time.Minute
	return b
}

// sendOutbox sends a job of operation id tied to the outbox row of
// partition "Sales", with a 30 s window, hidden for hide.
func (b *bundle) sendOutbox(t *testing.T, id string, hide time.Duration) jobs.Envelope {
	t.Helper()
	env, _ := b.sendOutboxID(t, id, hide)
	return env
}

// sendOutboxID is sendOutbox that returns the message's id too.
func (b *bundle) sendOutboxID(t *testing.T, id string, hide time.Duration) (jobs.Envelope, string) {
	t.Helper()
	env := jobs.Envelope{V: 1, ID: id, Kind: "test", Args: []byte(`{}`),
		Outbox: &jobs.OutboxRef{Table: outboxTable, PK: "Sales", RK: jobs.OutboxPrefix + id, Window: jobs.Duration(30 * time.Second)}}
	text, err := jobs.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := b.queue.Send(context.Background(), text, storeadapter.SendOptions{VisibilityDelay: hide})
	if err != nil {
		t.Fatal(err)
	}
	return env, sent.ID
}

// commit writes env's outbox row as a committed transaction does.
func (b *bundle) commit(t *testing.T, env jobs.Envelope) error {
	t.Helper()
	return b.store.Tables().Transact(context.Background(), outboxTable, []storeadapter.TableOp{
		{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "Sales", RowKey: "emp-1", Properties: map[string]any{"Name": "Jones"}}},
		{Action: storeadapter.TxInsert, Entity: jobs.OutboxRow(env, "work", "m-1")},
	})
}

// row reads an outbox row's state.
func (b *bundle) row(t *testing.T, env jobs.Envelope) jobs.OutboxState {
	t.Helper()
	e, err := jobs.ReadOutbox(context.Background(), b.store.Tables(), env.Outbox)
	if err != nil {
		t.Fatal(err)
	}
	return e.State
}

// TestOutboxCommitted: the job of a committed transaction runs once; its
// row is deleted with its message, and its log line names the row.
func TestOutboxCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		b := outboxBundle(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { runs.Add(1); return nil })
		logs := b.logTo()
		env := b.sendOutbox(t, "op-1", 0)
		if err := b.commit(t, env); err != nil {
			t.Fatal(err)
		}
		s := b.drain(t, time.Second)
		if runs.Load() != 1 || s.Succeeded != 1 || s.Continued != 0 {
			t.Errorf("%d runs, stats %+v; want one run, one success", runs.Load(), s)
		}
		if st := b.row(t, env); st != jobs.OutboxMissing {
			t.Errorf("the row is %v after the job, want it deleted", st)
		}
		if l := logs.lines("job done"); len(l) != 1 || l[0]["outbox"] != "Employees/Sales/~tk.o.op-1" {
			t.Errorf("job done lines %v, want one naming the outbox row", l)
		}
	})
}

// TestOutboxLateCommit: a message that arrives before its transaction
// committed (made visible early) waits: it is re-sent for the window's
// end with the window's start recorded, and runs once the row is there.
func TestOutboxLateCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		b := outboxBundle(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			runs.Add(1)
			if job.Outbox.Since.IsZero() || job.Continued != 1 {
				t.Errorf("the job ran from %+v, continued %d; want the re-sent message with Since set", job.Outbox, job.Continued)
			}
			return nil
		})
		env := b.sendOutbox(t, "op-2", 0)
		r, stop := b.start(t)
		defer stop()
		b.advanceUntil(t, time.Second, time.Minute, func() bool { return r.Stats().Continued == 1 })
		if runs.Load() != 0 {
			t.Fatal("the job ran before its row existed")
		}
		if err := b.commit(t, env); err != nil {
			t.Fatal(err)
		}
		b.advanceUntil(t, time.Second, time.Minute, func() bool { return r.Stats().Succeeded == 1 })
		if runs.Load() != 1 || b.row(t, env) != jobs.OutboxMissing {
			t.Errorf("%d runs, row %v; want one run and the row deleted", runs.Load(), b.row(t, env))
		}
	})
}

// TestOutboxNeverCommitted: a job whose row is still missing after the
// window is dropped: the runner fences the row (a late commit of the
// transaction now fails), logs the drop, and removes the fence after the
// hold; the job never runs, and nothing is poisoned.
func TestOutboxNeverCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		b := outboxBundle(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { runs.Add(1); return nil })
		logs := b.logTo()
		var outcomes []runner.OutboxOutcome
		b.cfg.Observers = append(b.cfg.Observers, runner.ObserverFunc(func(_ context.Context, e runner.Event) {
			if e.Type == runner.Finished {
				outcomes = append(outcomes, e.Outbox)
			}
		}))
		sent := b.clock.Now()
		env, first := b.sendOutboxID(t, "op-3", 30*time.Second)
		r, stop := b.start(t)
		defer stop()
		b.advanceUntil(t, time.Second, 5*time.Minute, func() bool { return b.row(t, env) == jobs.OutboxFence })
		if err := b.commit(t, env); !errors.Is(err, storeadapter.ErrAlreadyExists) {
			t.Errorf("a commit after the fence = %v, want it refused (ErrAlreadyExists)", err)
		}
		if l := logs.lines("job dropped: its transaction never committed"); len(l) != 1 || l[0]["op_id"] != "op-3" {
			t.Errorf("drop lines %v, want one", l)
		}
		b.advanceUntil(t, time.Second, 5*time.Minute, func() bool { return r.Stats().Succeeded == 1 })
		if st := b.row(t, env); st != jobs.OutboxMissing || runs.Load() != 0 {
			t.Errorf("after the hold: row %v, %d runs; want the fence gone and no run", st, runs.Load())
		}
		want := []runner.OutboxOutcome{runner.OutboxDropped, runner.OutboxFenceRemoved}
		if len(outcomes) != 2 || outcomes[0] != want[0] || outcomes[1] != want[1] {
			t.Errorf("outcomes %v, want %v", outcomes, want)
		}
		if s := r.Stats(); s.Poisoned+s.Retried != 0 || len(b.poison.moved) != 0 {
			t.Errorf("stats %+v: a dropped job is no failure", s)
		}
		// The drop is recorded once, with what operators need to find it.
		wantDrop := poison.Drop{OpID: "op-3", Kind: "test", MessageID: first, Table: outboxTable, PK: "Sales", RK: "~tk.o.op-3",
			Window: 30 * time.Second, Host: "unknown"}
		d := b.poison.dropped()
		if len(d) != 1 || !d[0].Since.Equal(sent) || d[0].Time.Before(sent.Add(30*time.Second)) {
			t.Fatalf("drops recorded %+v, want one with the window from %v, dropped after it", d, sent)
		}
		d[0].Since, d[0].Time = time.Time{}, time.Time{}
		if d[0] != wantDrop {
			t.Errorf("drop recorded %+v, want %+v", d[0], wantDrop)
		}
	})
}

// TestOutboxKeepsRowUntilDone: a job that fails, and one that continues,
// keep their row; it goes when the job is done.
func TestOutboxKeepsRowUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		var b *bundle
		var env jobs.Envelope
		b = outboxBundle(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			if st := b.row(t, env); st != jobs.OutboxCommitted {
				t.Errorf("run %d: the row is %v while the job runs", runs.Load(), st)
			}
			switch runs.Add(1) {
			case 1:
				return errors.New("transient")
			case 2:
				return jobs.ContinueLater(time.Second, "half way")
			}
			return nil
		})
		env = b.sendOutbox(t, "op-4", 0)
		if err := b.commit(t, env); err != nil {
			t.Fatal(err)
		}
		s := b.drain(t, time.Second)
		if runs.Load() != 3 || s.Retried != 1 || s.Continued != 1 || s.Succeeded != 1 {
			t.Errorf("%d runs, stats %+v; want a retry, a continuation and a success", runs.Load(), s)
		}
		if st := b.row(t, env); st != jobs.OutboxMissing {
			t.Errorf("the row is %v after the job, want it deleted", st)
		}
	})
}

// TestOutboxLogLinesNameTheRow: every line about a job sent by a
// transactional enqueue names its outbox row, the observers' lines
// (received, started, finished, the outcome) and the runner's own (here a
// failed attempt it could not record).
func TestOutboxLogLinesNameTheRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := outboxBundle(t, failFirst(new(atomic.Int64), errors.New("transient")))
		logs := b.logTo()
		b.cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		b.poison.recordErr = fmt.Errorf("record: %w", storeadapter.ErrInvalidInput)
		env := b.sendOutbox(t, "op-5", 0)
		if err := b.commit(t, env); err != nil {
			t.Fatal(err)
		}
		if s := b.drain(t, time.Second); s.Retried != 1 || s.Succeeded != 1 {
			t.Fatalf("stats %+v, want a retry and a success", s)
		}
		all := logs.lines("")
		msgs := map[string]bool{}
		for _, l := range all {
			if l["msg_id"] == nil {
				continue // a line about the runner, not a message
			}
			msgs[fmt.Sprint(l["msg"])] = true
			if l["outbox"] != "Employees/Sales/~tk.o.op-5" || l["op_id"] != "op-5" {
				t.Errorf("line %v does not name the outbox row and the operation", l)
			}
		}
		for _, want := range []string{"received", "started", "job finished", "could not record the failed attempt", "job failed; will retry", "job done"} {
			if !msgs[want] {
				t.Errorf("no %q line among %v", want, msgs)
			}
		}
	})
}

// TestOutboxNoTable: a job whose outbox table does not exist after the
// window is dropped once and its message ends: there is nothing to fence,
// so nothing to come back for (it used to be re-sent, and dropped again,
// after every hold).
func TestOutboxNoTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { runs.Add(1); return nil })
		b.cfg.Tables = b.store.Tables() // and no table "Employees"
		logs := b.logTo()
		var outcomes []runner.OutboxOutcome
		b.cfg.Observers = append(b.cfg.Observers, runner.ObserverFunc(func(_ context.Context, e runner.Event) {
			if e.Type == runner.Finished {
				outcomes = append(outcomes, e.Outbox)
			}
		}))
		b.sendOutbox(t, "op-6", 30*time.Second)
		s := b.drain(t, time.Second)
		if runs.Load() != 0 || s.Succeeded != 1 || s.Continued != 0 || len(outcomes) != 1 || outcomes[0] != runner.OutboxDropped {
			t.Errorf("%d runs, stats %+v, outcomes %v; want one drop that ends the message", runs.Load(), s, outcomes)
		}
		if l := logs.lines("job dropped: its transaction never committed"); len(l) != 1 ||
			l[0]["result"] != "outbox: the transaction never committed (no table Employees after the 30s window): job dropped, nothing to fence" {
			t.Errorf("drop lines %v, want one saying there was no table", l)
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Errorf("%d messages left, want none", n)
		}
		if d := b.poison.dropped(); len(d) != 1 || d[0].OpID != "op-6" || d[0].Table != outboxTable {
			t.Errorf("drops recorded %+v, want op-6's", d)
		}
	})
}

// TestOutboxDropRecordFails: a drop whose record cannot be written is
// still a drop: the row is fenced and the message goes on as without the
// record; a warning naming the operation and its row says so.
func TestOutboxDropRecordFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := outboxBundle(t, func(ctx context.Context, job *jobs.Job[testArgs]) error { return nil })
		logs := b.logTo()
		b.poison.recordErr = fmt.Errorf("record: %w", storeadapter.ErrUnavailable)
		env := b.sendOutbox(t, "op-7", 30*time.Second)
		s := b.drain(t, time.Second)
		if s.Continued != 1 || s.Succeeded != 1 || s.Retried+s.Poisoned != 0 {
			t.Errorf("stats %+v, want the drop's continuation and the fence's removal, nothing failed", s)
		}
		if st := b.row(t, env); st != jobs.OutboxMissing {
			t.Errorf("row %v after the hold, want the fence removed", st)
		}
		l := logs.lines("could not record the dropped job")
		if len(l) != 1 || l[0]["op_id"] != "op-7" || l[0]["outbox"] != "Employees/Sales/~tk.o.op-7" || l[0]["err"] != "record: service unavailable" {
			t.Errorf("warnings %v, want one naming the operation, its row and the error", l)
		}
		if len(logs.lines("job dropped")) != 1 {
			t.Error("no drop line")
		}
	})
}
