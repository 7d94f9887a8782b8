package azstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// captureTransport records the body of each request and answers none.
type captureTransport struct{ bodies [][]byte }

var errCaptured = errors.New("captured, not sent")

func (c *captureTransport) Do(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	c.bodies = append(c.bodies, b)
	return nil, errCaptured
}

// wireRunes are the characters whose size on the wire differs most from
// their size in memory, and a few plain ones.
var wireRunes = []rune("aZ09 '\"\\<>&\n\t\x01\x7f\u2028\u2029é漢😀\ufffd\ue000-_.~%+=")

// randomAlphabet picks a few of wireRunes, so that some texts are made
// of nothing but the characters that grow most on the wire.
func randomAlphabet(r *rand.Rand) []rune {
	a := make([]rune, 1+r.IntN(4))
	for i := range a {
		a[i] = wireRunes[r.IntN(len(wireRunes))]
	}
	return a
}

func randomText(r *rand.Rand, alphabet []rune, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// randomKey is a valid key: no / \ # ? or control characters.
func randomKey(r *rand.Rand) string {
	for {
		k := randomText(r, randomAlphabet(r), 1+r.IntN(200))
		if storeadapter.ValidateKey("key", k) == nil {
			return k
		}
	}
}

// TestBatchOpSizeBoundsWire checks, for random transactions, that the sum
// of BatchOpSize of the operations is never below the bytes azstore really
// sends (the SDK re-encodes entities with encoding/json and puts the keys
// in each operation's URL), so a transaction that passes validation never
// meets the service's 413.
func TestBatchOpSizeBoundsWire(t *testing.T) {
	tr := &captureTransport{}
	opts := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Transport: tr, Retry: policy.RetryOptions{MaxRetries: -1}}}}
	ep := azstore.Endpoints{Table: "https://averylongaccountname0024.table.core.windows.net/"}
	s, err := azstore.NewWithSharedKey(ep, azurite.Account, azurite.Key, opts)
	if err != nil {
		t.Fatal(err)
	}
	actions := []storeadapter.TxAction{storeadapter.TxInsert, storeadapter.TxUpsertReplace, storeadapter.TxUpsertMerge,
		storeadapter.TxUpdateReplace, storeadapter.TxUpdateMerge, storeadapter.TxDelete}
	r := rand.New(rand.NewPCG(6, 4))
	for iter := range 200 {
		pk := randomKey(r)
		var ops []storeadapter.TableOp
		estimate := 0
		seen := map[string]bool{}
		for range 1 + r.IntN(storeadapter.MaxBatchOps) {
			rk := randomKey(r)
			if seen[rk] {
				continue
			}
			seen[rk] = true
			e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{}}
			alphabet := randomAlphabet(r)
			for p := range r.IntN(6) {
				e.Properties[fmt.Sprintf("P%d", p)] = randomText(r, alphabet, r.IntN(2000))
			}
			e.Properties["N"], e.Properties["B"], e.Properties["F"] = r.Int64(), []byte(randomText(r, alphabet, 20)), r.NormFloat64()*1e300
			op := storeadapter.TableOp{Action: actions[r.IntN(len(actions))], Entity: e}
			if op.Action >= storeadapter.TxUpdateReplace {
				op.IfMatch = `W/"datetime'2026-11-21T09%3A30%3A00.1234567Z'"`
			}
			ops = append(ops, op)
			estimate += storeadapter.BatchOpSize(e)
		}
		tr.bodies = nil
		if err := s.Tables().Transact(context.Background(), "SomeTable", ops); !errors.Is(err, storeadapter.ErrUnavailable) {
			t.Fatalf("transaction %d: Transact = %v, want the transport's error (ErrUnavailable)", iter, err)
		}
		if len(tr.bodies) != 1 {
			t.Fatalf("transaction %d: %d requests, want 1", iter, len(tr.bodies))
		}
		if sent := len(tr.bodies[0]); sent > estimate {
			t.Fatalf("transaction %d of %d operations: sent %d bytes, BatchOpSize sums to %d", iter, len(ops), sent, estimate)
		}
	}
}

// requestBodyLimit is the most a table request body may hold: Azure answers
// 413 RequestBodyTooLarge above 4 MiB, single-entity requests included
// (docs/azure-behaviour.md, "Strings, sizes and encodings").
const requestBodyLimit = 4 << 20

