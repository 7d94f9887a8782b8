package jobs_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestEnvelopeRoundTrip encodes an envelope and decodes it from both
// base64 and plain JSON.
func TestEnvelopeRoundTrip(t *testing.T) {
	env := jobs.Envelope{V: 1, ID: "op-2026-11-21-0001", Kind: "archive", Args: json.RawMessage(`{"table":"T"}`),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Continued: 3}
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
		if got.ID != env.ID || got.Kind != env.Kind || string(got.Args) != string(env.Args) || got.TraceParent != env.TraceParent || got.Continued != 3 {
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
		{`{"v":"1","id":"a","kind":"k","args":{}}`, "v: must be an integer, got string"},
		{`{"v":1,"id":"a","kind":"k","args":{},"extra":true}`, "extra: unknown field"},
		{`{"v":1,"id":"a","kind":"k","args":{}} {}`, "unexpected data"},
		{`{"v":1,"id":"a","kind":"k","args":{},"traceparent":"xyz"}`, "traceparent: must be"},
		{`{"v":1,"id":"a","kind":"k","args":{},"continued":-1}`, "continued: must not be negative"},
		{`{"v":1,"id":"a","kind":"k","args":{},"continued":1.5}`, "continued: must be an integer"},
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

// TestEnvelopeIsStrictAboutKeys: field names match exactly (encoding/json
// alone matches them case-insensitively) and a key given twice is refused
// (encoding/json alone keeps the last), in the envelope and inside args.
func TestEnvelopeIsStrictAboutKeys(t *testing.T) {
	reg := archiveArgs(t)
	const args = `{"table":"Src","to":"Dst","pk":"p","rk":"r"}`
	cases := []struct{ text, want string }{
		{`{"v":1,"ID":"a","kind":"archive","args":` + args + `}`, `ID: unknown field (names are case-sensitive: did you mean "id"?)`},
		{`{"v":1,"id":"a","KIND":"archive","args":` + args + `}`, `KIND: unknown field (names are case-sensitive: did you mean "kind"?)`},
		{`{"v":1,"id":"a","kind":"archive","ARGS":` + args + `}`, `ARGS: unknown field`},
		{`{"V":1,"id":"a","kind":"archive","args":` + args + `}`, `V: unknown field`},
		{`{"v":1,"id":"a","id":"b","kind":"archive","args":` + args + `}`, `id: given twice`},
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","TABLE":"Other","to":"Dst","pk":"p","rk":"r"}}`, `args.TABLE: unknown field (names are case-sensitive: did you mean "table"?)`},
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","to":"Dst","to":"Else","pk":"p","rk":"r"}}`, `args.to: given twice`},
		// The key check walks the bytes: escapes in keys, strings holding
		// quotes, braces and brackets, white space everywhere.
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","t\u006f":"Dst","to":"Else","pk":"p","rk":"r"}}`, `args.to: given twice`},
		{"{ \"v\" : 1 ,\n\t\"id\" : \"a\" , \"kind\":\"archive\", \"args\" : { \"table\" : \"S\\\"}rc\" , \"pk\":\"p\",\"rk\":\"r\",\"to\":\"D\" , \"Pk\" : 1 } }", `args.Pk: unknown field (names are case-sensitive: did you mean "pk"?)`},
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":"r"},"traceparent":[{"x":[1,{"y":null}]}],"id":"b"}`, `id: given twice`},
	}
	for _, c := range cases {
		_, err := reg.Decode(t.Context(), storeadapter.Message{Text: c.text})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%s)\n = %v\nwant an error containing %q", c.text, err, c.want)
			continue
		}
		if !jobs.IsPermanent(err) {
			t.Errorf("Decode(%s) error is not permanent: %v", c.text, err)
		}
	}
	if _, err := reg.Decode(t.Context(), storeadapter.Message{Text: `{"v":1,"id":"a","kind":"archive","args":` + args + `}`}); err != nil {
		t.Fatalf("a valid envelope: %v", err)
	}
}

