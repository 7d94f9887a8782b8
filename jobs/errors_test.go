package jobs_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/jobs"
)

// TestContinueLater: a wrapped ContinueError is found, is not permanent,
// and keeps its delay and (cut) progress; a negative delay is 0.
func TestContinueLater(t *testing.T) {
	err := fmt.Errorf("purge: %w", jobs.ContinueLater(5*time.Second, strings.Repeat("x", 300)))
	ce, ok := jobs.AsContinue(err)
	switch {
	case !ok:
		t.Fatalf("AsContinue(%v) = false", err)
	case ce.After != 5*time.Second || len(ce.Progress) > 210 || !strings.HasPrefix(ce.Progress, "xxx"):
		t.Fatalf("got after %v, progress of %d bytes", ce.After, len(ce.Progress))
	case jobs.IsPermanent(err):
		t.Fatal("a continuation is permanent")
	}
	if ce, _ := jobs.AsContinue(jobs.ContinueLater(-time.Second, "p")); ce.After != 0 {
		t.Fatalf("negative delay kept: %v", ce.After)
	}
	if _, ok := jobs.AsContinue(jobs.Permanentf("no")); ok {
		t.Fatal("a permanent error asks to continue")
	}
}

// TestBudget: spent exactly when its time is up; zero or negative never.
func TestBudget(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	b := jobs.NewBudget(time.Minute, clk)
	if b.Spent() {
		t.Fatal("spent at once")
	}
	clk.Advance(59 * time.Second)
	if b.Spent() {
		t.Fatal("spent before its end")
	}
	clk.Advance(time.Second)
	if !b.Spent() {
		t.Fatal("not spent at its end")
	}
	if jobs.NewBudget(0, clk).Spent() || (jobs.Budget{}).Spent() {
		t.Fatal("a zero budget is spent")
	}
}

// TestSettings: defaults (a short maxRunTime alone stays valid: the
// budget is half of it, whatever the kind's default), the ranges, and
// errors naming section and field.
func TestSettings(t *testing.T) {
	cases := []struct {
		table          string
		budget, maxRun time.Duration
		def            time.Duration
		wantB, wantM   time.Duration
		wantErr        string
	}{
		{"", 0, 0, jobs.DefaultTimeBudget, 5 * time.Minute, 30 * time.Minute, ""},
		{"", 0, 0, 30 * time.Second, 30 * time.Second, 30 * time.Minute, ""},
		{"", 0, 2 * time.Minute, jobs.DefaultTimeBudget, time.Minute, 2 * time.Minute, ""},
		{"", 0, 5 * time.Minute, jobs.DefaultTimeBudget, 150 * time.Second, 5 * time.Minute, ""},
		{"", time.Second, 2 * time.Second, jobs.DefaultTimeBudget, time.Second, 2 * time.Second, ""},
		{"", 0, time.Second, jobs.DefaultTimeBudget, 0, 0, "sec.timeBudget: must be at least 1s and less than sec.maxRunTime (1s), got 500ms"},
		{"", time.Minute, time.Minute, jobs.DefaultTimeBudget, 0, 0, "sec.timeBudget: must be at least 1s and less than sec.maxRunTime (1m0s)"},
		{"", 0, 25 * time.Hour, jobs.DefaultTimeBudget, 0, 0, "sec.maxRunTime: must be 1s-24h, got 25h0m0s"},
		{"x", 0, 0, jobs.DefaultTimeBudget, 0, 0, "sec.checkpointTable:"},
	}
	for _, c := range cases {
		table, b, m := c.table, jobs.Duration(c.budget), jobs.Duration(c.maxRun)
		err := jobs.CheckRunSettings("sec", &table, &m)
		if err == nil {
			err = jobs.CheckTimeBudget("sec", &b, m, c.def)
		}
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("settings %q, %v, %v = %v, want %q", c.table, c.budget, c.maxRun, err, c.wantErr)
			}
		case err != nil || time.Duration(b) != c.wantB || time.Duration(m) != c.wantM || table != jobs.DefaultCheckpointTable:
			t.Errorf("settings %q, %v, %v = %q, %v, %v, %v; want %v, %v", c.table, c.budget, c.maxRun, table, time.Duration(b), time.Duration(m), err, c.wantB, c.wantM)
		}
	}
}
