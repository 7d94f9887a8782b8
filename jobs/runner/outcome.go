package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Class is how a job ended, as classify decides it.
type Class int

// The classes of classify's table. The zero Class, ClassNone, is on the
// events of a message whose job did not run (released unstarted, lease lost
// while waiting, abandoned), so an observer never counts those as successes.
const (
	ClassNone       Class = iota // no job ran
	ClassSuccess                 // the handler returned nil
	ClassPermanent               // a jobs.Permanent error: a malformed message, invalid args, a handler panic
	ClassRefused                 // storage refused the request itself (invalid input, too large)
	ClassTransient               // anything else: retried, poisoned past MaxDequeueCount
	ClassLeaseLost               // the lease was lost while the job ran
	ClassShutdown                // the job failed after the shutdown grace period cancelled it
	ClassContinue                // the handler saved its progress and asked to continue later (jobs.ContinueLater)
	ClassCredential              // storage refused the credential (storeadapter.ErrAuthentication): released, and the runner stops
)

// String names a class.
func (c Class) String() string {
	return [...]string{"none", "success", "permanent", "storage refusal", "transient", "lease lost", "shutdown", "continue", "credential refused"}[c]
}

// classify is the one table that decides what happens to a message whose
// job ended with err. The first row that matches wins:
//
//	row  condition                                  class       the runner then
//	1    the lease was lost                         lease lost  does nothing: the message reappears, or another worker has it
//	2    err == nil                                 success     deletes the message, drops its failure record
//	3    jobs.AsContinue(err): progress saved,      continue    re-sends the envelope with Continued one higher (visible
//	     continue later (also during shutdown)                  after After), then deletes the message, drops its
//	                                                            failure record (see continueLater)
//	4    shutdown: the grace period cancelled it    shutdown    releases the message at once, no attempt counted
//	5    jobs.IsPermanent(err)                      permanent   poisons the message now
//	6    storage refused the credential itself      credential  releases the message at once, no attempt counted (not
//	     (storeadapter.ErrAuthentication: a                     its fault), and stops the runner: Run returns the error
//	     sign-in that cannot succeed, a wrong key,              (every other message would fail alike; the worker
//	     an expired SAS)                                        exits 1 instead of poisoning the queue message by message)
//	7    storage refused the request (400, 413):    refused     poisons the message now (retrying the same request
//	     ErrInvalidInput or ErrTooLarge, not                    cannot succeed; DESIGN asks this of 4xx)
//	     transient
//	8    anything else: a transient storage error,  transient   records the attempt and retries after RetryDelay;
//	     404/409/412/403 escaping a handler, the                poisons once the delivery count reaches MaxDequeueCount
//	     maximum run time, a message delivered
//	     more than MaxDequeueCount times
//
// Row 3 comes before shutdown: the handler saved its progress either way,
// and a continuation is better than a release, which would run the same
// message again with its dequeue count one higher. A lost lease still wins
// (row 1): the message reappears and its next delivery resumes from the
// same checkpoint.
//
// Row 8 keeps 404, 409, 412 and a 403 for a missing permission
// (storeadapter.ErrForbidden without ErrAuthentication) transient: they may
// depend on what others do meanwhile, a role assignment still propagating
// or a lease that lapses, and a handler that knows better returns a
// Permanent error.
func classify(err error, leaseLost, shutdown bool) Class {
	switch {
	case leaseLost:
		return ClassLeaseLost
	case err == nil:
		return ClassSuccess
	}
	if _, ok := jobs.AsContinue(err); ok {
		return ClassContinue
	}
	switch {
	case shutdown:
		return ClassShutdown
	case jobs.IsPermanent(err):
		return ClassPermanent
	case errors.Is(err, storeadapter.ErrAuthentication):
		return ClassCredential
	case !storeadapter.IsTransient(err) && (errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge)):
		return ClassRefused
	}
	return ClassTransient
}

// Causes of a handler's cancellation, besides shutdown.
var (
	errLeaseLost  = errors.New("lease on the message was lost")
	errMaxRunTime = errors.New("the job ran past its maximum run time")
)

