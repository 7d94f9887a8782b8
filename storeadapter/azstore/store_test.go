package azstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
	"github.com/tablekeeper/tablekeeper/test/netfault"
)

// TestConnectionStringErrors checks that malformed connection strings are
// refused with an error that names the problem and never quotes the key.
func TestConnectionStringErrors(t *testing.T) {
	const key = "c2VjcmV0LWtleS1kby1ub3QtcHJpbnQ="
	cases := []struct{ conn, want string }{
		{"", "empty"},
		{"AccountName=a;" + strings.TrimRight(key, "="), "no '='"},
		{"AccountKey=" + key, "AccountName"},
		{"AccountName=acct", "AccountKey or SharedAccessSignature"},
		{"AccountName=acct;AccountKey=not!base64" + key, "base64"},
	}
	for _, c := range cases {
		_, err := azstore.NewFromConnectionString(c.conn, nil)
		if err == nil {
			t.Fatalf("NewFromConnectionString(%d chars) succeeded, want an error mentioning %q", len(c.conn), c.want)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %q does not mention %q", err, c.want)
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("error quotes the account key: %q", err)
		}
	}
	for _, ok := range []string{"UseDevelopmentStorage=true", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + key + ";EndpointSuffix=core.windows.net",
		"TableEndpoint=https://t/;QueueEndpoint=https://q/;BlobEndpoint=https://b/;SharedAccessSignature=sv=2024&sig=abc"} {
		if _, err := azstore.NewFromConnectionString(ok, nil); err != nil {
			t.Errorf("valid connection string refused: %v", err)
		}
	}
}

// TestSASNotInErrors connects with a SAS token to a port nobody listens on
// and checks the transport error is transient and does not quote the SAS.
func TestSASNotInErrors(t *testing.T) {
	const sig = "sig=TOPSECRETSIGNATURE"
	conn := "TableEndpoint=http://127.0.0.1:1/a;QueueEndpoint=http://127.0.0.1:1/a;BlobEndpoint=http://127.0.0.1:1/a;SharedAccessSignature=sv=2024&" + sig
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}}
	s, err := azstore.NewFromConnectionString(conn, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Tables().GetEntity(context.Background(), "table1", "p", "r")
	if !errors.Is(err, storeadapter.ErrUnavailable) || !storeadapter.IsTransient(err) {
		t.Fatalf("GetEntity on a closed port = %v, want a transient ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "TOPSECRET") {
		t.Fatalf("error quotes the SAS: %v", err)
	}
}

type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultClient.Do(r)
}

