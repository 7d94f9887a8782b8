package runner

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// EventType names a step in a received message's life.
type EventType int

// The steps the runner reports to observers. Every received message has
// one Received event and then exactly one outcome event: Succeeded,
// Continued, Retried, Poisoned, LeaseLost, Released, AckFailed or
// Abandoned. Started,
// Finished and LeaseRenewed come between them for a message whose job ran.
const (
	Received     EventType = iota // the message arrived; its lease is kept from now on
	Started                       // its handler starts
	Finished                      // its handler returned: Class, Duration and Err say how
	LeaseRenewed                  // its lease was renewed (the message stays hidden)
	Succeeded                     // outcome: the job succeeded and the message is deleted
	Retried                       // outcome: the job failed transiently; the message comes back after Delay
	Poisoned                      // outcome: moved to the poison queue for Reason
	LeaseLost                     // outcome: the lease was lost (another worker may have the message)
	Released                      // outcome: handed back unstarted, or cancelled by shutdown
	AckFailed                     // outcome: the acknowledgement kept failing; it runs again when its lease expires
	Abandoned                     // outcome: its handler ignored the cancellation at the end of the shutdown grace period
	Continued                     // outcome: the job saved its progress and continues in a new message; this one is deleted
	numEventTypes
)

// String names an event type as Stats and the logs do.
func (t EventType) String() string {
	return [...]string{"received", "started", "finished", "lease renewed", "succeeded", "retried", "poisoned",
		"lease lost", "released", "ack failed", "abandoned", "continued"}[t]
}

// Event is one step of one message, as observers see it.
type Event struct {
	Type    EventType
	Message storeadapter.Message
	// Envelope is the message's envelope; zero when the text does not decode.
	Envelope jobs.Envelope
	// Ran is whether the message was processed (its job ran, or it was
	// refused before running): Duration is meaningful then.
	Ran bool
	// Duration is how long the job ran, on Finished and the outcome after it.
	Duration time.Duration
	// Class is how the job ended, on Finished and the outcome after it;
	// ClassNone when no job ran.
	Class Class
	// Err is the job's error (nil when it succeeded).
	Err error
	// Result is what the job reported with jobs.SetResult.
	Result string
	// Outbox is what the outbox step decided, on Finished and the outcome
	// after it, for a job sent by a transactional enqueue; "" otherwise.
	Outbox OutboxOutcome
	// Delay is when a Retried message comes back, or when a Continued
	// one's continuation becomes visible.
	Delay time.Duration
	// Continued is, on a Continued outcome (and on an AckFailed or
	// LeaseLost one at stage "continue"), the continuation marker of the
	// message re-sent (the delivered one's plus one), and NextID that
	// message's id.
	Continued int
	NextID    string
	// Reason is why a message was Poisoned.
	Reason string
	// Stage and AckErr say which acknowledgement failed and how, on an
	// outcome of AckFailed or LeaseLost that an acknowledgement decided:
	// "delete", "retry", "confirm" (the lease check before poisoning),
	// "poison", "release", "continue" (the delete after the continuation
	// was sent) or "process" (a panic outside the handler).
	Stage  string
	AckErr error
}

// Observer hears every step of every message: logs, Stats and metrics are
// observers. Observe is called from the runner's goroutines, concurrently,
// and must not block.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// counter is the observer behind Stats.
type counter struct {
	events          [numEventTypes]atomic.Int64
	receiveFailures atomic.Int64
}

func (c *counter) Observe(_ context.Context, e Event) { c.events[e.Type].Add(1) }

// logger is the observer that writes one line per outcome (and debug lines
// for the steps before it).
type logger struct{ log *slog.Logger }

// ackLines are the lines of an outcome an acknowledgement decided, by stage.
var ackLines = map[string]string{
	"delete":   "job done but the message could not be deleted; it will run again",
	"retry":    "job failed, and its retry could not be scheduled; the message reappears when its lease expires",
	"confirm":  "could not confirm the lease before poisoning; not poisoned, the message will be delivered again",
	"poison":   "could not move the message to the poison queue; it will be delivered again",
	"release":  "could not release the message; it reappears when its lease expires",
	"continue": "job continues in a new message, but the delivered one could not be deleted; both resume from the checkpoint",
}

