package azstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Store is one storage account reached through the Azure SDK. It is safe
// for concurrent use.
type Store struct {
	tables  *Tables
	queues  *azqueue.ServiceClient
	blobs   *service.Client
	timeout callTimeout
	// receiveRetry are the queue client's retry options with retries
	// off, for Receive (see Queue.Receive).
	receiveRetry policy.RetryOptions
}

var _ storeadapter.Store = (*Store)(nil)

// Default time bounds of every call (see Options). Without them a storage
// endpoint that accepts a connection and never answers would hang a call
// until its context ends, which for a background context is never.
const (
	// DefaultTryTimeout bounds one HTTP attempt: a try that has no complete
	// answer (body included) within it is abandoned and, within the SDK's
	// retry policy (3 retries by default), tried again. It is as long as
	// the service's own limit for a table operation; a blob Put or Get must
	// move its whole body within it.
	DefaultTryTimeout = 30 * time.Second
	// DefaultCallTimeout bounds one method call, retries and their delays
	// included.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultWaitNotice is how long a try waits for its answer before
	// Options.OnWait hears of it (or a quarter of the call timeout, when
	// that is shorter).
	DefaultWaitNotice = 5 * time.Second
)

// Options pass SDK client options through to the three clients (retry
// policy, transport, logging) and bound the time of every call. Nil client
// options keep the SDK defaults, except for the per-try timeout. The
// structs are copied, never changed.
//
// A call that runs out of time, on a try or as a whole, returns an error
// that wraps storeadapter.ErrUnavailable (and context.DeadlineExceeded):
// transient, so callers retry it like a 503.
type Options struct {
	Tables *aztables.ClientOptions
	Queues *azqueue.ClientOptions
	Blobs  *azblob.ClientOptions

	// TryTimeout bounds each HTTP attempt of every client whose own
	// Retry.TryTimeout is zero (a value set there wins). 0 means
	// DefaultTryTimeout; a negative value leaves tries unbounded.
	TryTimeout time.Duration
	// CallTimeout bounds each method call, retries included, on top of the
	// caller's context: a caller's earlier deadline still wins. 0 means
	// DefaultCallTimeout; a negative value leaves calls bounded only by
	// the caller's context.
	CallTimeout time.Duration

	// OnTry, if set, is called after every HTTP try of every client: with
	// nil when the service answered (whatever the status, but 408, 429 and
	// 5xx), and with an error wrapping storeadapter.ErrUnavailable when the
	// try failed in a way the SDK retries (no connection, no answer within
	// TryTimeout, 408, 429, 5xx; a 500 wraps storeadapter.ErrServiceFailed:
	// the service did answer). It lets a command say at once that
	// storage is not answering, before the SDK's retries of one call are
	// spent (8–10 s by default). The error holds no URL. It must be quick
	// and safe for concurrent use.
	OnTry func(err error)
	// OnWait, if set, is called while an HTTP try of any client waits for
	// its answer: once it has waited WaitNotice, then each time its wait
	// has doubled (5 s, 10 s, 20 s by default), until it is answered or
	// abandoned. It lets a command say what it is waiting for when an
	// endpoint accepts connections and does not answer, long before the
	// try's timeout. It must be quick and safe for concurrent use.
	OnWait func(Wait)
	// WaitNotice is the first wait OnWait hears of: 0 means
	// DefaultWaitNotice or a quarter of CallTimeout, whichever is shorter.
	WaitNotice time.Duration
}

// Wait describes an HTTP try that has not been answered yet, or a token
// the credential of NewWithCredential has not got yet (see
// Options.OnWait).
type Wait struct {
	// Service is "table", "queue" or "blob"; SignIn for a token.
	Service string
	// Host is the endpoint's host and port; never a path or query, which
	// may hold a SAS. "" for a token (the credential knows where it asks).
	Host string
	// Waited is how long the try has waited: WaitNotice, then twice that,
	// four times that, ….
	Waited time.Duration
}

// SignIn is the Wait.Service of a token the credential has not got yet.
const SignIn = "sign-in"

// Endpoints are the service URLs of one account, such as
// https://acct.table.core.windows.net/ or http://127.0.0.1:10002/devstoreaccount1.
type Endpoints struct {
	Table, Queue, Blob string
}

// AccountEndpoints returns the public-cloud endpoints of an account name.
func AccountEndpoints(account string) Endpoints {
	return endpointsFor("https", account, "core.windows.net")
}

