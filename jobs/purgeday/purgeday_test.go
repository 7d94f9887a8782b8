package purgeday

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestArgs: every bad argument is refused naming its field and rule.
func TestArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{"keepDays":3}`, "args.prefix: "},
		{`{"prefix":"9Logs","keepDays":3}`, `args.prefix: "9Logs" is not a day-table prefix: a letter, then letters and digits, 1-55 characters`},
		{`{"prefix":"Log_s","keepDays":3}`, "args.prefix:"},
		{`{"prefix":"L` + strings.Repeat("x", 55) + `","keepDays":3}`, "args.prefix:"},
		{`{"prefix":"Logs"}`, "args.keepDays: give keepDays or before (exactly one)"},
		{`{"prefix":"Logs","keepDays":3,"before":"2026-01-01"}`, "args.before: give keepDays or before, not both"},
		{`{"prefix":"Logs","keepDays":0}`, "args.keepDays: must be 1-36500 (1 keeps today and yesterday), got 0"},
		{`{"prefix":"Logs","keepDays":-1}`, "args.keepDays: must be 1-36500"},
		{`{"prefix":"Logs","keepDays":36501}`, "args.keepDays: must be 1-36500"},
		{`{"prefix":"Logs","keepDays":"3"}`, "keepDays"},
		{`{"prefix":"Logs","before":"2026-02-30"}`, `args.before: must be a real date YYYY-MM-DD, got "2026-02-30"`},
		{`{"prefix":"Logs","before":"2026-1-5"}`, "args.before: must be a real date"},
		{`{"prefix":"Logs","before":"20261105"}`, "args.before: must be a real date"},
		{`{"prefix":"Logs","keepDays":3,"exportTo":"Bad_Container"}`, "args.exportTo:"},
		{`{"prefix":"Logs","keepDays":3,"exportTo":"ccc/../x"}`, `args.exportTo: "ccc/../x": the prefix must not hold "." or ".." path segments`},
		{`{"prefix":"Logs","keepDays":3,"exportTo":"ccc/` + strings.Repeat("x", 1000) + `"}`, "args.exportTo: the prefix is too long"},
		{`{"prefix":"Logs","keepDays":3,"dryRun":"yes"}`, "dryRun"},
		{`{"prefix":"Logs","keepDays":3,"table":"x"}`, "table"},
	} {
		_, err := jobs.ParseArgs[Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%s) = %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"prefix":"Logs","keepDays":1}`,
		`{"prefix":"L","keepDays":36500,"exportTo":"ccc/a/b","dryRun":true}`,
		`{"prefix":"Logs","before":"9999-12-31"}`, // the future is the plan's to refuse (it has the clock)
		`{"prefix":"Logs","before":"2024-02-29","exportTo":"ccc"}`,
	} {
		if _, err := jobs.ParseArgs[Args](json.RawMessage(ok)); err != nil {
			t.Errorf("ParseArgs(%s) = %v, want nil", ok, err)
		}
	}
}

// TestCutoff: keepDays N cuts at today - N days (UTC), so keepDays 1
// keeps yesterday and today; before D cuts at D.
func TestCutoff(t *testing.T) {
	n := func(v int) *int { return &v }
	s := func(v string) *string { return &v }
	east := time.FixedZone("UTC+10", 10*3600)
	for _, c := range []struct {
		a    Args
		now  time.Time
		want string
	}{
		{Args{KeepDays: n(1)}, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), "2026-11-20"},
		{Args{KeepDays: n(1)}, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), "2026-11-20"},
		{Args{KeepDays: n(1)}, time.Date(2026, 11, 21, 23, 59, 59, 0, time.UTC), "2026-11-20"},
		{Args{KeepDays: n(1)}, time.Date(2026, 11, 22, 5, 0, 0, 0, east), "2026-11-20"}, // 19:00 UTC on the 21st
		{Args{KeepDays: n(3)}, time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC), "2026-02-27"},
		{Args{KeepDays: n(365)}, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), "2025-11-21"},
		{Args{Before: s("2026-11-20")}, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), "2026-11-20"},
		{Args{Before: s("2020-01-01")}, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), "2020-01-01"},
	} {
		got, err := c.a.Cutoff(c.now)
		if err != nil || got.Format(time.DateOnly) != c.want || got.Location() != time.UTC || !got.Equal(got.Truncate(24*time.Hour)) {
			t.Errorf("Cutoff(%+v at %v) = %v, %v; want %s", c.a, c.now, got, err, c.want)
		}
	}
	if _, err := (Args{Before: s("2026-11-22")}).Cutoff(time.Date(2026, 11, 21, 23, 59, 0, 0, time.UTC)); err == nil ||
		err.Error() != "args.before: must be no later than yesterday (2026-11-20 UTC), so that every deleted day ended at least a day ago; got 2026-11-22" {
		t.Errorf("a before of tomorrow: %v", err)
	}
	// Today would delete yesterday the moment it ended, as keepDays 0.
	if _, err := (Args{Before: s("2026-11-21")}).Cutoff(time.Date(2026, 11, 21, 0, 0, 30, 0, time.UTC)); err == nil ||
		!strings.Contains(err.Error(), "args.before: must be no later than yesterday (2026-11-20 UTC)") {
		t.Errorf("a before of today: %v", err)
	}
}

