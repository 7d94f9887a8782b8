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
	"strings"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/internal/text"
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
	// for a message (see Client.Enqueue). Default "<queue>-args" (the
	// queue's name cut to fit a container name's 63 characters).
	ArgsContainer string
	// PlainJSON sends envelopes as JSON text instead of the base64 of it
	// (the default, which every Azure Storage queue client can read).
	PlainJSON bool
	// Concurrency is how many messages EnqueueMany and a Stream send at
	// once. Default 16, 1-1024.
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
	if c.ArgsContainer == "" {
		c.ArgsContainer = defaultArgsContainer(c.Queue)
	}
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

// defaultArgsContainer is Config.ArgsContainer's default for queue:
// "<queue>-args", the queue's name cut (and any hyphen left at the cut
// dropped) so that the whole fits a container name. Two queues whose names
// share their first 58 characters share it, which is harmless: a blob's
// name begins with its operation's id and ends with the hash of its
// content.
func defaultArgsContainer(queue string) string {
	const suffix, limit = "-args", 63
	if len(queue)+len(suffix) > limit {
		queue = strings.TrimRight(queue[:limit-len(suffix)], "-")
	}
	return queue + suffix
}

// Client sends jobs to tablekeeper's workers. It is safe for concurrent
// use.
type Client struct {
	cfg   Config
	queue storeadapter.Queue
	// reg decodes what the client sends as a worker would: every kind's
	// strict parser and Validate, and the blob of an argsRef read from
	// the store.
	reg *jobs.Registry
}