// TestEnvelopeReasonsAreAccurate: text that is JSON but not an object, and
// a version that is not an integer, are reported as what they are.
func TestEnvelopeReasonsAreAccurate(t *testing.T) {
	cases := []struct{ text, want string }{
		{`[1,2,3]`, "the message must be a JSON object, got an array"},
		{`null`, "the message must be a JSON object, got null"},
		{`1234`, "the message must be a JSON object, got a number"},
		{`"text"`, "the message must be a JSON object, got a string"},
		{base64.StdEncoding.EncodeToString([]byte(`[1]`)), "the message must be a JSON object, got an array"},
		{`{"v":1.0,"id":"a","kind":"k","args":{}}`, "v: must be an integer, got 1.0"},
		{`{"v":-1e3,"id":"a","kind":"k","args":{}}`, "v: must be an integer, got -1e3"},
		{"eyJ2Ijox", "base64 of text that is not JSON"}, // base64 of `{"v":1`
		{base64.StdEncoding.EncodeToString([]byte("\xff\xfe{}")), "base64 of text that is not valid UTF-8"},
		{"not json", "neither JSON nor base64 of JSON"},
	}
	for _, c := range cases {
		_, err := jobs.DecodeEnvelope(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeEnvelope(%.50q) = %v, want an error containing %q", c.text, err, c.want)
		}
	}
}

// TestNumbersOutOfRange: a number no Go field can hold (1e400, an
// integer past int64) is an error naming the field and its range, in the
// envelope and in args, not encoding/json's "cannot unmarshal number 1e400
// into Go value of type float64"; and it is permanent, so the runner
// poisons the message on its first delivery.
func TestNumbersOutOfRange(t *testing.T) {
	reg := jobs.NewRegistry(nil)
	if err := jobs.RegisterArgs[archive.Args](reg); err != nil {
		t.Fatal(err)
	}
	if err := jobs.RegisterArgs[purgeday.Args](reg); err != nil {
		t.Fatal(err)
	}
	const int64Range = "from -9223372036854775808 to 9223372036854775807"
	cases := []struct{ text, want string }{
		{`{"v":1e400,"id":"a","kind":"k","args":{}}`, "envelope: v: must be an integer " + int64Range + ", got 1e400"},
		{`{"v":-1e400,"id":"a","kind":"k","args":{}}`, "envelope: v: must be an integer " + int64Range + ", got -1e400"},
		{`{"v":99999999999999999999,"id":"a","kind":"k","args":{}}`, "envelope: v: must be an integer " + int64Range + ", got 99999999999999999999"},
		{`{"v":1,"id":"a","kind":"k","args":{},"continued":1e999}`, "envelope: continued: must be an integer " + int64Range + ", got 1e999"},
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":1e999}}`, "args.rk: must be a string, got number"},
		{`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":"r","x":[1e999]}}`, "args.x: unknown field"},
		{`{"v":1,"id":"a","kind":"purgeday","args":{"prefix":"Days","keepDays":1e400}}`, "args.keepDays: must be an integer " + int64Range + ", got 1e400"},
		{`{"v":1,"id":"a","kind":"purgeday","args":{"prefix":"Days","keepDays":1e1}}`, "args.keepDays: must be an integer, got 1e1"},
	}
	for _, c := range cases {
		for _, text := range []string{c.text, base64.StdEncoding.EncodeToString([]byte(c.text))} {
			_, err := reg.Decode(t.Context(), storeadapter.Message{Text: text})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Decode(%s)\n = %v\nwant an error containing %q", c.text, err, c.want)
				continue
			}
			if !jobs.IsPermanent(err) {
				t.Errorf("Decode(%s) error is not permanent: %v", c.text, err)
			}
		}
	}
}

// FuzzDecodeArgs proves the registry's decoder (envelope and strict args)
// never panics and always gives a non-empty, permanent reason.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":"r"}}`,
		`{"v":1,"id":"a","kind":"archive","args":{"table":"Src","TABLE":"x"}}`,
		`{"v":1,"id":"a","kind":"archive","args":{"pk":"p","pk":"q"}}`,
		`{"v":1,"id":"a","kind":"archive","args":[{"a":{"b":1,"b":2}}]}`,
		`[1,2,3]`, `null`, `1234`, `{"v":1.0}`, "eyJ2IjoxfQ==", "\x00\xff",
	} {
		f.Add(s)
	}
	reg := archiveArgs(f)
	f.Fuzz(func(t *testing.T, text string) {
		_, err := reg.Decode(t.Context(), storeadapter.Message{Text: text})
		if err == nil {
			return
		}
		if !jobs.IsPermanent(err) {
			t.Fatalf("non-permanent decode error: %v", err)
		}
		if strings.TrimSpace(err.Error()) == "" {
			t.Fatalf("empty reason for %q", text)
		}
	})
}