// TestOptionsPassThrough plugs a transport into the table client options
// and checks the store uses it, without changing the caller's struct.
func TestOptionsPassThrough(t *testing.T) {
	if emulator == nil {
		t.Skip(azurite.EnvSkip + "=1: Azurite-backed test skipped on request")
	}
	tr := &countingTransport{}
	opts := &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Transport: tr}}
	before := *opts
	s, err := azstore.NewFromConnectionString(emulator.ConnectionString, &azstore.Options{Tables: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tables().CreateTable(context.Background(), fmt.Sprintf("optspass%d", time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	if tr.n.Load() == 0 {
		t.Fatal("the table client did not use the transport passed in its options")
	}
	if opts.Transport != before.Transport || len(opts.PerCallPolicies) != len(before.PerCallPolicies) || len(opts.PerRetryPolicies) != len(before.PerRetryPolicies) {
		t.Fatal("the caller's options struct was changed")
	}
}

// hangingEndpoints listens on a loopback port, accepts every connection and
// never answers, like a storage endpoint that hangs. It returns a
// connection string whose three services point there.
func hangingEndpoints(t *testing.T) string {
	t.Helper()
	return endpointsAt(netfault.Silent(t))
}

// endpointsAt returns a connection string for the well-known development
// account whose three services are at addr.
func endpointsAt(addr string) string {
	u := "http://" + addr + "/" + azurite.Account
	return "AccountName=" + azurite.Account + ";AccountKey=" + azurite.Key +
		";TableEndpoint=" + u + ";QueueEndpoint=" + u + ";BlobEndpoint=" + u
}

// fastRetries is client options with one quick retry.
func fastRetries() policy.ClientOptions {
	return policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}}
}

// storeCalls are one table, transaction, queue and blob call each, so a
// test covers every client.
var storeCalls = []struct {
	name string
	call func(ctx context.Context, s *azstore.Store) error
}{
	{"table GetEntity", func(ctx context.Context, s *azstore.Store) error {
		_, err := s.Tables().GetEntity(ctx, "table1", "p", "r")
		return err
	}},
	{"table Transact", func(ctx context.Context, s *azstore.Store) error {
		return s.Tables().Transact(ctx, "table1", []storeadapter.TableOp{{Action: storeadapter.TxUpsertMerge, Entity: storeadapter.Entity{PartitionKey: "p", RowKey: "r"}}})
	}},
	{"queue Receive", func(ctx context.Context, s *azstore.Store) error {
		_, err := s.Queue("queue1").Receive(ctx, 1, time.Minute)
		return err
	}},
	{"blob Put", func(ctx context.Context, s *azstore.Store) error {
		_, err := s.Container("container1").Put(ctx, "b", []byte("data"), storeadapter.PutOptions{})
		return err
	}},
	{"blob Get", func(ctx context.Context, s *azstore.Store) error {
		_, _, err := s.Container("container1").Get(ctx, "b")
		return err
	}},
}

// checkBounded runs every call of storeCalls on a store built with o
// against conn, and checks each returns a transient ErrUnavailable within
// limit and, when min is set, not before it. A call that has not returned
// by limit fails the test at once.
func checkBounded(t *testing.T, conn string, o *azstore.Options, minWait, limit time.Duration) {
	t.Helper()
	s, err := azstore.NewFromConnectionString(conn, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range storeCalls {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- c.call(context.Background(), s) }()
		select {
		case err := <-done:
			elapsed := time.Since(start)
			if !errors.Is(err, storeadapter.ErrUnavailable) || !storeadapter.IsTransient(err) {
				t.Errorf("%s = %v, want a transient ErrUnavailable", c.name, err)
			}
			if elapsed < minWait {
				t.Errorf("%s returned after %v, before the %v bound that should have ended it", c.name, elapsed, minWait)
			}
		case <-time.After(limit):
			t.Fatalf("%s has not returned after %v: the call is not bounded", c.name, limit)
		}
	}
}

// TestHungEndpointTryTimeout checks that the per-try timeout alone (no call
// timeout) ends calls to an endpoint that accepts connections and never
// answers, with a transient error, on every client.
func TestHungEndpointTryTimeout(t *testing.T) {
	conn := hangingEndpoints(t)
	tables := &aztables.ClientOptions{ClientOptions: fastRetries()}
	before := *tables
	o := &azstore.Options{Tables: tables, Queues: &azqueue.ClientOptions{ClientOptions: fastRetries()},
		Blobs: &azblob.ClientOptions{ClientOptions: fastRetries()}, TryTimeout: 100 * time.Millisecond, CallTimeout: -1}
	checkBounded(t, conn, o, 0, 10*time.Second)
	if tables.Retry.TryTimeout != before.Retry.TryTimeout || tables.Retry.MaxRetries != before.Retry.MaxRetries {
		t.Errorf("the caller's retry options were changed: %+v, was %+v", tables.Retry, before.Retry)
	}
}

// TestHungEndpointCallTimeout checks that the call timeout ends a call
// whose tries are not bounded in time (an explicit, long TryTimeout in the
// client options, which wins over Options.TryTimeout).
func TestHungEndpointCallTimeout(t *testing.T) {
	conn := hangingEndpoints(t)
	long := policy.ClientOptions{Retry: policy.RetryOptions{TryTimeout: time.Hour}}
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: long}, Queues: &azqueue.ClientOptions{ClientOptions: long},
		Blobs: &azblob.ClientOptions{ClientOptions: long}, TryTimeout: time.Millisecond, CallTimeout: 300 * time.Millisecond}
	// Were Options.TryTimeout applied over the explicit hour, the calls
	// would fail after a few milliseconds of tries and retry delays.
	checkBounded(t, conn, o, 300*time.Millisecond, 10*time.Second)
}

// TestClosedPortIsTransient checks what a port with nothing listening
// gives: the SDK retries the refused connection, then every client's call
// fails with a transient ErrUnavailable.
func TestClosedPortIsTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: fastRetries()}, Queues: &azqueue.ClientOptions{ClientOptions: fastRetries()},
		Blobs: &azblob.ClientOptions{ClientOptions: fastRetries()}}
	checkBounded(t, endpointsAt(addr), o, 0, 10*time.Second)
}

