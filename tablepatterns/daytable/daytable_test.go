package daytable_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/daytable"
)

func TestValidatePrefix(t *testing.T) {
	for _, c := range []struct {
		prefix string
		ok     bool
	}{
		{"L", true},
		{"LoginAttempts", true},
		{"Logs2", true},
		{"a" + strings.Repeat("0", 54), true},
		{"a" + strings.Repeat("0", 55), false}, // 56 + 8 = 64 > 63
		{"", false},
		{"2Logs", false},
		{"Login_Attempts", false},
		{"Login-Attempts", false},
		{"Lögin", false},
	} {
		err := daytable.ValidatePrefix(c.prefix)
		if (err == nil) != c.ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok %v", c.prefix, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "a letter, then letters and digits, 1-55 characters") {
			t.Errorf("ValidatePrefix(%q) = %v, want the rule", c.prefix, err)
		}
		if err == nil {
			name, err := daytable.Name(c.prefix, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := storeadapter.ValidateTableName(name); err != nil {
				t.Errorf("Name(%q) = %q, not a valid table name: %v", c.prefix, name, err)
			}
		}
	}
}

func TestName(t *testing.T) {
	east := time.FixedZone("UTC+10", 10*3600)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 11, 21, 23, 59, 59, 999999999, time.UTC), "LoginAttempts20261121"},
		{time.Date(2026, 11, 22, 5, 0, 0, 0, east), "LoginAttempts20261121"}, // 19:00 UTC the day before
		{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), "LoginAttempts20260102"},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "LoginAttempts00010101"},
	} {
		got, err := daytable.Name("LoginAttempts", c.t)
		if err != nil || got != c.want {
			t.Errorf("Name(%v) = %q, %v; want %q", c.t, got, err, c.want)
		}
		day, ok := daytable.Parse("LoginAttempts", got)
		if !ok || day.Format("20060102") != c.want[len("LoginAttempts"):] || day.Location() != time.UTC || day.Hour() != 0 {
			t.Errorf("Parse(Name(%v)) = %v, %v", c.t, day, ok)
		}
	}
	if _, err := daytable.Name("Bad_Prefix", time.Now()); err == nil {
		t.Error("Name accepted an invalid prefix")
	}
	if _, err := daytable.Name("Logs", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), "0001-9999") {
		t.Errorf("Name in the year 10000 = %v, want the year rule", err)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		prefix, table string
		want          string // YYYY-MM-DD, "" for not a day table
	}{
		{"LoginAttempts", "LoginAttempts20261121", "2026-11-21"},
		{"LoginAttempts", "LoginAttempts20240229", "2024-02-29"}, // leap day
		{"LoginAttempts", "LoginAttempts20250229", ""},           // not a leap year
		{"LoginAttempts", "LoginAttempts20261341", ""},           // month 13
		{"LoginAttempts", "LoginAttempts20260230", ""},           // 30 February
		{"LoginAttempts", "LoginAttempts20261100", ""},           // day 0
		{"LoginAttempts", "LoginAttempts20261131", ""},           // 31 November
		{"LoginAttempts", "LoginAttempts00000101", ""},           // year 0
		{"LoginAttempts", "LoginAttemptsArchive", ""},
		{"LoginAttempts", "LoginAttempts2026", ""},
		{"LoginAttempts", "LoginAttempts202611210", ""},
		{"LoginAttempts", "LoginAttempts2026112", ""},
		{"LoginAttempts", "LoginAttempts2026112a", ""},
		{"LoginAttempts", "LoginAttemptsX20261121", ""},
		{"LoginAttempts", "loginattempts20261121", ""}, // case-sensitive, as ListTables
		{"LoginAttempts", "Other20261121", ""},
		{"LoginAttempts", "LoginAttempts", ""},
		{"Logs", "Logs220261121", ""}, // another prefix's day (Logs2)
		{"Logs2", "Logs220261121", "2026-11-21"},
		{"Logs", "Logs+2026-1121", ""},
	} {
		day, ok := daytable.Parse(c.prefix, c.table)
		got := ""
		if ok {
			got = day.Format(time.DateOnly)
		}
		if got != c.want {
			t.Errorf("Parse(%q, %q) = %q, %v; want %q", c.prefix, c.table, got, ok, c.want)
		}
	}
}