// held is a received message whose lease is kept from the moment it
// arrived, whether it runs yet or waits for a slot.
type held struct {
	m      storeadapter.Message
	env    jobs.Envelope // zero when the text does not decode
	envErr error         // why it does not
	// base is the runner's logger; log is it with the message's
	// attributes, made at the first line about the message (most have
	// none but what the observers write).
	base    *slog.Logger
	logOnce sync.Once
	log     *slog.Logger
	lease   *lease
	// ctx is the handler's; cancelled when the lease is lost.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// leftBehind, when the handler ignored the cancellation at its maximum
	// run time, ends when that handler finally returns (see run).
	leftBehind <-chan error
}

// logger returns the logger of the runner's own lines about h: they
// carry what the observers' lines carry (see logger).
func (h *held) logger() *slog.Logger {
	h.logOnce.Do(func() { h.log = h.base.With(messageAttrs(h.m, h.env)...) })
	return h.log
}

// event returns an event of type t about h.
func (h *held) event(t EventType) Event { return Event{Type: t, Message: h.m, Envelope: h.env} }

// hold starts keeping the lease of a message received by a call that began
// at began.
func (r *Runner) hold(ctx context.Context, h *held, began time.Time) {
	h.lease = newLease(r, h, began)
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	go h.lease.keep(h.ctx, h.cancel)
}

// processSafely runs process and survives a panic outside the handler
// (in decoding, poisoning or acknowledging): the lease is dropped and the
// message reappears after its visibility timeout.
func (r *Runner) processSafely(ctx context.Context, h *held) {
	defer func() {
		if p := recover(); p != nil {
			h.cancel(nil)
			h.lease.stop()
			h.logger().ErrorContext(ctx, "panic while processing a message; it will be delivered again", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			e := h.event(AckFailed)
			e.Stage, e.AckErr = "process", fmt.Errorf("panic: %v", p)
			r.end(ctx, h, e)
		}
	}()
	r.end(ctx, h, r.process(ctx, h))
}

// process runs one held message, acknowledges it as classify says and
// returns its outcome event.
func (r *Runner) process(ctx context.Context, h *held) Event {
	c := &r.cfg
	m, lease := h.m, h.lease
	defer h.cancel(nil)
	start := c.Clock.Now()
	hctx, res := jobs.WithResult(jobs.WithTraceParent(h.ctx, h.env.TraceParent))

	task := &jobs.Task{Envelope: h.env, Message: m}
	var err error
	var outbox OutboxOutcome
	overDelivered := m.DequeueCount > c.MaxDequeueCount
	if overDelivered {
		err = fmt.Errorf("delivered %d times, more than the maximum %d, without finishing (the worker may have crashed, lost the lease or failed to acknowledge each time)", m.DequeueCount, c.MaxDequeueCount)
	} else if hctx.Err() != nil {
		err = context.Cause(hctx) // lost its lease, or shut down, while waiting for a slot
	} else if h.envErr != nil {
		err = h.envErr
	} else if task, err = c.Registry.DecodeArgs(hctx, m, h.env); err == nil && task.Outbox != nil {
		outbox, h.leftBehind, err = r.runOutbox(hctx, h, task)
	} else if err == nil {
		r.emit(ctx, h.event(Started))
		h.leftBehind, err = r.run(hctx, task)
	}
	receipt, until, lost := lease.stop()
	e := h.event(Finished)
	e.Ran, e.Duration, e.Err, e.Result, e.Outbox = true, c.Clock.Now().Sub(start), err, res.Text(), outbox
	e.Class = classify(err, lost, ctx.Err() != nil)
	r.emit(ctx, e)

	switch e.Class {
	case ClassLeaseLost:
		e.Type = LeaseLost
		return e
	case ClassShutdown:
		// The shutdown grace period ran out: not the job's fault. Hand the
		// message back at once, without counting an attempt.
		e.Type = Released
		return r.release(h, e, receipt, until)
	case ClassCredential:
		// Not the message's fault, and every message would fail alike:
		// stop receiving, and hand this one back at once without counting
		// an attempt (with the refused credential the release may fail
		// too: then it reappears when its lease ends).
		r.fail(err)
		e.Type = Released
		return r.release(h, e, receipt, until)
	case ClassSuccess:
		return r.succeed(ctx, h, e, receipt, until)
	case ClassContinue:
		out, serr := r.continueLater(ctx, h, e, task.Envelope, receipt, until)
		if serr == nil {
			return out
		}
		// The continuation could not be sent: the message takes the
		// transient-failure path (its progress is saved all the same).
		h.logger().WarnContext(ctx, "could not re-send the message to continue the job; retrying the delivered one instead", "err", serr)
		err, e.Err, e.Class = serr, serr, ClassTransient
	}
	f := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: task.ID, Kind: task.Kind,
		Attempt: poison.Attempt{DequeueCount: m.DequeueCount, Time: start, Duration: e.Duration, Host: c.Host, Error: err.Error()}}
	if e.Class == ClassTransient && m.DequeueCount < c.MaxDequeueCount {
		return r.retry(ctx, h, e, f, receipt, until)
	}
	switch {
	case e.Class != ClassTransient:
		e.Reason = "permanent: " + err.Error()
	case overDelivered:
		e.Reason = err.Error() + "; " + r.lastError(m.ID, until)
	default:
		e.Reason = fmt.Sprintf("dequeue count %d reached the maximum %d; last error: %v", m.DequeueCount, c.MaxDequeueCount, err)
	}
	return r.poison(e, f, receipt, until)
}