func endpointsFor(protocol, account, suffix string) Endpoints {
	u := func(svc string) string { return protocol + "://" + account + "." + svc + "." + suffix + "/" }
	return Endpoints{Table: u("table"), Queue: u("queue"), Blob: u("blob")}
}

// DevelopmentConnectionString is what "UseDevelopmentStorage=true" stands
// for: Azurite's well-known account on its default loopback ports.
const DevelopmentConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
	"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
	"BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;" +
	"TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"

// errBadConnectionString never quotes the connection string: it holds a key.
var errBadConnectionString = errors.New("azstore: invalid connection string")

// NewFromConnectionString connects with an Azure Storage connection string:
// account name and key, a SAS token, or UseDevelopmentStorage=true (Azurite
// on its default ports). Explicit BlobEndpoint / QueueEndpoint /
// TableEndpoint entries override the ones derived from the account name.
// Errors name the missing or malformed part, never its value.
func NewFromConnectionString(conn string, o *Options) (*Store, error) {
	kv, err := parseConnectionString(conn)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(kv["usedevelopmentstorage"], "true") {
		if kv, err = parseConnectionString(DevelopmentConnectionString); err != nil {
			return nil, err
		}
	}
	account := kv["accountname"]
	ep := endpointsFor(cmp.Or(kv["defaultendpointsprotocol"], "https"), account, cmp.Or(kv["endpointsuffix"], "core.windows.net"))
	ep.Table = cmp.Or(kv["tableendpoint"], ep.Table)
	ep.Queue = cmp.Or(kv["queueendpoint"], ep.Queue)
	ep.Blob = cmp.Or(kv["blobendpoint"], ep.Blob)
	if account == "" && (kv["tableendpoint"] == "" || kv["queueendpoint"] == "" || kv["blobendpoint"] == "") {
		return nil, fmt.Errorf("%w: AccountName is missing (or give all three service endpoints)", errBadConnectionString)
	}
	switch {
	case kv["accountkey"] != "":
		if account == "" {
			return nil, fmt.Errorf("%w: AccountKey needs AccountName", errBadConnectionString)
		}
		return NewWithSharedKey(ep, account, kv["accountkey"], o)
	case kv["sharedaccesssignature"] != "":
		return NewWithSAS(ep, kv["sharedaccesssignature"], o)
	}
	return nil, fmt.Errorf("%w: it needs AccountKey or SharedAccessSignature (use NewWithCredential for Entra ID)", errBadConnectionString)
}

// parseConnectionString splits "k=v;k=v" into lower-case keys and values.
func parseConnectionString(conn string) (map[string]string, error) {
	kv := make(map[string]string)
	for part := range strings.SplitSeq(conn, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%w: a part has no '=' (expected Key=Value;...)", errBadConnectionString)
		}
		kv[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	if len(kv) == 0 {
		return nil, fmt.Errorf("%w: it is empty", errBadConnectionString)
	}
	return kv, nil
}

// NewWithSharedKey connects with an account name and key.
func NewWithSharedKey(ep Endpoints, account, key string, o *Options) (*Store, error) {
	tcred, err := aztables.NewSharedKeyCredential(account, key)
	if err != nil {
		return nil, errors.New("azstore: invalid account key (it must be base64)")
	}
	qcred, err := azqueue.NewSharedKeyCredential(account, key)
	if err != nil {
		return nil, errors.New("azstore: invalid account key (it must be base64)")
	}
	bcred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		return nil, errors.New("azstore: invalid account key (it must be base64)")
	}
	o = o.copy()
	t, err1 := aztables.NewServiceClientWithSharedKey(ep.Table, tcred, o.Tables)
	q, err2 := azqueue.NewServiceClientWithSharedKeyCredential(ep.Queue, qcred, o.Queues)
	b, err3 := service.NewClientWithSharedKeyCredential(ep.Blob, bcred, blobServiceOptions(o.Blobs))
	return newStore(t, q, b, o, errors.Join(err1, err2, err3))
}