// TestOnTryHearsEachTry: OnTry hears every failed try of every client as a
// transient error, while the SDK is still retrying the call, and a nil once
// the service answers; the caller's options are not changed.
func TestOnTryHearsEachTry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var mu sync.Mutex
	var heard []error
	retries := policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}}
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: retries}, Queues: &azqueue.ClientOptions{ClientOptions: retries},
		Blobs: &azblob.ClientOptions{ClientOptions: retries}, OnTry: func(err error) {
			mu.Lock()
			heard = append(heard, err)
			mu.Unlock()
		}}
	s, err := azstore.NewFromConnectionString(endpointsAt(addr), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Tables.PerRetryPolicies) != 0 {
		t.Errorf("the caller's table options gained %d per-retry policies", len(o.Tables.PerRetryPolicies))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range storeCalls {
		mu.Lock()
		heard = nil
		mu.Unlock()
		if err := c.call(ctx, s); !storeadapter.IsTransient(err) {
			t.Fatalf("%s on a closed port: %v, want a transient error", c.name, err)
		}
		mu.Lock()
		got := slices.Clone(heard)
		mu.Unlock()
		want := 3 // one try and two retries
		if c.name == "queue Receive" {
			want = 1 // never retried (see TestReceiveIsNotRetried)
		}
		if len(got) != want {
			t.Errorf("%s: OnTry heard %d tries, want %d", c.name, len(got), want)
		}
		for _, err := range got {
			if !errors.Is(err, storeadapter.ErrUnavailable) || strings.Contains(err.Error(), azurite.Key) {
				t.Errorf("%s: OnTry heard %v, want ErrUnavailable without secrets", c.name, err)
			}
		}
	}

	// An answer, even an error status such as 404, is news that storage is up.
	if emulator == nil {
		t.Skip(azurite.EnvSkip + "=1: the Azurite half of this test skipped on request")
	}
	heard = nil
	up, err := azstore.NewFromConnectionString(emulator.ConnectionString, &azstore.Options{OnTry: func(err error) {
		mu.Lock()
		heard = append(heard, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Tables().GetEntity(ctx, "NoSuchTable", "p", "r"); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Fatalf("GetEntity on a missing table: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || heard[0] != nil {
		t.Errorf("OnTry heard %v for a 404, want one nil", heard)
	}
}

// TestOnWaitHearsSilentTries: on an endpoint that accepts connections and
// never answers, OnWait hears each try of every client once it has waited
// WaitNotice and each time its wait doubles, with the service and the host
// (no path or query), until the try times out; on an endpoint that answers
// it hears nothing.
func TestOnWaitHearsSilentTries(t *testing.T) {
	conn := hangingEndpoints(t)
	host := strings.Split(strings.Split(conn, "QueueEndpoint=")[1], "/")[2] // http://HOST/account
	var mu sync.Mutex
	var heard []azstore.Wait
	noRetries := policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: noRetries}, Queues: &azqueue.ClientOptions{ClientOptions: noRetries},
		Blobs: &azblob.ClientOptions{ClientOptions: noRetries}, TryTimeout: 450 * time.Millisecond, WaitNotice: 100 * time.Millisecond,
		OnWait: func(w azstore.Wait) {
			mu.Lock()
			heard = append(heard, w)
			mu.Unlock()
		}}
	s, err := azstore.NewFromConnectionString(conn, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, c := range storeCalls {
		mu.Lock()
		heard = nil
		mu.Unlock()
		if err := c.call(ctx, s); !storeadapter.IsTransient(err) {
			t.Fatalf("%s on a silent endpoint: %v, want a transient error", c.name, err)
		}
		time.Sleep(150 * time.Millisecond) // a notice after the try ended would show now
		mu.Lock()
		got := slices.Clone(heard)
		mu.Unlock()
		service := strings.Fields(c.name)[0]
		want := []azstore.Wait{{service, host, 100 * time.Millisecond}, {service, host, 200 * time.Millisecond}, {service, host, 400 * time.Millisecond}}
		if !slices.Equal(got, want) {
			t.Errorf("%s: OnWait heard %v, want %v", c.name, got, want)
		}
	}

	if emulator == nil {
		t.Skip(azurite.EnvSkip + "=1: the Azurite half of this test skipped on request")
	}
	heard = nil
	up, err := azstore.NewFromConnectionString(emulator.ConnectionString, &azstore.Options{WaitNotice: 2 * time.Second, OnWait: func(w azstore.Wait) {
		mu.Lock()
		heard = append(heard, w)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Tables().GetEntity(ctx, "NoSuchTable", "p", "r"); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Fatalf("GetEntity on a missing table: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 0 {
		t.Errorf("OnWait heard %v for a call answered at once, want nothing", heard)
	}
}

// TestReceiveIsNotRetried: a receive whose try failed is not retried by the
// SDK, whatever the client's retry options, as a retry would hide the
// messages the failed try may have hidden and return the next ones; other
// calls are retried as configured. The service here answers 500 to
// everything, as Azurite answers a receive of a message it cannot return.
func TestReceiveIsNotRetried(t *testing.T) {
	var mu sync.Mutex
	tries := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries[r.Method+" "+r.URL.Query().Get("peekonly")+" "+r.URL.Query().Get("comp")]++
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: fastRetries()}, Queues: &azqueue.ClientOptions{ClientOptions: fastRetries()},
		Blobs: &azblob.ClientOptions{ClientOptions: fastRetries()}}
	s, err := azstore.NewFromConnectionString(endpointsAt(strings.TrimPrefix(srv.URL, "http://")), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	q := s.Queue("queue1")
	if _, err := q.Receive(ctx, 32, time.Minute); !errors.Is(err, storeadapter.ErrServiceFailed) {
		t.Fatalf("Receive: %v, want ErrServiceFailed", err)
	}
	if _, err := q.Peek(ctx, 32); !errors.Is(err, storeadapter.ErrServiceFailed) {
		t.Fatalf("Peek: %v, want ErrServiceFailed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	receives, peeks := tries["GET  "], tries["GET true "]
	if want := 1 + int(fastRetries().Retry.MaxRetries); receives != 1 || peeks != want {
		t.Errorf("the service saw %d receives and %d peeks (%v); want 1 receive (no retry) and %d peeks (retried as configured)", receives, peeks, tries, want)
	}
}
