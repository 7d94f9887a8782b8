package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// decodeBlobsync decodes message text as the worker does.
func decodeBlobsync(t *testing.T, text string) (jobs.Envelope, blobsync.Args) {
	t.Helper()
	env, err := jobs.DecodeEnvelope(text)
	if err != nil {
		t.Fatalf("DecodeEnvelope: %v", err)
	}
	a, err := jobs.ParseArgs[blobsync.Args](env.Args)
	if err != nil {
		t.Fatalf("ParseArgs(%s): %v", env.Args, err)
	}
	return env, a
}

// TestBlobsyncEnqueues sends each mode's args as the flags give them.
func TestBlobsyncEnqueues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // the args JSON
	}{
		{[]string{"offload", "-table", "Employees", "-pk", "Sales", "-rk", "1", "-property", "Bio", "-id", "op-1"},
			`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio"}`},
		{[]string{"offload", "-table", "Employees", "-pk", "Sales", "-rk", "1", "-container", "blobs"},
			`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","container":"blobs"}`},
		{[]string{"attach", "-table", "Employees", "-pk", "Sales", "-rk", "1", "-property", "Photo", "-container", "photos", "-blob", "sales/1.jpg"},
			`{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Photo","container":"photos","blob":"sales/1.jpg"}`},
		{[]string{"reconcile", "-table", "Employees", "-container", "blobs"},
			`{"mode":"reconcile","table":"Employees","container":"blobs"}`},
		{[]string{"reconcile", "-table", "Employees", "-pk", "Sales", "-container", "blobs", "-prefix", "large", "-grace", "48h", "-on-missing", "clear"},
			`{"mode":"reconcile","table":"Employees","pk":"Sales","container":"blobs","prefix":"large","grace":"48h0m0s","onMissing":"clear"}`},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			b := setup(t)
			r := b.mustRun("", append([]string{"blobsync"}, c.args...)...)
			msgs := b.receiveAll(b.queue)
			if len(msgs) != 1 {
				t.Fatalf("%d messages, want 1", len(msgs))
			}
			env, _ := decodeBlobsync(t, msgs[0].Text)
			if env.Kind != "blobsync" || string(env.Args) != c.want {
				t.Errorf("kind %s args %s\nwant args %s", env.Kind, env.Args, c.want)
			}
			if !strings.Contains(r.stdout, env.ID) || !strings.HasPrefix(env.ID, "op-") {
				t.Errorf("op id %q, stdout:\n%s", env.ID, r.stdout)
			}
		})
	}
}

