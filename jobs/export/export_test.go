package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestExportArgs: every bad argument is refused naming its field and rule.
func TestExportArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{"to":"ccc"}`, "args.table:"},
		{`{"table":"x","to":"ccc"}`, "args.table:"},
		{`{"table":"Logs"}`, `args.to: is required`},
		{`{"table":"Logs","to":"Bad_Container"}`, "args.to:"},
		{`{"table":"Logs","to":"ccc/../x"}`, `args.to: "ccc/../x": the prefix must not hold "." or ".." path segments`},
		{`{"table":"Logs","to":"ccc/` + strings.Repeat("x", 1000) + `"}`, "args.to: the prefix is too long"},
		{`{"table":"Logs","to":"ccc","rkFrom":"a"}`, "args.pk: is required with rkFrom or rkTo"},
		{`{"table":"Logs","to":"ccc","pk":"p","rkFrom":"b","rkTo":"a"}`, "args.rkTo: must be greater than rkFrom"},
		{`{"table":"Logs","to":"ccc","pk":"a/b"}`, "args.pk:"},
		{`{"table":"Logs","to":"ccc","maxPartBytes":10}`, "args.maxPartBytes: must be 1024-4294967296 bytes (1 KiB-4 GiB), got 10"},
		{`{"table":"Logs","to":"ccc","gzip":"yes"}`, "args.gzip"},
		{`{"table":"Logs","to":"ccc","extra":1}`, "extra"},
		{`{"table":"Logs","to":"ccc","since":"yesterday"}`, `args.since: "yesterday" is not an RFC 3339 time`},
		{`{"table":"Logs","to":"ccc","since":"2026-11-21T00:00:00"}`, `args.since: "2026-11-21T00:00:00" is not an RFC 3339 time`},
		{`{"table":"Logs","to":"ccc","since":"1500-01-01T00:00:00Z"}`, `args.since: "1500-01-01T00:00:00Z":`},
		{`{"table":"Logs","to":"ccc","since":"2026-11-21T00:00:00Z","after":"ccc/m/manifest-x.json"}`, "args.since: give since or after, not both"},
		{`{"table":"Logs","to":"ccc","afterLatest":true,"since":"2026-11-21T00:00:00Z"}`, "args.afterLatest: give one of since, after and afterLatest"},
		{`{"table":"Logs","to":"ccc","after":"ccc"}`, `args.after: "ccc" is not container/path/manifest-<op>.json`},
		{`{"table":"Logs","to":"ccc","after":"ccc/a/000001.jsonl"}`, `args.after: "ccc/a/000001.jsonl" does not name a manifest`},
		{`{"table":"Logs","to":"ccc","after":"Bad_C/manifest-x.json"}`, "args.after:"},
	} {
		_, err := jobs.ParseArgs[export.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%s) = %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"table":"Logs","to":"ccc"}`,
		`{"table":"Logs","to":"ccc/a/b","pk":"p","rkFrom":"","rkTo":"z","gzip":true,"maxPartBytes":1024}`,
		`{"table":"Logs","to":"ccc","since":"2026-11-21T10:30:00.1234567+01:00"}`,
		`{"table":"Logs","to":"ccc","after":"ccc/Logs/2026/11/21/1030/manifest-op-1.json"}`,
	} {
		if _, err := jobs.ParseArgs[export.Args](json.RawMessage(ok)); err != nil {
			t.Errorf("ParseArgs(%s) = %v, want nil", ok, err)
		}
	}
}

func run(t *testing.T, w *export.Worker, id, args string) (string, error) {
	t.Helper()
	parsed, err := jobs.ParseArgs[export.Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = w.Work(ctx, &jobs.Job[export.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: export.Kind}, Args: parsed})
	return res.Text(), err
}