// archiveArgs returns a registry that parses the archive kind's args.
func archiveArgs(t testing.TB) *jobs.Registry {
	t.Helper()
	reg := jobs.NewRegistry(nil)
	if err := jobs.RegisterArgs[archive.Args](reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestEnvelopeOutbox: an outbox reference names a valid table and
// partition, the RowKey of the envelope's own id under the outbox prefix
// and a window of 1s-1h; it survives encoding, and each rule is named.
func TestEnvelopeOutbox(t *testing.T) {
	reg := archiveArgs(t)
	const head = `{"v":1,"id":"op-1","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":"r"},"outbox":`
	cases := []struct{ outbox, want string }{
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-1","window":"30s"}`, ""},
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-1","window":"30s","since":"2026-11-26T10:00:00Z"}`, ""},
		{`{"table":"E","pk":"Sales","rk":"~tk.o.op-1","window":"30s"}`, "envelope: outbox.table:"},
		{`{"table":"Emp","pk":"","rk":"~tk.o.op-1","window":"30s"}`, "outbox.pk: must not be empty"},
		{`{"table":"Emp","pk":"a/b","rk":"~tk.o.op-1","window":"30s"}`, "outbox.pk: must not contain"},
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-2","window":"30s"}`, `envelope: outbox.rk: must be "~tk.o.op-1"`},
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-1","window":"500ms"}`, "envelope: outbox.window: must be 1s-1h0m0s, got 500ms"},
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-1"}`, "envelope: outbox.window: must be 1s-1h0m0s, got 0s"},
		{`{"table":"Emp","pk":"Sales","rk":"~tk.o.op-1","window":"2h"}`, "envelope: outbox.window:"},
		{`{"table":"Emp","pk":"Sales","RK":"~tk.o.op-1","window":"30s"}`, `outbox.RK: unknown field`},
	}
	for _, c := range cases {
		task, err := reg.Decode(t.Context(), storeadapter.Message{Text: head + c.outbox + `}`})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("outbox %s: %v", c.outbox, err)
		case c.want == "":
			text, err := jobs.Encode(task.Envelope)
			if err != nil {
				t.Fatal(err)
			}
			back, err := jobs.DecodeEnvelope(text)
			if err != nil || *back.Outbox != *task.Outbox {
				t.Errorf("outbox %s does not survive encoding: %+v, %v", c.outbox, back.Outbox, err)
			}
		case err == nil || !strings.Contains(err.Error(), c.want) || !jobs.IsPermanent(err):
			t.Errorf("outbox %s = %v, want a permanent error containing %q", c.outbox, err, c.want)
		}
	}
}

// TestOutboxRows: the filter of outbox rows is the reserved range of
// OutboxPrefix, in one partition when one is given, its value escaped.
func TestOutboxRows(t *testing.T) {
	for pk, want := range map[string]string{
		"":        "(RowKey ge '~tk.o.') and (RowKey lt '~tk.o/')",
		"O'Brien": "(PartitionKey eq 'O''Brien') and ((RowKey ge '~tk.o.') and (RowKey lt '~tk.o/'))",
	} {
		if f := jobs.OutboxRows(pk); f.Err() != nil || f.String() != want {
			t.Errorf("OutboxRows(%q) = %q, %v; want %q", pk, f, f.Err(), want)
		}
	}
}

// BenchmarkDecodeStrict decodes an archive message as the runner does
// each one it receives (BENCHMARKS.md, "Past 64 slots").
func BenchmarkDecodeStrict(b *testing.B) {
	type args struct {
		Table string  `json:"table"`
		To    string  `json:"to"`
		PK    *string `json:"pk,omitempty"`
		RK    *string `json:"rk,omitempty"`
		N     int     `json:"n,omitempty"`
	}
	data := []byte(`{"v":1,"id":"op-2026-11-26-000123","kind":"archive","args":{"table":"Orders","to":"OrdersArchive","pk":"customer-000042","rk":"order-20261126-000123"}}`)
	type env struct {
		V    int    `json:"v"`
		ID   string `json:"id"`
		Kind string `json:"kind"`
		Args args   `json:"args"`
	}
	b.ReportAllocs()
	for b.Loop() {
		var e env
		if err := jobs.DecodeStrict(data, &e, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeStrictIsStrict: whatever DecodeStrict accepts, a Decoder that
// refuses unknown fields accepts too, with the same value and nothing
// after it — its fast path (a plain Unmarshal, then the keys) is never
// laxer than the strict decoder it stands for.
func FuzzDecodeStrictIsStrict(f *testing.F) {
	type args struct {
		Table string            `json:"table"`
		PK    *string           `json:"pk,omitempty"`
		N     int               `json:"n,omitempty"`
		Tags  []string          `json:"tags,omitempty"`
		Meta  map[string]string `json:"meta,omitempty"`
	}
	type env struct {
		V    int             `json:"v"`
		Kind string          `json:"kind"`
		Args args            `json:"args"`
		Raw  json.RawMessage `json:"raw,omitempty"`
	}
	for _, s := range []string{
		`{"v":1,"kind":"k","args":{"table":"T","pk":"p","n":3,"tags":["a"],"meta":{"a":"b"}},"raw":{"x":1}}`,
		`{"v":1,"Kind":"k"}`, `{"v":1,"v":2}`, `{"args":{"TABLE":"x"}}`, `{"v":1} {}`, `null`, `{"v":1e400}`, `{"args":{"n":"3"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var got env
		if jobs.DecodeStrict([]byte(text), &got, "") != nil {
			return
		}
		var want env
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("DecodeStrict accepted %q, which a strict Decoder refuses: %v", text, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Fatalf("DecodeStrict accepted %q, which has data after its value", text)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeStrict(%q) = %+v, a strict Decoder %+v", text, got, want)
		}
	})
}

// TestDecodeStrictTypesKeysCannotName: for types whose keys the key check
// cannot name as encoding/json does (an embedded pointer or non-struct,
// a name two embedded structs share, a shallow field beside a deeper one
// of the same name, an interface holding a struct), an unknown key is
// still refused — by the strict decoder behind the fast path — and a
// refused value is left as it was.
func TestDecodeStrictTypesKeysCannotName(t *testing.T) {
	type Inner struct {
		A int `json:"a"`
	}
	type myint int
	type a1 struct{ N int }
	type a2 struct{ N int }
	type deep struct {
		Args map[string]int `json:"args"`
	}
	type embeddedPointer struct{ *Inner }
	type embeddedInt struct{ myint }
	type shared struct {
		a1
		a2
	}
	type shallow struct {
		Args Inner `json:"args"`
		deep
	}
	type holder struct {
		P any `json:"p"`
	}
	cases := []struct {
		name, text string
		v          any
	}{
		{"embedded pointer", `{"Inner":{"a":1}}`, &embeddedPointer{}},
		{"embedded non-struct", `{"myint":1}`, &embeddedInt{myint: 0}},
		{"name two embedded structs share", `{"N":1}`, &shared{}},
		{"shallow field beside a deeper one", `{"args":{"zz":2}}`, &shallow{}},
		{"interface holding a struct", `{"p":{"zz":2}}`, &holder{P: &Inner{}}},
	}
	for _, c := range cases {
		if err := jobs.DecodeStrict([]byte(c.text), c.v, "args"); err == nil {
			t.Errorf("%s: DecodeStrict(%s) accepted an unknown key", c.name, c.text)
		}
	}
	// A key refused after the fast path decoded: the value stays zero.
	var a struct {
		Table string `json:"table"`
	}
	if err := jobs.DecodeStrict([]byte(`{"table":"T","TABLE":"U"}`), &a, "args"); err == nil || a.Table != "" {
		t.Errorf("DecodeStrict with a refused key: %v, value %+v; want an error and the zero value", err, a)
	}
}

// TestDecodeStrictNamesNestedKeys: an error names the key by its path,
// arrays as "[]", and a key given twice is found among an object's first
// keys and past them (where the check keeps them in a map).
func TestDecodeStrictNamesNestedKeys(t *testing.T) {
	type item struct {
		B int `json:"b"`
	}
	type list struct {
		A []item `json:"a"`
	}
	if err := jobs.DecodeStrict([]byte(`{"a":[{"b":1},{"c":2}]}`), &list{}, "args"); err == nil || err.Error() != "args.a[].c: unknown field" {
		t.Errorf("unknown key in an array: %v, want args.a[].c: unknown field", err)
	}
	if err := jobs.DecodeStrict([]byte(`{"a":[{"b":1,"b":2}]}`), &list{}, ""); err == nil || err.Error() != "a[].b: given twice (each key may appear once)" {
		t.Errorf("key twice in an array: %v, want a[].b: given twice", err)
	}
	for _, keys := range []int{3, 16, 17, 40} {
		var b strings.Builder
		for i := range keys {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		for _, again := range []int{0, keys - 1} {
			var m map[string]int
			text := fmt.Sprintf(`{"m":{%s"k%d":0}}`, b.String(), again)
			want := fmt.Sprintf("args.m.k%d: given twice (each key may appear once)", again)
			if err := jobs.DecodeStrict([]byte(text), &struct {
				M *map[string]int `json:"m"`
			}{&m}, "args"); err == nil || err.Error() != want {
				t.Errorf("%d keys, k%d again: %v, want %s", keys, again, err, want)
			}
		}
		var m map[string]int
		if err := jobs.DecodeStrict([]byte(`{`+strings.TrimSuffix(b.String(), ",")+`}`), &m, "args"); err != nil || len(m) != keys {
			t.Errorf("%d distinct keys: %v, %d decoded", keys, err, len(m))
		}
	}
}
