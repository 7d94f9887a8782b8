package jobs

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Args are one kind's arguments, the river way: a struct decoded strictly
// from the envelope's args (see ParseArgs) whose methods name its kind and
// check it. Validate returns an error naming the field ("args.pk: …") and
// the rule; producers (the CLI) call the same Validate through the
// catalog, so the worker and its producers apply one rule set.
type Args interface {
	// Kind is the envelope's kind for these arguments, such as "archive".
	Kind() string
	// Validate checks the arguments after decoding.
	Validate() error
}

// Job is one decoded message as a Worker sees it: the envelope, its
// arguments of the kind's type, and the queue message.
type Job[T Args] struct {
	Envelope
	// Args are the validated arguments.
	Args T
	// Message is the queue message as received; its DequeueCount says
	// which attempt this is.
	Message storeadapter.Message
}

// Worker carries out the jobs of one kind; register it with Register. It
// returns nil when the job is done (the message is then deleted), a
// Permanent error when retrying cannot help (the message goes to the
// poison queue at once), and any other error to have the message retried
// after a backoff. ctx is cancelled when the worker loses the message's
// lease, when the job runs past its maximum run time, or when the process
// shuts down past its grace period; context.Cause says which. Workers must
// be idempotent: any step may run twice.
//
// A Worker may also have a method MaxRunTime() time.Duration: the longest
// one job of its kind may run before its context is cancelled and it is
// retried (0: DefaultMaxRunTime).
type Worker[T Args] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// NewJob returns the Job a Worker sees for args under operation id id, as
// the runner makes it from a message, with no message behind it: the
// envelope is checked, and the args go to JSON and back through ParseArgs
// (strict decoding, then Validate), so a worker called directly gets what
// the queue would give it. It is for benchmarks and tools that call a
// worker in-process; producers send jobs with package client.
func NewJob[T Args](id string, args T) (*Job[T], error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	env := Envelope{V: 1, ID: id, Kind: args.Kind(), Args: raw}
	if err := env.validate(); err != nil {
		return nil, err
	}
	parsed, err := ParseArgs[T](raw)
	if err != nil {
		return nil, err
	}
	return &Job[T]{Envelope: env, Args: parsed}, nil
}

// WorkFunc adapts a function to Worker.
type WorkFunc[T Args] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// DefaultMaxRunTime is how long a job may run when its Worker sets no
// maximum: generous, so that only a stuck handler reaches it.
const DefaultMaxRunTime = 30 * time.Minute

// Task is a decoded message whatever its kind: what the runner dispatches
// and what middleware sees. Args holds the kind's own Args type.
type Task struct {
	Envelope
	Args    Args
	Message storeadapter.Message
}

// Handler runs a Task; see Worker for what its error means. The registry
// turns each registered Worker into one.
type Handler interface {
	Handle(ctx context.Context, task *Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, task *Task) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, task *Task) error { return f(ctx, task) }

// Middleware wraps a Handler, as asynq's ServeMux.Use does: for metrics,
// tracing or logging around every job. It must call next (or return an
// error saying why not) and return next's error unchanged, or wrapped with
// %w, so the runner still classifies it.
type Middleware func(next Handler) Handler

// traceParentKey is the context key of a job's W3C traceparent.
type traceParentKey struct{}

// WithTraceParent returns ctx carrying the traceparent of a job's envelope.
// The runner puts it on every handler's context.
func WithTraceParent(ctx context.Context, traceParent string) context.Context {
	return context.WithValue(ctx, traceParentKey{}, traceParent)
}

// TraceParent returns the W3C traceparent the job's producer sent (the
// envelope's "traceparent"), and "" when none was sent or ctx is not a
// job's context. No tracing library is involved: a middleware can start
// a span from it.
func TraceParent(ctx context.Context) string {
	tp, _ := ctx.Value(traceParentKey{}).(string)
	return tp
}

// resultKey is the context key of a job's result; see SetResult.
type resultKey struct{}

// Result holds what a handler reported with SetResult. The runner makes
// one per job with WithResult and reads it with Text.
type Result struct {
	mu   sync.Mutex
	text string
}

// WithResult returns ctx with an empty Result for SetResult to fill.
func WithResult(ctx context.Context) (context.Context, *Result) {
	res := &Result{}
	return context.WithValue(ctx, resultKey{}, res), res
}

// Text returns what the handler set with SetResult, "" when nothing.
func (res *Result) Text() string {
	res.mu.Lock()
	defer res.mu.Unlock()
	return res.text
}

// SetResult records a short, human-readable summary of what the job did,
// such as "moved 12 entities" or "already done"; the runner logs it as
// "result" on the job's "job done" line (or on its failure line, when the
// job fails after setting it). A later call replaces an earlier one. It
// does nothing when ctx is not a job's context from the runner, so
// handlers can call it unconditionally. Keep it short and free of
// secrets; it is cut at 200 characters.
func SetResult(ctx context.Context, result string) {
	if res, ok := ctx.Value(resultKey{}).(*Result); ok {
		res.mu.Lock()
		res.text = text.Truncate(result, 200)
		res.mu.Unlock()
	}
}