// New returns a client of cfg.Store (see Config). It calls no service.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, queue: cfg.Store.Queue(cfg.Queue), reg: catalog.ArgsRegistry(cfg.Store.Container)}, nil
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
		return o, &InvalidError{Err: fmt.Errorf("Delay: must be 0-%v, got %v", storeadapter.MaxVisibility, o.delay)}
	}
	if o.ttl != 0 && o.ttl != storeadapter.NeverExpire && (o.ttl < time.Second || o.ttl <= o.delay) {
		return o, &InvalidError{Err: fmt.Errorf("TTL: must be at least 1s and longer than Delay (%v), or storeadapter.NeverExpire, got %v", o.delay, o.ttl)}
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

// InvalidError is the error of a job refused before anything was sent
// for it: an option out of its range, an operation id that breaks the
// rule, or an envelope or args the worker would refuse on sight. Err
// names the option ("ID: …", "Delay: …") or, worded as the worker words
// it, the field and the rule ("args.pk: is required", "envelope:
// traceparent: …"). Sending the same job again cannot succeed.
type InvalidError struct {
	// OpID is the job's operation id; "" when the error is about an
	// option or the id itself.
	OpID string
	Err  error
}

func (e *InvalidError) Error() string {
	if e.OpID == "" {
		return "client: " + e.Err.Error()
	}
	return "client: op " + e.OpID + ": " + e.Err.Error()
}

func (e *InvalidError) Unwrap() error { return e.Err }

// Message is one job checked as the worker will check it and encoded,
// ready to send: Prepare and PrepareEnvelope make it; Send and
// Stream.Send send it. Sending one twice makes two messages of one
// operation, which the workers carry out as one.
type Message struct {
	// OpID is the job's operation id.
	OpID string
	// ArgsRef, when the arguments were too large for a message, is the
	// blob ("container/name") that holds them.
	ArgsRef string
	text    string
	opts    storeadapter.SendOptions
}

// Enqueue sends one job: the envelope of args (validated exactly as the
// worker will: the kind's strict parser and Validate), under the
// operation id of the ID option or a new one, base64-encoded unless
// Config.PlainJSON. The work queue is created on its first not-found. It
// is Prepare and then Send; an invalid job's error is an *InvalidError.
//
// Arguments that would make the message exceed Azure's 64 KiB are put in
// a blob, <ArgsContainer>/<op id>/<sha256 of the args>.json, and the
// message carries an argsRef to it (the container is created when
// missing). The worker reads it; nothing deletes it: give the container a
// lifecycle rule that deletes blobs older than the queue's message time
// to live (7 days by default; see docs/client.md).
func (c *Client) Enqueue(ctx context.Context, args jobs.Args, opts ...Option) (Result, error) {
	m, err := c.Prepare(ctx, args, opts...)
	if err != nil {
		return Result{OpID: m.OpID, ArgsRef: m.ArgsRef}, err
	}
	return c.Send(ctx, m)
}

// Prepare does all Enqueue does but the send: it checks the job (its
// errors are *InvalidError), gives it its operation id, puts arguments
// too large for a message in a blob, and encodes it. The Message it
// returns holds the operation id even when the job is invalid (unless
// an option is).
func (c *Client) Prepare(ctx context.Context, args jobs.Args, opts ...Option) (Message, error) {
	o, err := apply(opts)
	if err != nil {
		return Message{}, err
	}
	env, res, err := c.envelope(ctx, args, o)
	m := Message{OpID: res.OpID, ArgsRef: res.ArgsRef, opts: sendOptions(o)}
	if err == nil {
		m.text, err = c.encode(env)
	}
	return m, err
}

// PrepareEnvelope prepares an envelope made elsewhere (read from a file,
// received from another producer) to be sent exactly as it is: checked as
// the worker will check it — the envelope's rules, then its kind's strict
// parser and Validate, the arguments read from the store when it names an
// argsRef — and encoded, never changed: no operation id is made for it,
// no argument moves to a blob, and an envelope too large for a message is
// refused. Its errors are *InvalidError, except a failure to read an
// argsRef's blob for a reason other than its absence. Only the Delay and
// TTL options apply: the envelope carries its own id and trace context.
func (c *Client) PrepareEnvelope(ctx context.Context, env jobs.Envelope, opts ...Option) (Message, error) {
	m := Message{OpID: env.ID, ArgsRef: env.ArgsRef}
	o, err := apply(opts)
	if err == nil && (o.id != "" || o.ids != nil || o.traceParent != "") {
		err = &InvalidError{Err: errors.New("ID, IDs and TraceParent: an envelope carries its own id and trace context")}
	}
	if err == nil {
		err = check(ctx, c.reg, env)
	}
	if err == nil {
		m.text, err = c.encode(env)
	}
	m.opts = sendOptions(o)
	return m, err
}

// Send sends a prepared job to the work queue, creating the queue on its
// first not-found.
func (c *Client) Send(ctx context.Context, m Message) (Result, error) {
	res := Result{OpID: m.OpID, ArgsRef: m.ArgsRef}
	if m.text == "" {
		return res, errors.New("client: Send: the Message was not made by Prepare or PrepareEnvelope")
	}
	sent, err := c.send(ctx, m.text, m.opts)
	if err != nil {
		return res, fmt.Errorf("client: op %s: %w", m.OpID, err)
	}
	res.MessageID = sent.ID
	return res, nil
}

// Check checks a job as Enqueue checks it before it sends anything — its
// options, the operation id ID gives (if any) and its args, exactly as
// the worker will check them — without a client and calling no service:
// for a producer that reports an invalid job before it connects to
// storage (the enqueue command). Its errors are *InvalidError.
func Check(ctx context.Context, args jobs.Args, opts ...Option) error {
	o, err := apply(opts)
	if err != nil {
		return err
	}
	_, err = newEnvelope(ctx, argsRegistry(), cmp.Or(o.id, "op-check"), args, o.traceParent)
	var ie *InvalidError
	if o.id == "" && errors.As(err, &ie) {
		ie.OpID = "" // not the job's: it has none yet
	}
	return err
}

// argsRegistry decodes jobs as a worker would, for Check.
var argsRegistry = sync.OnceValue(func() *jobs.Registry { return catalog.ArgsRegistry(nil) })

// envelope builds and checks the envelope of args under o, putting large
// arguments in a blob (see Enqueue).
func (c *Client) envelope(ctx context.Context, args jobs.Args, o options) (jobs.Envelope, Result, error) {
	id := o.id
	if id == "" {
		id = NewOpID(c.cfg.Clock.Now())
	}
	res := Result{OpID: id}
	env, err := newEnvelope(ctx, c.reg, id, args, o.traceParent)
	if err != nil || c.fits(env) {
		return env, res, err
	}
	res.ArgsRef, err = c.putArgs(ctx, id, env.Args)
	if err != nil {
		return env, res, err
	}
	env.Args, env.ArgsRef = nil, res.ArgsRef
	return env, res, nil
}

// newEnvelope returns the envelope of args under operation id id, checked
// as reg decodes it.
func newEnvelope(ctx context.Context, reg *jobs.Registry, id string, args jobs.Args, traceParent string) (jobs.Envelope, error) {
	if !opIDRE.MatchString(id) {
		return jobs.Envelope{}, &InvalidError{Err: fmt.Errorf("ID: must be 1-128 characters of A-Za-z0-9._:-, got %q", text.Truncate(id, 140))}
	}
	if args == nil {
		return jobs.Envelope{}, &InvalidError{Err: errors.New("args: is required")}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return jobs.Envelope{}, &InvalidError{OpID: id, Err: fmt.Errorf("args: cannot be encoded: %w", err)}
	}
	env := jobs.Envelope{V: 1, ID: id, Kind: args.Kind(), Args: raw, TraceParent: traceParent}
	return env, check(ctx, reg, env)
}

// check decodes env as the worker will with reg: the envelope's rules,
// then the kind's strict parser and Validate. What the worker would
// refuse is an *InvalidError.
func check(ctx context.Context, reg *jobs.Registry, env jobs.Envelope) error {
	b, err := json.Marshal(env)
	if err != nil {
		return &InvalidError{OpID: env.ID, Err: err}
	}
	if _, err := reg.Decode(ctx, storeadapter.Message{Text: string(b)}); err != nil {
		if jobs.IsPermanent(err) {
			return &InvalidError{OpID: env.ID, Err: err}
		}
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
// itself with Config.PlainJSON. An envelope that does not fit a message
// is an *InvalidError.
func (c *Client) encode(env jobs.Envelope) (string, error) {
	if !c.cfg.PlainJSON {
		text, err := jobs.Encode(env)
		if err != nil {
			return "", &InvalidError{OpID: env.ID, Err: err}
		}
		return text, nil
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", &InvalidError{OpID: env.ID, Err: err}
	}
	if len(b) > storeadapter.MaxMessageBytes {
		return "", &InvalidError{OpID: env.ID, Err: fmt.Errorf("the envelope is %d bytes, over the %d-byte message limit", len(b), storeadapter.MaxMessageBytes)}
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

// send sends text, creating the work queue on its first not-found
// (idempotent.CreateOnMissing). Its errors say which call failed.
func (c *Client) send(ctx context.Context, text string, so storeadapter.SendOptions) (sent storeadapter.Sent, err error) {
	q := c.queue
	create := func(ctx context.Context) error {
		if err := q.Create(ctx); err != nil {
			return fmt.Errorf("create queue %s: %w", q.Name(), err)
		}
		return nil
	}
	err = idempotent.CreateOnMissing(ctx, create, func(ctx context.Context) error {
		if sent, err = q.Send(ctx, text, so); err != nil {
			return fmt.Errorf("send to queue %s: %w", q.Name(), err)
		}
		return nil
	})
	return sent, err
}
