package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exportForRestore writes an export of 30 rows of table Src in several
// parts and returns its manifest's reference.
func exportForRestore(t *testing.T, b *bundle) string {
	t.Helper()
	ctx := t.Context()
	for i := range 30 {
		b.put("Src", storeadapter.Entity{PartitionKey: fmt.Sprint("p", i%3), RowKey: fmt.Sprintf("r%02d", i), Properties: map[string]any{"N": int64(i)}})
	}
	if err := b.store.Container("backups").Create(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Src"}, tableexport.Options{
		Blobs: b.store.Container("backups"), MaxPartBytes: 1024, OpID: "op-full",
		Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}, Clock: b.clock})
	if err != nil {
		t.Fatal(err)
	}
	return "backups/" + m.Name
}

// TestRestoreEnqueues: the flags become the restore kind's args; a
// missing manifest is refused before anything is sent.
func TestRestoreEnqueues(t *testing.T) {
	b := setup(t)
	ref := exportForRestore(t, b)
	r := b.run("", "restore", "-manifest", "backups/x/manifest-nosuch.json")
	if r.code != 1 || !strings.Contains(r.stderr, "-manifest: backups/x/manifest-nosuch.json does not exist (nothing was sent)") || b.count(b.queue) != 0 {
		t.Fatalf("missing manifest: exit %d, %d sent, stderr:\n%s", r.code, b.count(b.queue), r.stderr)
	}
	r = b.run("", "restore", "-manifest", ref, "-manifest", ref+"x.json", "-table", "Back", "-mode", "replace", "-id", "op-r1")
	if r.code != 1 || !strings.Contains(r.stderr, "x.json does not exist (nothing was sent)") || b.count(b.queue) != 0 {
		t.Fatalf("a chain naming a missing manifest: exit %d, %d sent, stderr:\n%s", r.code, b.count(b.queue), r.stderr)
	}
	r = b.mustRun("", "restore", "-o", "json", "-manifest", ref, "-table", "Back", "-mode", "mirror", "-id", "op-r1")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.OpID != "op-r1" || out.MessageID == "" {
		t.Fatalf("stdout %q (%v)", r.stdout, err)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	env := mustEnvelope(t, msgs[0].Text)
	a, err := jobs.ParseArgs[restore.Args](env.Args)
	if err != nil || env.Kind != "restore" || len(a.Manifests) != 1 || a.Manifests[0] != ref || a.Table != "Back" || a.Mode != "mirror" {
		t.Fatalf("envelope %+v args %+v, %v", env, a, err)
	}
}

// TestRestoreFlagErrors: bad flags are usage errors naming the flag, and
// nothing is sent.
func TestRestoreFlagErrors(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-manifest: is required"},
		{[]string{"-manifest", "backups"}, "-manifest[0]: "},
		{[]string{"-manifest", "backups/a/b.json"}, "manifest-<op>.json"},
		{[]string{"-manifest", "backups/manifest-a.json", "-table", "a_b"}, "-table: "},
		{[]string{"-manifest", "backups/manifest-a.json", "-mode", "merge"}, `-mode: must be "insert", "replace" or "mirror"`},
		{[]string{"-manifest", "backups/manifest-a.json", "-manifest", "backups/manifest-b.json"}, "-mode: a chain of 2 manifests needs mode replace"},
		{[]string{"-manifest", "backups/manifest-a.json", "-manifest", "backups/manifest-b.json", "-mode", "mirror", "-dry-run"}, "-mode: mirror needs exactly one manifest"},
		{[]string{"-manifest", "backups/manifest-a.json", "-id", "a b"}, "-id: "},
		{[]string{"-manifest", "backups/manifest-a.json", "extra"}, "extra"},
	} {
		r := b.run("", append([]string{"restore"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("restore %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if n := b.count(b.queue); n != 0 {
		t.Errorf("%d messages sent", n)
	}
}

// TestRestoreDryRun counts from the manifest and the target, and sends
// and writes nothing.
func TestRestoreDryRun(t *testing.T) {
	b := setup(t)
	ref := exportForRestore(t, b)
	// The target holds 5 of the exported rows and 4 others, one reserved.
	for i := range 5 {
		b.put("Back", storeadapter.Entity{PartitionKey: fmt.Sprint("p", i%3), RowKey: fmt.Sprintf("r%02d", i)})
	}
	for _, k := range []string{"p0/a", "p1/zz", "q/r", "p0/~tk.m.x"} {
		pk, rk, _ := strings.Cut(k, "/")
		b.put("Back", storeadapter.Entity{PartitionKey: pk, RowKey: rk})
	}
	for _, c := range []struct {
		mode                string
		write, skip, delete int64
	}{{"insert", 25, 5, 0}, {"replace", 30, 0, 0}, {"mirror", 30, 0, 3}} {
		r := b.mustRun("", "restore", "-o", "json", "-dry-run", "-manifest", ref, "-table", "Back", "-mode", c.mode)
		var p struct {
			Table                     string
			Rows, Write, Skip, Delete int64
		}
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatal(err)
		}
		if p.Table != "Back" || p.Rows != 30 || p.Write != c.write || p.Skip != c.skip || p.Delete != c.delete {
			t.Errorf("%s dry run: %s, want write %d skip %d delete %d", c.mode, r.stdout, c.write, c.skip, c.delete)
		}
	}
	r := b.mustRun("", "restore", "-dry-run", "-manifest", ref)
	if !strings.Contains(r.stdout, "dry run (nothing sent): restore, mode insert, of 30 rows") || !strings.Contains(r.stdout, "Src") {
		t.Errorf("table output:\n%s", r.stdout)
	}
	if n := b.count(b.queue); n != 0 {
		t.Errorf("a dry run sent %d messages", n)
	}
	page, err := b.store.Tables().Query(t.Context(), "Back", storeadapter.Query{})
	if err != nil || len(page.Entities) != 9 {
		t.Errorf("the target holds %d rows after dry runs (%v), want the 9 it had", len(page.Entities), err)
	}
	// A damaged part fails the dry run, naming it.
	m, _ := tableexport.ReadManifest(t.Context(), b.store.Container("backups"), strings.TrimPrefix(ref, "backups/"))
	if _, err := b.store.Container("backups").Put(t.Context(), m.Parts[1].Name, []byte("{}\n"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "restore", "-dry-run", "-manifest", ref)
	if r.code != 1 || !strings.Contains(r.stderr, "nothing of part "+m.Parts[1].Name) {
		t.Errorf("damaged part: exit %d, stderr %q", r.code, r.stderr)
	}
}