// dropLine is the line of a job dropped because its transaction never
// committed (OutboxDropped).
const dropLine = "job dropped: its transaction never committed"

// ackErrKeys name the acknowledgement's error in its line, by stage.
var ackErrKeys = map[string]string{"delete": "err", "retry": "ack_err", "confirm": "lease_err", "poison": "poison_err", "release": "err", "continue": "err"}

// lineLevel is the level of the line Observe writes for e, false when it
// writes none: a failed acknowledgement's line is a warning (an error for
// the poison queue's); the steps before an outcome are debug lines (most
// often not logged); a success or continuation is information; the other
// outcomes are warnings, and a release only when shutdown cancelled the
// job.
func lineLevel(e Event) (slog.Level, bool) {
	if _, ack := ackLines[e.Stage]; ack {
		if e.Stage == "poison" {
			return slog.LevelError, true
		}
		return slog.LevelWarn, true
	}
	switch e.Type {
	case Received, Started, LeaseRenewed, Finished:
		return slog.LevelDebug, true
	case Succeeded, Continued:
		return slog.LevelInfo, true
	case Retried, Poisoned, LeaseLost:
		return slog.LevelWarn, true
	case Released:
		return slog.LevelWarn, e.Class == ClassShutdown
	}
	return 0, false
}

// messageAttrs are the attributes of every log line about message m with
// envelope env (zero when its text does not decode): its id and dequeue
// count; the operation id and kind; and, for a job sent by a
// transactional enqueue, its outbox row as "table/pk/rk".
func messageAttrs(m storeadapter.Message, env jobs.Envelope) []any {
	attrs := []any{"msg_id", m.ID, "dequeue_count", m.DequeueCount}
	if env.ID != "" {
		attrs = append(attrs, "op_id", env.ID, "kind", env.Kind)
	}
	if o := env.Outbox; o != nil {
		attrs = append(attrs, "outbox", o.Table+"/"+o.PK+"/"+o.RK)
	}
	return attrs
}

func (l logger) Observe(ctx context.Context, e Event) {
	level, ok := lineLevel(e)
	if !ok || !l.log.Enabled(ctx, level) {
		return // no line, or not at this level: the attributes cost more than the check
	}
	log := l.log.With(messageAttrs(e.Message, e.Envelope)...)
	if e.Ran && e.Type != Started {
		log = log.With("duration", e.Duration)
	}
	if e.Result != "" {
		log = log.With("result", e.Result)
	}
	if line, ok := ackLines[e.Stage]; ok {
		attrs := []any{"outcome", e.Type.String(), ackErrKeys[e.Stage], e.AckErr}
		switch e.Stage {
		case "delete", "release":
		case "continue":
			attrs = append(attrs, "continued", e.Continued, "new_msg_id", e.NextID)
		default:
			attrs = append(attrs, "err", e.Err)
		}
		log.Log(ctx, level, line, attrs...)
		return
	}
	switch e.Type {
	case Received, Started, LeaseRenewed:
		log.Log(ctx, level, e.Type.String())
	case Finished:
		log.Log(ctx, level, "job finished", "class", e.Class.String(), "err", e.Err)
	case Succeeded:
		if e.Outbox == OutboxDropped { // no table: the result says so
			log.Log(ctx, level, dropLine)
			return
		}
		log.Log(ctx, level, "job done")
	case Continued:
		progress := ""
		if ce, ok := jobs.AsContinue(e.Err); ok {
			progress = ce.Progress
		}
		if e.Outbox == OutboxDropped {
			log.Log(ctx, level, dropLine, "outbox_result", progress, "new_msg_id", e.NextID)
			return
		}
		log.Log(ctx, level, "job continues", "continued", e.Continued, "after", e.Delay, "progress", progress, "new_msg_id", e.NextID)
	case Retried:
		log.Log(ctx, level, "job failed; will retry", "err", e.Err, "retry_in", e.Delay)
	case Poisoned:
		log.Log(ctx, level, "job poisoned", "reason", e.Reason)
	case LeaseLost:
		log.Log(ctx, level, "lease lost; the message will be delivered again", "err", e.Err)
	case Released: // by shutdown (see lineLevel)
		log.Log(ctx, level, "job cancelled by shutdown; releasing the message", "err", e.Err)
	}
}