// NewWithCredential connects with a Microsoft Entra ID token credential,
// such as azidentity.NewDefaultAzureCredential (managed identity in
// production). The identity needs the Storage Table Data Contributor, Queue
// Data Message Processor (or Contributor) and Blob Data Contributor roles.
//
// A failure to get a token that waiting will not cure (no identity found,
// the authority refusing it) is an error wrapping
// storeadapter.ErrAuthentication, not a transient one.
func NewWithCredential(ep Endpoints, cred azcore.TokenCredential, o *Options) (*Store, error) {
	o = o.copy()
	cred = signIn{cred: cred, onWait: o.OnWait, notice: o.WaitNotice}
	t, err1 := aztables.NewServiceClient(ep.Table, cred, o.Tables)
	q, err2 := azqueue.NewServiceClient(ep.Queue, cred, o.Queues)
	b, err3 := service.NewClient(ep.Blob, cred, blobServiceOptions(o.Blobs))
	return newStore(t, q, b, o, errors.Join(err1, err2, err3))
}

// errBadSAS never quotes the token: it is a credential.
var errBadSAS = errors.New("azstore: invalid SAS token")

// NewWithSAS connects with a shared access signature: the query string of
// an account SAS for the blob, queue and table services ("sv=…&ss=bqt&
// srt=sco&sp=…&se=…&sig=…", a leading "?" is allowed), which each client
// sends on every request (the SDKs' NewClientWithNoCredential with the
// token in the service URL). Errors never quote the token.
func NewWithSAS(ep Endpoints, sas string, o *Options) (*Store, error) {
	sas = strings.TrimPrefix(strings.TrimSpace(sas), "?")
	query, err := url.ParseQuery(sas)
	switch {
	case sas == "":
		return nil, fmt.Errorf("%w: it is empty", errBadSAS)
	case err != nil:
		return nil, fmt.Errorf("%w: it is not a URL query string (expected sv=…&sig=…)", errBadSAS)
	case query.Get("sig") == "" || query.Get("sv") == "":
		return nil, fmt.Errorf("%w: it lacks sv= or sig= (expected the query string of an account SAS)", errBadSAS)
	}
	o = o.copy()
	withSAS := func(u string) string { return strings.TrimRight(u, "/") + "/?" + sas }
	t, err1 := aztables.NewServiceClientWithNoCredential(withSAS(ep.Table), o.Tables)
	q, err2 := azqueue.NewServiceClientWithNoCredential(withSAS(ep.Queue), o.Queues)
	b, err3 := service.NewClientWithNoCredential(withSAS(ep.Blob), blobServiceOptions(o.Blobs))
	return newStore(t, q, b, o, errors.Join(err1, err2, err3))
}

func newStore(t *aztables.ServiceClient, q *azqueue.ServiceClient, b *service.Client, o *Options, err error) (*Store, error) {
	if err != nil {
		// SDK constructor errors can quote the endpoint URL, which may hold
		// a SAS token: say only that an endpoint was rejected.
		return nil, errors.New("azstore: an endpoint URL was rejected by the SDK (check the table, queue and blob endpoints)")
	}
	timeout := callTimeout(o.CallTimeout)
	receiveRetry := o.Queues.Retry
	receiveRetry.MaxRetries = -1
	return &Store{tables: &Tables{svc: t, callTimeout: timeout}, queues: q, blobs: b, timeout: timeout, receiveRetry: receiveRetry}, nil
}

// copy returns a copy of o whose option structs are copies too, so the SDK
// never changes the caller's, with the defaults of TryTimeout and
// CallTimeout filled in and the try timeout set in each client's retry
// options where the caller left it zero.
func (o *Options) copy() *Options {
	c := &Options{Tables: &aztables.ClientOptions{}, Queues: &azqueue.ClientOptions{}, Blobs: &azblob.ClientOptions{}}
	if o != nil {
		*c = Options{Tables: c.Tables, Queues: c.Queues, Blobs: c.Blobs, TryTimeout: o.TryTimeout, CallTimeout: o.CallTimeout, OnTry: o.OnTry,
			OnWait: o.OnWait, WaitNotice: o.WaitNotice}
		if o.Tables != nil {
			*c.Tables = *o.Tables
		}
		if o.Queues != nil {
			*c.Queues = *o.Queues
		}
		if o.Blobs != nil {
			*c.Blobs = *o.Blobs
		}
	}
	if c.TryTimeout == 0 {
		c.TryTimeout = DefaultTryTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	// New slices: appending to the caller's could write into its arrays.
	c.Tables.PerCallPolicies = append(slices.Clone(c.Tables.PerCallPolicies), batchKeyQuotes{})
	if c.WaitNotice == 0 {
		c.WaitNotice = DefaultWaitNotice
		if c.CallTimeout > 0 {
			c.WaitNotice = min(c.WaitNotice, c.CallTimeout/4)
		}
	}
	clients := []struct {
		service string
		co      *policy.ClientOptions
	}{{"table", &c.Tables.ClientOptions}, {"queue", &c.Queues.ClientOptions}, {"blob", &c.Blobs.ClientOptions}}
	for _, cl := range clients {
		if c.OnTry != nil || c.OnWait != nil {
			cl.co.PerRetryPolicies = slices.Clone(cl.co.PerRetryPolicies)
		}
		if c.OnTry != nil {
			cl.co.PerRetryPolicies = append(cl.co.PerRetryPolicies, tryObserver(c.OnTry))
		}
		if c.OnWait != nil {
			cl.co.PerRetryPolicies = append(cl.co.PerRetryPolicies, waitWatch{service: cl.service, notice: c.WaitNotice, f: c.OnWait})
		}
	}
	for _, r := range []*policy.RetryOptions{&c.Tables.Retry, &c.Queues.Retry, &c.Blobs.Retry} {
		if r.TryTimeout == 0 && c.TryTimeout > 0 {
			r.TryTimeout = c.TryTimeout
		}
	}
	return c
}

// callTimeout is Options.CallTimeout once defaulted: the bound of one
// method call (none when not positive).
type callTimeout time.Duration

// bound derives the context of one call: the caller's, ended after the
// call timeout at the latest.
func (d callTimeout) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(d))
}

