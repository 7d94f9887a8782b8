package jobs_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
)

// TestEnvelopeRoundTrip encodes an envelope and decodes it from both
// base64 and plain JSON.
func TestEnvelopeRoundTrip(t *testing.T) {
	env := jobs.Envelope{V: 1, ID: "op-2026-11-21-0001", Kind: "archive", Args: json.RawMessage(`{"table":"T"}`),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	text, err := jobs.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		t.Fatalf("Encode did not produce base64: %v", err)
	}
	for _, in := range []string{text, string(raw), "  " + string(raw) + "\n"} {
		got, err := jobs.DecodeEnvelope(in)
		if err != nil {
			t.Fatalf("DecodeEnvelope(%.40q) = %v", in, err)
		}
		if got.ID != env.ID || got.Kind != env.Kind || string(got.Args) != string(env.Args) || got.TraceParent != env.TraceParent {
			t.Fatalf("round trip: got %+v, want %+v", got, env)
		}
	}
}

// TestEnvelopeErrors: each malformed envelope is a permanent error naming
// the field and the rule.
func TestEnvelopeErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"", "empty"},
		{"%%%", "neither JSON nor base64"},
		{`{"v":1,"id":"a","kind":"k","args":{}`, "invalid JSON"},
		{`{"v":2,"id":"a","kind":"k","args":{}}`, "v: must be 1"},
		{`{"v":1,"id":"","kind":"k","args":{}}`, "id: must be 1-128 characters"},
		{`{"v":1,"id":"a b","kind":"k","args":{}}`, "id: must be"},
		{`{"v":1,"id":"` + strings.Repeat("a", 129) + `","kind":"k","args":{}}`, "id: must be 1-128"},
		{`{"v":1,"id":"a","args":{}}`, "kind: is required"},
		{`{"v":1,"id":"a","kind":"k"}`, "args: is required"},
		{`{"v":1,"id":"a","kind":"k","args":{},"argsRef":"c/b"}`, "give one, not both"},
		{`{"v":1,"id":"a","kind":"k","argsRef":"nocontainer"}`, "argsRef: must be \"container/blob\""},
		{`{"v":"1","id":"a","kind":"k","args":{}}`, "v: must be a number"},
		{`{"v":1,"id":"a","kind":"k","args":{},"extra":true}`, "extra: unknown field"},
		{`{"v":1,"id":"a","kind":"k","args":{}} {}`, "unexpected data"},
		{`{"v":1,"id":"a","kind":"k","args":{},"traceparent":"xyz"}`, "traceparent: must be"},
	}
	for _, c := range cases {
		_, err := jobs.DecodeEnvelope(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeEnvelope(%.50q) = %v, want an error containing %q", c.text, err, c.want)
			continue
		}
		if !jobs.IsPermanent(err) {
			t.Errorf("DecodeEnvelope(%.50q) error is not permanent: %v", c.text, err)
		}
	}
}

// FuzzDecodeEnvelope proves the decoder never panics and that whatever it
// accepts re-encodes and decodes to the same envelope.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{`{"v":1,"id":"a","kind":"archive","args":{"table":"T"}}`, "eyJ2IjoxfQ==", "", "{", `{"v":1e999}`, `{"args":null}`, "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		env, err := jobs.DecodeEnvelope(text)
		if err != nil {
			if !jobs.IsPermanent(err) {
				t.Fatalf("non-permanent decode error: %v", err)
			}
			return
		}
		again, err := jobs.Encode(env)
		if err != nil {
			return // valid but too large to send again
		}
		env2, err := jobs.DecodeEnvelope(again)
		if err != nil || env2.ID != env.ID || env2.Kind != env.Kind {
			t.Fatalf("re-decode of an accepted envelope: %+v, %v", env2, err)
		}
	})
}
