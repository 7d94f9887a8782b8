package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Job is one decoded message handed to a handler.
type Job struct {
	Envelope
	// Args are the kind's validated arguments, of the type its ParseArgs
	// returns (for example ArchiveArgs).
	Args any
	// Message is the queue message as received; its DequeueCount says
	// which attempt this is.
	Message storeadapter.Message
}

// Handler carries out one job. It returns nil when the job is done (the
// message is then deleted), a Permanent error when retrying cannot help
// (the message goes to the poison queue at once), and any other error to
// have the message retried after a backoff. ctx is cancelled when the
// worker loses the message's lease or shuts down past its grace period.
// Handlers must be idempotent: any step may run twice.
type Handler interface {
	Handle(ctx context.Context, job Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job Job) error { return f(ctx, job) }

// Kind is one job kind: its name in the envelope, its strict argument
// parser and its handler.
type Kind struct {
	Name string
	// ParseArgs decodes and validates the raw args JSON, rejecting unknown
	// fields, missing fields and wrong types with errors naming the field.
	ParseArgs func(raw json.RawMessage) (any, error)
	Handler   Handler
}

// Registry maps kind names to kinds. Build it before the runner starts;
// it is read-only afterwards.
type Registry struct {
	kinds map[string]Kind
	// Blobs resolves argsRef claim checks; nil rejects them.
	Blobs func(container string) storeadapter.Blobs
}

// NewRegistry returns a registry holding kinds.
func NewRegistry(blobs func(container string) storeadapter.Blobs, kinds ...Kind) *Registry {
	r := &Registry{kinds: make(map[string]Kind, len(kinds)), Blobs: blobs}
	for _, k := range kinds {
		r.kinds[k.Name] = k
	}
	return r
}

// Kinds returns the registered kind names, sorted.
func (r *Registry) Kinds() []string { return slices.Sorted(maps.Keys(r.kinds)) }

// Decode parses message text into a Job: envelope, kind, and strictly
// validated args (fetched from the blob named by argsRef when present).
// Every validation error is permanent and names the field and the rule;
// a failure to fetch an argsRef blob is transient unless the blob is gone.
func (r *Registry) Decode(ctx context.Context, msg storeadapter.Message) (Job, Kind, error) {
	env, err := DecodeEnvelope(msg.Text)
	if err != nil {
		return Job{}, Kind{}, err
	}
	job := Job{Envelope: env, Message: msg}
	k, ok := r.kinds[env.Kind]
	if !ok {
		return job, Kind{}, Permanentf("envelope: kind: %q is not one of %v", truncate(env.Kind, 40), r.Kinds())
	}
	raw := env.Args
	if env.ArgsRef != "" {
		if raw, err = r.fetchArgs(ctx, env.ArgsRef); err != nil {
			return job, k, err
		}
	}
	if job.Args, err = k.ParseArgs(raw); err != nil {
		return job, k, Permanent(err)
	}
	return job, k, nil
}

func (r *Registry) fetchArgs(ctx context.Context, ref string) (json.RawMessage, error) {
	if r.Blobs == nil {
		return nil, Permanentf("envelope: argsRef: this worker has no blob store configured")
	}
	container, name, _ := SplitBlobRef("argsRef", ref) // validated by DecodeEnvelope
	data, _, err := r.Blobs(container).Get(ctx, name)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil, Permanentf("envelope: argsRef: blob %s does not exist", ref)
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: argsRef: fetch %s: %w", ref, err)
	}
	return data, nil
}

// parseArgs decodes raw into a T strictly and runs its validation.
func parseArgs[T any, PT interface {
	*T
	validate() error
}](raw json.RawMessage) (any, error) {
	var v T
	if len(raw) == 0 {
		return nil, errors.New("args: is required")
	}
	if err := strictUnmarshal(raw, &v, "args"); err != nil {
		return nil, err
	}
	if err := PT(&v).validate(); err != nil {
		return nil, err
	}
	return v, nil
}
