package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exports seeds table Logins and writes exports of it under
// exports/daily, one per day given (days before t0; full or after the
// one before), and returns their manifests.
func (b *bundle) exports(days []int, full []bool) []tableexport.Manifest {
	b.t.Helper()
	ctx := context.Background()
	if err := b.store.Tables().CreateTable(ctx, "Logins"); err != nil {
		b.t.Fatal(err)
	}
	for i := range 12 {
		e := storeadapter.Entity{PartitionKey: "Day1", RowKey: fmt.Sprintf("%03d", i), Properties: map[string]any{"User": strings.Repeat("u", 80)}}
		if _, err := b.store.Tables().InsertEntity(ctx, "Logins", e); err != nil {
			b.t.Fatal(err)
		}
	}
	c := b.store.Container("exports")
	if err := c.Create(ctx); err != nil {
		b.t.Fatal(err)
	}
	var out []tableexport.Manifest
	for i, d := range days {
		o := tableexport.Options{Blobs: c, Prefix: "daily", OpID: fmt.Sprintf("op-%d", i), MaxPartBytes: 1024, Mark: true,
			Clock:       clock.NewFake(t0.Add(-time.Duration(d) * 24 * time.Hour)),
			Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}}
		if !full[i] {
			o.After = &tableexport.ManifestRef{Blobs: c, Name: out[i-1].Name}
		}
		m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logins"}, o)
		if err != nil {
			b.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestExportIncrementFlags: -since and -after become the args; a bad
// time, both at once, an -after manifest that is missing, of another
// scope or without a mark are refused and nothing is sent.
func TestExportIncrementFlags(t *testing.T) {
	b := setup(t)
	ms := b.exports([]int{1}, []bool{true})
	after := "exports/" + ms[0].Name
	r := b.mustRun("", "export", "-table", "Logins", "-to", "exports/daily", "-since", "2026-11-20T00:00:00Z", "-id", "op-s")
	r = b.mustRun("", "export", "-table", "Logins", "-to", "exports/daily", "-after", after, "-id", "op-a")
	r = b.mustRun("", "export", "-table", "Logins", "-to", "exports/daily", "-after-latest", "-id", "op-l")
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 2; stdout %s", len(msgs), r.stdout)
	}
	for i, want := range []string{`"since":"2026-11-20T00:00:00Z"`, `"after":"` + after + `"`, `"afterLatest":true`} {
		a, err := parseExportArgs(mustEnvelope(t, msgs[i].Text).Args)
		if err != nil || !strings.Contains(string(mustEnvelope(t, msgs[i].Text).Args), want) {
			t.Errorf("message %d args %s (%+v, %v), want %s", i, mustEnvelope(t, msgs[i].Text).Args, a, err, want)
		}
	}
	// A manifest without a mark (an export of before increments).
	noMark := ms[0]
	noMark.Mark, noMark.Version = "", 1
	data, _ := json.Marshal(noMark)
	if _, err := b.store.Container("exports").Put(t.Context(), "daily/old/manifest-x.json", data, storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sent := b.count(b.queue)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-since", "yesterday"}, 2, `-since: "yesterday" is not an RFC 3339 time`},
		{[]string{"-since", "2026-11-20T00:00:00Z", "-after", after}, 2, "-since: give since or after, not both"},
		{[]string{"-after-latest", "-since", "2026-11-20T00:00:00Z"}, 2, "-after-latest: give one of since, after and afterLatest"},
		{[]string{"-after", "exports/daily/x.json"}, 2, "-after: \"exports/daily/x.json\" does not name a manifest"},
		{[]string{"-after", "exports/daily/manifest-nosuch.json"}, 1, "-after: manifest exports/daily/manifest-nosuch.json does not exist (nothing was sent)"},
		{[]string{"-after", after, "-pk", "Day1"}, 1, `is an export of table Logins, not of table Logins pk "Day1" (nothing was sent)`},
		{[]string{"-after", "exports/daily/old/manifest-x.json"}, 1, "records no mark (written before increments): give -since instead"},
	} {
		r := b.run("", append([]string{"export", "-table", "Logins", "-to", "exports/daily"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("export %v: exit %d, stderr:\n%s\nwant exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		if n := b.count(b.queue); n != sent {
			t.Errorf("export %v: %d messages sent", c.args, n-sent)
		}
	}
}

func parseExportArgs(raw json.RawMessage) (export.Args, error) {
	var a export.Args
	err := json.Unmarshal(raw, &a)
	return a, err
}

// TestExportListAndPrune: list shows each export with its scope, kind,
// rows, since and mark (-verify checks them: a tampered part makes it
// exit 1); prune is a dry run without -yes, deletes the exports finished
// before -keep-days that nothing kept depends on with it, and deletes
// nothing more when run again.
func TestExportListAndPrune(t *testing.T) {
	b := setup(t)
	// Days before now: a full export 20 days ago and an increment after
	// it, a full one 10 days ago and two increments, the last 1 day ago.
	ms := b.exports([]int{20, 19, 10, 9, 1}, []bool{true, false, true, false, false})
	r := b.mustRun("", "export", "list", "-to", "exports/daily")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "SCOPE") || !strings.Contains(lines[1], "full") || !strings.Contains(lines[2], "increment") ||
		!strings.Contains(lines[2], ms[1].Since) || !strings.Contains(lines[5], ms[4].Mark) || !strings.Contains(lines[5], "exports/"+ms[4].Name) {
		t.Fatalf("export list:\n%s", r.stdout)
	}
	r = b.mustRun("", "export", "list", "-to", "exports/daily", "-verify", "-o", "json")
	var listed []listedJSON
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 5 {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	for i, l := range listed {
		if l.Manifest != "exports/"+ms[i].Name || l.Scope != "table Logins" || l.Verified == nil || !*l.Verified || l.Incremental != (i == 1 || i == 3 || i == 4) || l.Entities != ms[i].Entities {
			t.Errorf("listed %d: %+v", i, l)
		}
	}
	// Tamper with a part of the oldest export: -verify says so.
	p := ms[0].Parts[0].Name
	if _, err := b.store.Container("exports").Put(t.Context(), p, []byte("{}\n"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := b.run("", "export", "list", "-to", "exports/daily", "-verify"); r.code != 1 || !strings.Contains(r.stdout, "problems") || !strings.Contains(r.stdout, p) {
		t.Errorf("list -verify of a tampered export: exit %d\n%s", r.code, r.stdout)
	}

	r = b.mustRun("", "export", "prune", "-to", "exports/daily", "-keep-days", "5")
	if !strings.Contains(r.stdout, "dry run: would delete 2 of 5 exports") {
		t.Errorf("prune dry run:\n%s", r.stdout)
	}
	if got := len(mustList(t, b)); got != 5 {
		t.Errorf("a dry run deleted: %d exports left", got)
	}
	r = b.mustRun("", "export", "prune", "-to", "exports/daily", "-keep-days", "5", "-yes", "-o", "json")
	var pr struct {
		DryRun  bool
		Deleted int
		Exports []struct {
			Manifest     string
			Delete       bool
			Reason       string
			DeletedParts int
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || pr.DryRun || pr.Deleted != 2 || len(pr.Exports) != 5 {
		t.Fatalf("prune -yes -o json: %+v, %v\n%s", pr, err, r.stdout)
	}
	for i, e := range pr.Exports {
		if e.Delete != (i < 2) || (e.Delete && e.DeletedParts != len(ms[i].Parts)) || e.Reason == "" {
			t.Errorf("prune decision %d: %+v", i, e)
		}
	}
	left := mustList(t, b)
	if len(left) != 3 || left[0].Name != ms[2].Name {
		t.Errorf("after prune: %v; want the full export of 10 days ago and its chain", left)
	}
	page, err := b.store.Container("exports").List(t.Context(), ms[0].Folder+"/", "")
	if err != nil || len(page.Blobs) != 0 {
		t.Errorf("the pruned export's folder holds %v (%v)", page.Blobs, err)
	}
	r = b.mustRun("", "export", "prune", "-to", "exports/daily", "-keep-days", "5", "-yes")
	if !strings.Contains(r.stdout, "deleted 0 of 3 exports") {
		t.Errorf("prune again:\n%s", r.stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"prune", "-to", "exports/daily"}, "-keep-days: must be 1-36500, got 0"},
		{[]string{"prune", "-keep-days", "3"}, "-to: is required"},
		{[]string{"list", "-to", "Bad_Container"}, "-to:"},
	} {
		if r := b.run("", append([]string{"export"}, c.args...)...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("export %v: exit %d, stderr %s; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func mustList(t *testing.T, b *bundle) []tableexport.Entry {
	t.Helper()
	es, err := tableexport.List(t.Context(), b.store.Container("exports"), "daily")
	if err != nil {
		t.Fatal(err)
	}
	return es
}
