package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestExportEnqueuesEnvelope: the flags become the export kind's args.
func TestExportEnqueuesEnvelope(t *testing.T) {
	b := setup(t)
	// A container that does not exist is refused now, with nothing sent,
	// rather than poisoned when the worker runs the job.
	r := b.run("", "export", "-table", "Logins", "-to", "exports/daily")
	if r.code != 1 || !strings.Contains(r.stderr, "-to: container exports does not exist: create it first") || b.count(b.queue) != 0 {
		t.Fatalf("export to a missing container: exit %d, %d sent, stderr:\n%s", r.code, b.count(b.queue), r.stderr)
	}
	if err := b.store.Container("exports").Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	r = b.mustRun("", "export", "-o", "json", "-table", "Logins", "-pk", "Day1", "-rk-from", "a", "-rk-to", "m",
		"-to", "exports/daily", "-gzip", "-max-part-bytes", "2048", "-id", "op-exp-1")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.OpID != "op-exp-1" || out.MessageID == "" {
		t.Fatalf("stdout %q (%v), want JSON with the op id and the message id", r.stdout, err)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	env, err := jobs.DecodeEnvelope(msgs[0].Text)
	if err != nil || env.Kind != "export" || env.ID != "op-exp-1" {
		t.Fatalf("envelope %+v, %v", env, err)
	}
	a, err := jobs.ParseArgs[export.Args](env.Args)
	if err != nil {
		t.Fatal(err)
	}
	if a.Table != "Logins" || *a.PK != "Day1" || *a.RKFrom != "a" || *a.RKTo != "m" || a.To != "exports/daily" || !a.Gzip || *a.MaxPartBytes != 2048 {
		t.Errorf("args %s", env.Args)
	}
	r = b.mustRun("", "export", "-table", "Logins", "-to", "exports")
	if !strings.Contains(r.stdout, "op-") {
		t.Errorf("stdout lacks a generated op id:\n%s", r.stdout)
	}
	if msgs := b.receiveAll(b.queue); len(msgs) != 1 || !strings.Contains(string(mustEnvelope(t, msgs[0].Text).Args), `{"table":"Logins","to":"exports"}`) {
		t.Errorf("whole-table export args: %v", msgs)
	}
}

func mustEnvelope(t *testing.T, text string) jobs.Envelope {
	t.Helper()
	env, err := jobs.DecodeEnvelope(text)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestExportFlagErrors: bad flags are usage errors naming the flag and
// the export kind's rule, and nothing is sent.
func TestExportFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-to", "exports"}, "-table:"},
		{[]string{"-table", "Logins"}, "-to: is required"},
		{[]string{"-table", "Logins", "-to", "exports/../x"}, `-to: "exports/../x": the prefix must not hold "." or ".."`},
		{[]string{"-table", "Logins", "-to", "exports", "-rk-from", "a"}, "-pk: is required with rkFrom or rkTo"},
		{[]string{"-table", "Logins", "-to", "exports", "-pk", "p", "-rk-from", "m", "-rk-to", "a"}, "-rk-to: must be greater than rkFrom"},
		{[]string{"-table", "Logins", "-to", "exports", "-max-part-bytes", "10"}, "-max-part-bytes: must be 1024-4294967296 bytes"},
		{[]string{"-table", "Logins", "-to", "exports", "-max-part-bytes", "lots"}, `-max-part-bytes: "lots" is not a whole number`},
		{[]string{"-table", "Logins", "-to", "exports", "-id", "bad id"}, "-id: must be 1-128 characters"},
	} {
		b := setup(t)
		r := b.run("", append([]string{"export"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("export %v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if n := b.count(b.queue); n != 0 {
			t.Errorf("export %v: the queue holds %d messages after a usage error", c.args, n)
		}
	}
}

// TestExportVerify: verify passes an intact export (found by -manifest or
// by -to/-table/-id; -o json gives the manifest path and counts) and
// exits 1 naming the problem once a part is tampered with.
func TestExportVerify(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.store.Tables().CreateTable(ctx, "Logins"); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		e := storeadapter.Entity{PartitionKey: "Day1", RowKey: fmt.Sprintf("%03d", i), Properties: map[string]any{"User": strings.Repeat("u", 80)}}
		if _, err := b.store.Tables().InsertEntity(ctx, "Logins", e); err != nil {
			t.Fatal(err)
		}
	}
	c := b.store.Container("exports")
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logins"}, tableexport.Options{
		Blobs: c, Prefix: "daily", OpID: "op-v1", MaxPartBytes: 1024, Clock: clock.NewFake(t0),
		Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}})
	if err != nil {
		t.Fatal(err)
	}
	r := b.mustRun("", "export", "verify", "-manifest", "exports/"+m.Name)
	if !strings.Contains(r.stdout, "ok: every part matches the manifest") || !strings.Contains(r.stdout, m.Parts[0].Name) {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	r = b.mustRun("", "export", "verify", "-o", "json", "-to", "exports/daily", "-table", "Logins", "-id", "op-v1")
	var out struct {
		Manifest string
		OK       bool
		Parts    int
		Entities int64
		Problems []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	if out.Manifest != "exports/"+m.Name || !out.OK || out.Parts != len(m.Parts) || out.Entities != 30 || out.Problems == nil {
		t.Errorf("verify -o json = %+v", out)
	}

	data, props, err := c.Get(ctx, m.Parts[1].Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, m.Parts[1].Name, append(data, data...), storeadapter.PutOptions{Metadata: props.Metadata}); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "export", "verify", "-manifest", "exports/"+m.Name)
	if r.code != 1 || !strings.Contains(r.stdout, m.Parts[1].Name+": SHA-256 is") || !strings.Contains(r.stdout, "lines, the manifest says") {
		t.Errorf("verify of a tampered export: exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "-manifest: is required"},
		{[]string{"-manifest", "exports"}, 2, `-manifest: "exports" is not container/path`},
		{[]string{"-to", "exports/daily", "-table", "Logins"}, 2, "-to: needs -table and -id"},
		{[]string{"-manifest", "exports/nosuch.json"}, 1, "not found"},
		{[]string{"-to", "exports/daily", "-table", "Logins", "-id", "op-none"}, 1, "no manifest manifest-op-none.json"},
	} {
		r := b.run("", append([]string{"export", "verify"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("export verify %v: exit %d, stderr:\n%s\nwant exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}

// TestExportClean: a stray part (of the operation, not in the manifest)
// makes verify exit 1 for ever; clean lists it without deleting it, then
// with -yes deletes it, and verify passes. An export with none says so.
func TestExportClean(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.store.Tables().CreateTable(ctx, "Logins"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		e := storeadapter.Entity{PartitionKey: "Day1", RowKey: fmt.Sprintf("%03d", i), Properties: map[string]any{"User": strings.Repeat("u", 80)}}
		if _, err := b.store.Tables().InsertEntity(ctx, "Logins", e); err != nil {
			t.Fatal(err)
		}
	}
	c := b.store.Container("exports")
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logins"}, tableexport.Options{
		Blobs: c, OpID: "op-c1", MaxPartBytes: 1024, Clock: clock.NewFake(t0),
		Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}})
	if err != nil {
		t.Fatal(err)
	}
	r := b.mustRun("", "export", "clean", "-manifest", "exports/"+m.Name)
	if !strings.Contains(r.stdout, "no stray part") {
		t.Errorf("clean of an export without strays:\n%s", r.stdout)
	}
	// A stray: a copy of a part under the next number, as a superseded
	// run commits it.
	data, props, err := c.Get(ctx, m.Parts[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	stray := fmt.Sprintf("%s/%06d.jsonl", m.Folder, len(m.Parts)+1)
	if _, err := c.Put(ctx, stray, data, storeadapter.PutOptions{ContentType: props.ContentType, Metadata: props.Metadata}); err != nil {
		t.Fatal(err)
	}
	if r := b.run("", "export", "verify", "-manifest", "exports/"+m.Name); r.code != 1 {
		t.Fatalf("verify with a stray: exit %d, want 1", r.code)
	}
	r = b.mustRun("", "export", "clean", "-to", "exports", "-table", "Logins", "-id", "op-c1")
	if !strings.Contains(r.stdout, "exports/"+stray) || !strings.Contains(r.stdout, "dry run: would delete 1 stray parts") {
		t.Errorf("clean's dry run:\n%s", r.stdout)
	}
	if _, err := c.Properties(ctx, stray); err != nil {
		t.Fatalf("the dry run deleted the stray: %v", err)
	}
	r = b.mustRun("", "export", "clean", "-o", "json", "-manifest", "exports/"+m.Name, "-yes")
	var out struct {
		DryRun  bool
		Strays  []string
		Deleted int
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.DryRun || out.Deleted != 1 || len(out.Strays) != 1 {
		t.Errorf("clean -yes -o json = %q (%v)", r.stdout, err)
	}
	b.mustRun("", "export", "verify", "-manifest", "exports/"+m.Name)
	if r := b.run("", "export", "clean", "-manifest", "exports/"+m.Name, "-to", "exports"); r.code != 2 || !strings.Contains(r.stderr, "-manifest and -to: give one") {
		t.Errorf("clean with both: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCheckpointsPrune: checkpoints last written more than -older-than
// ago are counted by a dry run and deleted with -yes; younger ones stay;
// -older-than below 8 days is a usage error.
func TestCheckpointsPrune(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cp := idempotent.Checkpoints{Tables: b.store.Tables(), Table: "TablekeeperCheckpoints"}
	b.clock.Set(time.Now().Add(-10 * 24 * time.Hour)) // the prune's cut-off is the machine's clock
	for _, op := range []string{"op-a", "op-b", "op-c"} {
		if err := cp.Save(ctx, op, "export", `{"done":true}`); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Set(time.Now())
	if err := cp.Save(ctx, "op-now", "export", "t:1"); err != nil {
		t.Fatal(err)
	}
	if r := b.run("", "checkpoints", "prune", "-older-than", "7d"); r.code != 2 || !strings.Contains(r.stderr, "-older-than: must be at least 8d") {
		t.Errorf("prune -older-than 7d: exit %d, stderr %q", r.code, r.stderr)
	}
	old := "8d"
	r := b.mustRun("", "checkpoints", "prune", "-older-than", old)
	if !strings.Contains(r.stdout, "dry run: 3 checkpoints") {
		t.Errorf("dry run:\n%s", r.stdout)
	}
	r = b.mustRun("", "checkpoints", "prune", "-older-than", old, "-yes")
	if !strings.Contains(r.stdout, "deleted 3 of 3 checkpoints") {
		t.Errorf("prune -yes:\n%s", r.stdout)
	}
	for op, want := range map[string]bool{"op-a": false, "op-now": true} {
		if tok, _ := cp.Load(ctx, op, "export"); (tok != "") != want {
			t.Errorf("checkpoint of %s after the prune: %q, want kept %v", op, tok, want)
		}
	}
}
