package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
	copykind "github.com/tablekeeper/tablekeeper/jobs/copy"
)

// TestCopyEnqueuesEnvelope: the flags become the copy kind's args, and
// -from and -to are checked against the -config file's accounts.
func TestCopyEnqueuesEnvelope(t *testing.T) {
	t.Setenv("TABLEKEEPER_CONFIG", "")
	cfg := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(cfg, []byte(`{"accounts": {"dr": {"account": "drstore", "credential": "default"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	r := b.mustRun("", "copy", "-o", "json", "-table", "Orders", "-pk", "p1", "-rk-from", "a", "-rk-to", "m",
		"-to", "dr", "-target", "Orders2", "-mode", "replace", "-id", "op-copy-1", "-config", cfg)
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.OpID != "op-copy-1" || out.MessageID == "" {
		t.Fatalf("stdout %q (%v), want JSON with the op id and the message id", r.stdout, err)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	env := mustEnvelope(t, msgs[0].Text)
	if env.Kind != "copy" || env.ID != "op-copy-1" {
		t.Fatalf("envelope %+v", env)
	}
	if _, err := jobs.ParseArgs[copykind.Args](env.Args); err != nil {
		t.Fatal(err)
	}
	if want := `{"table":"Orders","pk":"p1","rkFrom":"a","rkTo":"m","to":"dr","target":"Orders2","mode":"replace"}`; string(env.Args) != want {
		t.Errorf("args %s, want %s", env.Args, want)
	}
	b.mustRun("", "copy", "-table", "Orders", "-from", "dr") // no -config: the worker checks the name
	if msgs := b.receiveAll(b.queue); len(msgs) != 1 || string(mustEnvelope(t, msgs[0].Text).Args) != `{"table":"Orders","from":"dr"}` {
		t.Errorf("copy from dr: %v", msgs)
	}
}

// TestCopyFlagErrors: bad flags are usage errors naming the flag and the
// copy kind's rule, an account -config does not declare is named with
// the ones it does, and nothing is sent.
func TestCopyFlagErrors(t *testing.T) {
	t.Setenv("TABLEKEEPER_CONFIG", "")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "worker.json")
	if err := os.WriteFile(cfg, []byte(`{"accounts": {"dr": {"account": "drstore", "credential": "default"}, "old": {"credential": "connection-string", "connectionStringEnv": "OLD_CS"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"accounts": {"dr": {"account": "drstore", "credential": "sas", "sasToken": "sv=1&sig=FILESECRET0123"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-table:"},
		{[]string{"-table", "Orders"}, "-target: the copy would write table Orders onto itself"},
		{[]string{"-table", "Orders", "-to", "DR"}, "-to: an account of the worker's config"},
		{[]string{"-table", "Orders", "-to", "dr", "-mode", "merge"}, `-mode: must be "insert" or "replace", got "merge"`},
		{[]string{"-table", "Orders", "-rk-from", "a", "-to", "dr"}, "-pk: is required with rkFrom or rkTo"},
		{[]string{"-table", "Orders", "-to", "dr", "-target", "x"}, "-target:"},
		{[]string{"-table", "Orders", "-to", "backup", "-config", cfg}, `-to: account "backup": not in the config's "accounts" section (it declares dr, old) (-config ` + cfg + ")"},
		{[]string{"-table", "Orders", "-from", "nope", "-to", "dr", "-config", cfg}, `-from: account "nope": not in the config's "accounts" section`},
		{[]string{"-table", "Orders", "-to", "dr", "-config", bad}, "accounts.dr.sasToken: unknown field"},
		{[]string{"-table", "Orders", "-to", "dr", "-id", "bad id"}, "-id: must be 1-128 characters"},
	} {
		b := setup(t)
		r := b.run("", append([]string{"copy"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("copy %v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if strings.Contains(r.stderr, "FILESECRET") {
			t.Errorf("copy %v: stderr quotes the secret in the file:\n%s", c.args, r.stderr)
		}
		if n := b.count(b.queue); n != 0 {
			t.Errorf("copy %v: the queue holds %d messages after a usage error", c.args, n)
		}
	}
}
