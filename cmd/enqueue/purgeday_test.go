package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestPurgedayEnqueues: the flags become the purgeday kind's args.
func TestPurgedayEnqueues(t *testing.T) {
	b := setup(t)
	r := b.mustRun("", "purgeday", "-o", "json", "-prefix", "LoginAttempts", "-keep-days", "3", "-export-to", "exports/days", "-id", "op-pd-1")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.OpID != "op-pd-1" || out.MessageID == "" {
		t.Fatalf("stdout %q (%v), want JSON with the op id and the message id", r.stdout, err)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	env := mustEnvelope(t, msgs[0].Text)
	if env.Kind != "purgeday" || env.ID != "op-pd-1" || string(env.Args) != `{"prefix":"LoginAttempts","keepDays":3,"exportTo":"exports/days"}` {
		t.Errorf("envelope %+v args %s", env, env.Args)
	}
	b.mustRun("", "purgeday", "-prefix", "LoginAttempts", "-before", "2026-11-20")
	msgs = b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	if a, err := jobs.ParseArgs[purgeday.Args](mustEnvelope(t, msgs[0].Text).Args); err != nil || *a.Before != "2026-11-20" || a.KeepDays != nil || a.DryRun {
		t.Errorf("args %+v, %v", a, err)
	}
}

// TestPurgedayDryRun prints the plan computed now (the day tables that
// would go, in a table or as JSON) and enqueues the dry run.
func TestPurgedayDryRun(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, name := range []string{"LoginAttempts20261116", "LoginAttempts20261117", "LoginAttempts20261118", "LoginAttempts20261121",
		"LoginAttemptsArchive", "LoginAttempts20260230"} {
		if err := b.store.Tables().CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	r := b.mustRun("", "purgeday", "-prefix", "LoginAttempts", "-keep-days", "3", "-dry-run", "-id", "op-dry")
	for _, want := range []string{
		"dry run: 2 of 4 day tables LoginAttempts* are older than 2026-11-18 and would be deleted (2 kept; 2 other tables with the prefix, never touched):",
		"TABLE                  DATE\nLoginAttempts20261116  2026-11-16\nLoginAttempts20261117  2026-11-17\n",
		"op-dry",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 || !strings.Contains(r.stdout, msgs[0].ID) {
		t.Fatalf("the dry run's message: %v; stdout:\n%s", msgs, r.stdout)
	}
	if env := mustEnvelope(t, msgs[0].Text); string(env.Args) != `{"prefix":"LoginAttempts","keepDays":3,"dryRun":true}` {
		t.Errorf("args %s", env.Args)
	}
	r = b.mustRun("", "purgeday", "-o", "json", "-prefix", "LoginAttempts", "-before", "2026-11-17", "-dry-run")
	var out struct {
		OpID, MessageID, Cutoff string
		DayTables               int
		Expired                 []struct{ Table, Date string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Cutoff != "2026-11-17" || out.DayTables != 4 ||
		len(out.Expired) != 1 || out.Expired[0].Table != "LoginAttempts20261116" || out.Expired[0].Date != "2026-11-16" || out.MessageID == "" {
		t.Errorf("json %q: %+v, %v", r.stdout, out, err)
	}
	for _, name := range []string{"LoginAttempts20261116", "LoginAttempts20261117"} {
		if _, err := b.store.Tables().Query(ctx, name, storeadapter.Query{}); err != nil {
			t.Errorf("%s after a dry run: %v", name, err)
		}
	}
}

// TestPurgedayFlagErrors: bad flags are usage errors naming the flag and
// the kind's rule, and nothing is sent.
func TestPurgedayFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-keep-days", "3"}, "-prefix: "},
		{[]string{"-prefix", "9Logs", "-keep-days", "3"}, `-prefix: "9Logs" is not a day-table prefix`},
		{[]string{"-prefix", "Logs"}, "-keep-days: give -keep-days or -before (exactly one)"},
		{[]string{"-prefix", "Logs", "-keep-days", "3", "-before", "2026-11-01"}, "-before: give -keep-days or -before, not both"},
		{[]string{"-prefix", "Logs", "-keep-days", "0"}, "-keep-days: must be 1-36500"},
		{[]string{"-prefix", "Logs", "-keep-days", "three"}, `-keep-days: "three" is not a whole number of days`},
		{[]string{"-prefix", "Logs", "-before", "2026-02-30"}, `-before: must be a real date YYYY-MM-DD, got "2026-02-30"`},
		{[]string{"-prefix", "Logs", "-before", "2026-11-22"}, "-before: must be no later than yesterday (2026-11-20 UTC), so that every deleted day ended at least a day ago; got 2026-11-22"},
		{[]string{"-prefix", "Logs", "-before", "2026-11-21"}, "-before: must be no later than yesterday (2026-11-20 UTC)"},
		{[]string{"-prefix", "Logs", "-keep-days", "3", "-export-to", "exports/../y"}, `-export-to: "exports/../y": the prefix must not hold`},
		{[]string{"-prefix", "Logs", "-keep-days", "3", "-id", "bad id"}, "-id: must be 1-128 characters"},
	} {
		b := setup(t)
		r := b.run("", append([]string{"purgeday"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("purgeday %v: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if n := b.count(b.queue); n != 0 {
			t.Errorf("purgeday %v: the queue holds %d messages after a usage error", c.args, n)
		}
	}
}
