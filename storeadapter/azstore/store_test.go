package azstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
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