// TestEntityWireSize measures what azstore sends for single-entity writes.
// The entity is the worst case for the wire that validation accepts: 1 MiB
// by the data model (what Azure's limit counts), every string character one
// the SDK sends as a six-byte escape (three wire bytes per byte of the
// limit), keys of escaped characters too. It checks that:
//
//   - the SDK re-encodes the entity with Go's default, HTML-escaping
//     encoding/json whatever JSON azstore gives it (MarshalEntityJSON does
//     not escape < > &; the body does), so each string travels exactly as
//     JSONStringSize counts it;
//   - the body stays within the 4 MiB a request may hold, so an entity our
//     validation accepts never meets the service's 413.
func TestEntityWireSize(t *testing.T) {
	tr := &captureTransport{}
	opts := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Transport: tr, Retry: policy.RetryOptions{MaxRetries: -1}}}}
	s, err := azstore.NewWithSharedKey(azstore.Endpoints{Table: "https://account.table.core.windows.net/"}, azurite.Account, azurite.Key, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := storeadapter.Entity{
		PartitionKey: strings.Repeat("<", storeadapter.MaxKeyChars),
		RowKey:       strings.Repeat("\u2028", storeadapter.MaxKeyChars),
		Properties:   map[string]any{},
	}
	fill := []string{"\x01", "&", "\u2029", ">"}
	for i := 0; storeadapter.EntitySize(e) < storeadapter.MaxEntityBytes; i++ {
		name := fmt.Sprintf("P%03d", i)
		room := (storeadapter.MaxEntityBytes - storeadapter.EntitySize(e) - 8 - 2*len(name) - 4) / 2
		if room < 1 {
			break
		}
		e.Properties[name] = strings.Repeat(fill[i%len(fill)], min(storeadapter.MaxStringChars, room))
	}
	if n := storeadapter.EntitySize(e); n < storeadapter.MaxEntityBytes-16 || storeadapter.ValidateEntity(e) != nil {
		t.Fatalf("test bug: the entity is %d bytes (%v), want at the 1 MiB limit and valid", n, storeadapter.ValidateEntity(e))
	}
	ours, err := storeadapter.MarshalEntityJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ours, []byte(`\u003c`)) {
		t.Fatalf("MarshalEntityJSON HTML-escapes: %.80s", ours)
	}
	ctx := context.Background()
	writes := map[string]func() error{
		"InsertEntity": func() error { _, err := s.Tables().InsertEntity(ctx, "SomeTable", e); return err },
		"UpsertEntity": func() error {
			_, err := s.Tables().UpsertEntity(ctx, "SomeTable", e, storeadapter.Replace)
			return err
		},
		"UpdateEntity": func() error {
			_, err := s.Tables().UpdateEntity(ctx, "SomeTable", e, storeadapter.Merge, storeadapter.ETagAny)
			return err
		},
	}
	for what, write := range writes {
		tr.bodies = nil
		if err := write(); !errors.Is(err, storeadapter.ErrUnavailable) {
			t.Fatalf("%s = %v, want the transport's error (ErrUnavailable)", what, err)
		}
		if len(tr.bodies) != 1 {
			t.Fatalf("%s: %d requests, want 1", what, len(tr.bodies))
		}
		body := tr.bodies[0]
		for name, v := range e.Properties {
			wire, _ := json.Marshal(v) // Go's default encoding: HTML-escaped
			if len(wire) != storeadapter.JSONStringSize(v.(string)) {
				t.Fatalf("test bug: JSONStringSize(%s) = %d, json.Marshal writes %d", name, storeadapter.JSONStringSize(v.(string)), len(wire))
			}
			if !bytes.Contains(body, append([]byte(`"`+name+`":`), wire...)) {
				t.Errorf("%s: the body does not carry %s as JSONStringSize counts it (%d bytes, %.20s…)", what, name, len(wire), wire)
			}
		}
		if len(body) > requestBodyLimit {
			t.Errorf("%s of an entity validation accepts sent %d bytes, over the %d a request may hold", what, len(body), requestBodyLimit)
		}
		t.Logf("%s: a 1 MiB entity of escaped characters is %d bytes on the wire", what, len(body))
	}
}
