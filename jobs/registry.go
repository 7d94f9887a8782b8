package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Registry maps kind names to their argument parsers and workers, as
// river's Workers bundle does. Build it with Register (workers) or
// RegisterArgs (parsers only, for producers) before the runner starts; it
// is read-only afterwards.
type Registry struct {
	kinds map[string]*kind
	mw    []Middleware
	// blobs resolves argsRef claim checks; nil rejects them.
	blobs func(container string) storeadapter.Blobs
}

// kind is one registered kind.
type kind struct {
	parse      func(raw json.RawMessage) (Args, error)
	handler    Handler // nil when only the args are registered
	maxRunTime time.Duration
}

// NewRegistry returns an empty registry. blobs opens the container an
// argsRef names; nil makes Decode refuse argsRef.
func NewRegistry(blobs func(container string) storeadapter.Blobs) *Registry {
	return &Registry{kinds: map[string]*kind{}, blobs: blobs}
}

// RegisterArgs registers kind T's argument parser without a worker, for
// producers that validate what they send. It is an error to register a
// kind twice.
func RegisterArgs[T Args](r *Registry) error {
	_, err := r.add(parser[T]())
	return err
}

// Register registers w as the worker of kind T (the name comes from
// T.Kind). It is an error to register a kind twice.
func Register[T Args](r *Registry, w Worker[T]) error {
	k, err := r.add(parser[T]())
	if err != nil {
		return err
	}
	k.handler = HandlerFunc(func(ctx context.Context, task *Task) error {
		args, ok := task.Args.(T)
		if !ok {
			return Permanentf("%s: args of type %T, want %T", task.Kind, task.Args, args)
		}
		return w.Work(ctx, &Job[T]{Envelope: task.Envelope, Args: args, Message: task.Message})
	})
	if mr, ok := w.(interface{ MaxRunTime() time.Duration }); ok {
		k.maxRunTime = mr.MaxRunTime()
	}
	return nil
}

// parser returns the name of kind T and its strict parser.
func parser[T Args]() (string, func(json.RawMessage) (Args, error)) {
	var zero T
	return zero.Kind(), func(raw json.RawMessage) (Args, error) { return ParseArgs[T](raw) }
}

func (r *Registry) add(name string, parse func(json.RawMessage) (Args, error)) (*kind, error) {
	if name == "" {
		return nil, errors.New("jobs: register: the kind's name is empty")
	}
	if _, dup := r.kinds[name]; dup {
		return nil, fmt.Errorf("jobs: register: kind %q is registered already", name)
	}
	k := &kind{parse: parse}
	r.kinds[name] = k
	return k, nil
}

// Use appends middleware that wraps every handler, the first outermost.
func (r *Registry) Use(mw ...Middleware) { r.mw = append(r.mw, mw...) }

// Kinds returns the registered kind names, sorted.
func (r *Registry) Kinds() []string { return slices.Sorted(maps.Keys(r.kinds)) }

// Handler returns the handler of a kind wrapped in the middleware, and the
// kind's maximum run time (DefaultMaxRunTime unless its worker sets one);
// nil when the kind has no worker.
func (r *Registry) Handler(name string) (Handler, time.Duration) {
	k, ok := r.kinds[name]
	if !ok || k.handler == nil {
		return nil, 0
	}
	h := k.handler
	for _, mw := range slices.Backward(r.mw) {
		h = mw(h)
	}
	return h, cmp.Or(k.maxRunTime, DefaultMaxRunTime)
}

// Decode parses message text into a Task: envelope, kind, and strictly
// validated args (fetched from the blob named by argsRef when present).
// Every validation error is permanent and names the field and the rule;
// a failure to fetch an argsRef blob is transient unless the blob is gone.
// The Task returned with an error holds what did decode.
func (r *Registry) Decode(ctx context.Context, msg storeadapter.Message) (*Task, error) {
	env, err := DecodeEnvelope(msg.Text)
	if err != nil {
		return &Task{Message: msg}, err
	}
	return r.DecodeArgs(ctx, msg, env)
}

// DecodeArgs is Decode for a caller that has decoded msg's envelope
// already (env, from DecodeEnvelope(msg.Text) without an error): the
// runner decodes it as the message arrives, for its events, and once is
// enough.
func (r *Registry) DecodeArgs(ctx context.Context, msg storeadapter.Message, env Envelope) (*Task, error) {
	task := &Task{Message: msg, Envelope: env}
	k, ok := r.kinds[env.Kind]
	if !ok {
		return task, Permanentf("envelope: kind: %q is not one of %v", text.Truncate(env.Kind, 40), r.Kinds())
	}
	raw := env.Args
	if env.ArgsRef != "" {
		var err error
		if raw, err = r.fetchArgs(ctx, env.ArgsRef); err != nil {
			return task, err
		}
	}
	var err error
	if task.Args, err = k.parse(raw); err != nil {
		return task, Permanent(err)
	}
	return task, nil
}

func (r *Registry) fetchArgs(ctx context.Context, ref string) (json.RawMessage, error) {
	if r.blobs == nil {
		return nil, Permanentf("envelope: argsRef: this worker has no blob store configured")
	}
	container, name, _ := SplitBlobRef("argsRef", ref) // validated by DecodeEnvelope
	data, _, err := r.blobs(container).Get(ctx, name)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil, Permanentf("envelope: argsRef: blob %s does not exist", ref)
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: argsRef: fetch %s: %w", ref, err)
	}
	return data, nil
}

// ParseArgs decodes raw into a T strictly — field names case-sensitive,
// each key once, no unknown fields, no trailing data, types exact — and
// runs T's Validate. Errors name the field ("args.pk: …") and the rule.
func ParseArgs[T Args](raw json.RawMessage) (T, error) {
	var v T
	if len(raw) == 0 {
		return v, errors.New("args: is required")
	}
	if err := DecodeStrict(raw, &v, "args"); err != nil {
		return v, err
	}
	if err := v.Validate(); err != nil {
		return v, err
	}
	return v, nil
}
