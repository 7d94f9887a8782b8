package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Defaults and limits of Config.
const (
	DefaultQueue       = "tablekeeper"
	DefaultConcurrency = 16
	MaxConcurrency     = 1024
	DefaultWindow      = 30 * time.Second
	MinWindow          = 2 * time.Second
	MaxWindow          = jobs.MaxOutboxWindow
)

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// Store is the storage account: azstore on Azure (see Connect), or
	// localstore in tests. Required.
	Store storeadapter.Store
	// Queue is the work queue the workers poll. Default "tablekeeper".
	Queue string
	// ArgsContainer is the blob container that holds arguments too large
	// for a message (see Client.Enqueue). Default "<queue>-args".
	ArgsContainer string
	// PlainJSON sends envelopes as JSON text instead of the base64 of it
	// (the default, which every Azure Storage queue client can read).
	PlainJSON bool
	// Concurrency is how many messages EnqueueMany sends at once.
	// Default 16, 1-1024.
	Concurrency int
	// Window is a transaction's commit window (see Tx): how long its jobs
	// stay hidden, waiting for the transaction. Default 30s, 2s-1h.
	Window time.Duration
	// Clock tells the time (generated operation ids, the commit window);
	// nil is the wall clock.
	Clock clock.Clock
}

// validate fills the defaults and checks each field, naming it.
func (c *Config) validate() error {
	c.Queue = cmp.Or(c.Queue, DefaultQueue)
	c.ArgsContainer = cmp.Or(c.ArgsContainer, c.Queue+"-args")
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.Clock = clock.Or(c.Clock)
	switch {
	case c.Store == nil:
		return errors.New("client: Config.Store is required (or use Connect)")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("client: Config.Concurrency: must be 1-%d, got %d", MaxConcurrency, c.Concurrency)
	case c.Window < MinWindow || c.Window > MaxWindow:
		return fmt.Errorf("client: Config.Window: must be %v-%v, got %v", MinWindow, MaxWindow, c.Window)
	}
	if err := storeadapter.ValidateQueueName(c.Queue); err != nil {
		return fmt.Errorf("client: Config.Queue: %w", err)
	}
	if err := storeadapter.ValidateContainerName(c.ArgsContainer); err != nil {
		return fmt.Errorf("client: Config.ArgsContainer: %w", err)
	}
	return nil
}

// Client sends jobs to tablekeeper's workers. It is safe for concurrent
// use.
type Client struct {
	cfg   Config
	queue storeadapter.Queue
	// reg decodes what the client sends as a worker would: every kind's
	// strict parser and Validate.
	reg *jobs.Registry
}

// New returns a client of cfg.Store (see Config). It calls no service.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, queue: cfg.Store.Queue(cfg.Queue), reg: catalog.ArgsRegistry(nil)}, nil
}

// Queue returns the name of the work queue.
func (c *Client) Queue() string { return c.cfg.Queue }

// Result is what Enqueue did.
type Result struct {
	// OpID is the operation id: the idempotency key of the job.
	OpID string
	// MessageID is the queue message's id; "" when it was not sent.
	MessageID string
	// ArgsRef, when the arguments were too large for a message, is the
	// blob ("container/name") that holds them.
	ArgsRef string
}

// Option tunes one Enqueue (or every job of an EnqueueMany, or one job of
// a Tx).
type Option func(*options)

type options struct {
	id          string
	ids         []string
	delay, ttl  time.Duration
	traceParent string
}

// sendOptions are the queue's options of o.
func sendOptions(o options) storeadapter.SendOptions {
	return storeadapter.SendOptions{VisibilityDelay: o.delay, TTL: o.ttl}
}

// ID sets the operation id (1-128 characters of A-Za-z0-9._:-): the
// job's idempotency key, which a retry of the same operation must reuse.
// Without it, Enqueue makes one (see NewOpID).
func ID(id string) Option { return func(o *options) { o.id = id } }

// Delay hides the message for d (0-7 days) after it is sent.
func Delay(d time.Duration) Option { return func(o *options) { o.delay = d } }

// TTL is how long the message lives in the queue: at least 1s, or
// storeadapter.NeverExpire. Default 7 days.
func TTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// TraceParent attaches a W3C trace context the worker logs with the job.
func TraceParent(tp string) Option { return func(o *options) { o.traceParent = tp } }

// apply collects opts and checks them, naming the option.
func apply(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.delay < 0 || o.delay > storeadapter.MaxVisibility {
		return o, fmt.Errorf("client: Delay: must be 0-%v, got %v", storeadapter.MaxVisibility, o.delay)
	}
	if o.ttl != 0 && o.ttl != storeadapter.NeverExpire && (o.ttl < time.Second || o.ttl <= o.delay) {
		return o, fmt.Errorf("client: TTL: must be at least 1s and longer than Delay (%v), or storeadapter.NeverExpire, got %v", o.delay, o.ttl)
	}
	return o, nil
}