// TestExportWork exports a partition in several parts that verify, says
// so in its result, and returns the same result on redelivery; a missing
// container or table is permanent, naming the field, and writes nothing.
func TestExportWork(t *testing.T) {
	ctx := context.Background()
	store := localstore.New(localstore.Options{})
	if err := store.Tables().CreateTable(ctx, "Logs"); err != nil {
		t.Fatal(err)
	}
	if err := store.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		e := storeadapter.Entity{PartitionKey: fmt.Sprint("p", i%2), RowKey: fmt.Sprintf("r%03d", i), Properties: map[string]any{"S": strings.Repeat("s", 100)}}
		if _, err := store.Tables().InsertEntity(ctx, "Logs", e); err != nil {
			t.Fatal(err)
		}
	}
	w, err := export.New(kit.Plain(store), export.Config{CheckpointTable: "Checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"table":"Logs","pk":"p1","to":"exports/daily","maxPartBytes":1024,"gzip":true}`
	res, err := run(t, w, "op-1", args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res, "exported 25 entities in ") || !strings.Contains(res, " parts to exports/daily/Logs/") || !strings.HasSuffix(res, "/manifest-op-1.json") {
		t.Fatalf("result %q", res)
	}
	name := res[strings.Index(res, "exports/")+len("exports/"):]
	rep, err := tableexport.Verify(ctx, store.Container("exports"), name)
	if err != nil || !rep.OK() || rep.Entities != 25 || rep.Parts < 3 || !rep.Manifest.Gzip {
		t.Fatalf("Verify = %+v, %v; want 25 entities in several gzipped parts, no problem", rep, err)
	}
	again, err := run(t, w, "op-1", args)
	if err != nil || again != res {
		t.Fatalf("redelivery = %q, %v; want %q", again, err, res)
	}

	for _, c := range []struct{ id, args, want string }{
		{"op-2", `{"table":"Logs","to":"nosuch"}`, "export: args.to: container nosuch does not exist"},
		{"op-3", `{"table":"Nosuch","to":"exports"}`, "export: args.table: table Nosuch does not exist"},
	} {
		_, err := run(t, w, c.id, c.args)
		if !jobs.IsPermanent(err) || err.Error() != c.want {
			t.Errorf("export %s = %v, want permanent %q", c.args, err, c.want)
		}
		if e, err := store.Tables().GetEntity(ctx, "Checkpoints", c.id, "export"); err == nil {
			t.Errorf("export %s left a checkpoint %v", c.args, e.Properties)
		}
	}
	page, err := store.Container("exports").List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range page.Blobs {
		if !strings.HasPrefix(b.Name, "daily/Logs/") {
			t.Errorf("unexpected blob %s", b.Name)
		}
	}
}

// TestExportConfig names the field of a bad setting.
func TestExportConfig(t *testing.T) {
	c := export.Config{MaxPartBytes: 5}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "export.maxPartBytes: must be 1024-") {
		t.Errorf("Validate = %v, want the export.maxPartBytes rule", err)
	}
	c = export.Config{}
	if err := c.Validate(); err != nil || c.CheckpointTable != "TablekeeperCheckpoints" || c.MaxPartBytes != 64<<20 {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}

// TestExportContinues: with its time budget spent after every part, each
// delivery registers one part and asks to continue, saying how far it
// got; the deliveries together write one export that verifies, and a
// delivery after the end returns the same result without continuing.
func TestExportContinues(t *testing.T) {
	ctx := context.Background()
	store := localstore.New(localstore.Options{})
	if err := store.Tables().CreateTable(ctx, "Logs"); err != nil {
		t.Fatal(err)
	}
	if err := store.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		e := storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%03d", i), Properties: map[string]any{"S": strings.Repeat("s", 100)}}
		if _, err := store.Tables().InsertEntity(ctx, "Logs", e); err != nil {
			t.Fatal(err)
		}
	}
	// Every reading of the clock is 2 s after the one before: the budget
	// is spent at its first check, after the first part.
	clk := clock.NewFake(time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC)).AutoAdvance(2 * time.Second)
	w, err := export.New(kit.Deps{Store: store, Clock: clk}, export.Config{CheckpointTable: "Checkpoints", TimeBudget: jobs.Duration(time.Second), MaxRunTime: jobs.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"table":"Logs","to":"exports","maxPartBytes":1024}`
	var progress []string
	var res string
	for range 100 {
		res, err = run(t, w, "op-c", args)
		ce, ok := jobs.AsContinue(err)
		if !ok {
			break
		}
		if ce.After != 0 {
			t.Errorf("continue after %v; want 0 (the back of the queue)", ce.After)
		}
		progress = append(progress, ce.Progress)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) < 3 || progress[0] != "exported 4 entities in 1 parts so far" || progress[1] != "exported 8 entities in 2 parts so far" {
		t.Fatalf("progress %q; want one part per delivery, several deliveries", progress)
	}
	if !strings.HasPrefix(res, fmt.Sprintf("exported 40 entities in %d parts to exports/Logs/", len(progress))) {
		t.Fatalf("result %q after %d continuations", res, len(progress))
	}
	name := res[strings.Index(res, "exports/")+len("exports/"):]
	if rep, err := tableexport.Verify(ctx, store.Container("exports"), name); err != nil || !rep.OK() || rep.Entities != 40 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	if again, err := run(t, w, "op-c", args); err != nil || again != res {
		t.Fatalf("a delivery after the end = %q, %v; want %q", again, err, res)
	}
}

// TestExportTimeBudgetConfig: the budget defaults to 5 min and must be at
// least 1 s and below maxRunTime.
func TestExportTimeBudgetConfig(t *testing.T) {
	c := export.Config{}
	if err := c.Validate(); err != nil || time.Duration(c.TimeBudget) != 5*time.Minute {
		t.Errorf("default timeBudget %v, %v; want 5m", time.Duration(c.TimeBudget), err)
	}
	for _, c := range []export.Config{
		{TimeBudget: jobs.Duration(500 * time.Millisecond)},
		{TimeBudget: jobs.Duration(30 * time.Minute)},
		{TimeBudget: jobs.Duration(10 * time.Minute), MaxRunTime: jobs.Duration(5 * time.Minute)},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "export.timeBudget: must be at least 1s and less than export.maxRunTime") {
			t.Errorf("Validate(%+v) = %v; want the export.timeBudget rule", c, err)
		}
	}
}

// TestExportIncrement: a full export records a mark; an export after it
// exports only the rows written since (a row updated, a row inserted),
// says so in its manifest, and verifies; an after of another scope or a
// missing one is permanent, naming args.after, and writes nothing.
func TestExportIncrement(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 21, 1, 0, 0, 0, time.UTC))
	store := localstore.New(localstore.Options{Clock: clk})
	if err := store.Tables().CreateTable(ctx, "Logs"); err != nil {
		t.Fatal(err)
	}
	if err := store.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	put := func(rk string, n int64) {
		e := storeadapter.Entity{PartitionKey: "p", RowKey: rk, Properties: map[string]any{"N": n}}
		if _, err := store.Tables().UpsertEntity(ctx, "Logs", e, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		put(fmt.Sprintf("r%02d", i), 0)
	}
	clk.Advance(10 * time.Minute) // the rows lie before the full export's margin
	w, err := export.New(kit.Deps{Store: store, Clock: clk}, export.Config{CheckpointTable: "Checkpoints", MarkMargin: jobs.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := run(t, w, "op-full", `{"table":"Logs","to":"exports/nightly"}`)
	if err != nil {
		t.Fatal(err)
	}
	full := "exports/" + res[strings.Index(res, "exports/")+len("exports/"):]
	clk.Advance(time.Hour)
	put("r03", 1)
	put("r10", 1)
	clk.Advance(10 * time.Minute) // out of the increment's margin
	res, err = run(t, w, "op-inc", `{"table":"Logs","to":"exports/nightly","after":"`+full+`"}`)
	if err != nil || !strings.HasPrefix(res, "exported 2 entities in 1 parts") {
		t.Fatalf("increment: %q, %v; want the 2 rows written since", res, err)
	}
	name := res[strings.Index(res, "exports/")+len("exports/"):]
	rep, err := tableexport.Verify(ctx, store.Container("exports"), name)
	if err != nil || !rep.OK() || !rep.Manifest.Incremental() || rep.Manifest.After != full || rep.Manifest.Since != "2026-11-21T01:09:00.0000000Z" || rep.Manifest.Mark != "2026-11-21T02:19:00.0000000Z" {
		t.Fatalf("increment's manifest: %+v, %v; want since the full export's start less 1m, after it, a mark an hour later", rep, err)
	}

	put("r04", 2)
	clk.Advance(time.Hour)
	res, err = run(t, w, "op-latest", `{"table":"Logs","to":"exports/nightly","afterLatest":true}`)
	if err != nil || !strings.HasPrefix(res, "exported 1 entities in 1 parts") {
		t.Fatalf("afterLatest: %q, %v; want the 1 row written since the increment", res, err)
	}
	latest := res[strings.Index(res, "exports/")+len("exports/"):]
	if m, err := tableexport.ReadManifest(ctx, store.Container("exports"), latest); err != nil || m.After != "exports/"+name {
		t.Errorf("afterLatest's manifest: after %q, %v; want the increment %s", m.After, err, name)
	}

	pk := `"pk":"p",`
	for _, c := range []struct{ id, args, want string }{
		{"op-scope", `{"table":"Logs",` + pk + `"to":"exports","after":"` + full + `"}`, "export: args.after: manifest " + full + ` is an export of table Logs, not of table Logs pk "p"`},
		{"op-missing", `{"table":"Logs","to":"exports","after":"exports/nightly/manifest-nosuch.json"}`, "export: args.after: manifest exports/nightly/manifest-nosuch.json does not exist"},
		{"op-nolatest", `{"table":"Logs",` + pk + `"to":"exports/nightly","afterLatest":true}`, `export: args.after: manifest (the latest under exports/nightly/Logs) does not exist: no export of table Logs pk "p" there records a mark; run a full export first`},
		{"op-nocontainer", `{"table":"Logs","to":"exports","after":"nosuch/manifest-x.json"}`, "export: args.after: manifest nosuch/manifest-x.json does not exist"},
	} {
		_, err := run(t, w, c.id, c.args)
		if !jobs.IsPermanent(err) || err.Error() != c.want {
			t.Errorf("export %s = %v, want permanent %q", c.args, err, c.want)
		}
		if _, err := store.Tables().GetEntity(ctx, "Checkpoints", c.id, "export"); !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("export %s left a checkpoint (%v)", c.args, err)
		}
	}
	c := export.Config{MarkMargin: jobs.Duration(25 * time.Hour)}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "export.markMargin: must be 0-24h0m0s, got 25h0m0s") {
		t.Errorf("Validate(markMargin 25h) = %v", err)
	}
}