// run runs a task's handler, through the registry's middleware, for at
// most the kind's maximum run time: then its context is cancelled with
// errMaxRunTime as the cause, and a handler that still has not returned
// abandonAfter later is left behind: its message is retried (it may still
// finish its work, which every handler must tolerate anyway), and the
// channel returned ends when it finally returns; until then it counts
// against Concurrency (see Run). A panic is a permanent error.
func (r *Runner) run(ctx context.Context, task *jobs.Task) (leftBehind <-chan error, err error) {
	h, maxRunTime := r.cfg.Registry.Handler(task.Kind)
	if h == nil {
		return nil, jobs.Permanentf("envelope: kind: %q has no worker here", task.Kind)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- safeHandle(ctx, h, task) }()
	select {
	case err := <-done:
		return nil, err
	case <-r.cfg.Clock.After(maxRunTime):
	}
	cancel(errMaxRunTime)
	select {
	case err := <-done:
		return nil, err
	case <-r.cfg.Clock.After(abandonAfter):
		return done, fmt.Errorf("%w (%v); the handler ignored its cancellation for %v and was left behind", errMaxRunTime, maxRunTime, abandonAfter)
	}
}

// safeHandle runs a handler, turning a panic into a permanent error and
// adding the cause of a cancellation (lease lost, maximum run time) to the
// handler's error.
func safeHandle(ctx context.Context, h jobs.Handler, task *jobs.Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jobs.Permanentf("handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	err = h.Handle(ctx, task)
	if cause := context.Cause(ctx); err != nil && (cause == errLeaseLost || cause == errMaxRunTime) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// ackFailed turns e into the outcome of a failed acknowledgement at stage:
// lease lost when the message is gone or another receive took it, ack
// failed otherwise.
func ackFailed(e Event, stage string, err error) Event {
	e.Type, e.Stage, e.AckErr = AckFailed, stage, err
	if errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
		e.Type = LeaseLost
	}
	return e
}

// succeed deletes the message of a job that succeeded, then drops its
// failure record if earlier deliveries left one.
func (r *Runner) succeed(ctx context.Context, h *held, e Event, receipt string, until time.Time) Event {
	if err := r.delete(h, receipt, until); err != nil {
		return ackFailed(e, "delete", err)
	}
	r.forget(ctx, h)
	e.Type = Succeeded
	return e
}

// delete deletes a message whose job is over, with the newest pop
// receipt. A "not found" is done: an earlier try whose reply was lost, or
// another worker, deleted it.
func (r *Runner) delete(h *held, receipt string, until time.Time) error {
	return r.acknowledge(until, func(actx context.Context, retry bool) error {
		err := r.cfg.Queue.DeleteMessage(actx, h.m.ID, receipt)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return nil
		}
		return err
	})
}

// forget drops the failure record of a message just deleted, if earlier
// deliveries may have left one; a failure is logged, not returned.
func (r *Runner) forget(ctx context.Context, h *held) {
	c, m := &r.cfg, h.m
	if m.DequeueCount <= 1 {
		return
	}
	// Past the lease too: the message is gone, nobody else will.
	ferr := r.acknowledge(c.Clock.Now().Add(c.Visibility), func(actx context.Context, _ bool) error { return c.Poison.Forget(actx, m.ID) })
	if ferr != nil {
		h.logger().WarnContext(ctx, "could not drop the failure record of the deleted message; poison purge removes it once it is older than the queue's message time to live", "err", ferr)
	}
}

