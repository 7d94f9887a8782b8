package purgeday

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

const exportArgs = `{"prefix":"LoginAttempts","keepDays":3,"exportTo":"exports/days"}`

// smallParts gives each day of 12 rows several parts.
var smallParts = Config{CheckpointTable: "Checkpoints", MaxPartBytes: 1024}

// TestPurgeExport exports every expired day, verifies it and then deletes
// its table; the redelivery is a no-op; a missing container is refused
// naming args.exportTo, with nothing deleted.
func TestPurgeExport(t *testing.T) {
	b := newBundle(t, smallParts, 12)
	res, err := b.run(t, "op-x", exportArgs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res, "deleted 6 of 10 day tables, those older than 2026-11-18 (LoginAttempts20261112 … LoginAttempts20261117); exported 6 first: 72 entities in ") {
		t.Errorf("result %q", res)
	}
	b.wantTables(t, expired()...)
	for _, day := range expired() {
		b.checkExported(t, "op-x", day)
		if m, _ := b.manifest(t, "op-x", day); len(m.Parts) < 2 {
			t.Errorf("%s: %d parts, want several", day, len(m.Parts))
		}
	}
	for _, day := range dayTables[6:] {
		if _, ok := b.manifest(t, "op-x", day); ok {
			t.Errorf("%s: kept, but exported", day)
		}
	}
	if res, err := b.run(t, "op-x", exportArgs); err != nil || !strings.HasPrefix(res, "nothing to delete") {
		t.Errorf("redelivery = %q, %v", res, err)
	}

	b = newBundle(t, smallParts, 1)
	_, err = b.run(t, "op-y", `{"prefix":"LoginAttempts","keepDays":3,"exportTo":"nosuch"}`)
	if !jobs.IsPermanent(err) || err.Error() != "purgeday: args.exportTo: container nosuch does not exist" {
		t.Errorf("missing container: %v", err)
	}
	b.wantTables(t)

	_, err = b.run(t, "op-z", `{"prefix":"LoginAttempts","before":"2026-11-20"}`)
	if err != nil {
		t.Fatal(err)
	}
	b.w.Clock = clock.NewFake(testNow.AddDate(0, 0, -2)) // a worker whose clock is behind the producer's
	_, err = b.run(t, "op-z2", `{"prefix":"LoginAttempts","before":"2026-11-20"}`)
	if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), "args.before: must be no later than yesterday (2026-11-18 UTC)") {
		t.Errorf("a before in the worker's future: %v", err)
	}
}