// TestConfig fills the defaults and names the field of a bad setting.
func TestConfig(t *testing.T) {
	c := Config{}
	if err := c.Validate(); err != nil || c.CheckpointTable != "TablekeeperCheckpoints" || time.Duration(c.TimeBudget) != 5*time.Minute ||
		time.Duration(c.MaxRunTime) != 30*time.Minute || c.MaxPartBytes != 64<<20 {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{TimeBudget: jobs.Duration(500 * time.Millisecond)}, "purgeday.timeBudget: must be at least 1s and less than purgeday.maxRunTime (30m0s), got 500ms"},
		{Config{TimeBudget: jobs.Duration(time.Hour)}, "purgeday.timeBudget: must be at least 1s and less than purgeday.maxRunTime"},
		{Config{TimeBudget: jobs.Duration(time.Minute), MaxRunTime: jobs.Duration(time.Minute)}, "purgeday.timeBudget:"},
		{Config{MaxRunTime: jobs.Duration(25 * time.Hour)}, "purgeday.maxRunTime: must be 1s-24h"},
		{Config{CheckpointTable: "x"}, "purgeday.checkpointTable:"},
		{Config{MaxPartBytes: 5}, "purgeday.maxPartBytes: must be 1024-"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestPurge deletes exactly the day tables older than the cut-off, never
// a table whose suffix is not a real date nor another prefix's; the same
// message again is a no-op, and so is a purge with nothing expired.
func TestPurge(t *testing.T) {
	b := newBundle(t, Config{CheckpointTable: "Checkpoints"}, 2)
	res, err := b.run(t, "op-1", `{"prefix":"LoginAttempts","keepDays":3}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "deleted 6 of 10 day tables, those older than 2026-11-18 (LoginAttempts20261112 … LoginAttempts20261117)"; res != want {
		t.Errorf("result %q, want %q", res, want)
	}
	b.wantTables(t, expired()...)
	if n := b.counts.Snapshot()[instrument.OpDeleteTable].Calls; n != 6 {
		t.Errorf("%d DeleteTable calls, want 6: one per day", n)
	}

	before := b.counts.Snapshot()
	res, err = b.run(t, "op-1", `{"prefix":"LoginAttempts","keepDays":3}`)
	if err != nil || res != "nothing to delete: 0 of 4 day tables older than 2026-11-18" {
		t.Errorf("the same message again = %q, %v", res, err)
	}
	b.wantTables(t, expired()...)
	after := b.counts.Snapshot()
	if d := after.Total().Calls - before.Total().Calls; d != after[instrument.OpListTables].Calls-before[instrument.OpListTables].Calls {
		t.Errorf("the redelivery made %d calls besides listing: %v", d, after)
	}

	res, err = b.run(t, "op-2", `{"prefix":"LoginAttempts","before":"2026-11-20"}`)
	if err != nil || res != "deleted 2 of 4 day tables, those older than 2026-11-20 (LoginAttempts20261118, LoginAttempts20261119)" {
		t.Errorf("before 2026-11-20 = %q, %v", res, err)
	}
	b.wantTables(t, dayTables[:8]...)
	res, err = b.run(t, "op-3", `{"prefix":"LoginAttempts","keepDays":1}`)
	if err != nil || res != "nothing to delete: 0 of 2 day tables older than 2026-11-20" {
		t.Errorf("keepDays 1 = %q, %v", res, err)
	}
}

// TestDryRun lists and computes and touches nothing: ListTables calls
// only.
func TestDryRun(t *testing.T) {
	b := newBundle(t, Config{CheckpointTable: "Checkpoints"}, 2)
	for _, args := range []string{`{"prefix":"LoginAttempts","keepDays":3,"dryRun":true}`,
		`{"prefix":"LoginAttempts","keepDays":3,"dryRun":true,"exportTo":"exports/days"}`} {
		res, err := b.run(t, "op-dry", args)
		if want := "dry run: would delete 6 of 10 day tables, those older than 2026-11-18 (LoginAttempts20261112 … LoginAttempts20261117)"; err != nil || res != want {
			t.Errorf("dry run = %q, %v; want %q", res, err, want)
		}
	}
	snap := b.counts.Snapshot()
	if ops := snap.Ops(); len(ops) != 1 || ops[0] != instrument.OpListTables {
		t.Errorf("a dry run made calls %v, want ListTables only", snap)
	}
	b.wantTables(t)
	res, err := b.run(t, "op-dry2", `{"prefix":"Nothing","keepDays":3,"dryRun":true}`)
	if err != nil || res != "dry run: nothing to delete: 0 of 0 day tables older than 2026-11-18" {
		t.Errorf("dry run of nothing = %q, %v", res, err)
	}
}

// TestPlanPages: the plan follows ListTables' pages (1,000 names each).
func TestPlanPages(t *testing.T) {
	b := newBundle(t, Config{}, 0)
	ctx := context.Background()
	for i := range 1500 {
		name := fmt.Sprintf("LoginAttemptsA%04d", i) // not day tables, sorted before the days
		if err := b.raw.Tables().CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	p, err := MakePlan(ctx, b.store.Tables(), Args{Prefix: "LoginAttempts", KeepDays: new(3)}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Expired) != 6 || p.Kept != 4 || p.Other != 1500+6 || p.Expired[0].Table != "LoginAttempts20261112" {
		t.Errorf("plan %d expired, %d kept, %d other", len(p.Expired), p.Kept, p.Other)
	}
	if n := b.counts.Snapshot()[instrument.OpListTables].Calls; n != 2 {
		t.Errorf("%d ListTables calls, want 2 pages", n)
	}
	if _, err := MakePlan(ctx, b.store.Tables(), Args{Prefix: "LoginAttempts", Before: new("2026-11-22")}, testNow); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("MakePlan with a before of tomorrow = %v, want ErrInvalidInput", err)
	}
}