// retry records a transient failure and hides the message for the retry
// backoff.
func (r *Runner) retry(ctx context.Context, h *held, e Event, f poison.Failure, receipt string, until time.Time) Event {
	c := &r.cfg
	if rerr := r.acknowledge(until, func(actx context.Context, _ bool) error { return c.Poison.RecordAttempt(actx, f) }); rerr != nil {
		h.logger().WarnContext(ctx, "could not record the failed attempt", "err", rerr)
	}
	delay := RetryDelay(f.Attempt.DequeueCount, c.RetryBase, c.RetryMax)
	err := r.acknowledge(until, func(actx context.Context, retry bool) error {
		_, err := c.Queue.Update(actx, f.MessageID, receipt, f.Text, delay)
		return doneOnRetry(err, retry)
	})
	if err != nil {
		return ackFailed(e, "retry", err)
	}
	e.Type, e.Delay = Retried, delay
	return e
}

// poison moves the message to the poison queue for e.Reason, after
// confirming its lease: Move writes the record and sends the poison
// message before it deletes the original (see confirmLease).
func (r *Runner) poison(e Event, f poison.Failure, receipt string, until time.Time) Event {
	receipt, until, err := r.confirmLease(f.MessageID, f.Text, receipt, until)
	if err != nil {
		return ackFailed(e, "confirm", err)
	}
	if err := r.acknowledge(until, func(ctx context.Context, _ bool) error { return r.cfg.Poison.Move(ctx, f, receipt, e.Reason) }); err != nil {
		return ackFailed(e, "poison", err)
	}
	e.Type = Poisoned
	return e
}

// confirmLease renews a message's lease right before it is poisoned and
// returns the new receipt and lease end. The keeper notices a lost lease
// only at its next renewal, and Move parks the message before its last
// step, the delete, can find the receipt stale: without this check, a
// message whose lease lapsed unnoticed would be poisoned while it is live
// on another worker. An error wrapping ErrNotFound or
// ErrPopReceiptMismatch means the lease is lost (also on a retry: a try
// whose reply was lost changed the receipt, and the new one is unknown).
func (r *Runner) confirmLease(id, text, receipt string, until time.Time) (string, time.Time, error) {
	c := &r.cfg
	began := c.Clock.Now()
	var rc storeadapter.Receipt
	err := r.acknowledge(until, func(ctx context.Context, _ bool) error {
		var err error
		rc, err = c.Queue.Update(ctx, id, receipt, text, c.Visibility)
		return err
	})
	if err != nil {
		return receipt, until, err
	}
	return rc.PopReceipt, leaseEnd(began, c.Visibility, rc.NextVisible), nil
}

// release makes a message visible again at once and returns e as the
// outcome, or lease lost / ack failed when that did not work.
func (r *Runner) release(h *held, e Event, receipt string, until time.Time) Event {
	err := r.acknowledge(until, func(ctx context.Context, retry bool) error {
		_, err := r.cfg.Queue.Update(ctx, h.m.ID, receipt, h.m.Text, 0)
		return doneOnRetry(err, retry)
	})
	if err != nil {
		return ackFailed(e, "release", err)
	}
	return e
}

// doneOnRetry treats a message gone or a pop receipt changed as success on
// a retry of an update or delete: the earlier try whose reply was lost did
// the work.
func doneOnRetry(err error, retry bool) error {
	if retry && (errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPopReceiptMismatch)) {
		return nil
	}
	return err
}

// lastError describes the last failed attempt recorded for a message, for
// the reason of a message poisoned by its delivery count. A failure to read
// the record is described, never returned: it must not stop the move.
func (r *Runner) lastError(messageID string, until time.Time) string {
	var a poison.Attempt
	var found bool
	err := r.acknowledge(until, func(ctx context.Context, _ bool) error {
		var err error
		a, found, err = r.cfg.Poison.LastAttempt(ctx, messageID)
		return err
	})
	switch {
	case err != nil:
		return fmt.Sprintf("last error unknown: the failure record could not be read (%v)", err)
	case !found:
		return "no failed attempt was recorded"
	}
	return fmt.Sprintf("last recorded error (delivery %d on %s): %s", a.DequeueCount, a.Host, a.Error)
}
