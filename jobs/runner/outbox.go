package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
)

// DefaultOutboxHold is Config.OutboxHold's default.
const DefaultOutboxHold = 15 * time.Minute

// OutboxOutcome is what the outbox step decided for a job sent by a
// transactional enqueue (an envelope with an outbox reference).
type OutboxOutcome string

// The outbox step's outcomes; "" for a job without an outbox reference.
const (
	// OutboxRan: the transaction committed, the job ran (and, once done,
	// its row was deleted).
	OutboxRan OutboxOutcome = "ran"
	// OutboxWaiting: the row is missing and the window is still open: the
	// operation was re-sent to look again when the window closes.
	OutboxWaiting OutboxOutcome = "waiting"
	// OutboxDropped: the row was still missing after the window: the
	// runner fenced it, so the transaction can never commit, and dropped
	// the job. The fence is removed after Config.OutboxHold.
	OutboxDropped OutboxOutcome = "dropped"
	// OutboxFenceKept and OutboxFenceRemoved: a later delivery of a
	// dropped job found its fence, and kept it (the hold is not over) or
	// removed it.
	OutboxFenceKept    OutboxOutcome = "fence kept"
	OutboxFenceRemoved OutboxOutcome = "fence removed"
)

// runOutbox runs a task whose envelope carries an outbox reference: the
// job runs only if the application's transaction wrote its row. It
// returns what the outbox step decided, the handler's left-behind channel
// (see run) and the error that classify reads: a jobs.ContinueLater to
// look again later (which never counts towards MaxDequeueCount), nil when
// the job is done or dropped.
//
// The steps, with the row o names (see jobs.OutboxRow):
//
//  1. Read the row (jobs.ReadOutbox).
//  2. Committed: run the job. When it succeeds, delete the row, If-Match
//     the ETag read; then the runner deletes the message. A job that
//     continues or fails keeps its row: its next delivery reads it again.
//  3. Missing, and the window since the operation's first message
//     (o.Since, else the message's insertion time: the queue's clock,
//     never a producer's) is still open: re-send the operation, visible
//     when the window closes, and delete this message.
//  4. Missing after the window: insert a fence in the row's place
//     (jobs.FenceOutbox). The transaction, whose insert of the row now
//     fails, can never commit: drop the job, record the drop through the
//     Poisoner (best effort; see recordDrop), and re-send the operation to
//     remove the fence after OutboxHold. If the insert finds the row (the
//     transaction committed just now), go on as in 2. If it finds no
//     table, there is nothing to fence and nothing to remove later: drop
//     the job and end the message (a success, with outcome OutboxDropped).
//  5. A fence: remove it once the window and OutboxHold have passed
//     (If-Match), else look again then.
//
// Why every crash converges and no interleaving runs a job whose
// transaction did not commit, or drops one whose transaction did: the
// transaction and the fence both insert the same row, so exactly one of
// them exists; the job runs only after a read saw the transaction's row,
// and is dropped only after the fence was written. A crash before a step's
// write repeats the step on the next delivery. A crash after the job ran
// and before its row was deleted runs it again (every kind is idempotent).
// A crash after the row was deleted and before the message was: the next
// delivery finds the row missing and, once the window is over, fences and
// drops the job it already ran — the same "done", counted as dropped. Two
// deliveries of one operation (a duplicate message, a continuation and
// its original) interleave safely for the same reasons: the deletes are
// If-Match, and a fence written by one makes the other drop too.
func (r *Runner) runOutbox(ctx context.Context, h *held, task *jobs.Task) (OutboxOutcome, <-chan error, error) {
	c := &r.cfg
	o := task.Outbox
	if c.Tables == nil {
		return "", nil, errors.New("outbox: this runner has no tables (Config.Tables) to read the outbox row from")
	}
	since := o.Since
	if since.IsZero() {
		since = h.m.Inserted
	}
	age := c.Clock.Now().Sub(since)
	window := time.Duration(o.Window)
	entry, err := jobs.ReadOutbox(ctx, c.Tables, o)
	if err != nil {
		return "", nil, err
	}
	if entry.State == jobs.OutboxMissing && age >= window {
		if entry, err = jobs.FenceOutbox(ctx, c.Tables, o); err != nil {
			return "", nil, err
		}
		if entry.State != jobs.OutboxCommitted {
			r.recordDrop(h, task, since)
		}
		switch entry.State {
		case jobs.OutboxFence:
			return OutboxDropped, nil, jobs.ContinueLater(c.OutboxHold,
				fmt.Sprintf("outbox: the transaction never committed (no row %s after the %v window): job dropped", o.RK, window))
		case jobs.OutboxMissing:
			// No table: nothing was fenced and nothing is to be removed,
			// so the message ends here. Re-sending it would drop the job
			// again after every hold, for ever.
			jobs.SetResult(ctx, fmt.Sprintf("outbox: the transaction never committed (no table %s after the %v window): job dropped, nothing to fence", o.Table, window))
			return OutboxDropped, nil, nil
		}
	}
	switch entry.State {
	case jobs.OutboxMissing:
		return OutboxWaiting, nil, jobs.ContinueLater(max(window-age, time.Second),
			fmt.Sprintf("outbox: waiting for the transaction to commit (%v of its %v window)", age.Round(time.Second), window))
	case jobs.OutboxFence:
		if left := window + c.OutboxHold - age; left > 0 {
			return OutboxFenceKept, nil, jobs.ContinueLater(max(left, time.Second), "outbox: the fence of a dropped job stays until its hold is over")
		}
		return OutboxFenceRemoved, nil, jobs.RemoveOutbox(ctx, c.Tables, o.Table, entry.Row)
	}
	r.emit(ctx, h.event(Started))
	leftBehind, err := r.run(ctx, task)
	if err == nil {
		err = jobs.RemoveOutbox(ctx, c.Tables, o.Table, entry.Row)
	}
	return OutboxRan, leftBehind, err
}

// recordDrop records a dropped job through the Poisoner (poison.Drop),
// for operators to count. It is best effort: the drop stands whatever
// happens to its record, so a failure (after the retries acknowledge
// makes) is logged and the message goes on. The record is an upsert keyed
// by the operation id, so a delivery that drops the same job again (a
// crash before the message's re-send) rewrites it.
func (r *Runner) recordDrop(h *held, task *jobs.Task, since time.Time) {
	c := &r.cfg
	o := task.Outbox
	d := poison.Drop{OpID: task.ID, Kind: task.Kind, MessageID: h.m.ID, Table: o.Table, PK: o.PK, RK: o.RK,
		Window: time.Duration(o.Window), Since: since, Time: c.Clock.Now(), Host: c.Host}
	err := r.acknowledge(c.Clock.Now().Add(c.Visibility), func(ctx context.Context, _ bool) error { return c.Poison.RecordDropped(ctx, d) })
	if err != nil {
		h.logger().Warn("could not record the dropped job: enqueue stats will not count it", "err", err)
	}
}
