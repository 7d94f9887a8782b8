package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
)

// TestPurgeEnqueuesEnvelope: the flags become the purge kind's args
// (-older-than in days, as every duration flag takes it: 30d is 720h).
func TestPurgeEnqueuesEnvelope(t *testing.T) {
	b := setup(t)
	r := b.mustRun("", "purge", "-o", "json", "-table", "Logins", "-pk", "u01", "-rk-from", "a", "-rk-to", "m",
		"-older-than", "30d", "-id", "op-purge-1")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.OpID != "op-purge-1" || out.MessageID == "" {
		t.Fatalf("stdout %q (%v), want JSON with the op id and the message id", r.stdout, err)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	env := mustEnvelope(t, msgs[0].Text)
	if env.Kind != "purge" || env.ID != "op-purge-1" {
		t.Fatalf("envelope %+v", env)
	}
	a, err := jobs.ParseArgs[purge.Args](env.Args)
	if err != nil {
		t.Fatal(err)
	}
	if a.Table != "Logins" || *a.PK != "u01" || *a.RKFrom != "a" || *a.RKTo != "m" || time.Duration(*a.OlderThan) != 720*time.Hour {
		t.Errorf("args %s", env.Args)
	}
	if want := `{"table":"Logins","pk":"u01","rkFrom":"a","rkTo":"m","olderThan":"720h0m0s"}`; string(env.Args) != want {
		t.Errorf("args %s, want %s", env.Args, want)
	}
	r = b.mustRun("", "purge", "-table", "Logins")
	if !strings.Contains(r.stdout, "op-") {
		t.Errorf("stdout lacks a generated op id:\n%s", r.stdout)
	}
	if msgs := b.receiveAll(b.queue); len(msgs) != 1 || string(mustEnvelope(t, msgs[0].Text).Args) != `{"table":"Logins"}` {
		t.Errorf("whole-table purge: %v", msgs)
	}
}

// TestPurgeFlagErrors: bad flags are usage errors naming the flag and the
// purge kind's rule, and nothing is sent.
func TestPurgeFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-table:"},
		{[]string{"-table", "x"}, "-table:"},
		{[]string{"-table", "Logins", "-rk-from", "a"}, "-pk: is required with rkFrom or rkTo"},
		{[]string{"-table", "Logins", "-pk", "p", "-rk-from", "m", "-rk-to", "a"}, "-rk-to: must be greater than rkFrom"},
		{[]string{"-table", "Logins", "-pk", "a#b"}, "-pk:"},
		{[]string{"-table", "Logins", "-older-than", "30"}, `-older-than: must be a duration such as 90m, 36h or 7d, got "30" (a unit is needed`},
		{[]string{"-table", "Logins", "-older-than", "-1d"}, `-older-than: must not be negative`},
		{[]string{"-table", "Logins", "-older-than", "0s"}, "-older-than: must be a positive duration"},
		{[]string{"-table", "Logins", "-id", "bad id"}, "-id: must be 1-128 characters"},
		{[]string{"-table", "Logins", "extra"}, "extra"},
	} {
		b := setup(t)
		r := b.run("", append([]string{"purge"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("purge %v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if n := b.count(b.queue); n != 0 {
			t.Errorf("purge %v: the queue holds %d messages after a usage error", c.args, n)
		}
	}
}