// fakeClock is a clock whose Sleep advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After records d and moves the time past it at once: Ensure's backoff
// takes no wall time.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// TestEnsure creates a day table once, takes an existing one as done, and
// retries a name that is still being deleted with backoff until it is
// free: on localstore, which answers TableBeingDeleted for 40 s after a
// DeleteTable, as Azure does.
func TestEnsure(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	raw := localstore.New(localstore.Options{Clock: clock})
	var counts instrument.Counts
	tables := instrument.Wrap(raw, instrument.Options{Observers: []instrument.Observer{&counts}}).Tables()
	o := daytable.EnsureOptions{Clock: clock}
	day := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)

	for range 2 {
		name, err := o.Ensure(ctx, tables, "LoginAttempts", day)
		if err != nil || name != "LoginAttempts20261121" {
			t.Fatalf("Ensure = %q, %v", name, err)
		}
	}
	if n := counts.Snapshot()[instrument.OpCreateTable].Calls; n != 2 {
		t.Errorf("two Ensures made %d CreateTable calls, want 2", n)
	}
	if len(clock.sleeps) != 0 {
		t.Errorf("Ensure slept %v without a conflict", clock.sleeps)
	}

	// The day is deleted (a purge) and written again at once: the name
	// comes free 40 s later, and Ensure waits for it.
	if err := raw.Tables().DeleteTable(ctx, "LoginAttempts20261121"); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	name, err := o.Ensure(ctx, tables, "LoginAttempts", day)
	if err != nil || name != "LoginAttempts20261121" {
		t.Fatalf("Ensure after a delete = %q, %v", name, err)
	}
	waited := clock.Now().Sub(start)
	if waited < 40*time.Second || waited > 40*time.Second+20*time.Second {
		t.Errorf("Ensure waited %v for the name, want 40 s and at most one backoff more", waited)
	}
	// 1 s, 2 s, 4 s, 8 s, 15 s, 15 s... each ±20%.
	for i, d := range clock.sleeps {
		want := min(time.Second<<i, 15*time.Second)
		if d < want*8/10 || d > want*12/10 {
			t.Errorf("sleep %d was %v, want %v ±20%%", i+1, d, want)
		}
	}
	if _, err := raw.Tables().Query(ctx, "LoginAttempts20261121", storeadapter.Query{}); err != nil {
		t.Errorf("the table does not exist after Ensure: %v", err)
	}
}

// TestEnsureGivesUp: a name that stays unavailable ends with an error
// naming the table after MaxWait; a cancelled context ends the wait; any
// other error is returned at once.
func TestEnsureGivesUp(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	calls := 0
	fail := storeadapter.ErrTableBeingDeleted
	var deadlines []time.Duration
	tables := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
		calls++
		if d, ok := ctx.Deadline(); ok {
			deadlines = append(deadlines, time.Until(d))
		}
		return fail
	}}).Tables()
	o := daytable.EnsureOptions{MaxWait: 30 * time.Second, CallTimeout: 5 * time.Second, Clock: clock}
	start := clock.Now()
	_, err := o.Ensure(ctx, tables, "Logs", start)
	if !errors.Is(err, storeadapter.ErrTableBeingDeleted) || !strings.Contains(err.Error(), "ensure table Logs20261121: still being deleted after") {
		t.Fatalf("Ensure = %v, want the table named and ErrTableBeingDeleted", err)
	}
	if waited := clock.Now().Sub(start); waited != 30*time.Second {
		t.Errorf("gave up after %v, want MaxWait 30s", waited)
	}
	if calls < 4 || calls > 8 {
		t.Errorf("%d CreateTable calls in 30 s, want about 5 (1+2+4+8+15 s)", calls)
	}
	for _, d := range deadlines {
		if d <= 0 || d > 5*time.Second {
			t.Errorf("a CreateTable call had %v left, want at most CallTimeout 5s", d)
		}
	}
	if len(deadlines) != calls {
		t.Errorf("%d of %d calls had a deadline", len(deadlines), calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := o.Ensure(cctx, tables, "Logs", start); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure on a cancelled context = %v, want context.Canceled", err)
	}

	calls, fail = 0, storeadapter.ErrForbidden
	if _, err := o.Ensure(ctx, tables, "Logs", start); !errors.Is(err, storeadapter.ErrForbidden) || calls != 1 || !strings.Contains(err.Error(), "Logs20261121") {
		t.Errorf("Ensure on a forbidden table = %v after %d calls, want it at once, naming the table", err, calls)
	}
	if _, err := o.Ensure(ctx, tables, "9Logs", start); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("Ensure with a bad prefix = %v, want ErrInvalidInput", err)
	}
}