// TestBlobsyncFlagErrors: each mistake names its flag; nothing is sent.
func TestBlobsyncFlagErrors(t *testing.T) {
	off := []string{"blobsync", "offload", "-table", "Employees", "-pk", "Sales"}
	rec := []string{"blobsync", "reconcile", "-table", "Employees"}
	att := []string{"blobsync", "attach", "-table", "Employees", "-pk", "Sales", "-rk", "1", "-property", "Photo", "-container", "photos"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing rk", off, "-rk: is required with mode offload"},
		{"bad table", []string{"blobsync", "offload", "-table", "E_1", "-pk", "a", "-rk", "b"}, "-table: invalid input: table name"},
		{"bad pk", append(off, "-rk", "1", "-pk", "a/b"), "-pk: invalid input"},
		{"empty flag", append(off, "-rk", "1", "-property", ""), "-property: must not be empty"},
		{"long property", append(off, "-rk", "1", "-property", strings.Repeat("p", 249)), "-property: must be at most 248 characters"},
		{"reference property", append(off, "-rk", "1", "-property", "TkBlob_Bio"), "-property: \"TkBlob_Bio\" must not start with TkBlob_"},
		{"bad container", append(off, "-rk", "1", "-container", "Blobs"), "-container: invalid input: container name"},
		{"blob for offload", append(off, "-rk", "1", "-blob", "x"), "unknown flag -blob"},
		{"attach without blob", att, "-blob: is required with mode attach"},
		{"attach bad blob", append(att, "-blob", `a\b`), "-blob: invalid input: blob name"},
		{"reconcile without container", rec, "-container: is required with mode reconcile"},
		{"reconcile bad on-missing", append(rec, "-container", "blobs", "-on-missing", "drop"), `-on-missing: must be "report" or "clear", got "drop"`},
		{"reconcile zero grace", append(rec, "-container", "blobs", "-grace", "0s"), "-grace: must be 1s-"},
		{"reconcile bad prefix", append(rec, "-container", "blobs", "-prefix", "a/../b"), "-prefix:"},
		{"reconcile rk", append(rec, "-container", "blobs", "-rk", "1"), "unknown flag -rk"},
		{"bad id", append(rec, "-container", "blobs", "-id", "op 1"), "-id: must be 1-128 characters"},
		{"get without rk", []string{"blobsync", "get", "-table", "Employees", "-pk", "Sales"}, "-rk: invalid input"},
		{"no subcommand", []string{"blobsync"}, "usage: enqueue blobsync <subcommand>"},
		{"unknown subcommand", []string{"blobsync", "sync"}, `unknown subcommand "sync"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			r := b.run("", c.args...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, want 2 with %q in stderr:\n%s", r.code, c.want, r.stderr)
			}
			if n := b.count(b.queue); n != 0 {
				t.Errorf("%d messages sent after a usage error", n)
			}
		})
	}
}

// TestBlobsyncGet prints an offloaded entity with its properties read
// back (table and JSON) and fails, naming the property, on a blob that
// does not match.
func TestBlobsyncGet(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.store.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Container("blobs").Create(ctx); err != nil {
		t.Fatal(err)
	}
	want := storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{
		"Name": "Jones", "Age": int32(40), "Bio": strings.Repeat("long text é😀 ", 2000), "Photo": []byte{0, 1, 2, 255},
		"Hired": time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)}}
	if _, err := b.store.Tables().InsertEntity(ctx, "Employees", want); err != nil {
		t.Fatal(err)
	}
	w, err := blobsync.New(kit.Plain(b.store), blobsync.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"Bio", "Photo"} {
		if _, err := w.Run(ctx, "op-"+p, blobsync.Args{Mode: "offload", Table: "Employees", PK: "Sales", RK: "1", Property: p, Container: "blobs"}); err != nil {
			t.Fatal(err)
		}
	}

	r := b.mustRun("", "blobsync", "get", "-table", "Employees", "-pk", "Sales", "-rk", "1")
	for _, s := range []string{"PROPERTY", "Bio", "Edm.String(long text é😀", "offload blobs/Employees/Sales/1/Bio/", "sha256 verified", "Photo", "Edm.Binary(000102ff)", "Name", "entity"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("table output lacks %q:\n%s", s, r.stdout)
		}
	}

	r = b.mustRun("", "blobsync", "get", "-table", "Employees", "-pk", "Sales", "-rk", "1", "-o", "json")
	var got struct {
		Entity json.RawMessage
		Blobs  []struct{ Property, Name, SHA256 string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	e, err := storeadapter.UnmarshalEntityJSON(got.Entity, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range want.Properties {
		if !storeadapter.Equal(v, e.Properties[name]) {
			t.Errorf("%s = %s, want %s", name, storeadapter.Format(e.Properties[name]), storeadapter.Format(v))
		}
	}
	if len(e.Properties) != len(want.Properties) || len(got.Blobs) != 2 || got.Blobs[0].Property != "Bio" || got.Blobs[1].Property != "Photo" {
		t.Errorf("entity %d properties, blobs %+v", len(e.Properties), got.Blobs)
	}

	if _, err := b.store.Container("blobs").Put(ctx, got.Blobs[0].Name, []byte("tampered"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "blobsync", "get", "-table", "Employees", "-pk", "Sales", "-rk", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "property Bio") || !strings.Contains(r.stderr, "length is 8, the reference says") {
		t.Errorf("tampered blob: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = b.run("", "blobsync", "get", "-table", "Employees", "-pk", "Sales", "-rk", "2")
	if r.code != 1 || !strings.Contains(r.stderr, "Employees Sales/2 does not exist") {
		t.Errorf("missing entity: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