// opIDRE is the rule of an operation id (jobs.Envelope.ID).
var opIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// NewOpID returns a fresh operation id: "op-", the UTC time to the second
// and 8 random hex digits, such as "op-20261121T100000Z-1f3a9c0b".
func NewOpID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return "op-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// Enqueue sends one job: the envelope of args (validated exactly as the
// worker will: the kind's strict parser and Validate), under the
// operation id of the ID option or a new one, base64-encoded unless
// Config.PlainJSON. The work queue is created on its first not-found.
//
// Arguments that would make the message exceed Azure's 64 KiB are put in
// a blob, <ArgsContainer>/<op id>/<sha256 of the args>.json, and the
// message carries an argsRef to it (the container is created when
// missing). The worker reads it; nothing deletes it: give the container a
// lifecycle rule that deletes blobs older than the queue's message time
// to live (7 days by default; see docs/client.md).
func (c *Client) Enqueue(ctx context.Context, args jobs.Args, opts ...Option) (Result, error) {
	o, err := apply(opts)
	if err != nil {
		return Result{}, err
	}
	env, res, err := c.envelope(ctx, args, o)
	if err != nil {
		return res, err
	}
	text, err := c.encode(env)
	if err != nil {
		return res, err
	}
	sent, err := c.send(ctx, text, sendOptions(o))
	if err != nil {
		return res, fmt.Errorf("client: send op %s: %w", res.OpID, err)
	}
	res.MessageID = sent.ID
	return res, nil
}

// envelope builds and checks the envelope of args under o, putting large
// arguments in a blob (see Enqueue).
func (c *Client) envelope(ctx context.Context, args jobs.Args, o options) (jobs.Envelope, Result, error) {
	id := o.id
	if id == "" {
		id = NewOpID(c.cfg.Clock.Now())
	}
	res := Result{OpID: id}
	if !opIDRE.MatchString(id) {
		return jobs.Envelope{}, res, fmt.Errorf("client: ID: must be 1-128 characters of A-Za-z0-9._:-, got %q", id)
	}
	if args == nil {
		return jobs.Envelope{}, res, errors.New("client: args: is required")
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return jobs.Envelope{}, res, fmt.Errorf("client: encode the args of op %s: %w", id, err)
	}
	env := jobs.Envelope{V: 1, ID: id, Kind: args.Kind(), Args: raw, TraceParent: o.traceParent}
	if err := c.check(ctx, env); err != nil {
		return env, res, err
	}
	if c.fits(env) {
		return env, res, nil
	}
	res.ArgsRef, err = c.putArgs(ctx, id, raw)
	if err != nil {
		return env, res, err
	}
	env.Args, env.ArgsRef = nil, res.ArgsRef
	return env, res, nil
}

// check decodes env as the worker will: the envelope's rules, then the
// kind's strict parser and Validate.
func (c *Client) check(ctx context.Context, env jobs.Envelope) error {
	b, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("client: encode op %s: %w", env.ID, err)
	}
	if _, err := c.reg.Decode(ctx, storeadapter.Message{Text: string(b)}); err != nil {
		return fmt.Errorf("client: op %s: %w", env.ID, err)
	}
	return nil
}

// fits reports whether env encodes within a message.
func (c *Client) fits(env jobs.Envelope) bool {
	b, err := json.Marshal(env)
	if err != nil {
		return false
	}
	n := len(b)
	if !c.cfg.PlainJSON {
		n = base64.StdEncoding.EncodedLen(n)
	}
	return n <= storeadapter.MaxMessageBytes
}

// encode renders env as message text: base64 of its JSON, or the JSON
// itself with Config.PlainJSON.
func (c *Client) encode(env jobs.Envelope) (string, error) {
	if !c.cfg.PlainJSON {
		return jobs.Encode(env)
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	if len(b) > storeadapter.MaxMessageBytes {
		return "", fmt.Errorf("client: op %s: the envelope is %d bytes, over the %d-byte message limit", env.ID, len(b), storeadapter.MaxMessageBytes)
	}
	return string(b), nil
}

// putArgs writes arguments too large for a message to their blob
// (creating the container when missing) and returns its argsRef.
func (c *Client) putArgs(ctx context.Context, id string, raw []byte) (string, error) {
	sum := sha256.Sum256(raw)
	name := id + "/" + hex.EncodeToString(sum[:]) + ".json"
	blobs := c.cfg.Store.Container(c.cfg.ArgsContainer)
	put := func() error {
		_, err := blobs.Put(ctx, name, raw, storeadapter.PutOptions{ContentType: "application/json"})
		return err
	}
	err := put()
	if errors.Is(err, storeadapter.ErrContainerNotFound) {
		if err = blobs.Create(ctx); err == nil {
			err = put()
		}
	}
	if err != nil {
		return "", fmt.Errorf("client: op %s: put its args in %s/%s: %w", id, c.cfg.ArgsContainer, name, err)
	}
	return c.cfg.ArgsContainer + "/" + name, nil
}

// send sends text, creating the work queue on its first not-found.
func (c *Client) send(ctx context.Context, text string, so storeadapter.SendOptions) (storeadapter.Sent, error) {
	sent, err := c.queue.Send(ctx, text, so)
	if errors.Is(err, storeadapter.ErrQueueNotFound) {
		if err = c.queue.Create(ctx); err == nil {
			sent, err = c.queue.Send(ctx, text, so)
		}
	}
	return sent, err
}