// TestPurgeCrashAtEveryCall fails the run at each of its storage calls in
// turn (as a crash there would end it), checks that no table is ever gone
// without a complete export (with exportTo), then lets a redelivery
// finish: it converges on exactly the expired days deleted, each exported
// with every row once.
func TestPurgeCrashAtEveryCall(t *testing.T) {
	// keepDays 6 expires three days of six rows: two parts each.
	gone := dayTables[:3]
	for _, c := range []struct{ name, args string }{
		{"plain", `{"prefix":"LoginAttempts","keepDays":6}`},
		{"exportTo", `{"prefix":"LoginAttempts","keepDays":6,"exportTo":"exports/days"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			crashes := 0
			for k := 1; ; k++ {
				b := newBundle(t, smallParts, 6)
				crashed := false
				b.setFault(func(n int, call instrument.Call) error {
					if n == k {
						crashed = true
						return fmt.Errorf("crash at call %d (%s %s): %w", n, call.Op, call.Name, storeadapter.ErrUnavailable)
					}
					return nil
				})
				_, err := b.run(t, "op-c", c.args)
				if !crashed {
					if err != nil {
						t.Fatalf("run without a crash: %v", err)
					}
					break
				}
				crashes++
				if err == nil || jobs.IsPermanent(err) {
					t.Fatalf("crash at call %d: run returned %v, want a transient error", k, err)
				}
				if c.name == "exportTo" {
					for _, day := range gone {
						if !slices.Contains(b.tables(t), day) {
							b.checkExported(t, "op-c", day) // gone: exported first
						}
					}
				}
				b.setFault(nil)
				if _, err := b.run(t, "op-c", c.args); err != nil {
					t.Fatalf("crash at call %d, then the redelivery: %v", k, err)
				}
				b.wantTables(t, gone...)
				if c.name == "exportTo" {
					for _, day := range gone {
						b.checkExported(t, "op-c", day)
					}
				}
				if t.Failed() {
					t.Fatalf("after a crash at call %d", k)
				}
			}
			if min := map[string]int{"plain": 4, "exportTo": 50}[c.name]; crashes < min {
				t.Errorf("only %d crash positions, want at least %d", crashes, min)
			}
			t.Logf("%d crash positions", crashes)
		})
	}
}

// TestLateWrite: a row written to an expired day after its export began
// keeps the table (the export may lack it); the other days go; the job
// ends with a permanent error naming the table.
func TestLateWrite(t *testing.T) {
	b := newBundle(t, smallParts, 12)
	late := expired()[2]
	// The first delivery exports every day and fails on the delete of
	// the third.
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpDeleteTable && c.Name == late {
			return storeadapter.ErrUnavailable
		}
		return nil
	})
	if _, err := b.run(t, "op-l", exportArgs); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Fatalf("first delivery: %v", err)
	}
	b.setFault(nil)
	// A writer writes the expired day.
	b.clock.Advance(time.Minute)
	if _, err := b.raw.Tables().UpsertEntity(context.Background(), late, storeadapter.Entity{PartitionKey: "user0", RowKey: "late"}, storeadapter.Merge); err != nil {
		t.Fatal(err)
	}
	res, err := b.run(t, "op-l", exportArgs)
	want := "purgeday: " + late + ": written after its export began, so the table is kept; writers must not write days older than the cut-off"
	if !jobs.IsPermanent(err) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("redelivery = %v, want permanent %q", err, want)
	}
	if !strings.Contains(res, "1 kept for late writes") {
		t.Errorf("result %q", res)
	}
	gone := slices.DeleteFunc(expired(), func(s string) bool { return s == late })
	b.wantTables(t, gone...)

	// A new operation, more than LateWriteSlack after the late write,
	// exports the day again, late row included, and deletes it.
	b.clock.Advance(LateWriteSlack + time.Second)
	if _, err := b.run(t, "op-l2", exportArgs); err != nil {
		t.Fatal(err)
	}
	b.wantTables(t, expired()...)
	m, ok := b.manifest(t, "op-l2", late)
	if !ok || m.Entities != 13 {
		t.Errorf("the new export of %s: %v, %d entities; want 13 (the late row too)", late, ok, m.Entities)
	}
}

// TestBudget: a spent time budget makes the delivery continue later
// (jobs.ContinueLater) after a day and inside a day's export; the
// continuations finish the purge exactly.
func TestBudget(t *testing.T) {
	for _, c := range []struct {
		name, args string
		stopped    bool
	}{
		{"plain", `{"prefix":"LoginAttempts","keepDays":3}`, false},
		{"exportTo", exportArgs, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBundle(t, Config{CheckpointTable: "Checkpoints", MaxPartBytes: 1024, TimeBudget: jobs.Duration(time.Second)}, 12)
			b.tick = time.Second // every storage call spends the budget
			continued, stopped := 0, false
			for {
				_, err := b.run(t, "op-b", c.args)
				ce, ok := jobs.AsContinue(err)
				if !ok {
					if err != nil {
						t.Fatal(err)
					}
					break
				}
				if ce.After != 0 || !strings.HasPrefix(ce.Progress, "deleted ") {
					t.Errorf("continue %+v", ce)
				}
				stopped = stopped || strings.Contains(ce.Progress, "stopped while exporting")
				if continued++; continued > 200 {
					t.Fatal("no end to the continuations")
				}
			}
			if continued < 5 || stopped != c.stopped {
				t.Errorf("%d continuations (stopped inside an export: %v), want at least 5 (%v)", continued, stopped, c.stopped)
			}
			b.wantTables(t, expired()...)
			if c.name == "exportTo" {
				for _, day := range expired() {
					b.checkExported(t, "op-b", day)
				}
			}
		})
	}
}

// TestLateReservedRow: a row of tablekeeper's own (an index reconcile's
// membership record, a producer's outbox row) written to an expired day
// after its export began is not application data: it is neither exported
// nor a late write, and the day is deleted.
func TestLateReservedRow(t *testing.T) {
	b := newBundle(t, smallParts, 12)
	day := expired()[2]
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpDeleteTable && c.Name == day {
			return storeadapter.ErrUnavailable
		}
		return nil
	})
	if _, err := b.run(t, "op-r", exportArgs); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Fatalf("first delivery: %v", err)
	}
	b.setFault(nil)
	b.clock.Advance(time.Minute)
	record := storeadapter.Entity{PartitionKey: "user0", RowKey: storeadapter.ReservedPrefix + "m.late"}
	if _, err := b.raw.Tables().UpsertEntity(context.Background(), day, record, storeadapter.Merge); err != nil {
		t.Fatal(err)
	}
	if _, err := b.run(t, "op-r", exportArgs); err != nil {
		t.Fatalf("redelivery after a reserved row was written: %v, want the day deleted", err)
	}
	b.wantTables(t, expired()...)
	if m, ok := b.manifest(t, "op-r", day); !ok || m.Entities != 12 {
		t.Errorf("the export of %s: %v, %d entities; want the 12 application rows", day, ok, m.Entities)
	}
}
