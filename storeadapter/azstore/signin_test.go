package azstore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
)

// failingCredential is a token credential whose every GetToken fails with
// err, counting the calls.
type failingCredential struct {
	err   func() error
	calls atomic.Int32
}

func (c *failingCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.calls.Add(1)
	return azcore.AccessToken{}, c.err()
}

// authorityAnswer is an azidentity error carrying the token authority's
// answer with status code.
func authorityAnswer(code int) func() error {
	return func() error {
		req, _ := http.NewRequest(http.MethodPost, "https://login.example/tenant/oauth2/v2.0/token", nil)
		return &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: code, Status: http.StatusText(code), Request: req,
			Body: io.NopCloser(strings.NewReader(`{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}`))}}
	}
}

// TestSignInFailures: a credential that cannot sign in (no identity found,
// the authority refusing it) makes every client's call fail at once with
// ErrAuthentication — not a transient error, not retried by the SDK, not
// reported to OnTry as storage not answering — while a busy or failing
// authority (429, 5xx) or no answer in time stays transient.
func TestSignInFailures(t *testing.T) {
	const closed = "https://127.0.0.1:1/acct" // never reached: the token comes first
	cases := []struct {
		name string
		err  func() error
		auth bool // want ErrAuthentication; else a transient error
	}{
		{"no identity", func() error { return azidentity.NewCredentialUnavailableError("no managed identity endpoint found") }, true},
		{"secret refused", authorityAnswer(http.StatusUnauthorized), true},
		{"bad request", authorityAnswer(http.StatusBadRequest), true},
		{"authority unreachable", func() error {
			return &azidentity.AuthenticationFailedError{}
		}, true},
		{"authority busy", authorityAnswer(http.StatusTooManyRequests), false},
		{"authority failing", authorityAnswer(http.StatusServiceUnavailable), false},
		{"no answer in time", func() error { return context.DeadlineExceeded }, false},
	}
	retries := policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cred := &failingCredential{err: c.err}
			var mu sync.Mutex
			var heard []error
			s, err := azstore.NewWithCredential(azstore.Endpoints{Table: closed, Queue: closed, Blob: closed}, cred, &azstore.Options{
				Tables: &aztables.ClientOptions{ClientOptions: retries}, Queues: &azqueue.ClientOptions{ClientOptions: retries},
				Blobs: &azblob.ClientOptions{ClientOptions: retries}, OnTry: func(err error) {
					mu.Lock()
					heard = append(heard, err)
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for _, call := range storeCalls {
				cred.calls.Store(0)
				mu.Lock()
				heard = nil
				mu.Unlock()
				err := call.call(ctx, s)
				switch {
				case c.auth && (!errors.Is(err, storeadapter.ErrAuthentication) || storeadapter.IsTransient(err)):
					t.Fatalf("%s: %v; want ErrAuthentication, not transient", call.name, err)
				case c.auth && cred.calls.Load() != 1:
					t.Errorf("%s: the credential was asked %d times; a sign-in that cannot succeed is not retried", call.name, cred.calls.Load())
				case !c.auth && (!storeadapter.IsTransient(err) || errors.Is(err, storeadapter.ErrForbidden)):
					t.Fatalf("%s: %v; want a transient error", call.name, err)
				}
				mu.Lock()
				if c.auth && len(heard) != 0 {
					t.Errorf("%s: OnTry heard %v; a sign-in failure says nothing about storage", call.name, heard)
				}
				mu.Unlock()
			}
		})
	}
}

// TestSignInWaitHeard: while the credential has not got its token (a token
// authority that does not answer), OnWait hears of it as of a silent try:
// after WaitNotice and each time the wait doubles, with the service
// azstore.SignIn; the call ends with the call timeout, transient.
func TestSignInWaitHeard(t *testing.T) {
	const closed = "https://127.0.0.1:1/acct"
	hang := func(ctx context.Context, _ policy.TokenRequestOptions) (azcore.AccessToken, error) {
		<-ctx.Done()
		return azcore.AccessToken{}, ctx.Err()
	}
	var mu sync.Mutex
	var heard []azstore.Wait
	s, err := azstore.NewWithCredential(azstore.Endpoints{Table: closed, Queue: closed, Blob: closed}, hangingCredential(hang), &azstore.Options{
		CallTimeout: 450 * time.Millisecond, WaitNotice: 100 * time.Millisecond, OnWait: func(w azstore.Wait) {
			mu.Lock()
			heard = append(heard, w)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.Queue("queue1").ApproximateCount(ctx); !storeadapter.IsTransient(err) || errors.Is(err, storeadapter.ErrAuthentication) {
		t.Fatalf("a sign-in that never answers: %v, want a transient error", err)
	}
	time.Sleep(150 * time.Millisecond) // a notice after the call ended would show now
	mu.Lock()
	defer mu.Unlock()
	want := []azstore.Wait{{azstore.SignIn, "", 100 * time.Millisecond}, {azstore.SignIn, "", 200 * time.Millisecond}, {azstore.SignIn, "", 400 * time.Millisecond}}
	if len(heard) != len(want) || heard[0] != want[0] || heard[1] != want[1] || heard[2] != want[2] {
		t.Errorf("OnWait heard %v, want %v", heard, want)
	}
}

// hangingCredential adapts a function to a token credential.
type hangingCredential func(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error)

func (f hangingCredential) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return f(ctx, o)
}