func blobServiceOptions(o *azblob.ClientOptions) *service.ClientOptions {
	return (*service.ClientOptions)(o)
}

// Tables returns the table service.
func (s *Store) Tables() storeadapter.Tables { return s.tables }

// Queue returns a handle on the named queue.
func (s *Store) Queue(name string) storeadapter.Queue {
	return &Queue{name: name, c: s.queues.NewQueueClient(name), callTimeout: s.timeout, receiveRetry: s.receiveRetry}
}

// Container returns a handle on the named blob container.
func (s *Store) Container(name string) storeadapter.Blobs {
	return &Container{name: name, c: s.blobs.NewContainerClient(name), callTimeout: s.timeout}
}

// tryObserver reports the outcome of every HTTP try to Options.OnTry.
type tryObserver func(error)

func (f tryObserver) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	switch {
	case errors.Is(err, context.Canceled): // the caller gave up: no news about storage
	case err != nil:
		// A try that failed before storage was asked (the credential
		// could not get a token) says nothing about storage either.
		if err := interpretError("try", err); storeadapter.IsTransient(err) {
			f(err)
		}
	case resp.StatusCode == http.StatusInternalServerError:
		f(fmt.Errorf("azstore: try: %w (HTTP %d)", storeadapter.ErrServiceFailed, resp.StatusCode))
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		f(fmt.Errorf("azstore: try: %w (HTTP %d)", storeadapter.ErrUnavailable, resp.StatusCode))
	default:
		f(nil)
	}
	return resp, err
}

// waitWatch tells Options.OnWait about a try still waiting for its answer
// (see Options.OnWait).
type waitWatch struct {
	service string
	notice  time.Duration
	f       func(Wait)
}

func (w waitWatch) Do(req *policy.Request) (*http.Response, error) {
	// The try includes getting the token, which the credential's own
	// watch reports (see signIn): while it runs, the try's notices are
	// held back, so a silent token authority is not said to be storage.
	si := &signingIn{}
	req = req.WithContext(context.WithValue(req.Raw().Context(), signingInKey{}, si))
	defer watchWait(Wait{Service: w.service, Host: req.Raw().URL.Host}, w.notice, func(wt Wait) {
		if si.n.Load() == 0 {
			w.f(wt)
		}
	})()
	return req.Next()
}

// signingInKey is the context key of a try's signingIn.
type signingInKey struct{}

// signingIn counts the credential's token requests running for one try.
type signingIn struct{ n atomic.Int32 }

// watchWait tells f about a wait that has lasted notice, and again each
// time it has doubled, until the function it returns is called (when the
// wait is over; no call to f follows).
func watchWait(w Wait, notice time.Duration, f func(Wait)) (over func()) {
	var mu sync.Mutex
	ended := false
	next := notice
	mu.Lock()
	defer mu.Unlock()
	var timer *time.Timer
	timer = time.AfterFunc(next, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		w.Waited = next
		f(w)
		timer.Reset(next) // fires once the wait is twice as long
		next *= 2
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		timer.Stop()
	}
}
