package purgeday

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestBudgetAfterKeptDay: a day kept for a late write is verified and
// guarded again by every continuation before any other day. When that
// alone spends the time budget, the delivery must still go on to the
// next day (a continuation after a kept day would make no progress, for
// ever, and never report the late write): the other days go and the job
// ends with the permanent error naming the kept day.
func TestBudgetAfterKeptDay(t *testing.T) {
	b := newBundle(t, Config{CheckpointTable: "Checkpoints", MaxPartBytes: 1024, TimeBudget: jobs.Duration(time.Second)}, 12)
	late := expired()[0]
	// First delivery (no clock ticks: budget never spent): exports the
	// oldest day, then fails on its delete.
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpDeleteTable && c.Name == late {
			return storeadapter.ErrUnavailable
		}
		return nil
	})
	if _, err := b.run(t, "op-nl", exportArgs); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Fatalf("first delivery: %v", err)
	}
	b.setFault(nil)
	b.clock.Advance(time.Minute)
	if _, err := b.raw.Tables().UpsertEntity(context.Background(), late, storeadapter.Entity{PartitionKey: "user0", RowKey: "late"}, storeadapter.Merge); err != nil {
		t.Fatal(err)
	}
	// Re-verifying the kept day now takes longer than the budget.
	b.tick = time.Second
	var last error
	for i := 0; i < 30; i++ {
		_, err := b.run(t, "op-nl", exportArgs)
		ce, ok := jobs.AsContinue(err)
		if !ok {
			last = err
			break
		}
		last = err
		if i == 29 {
			t.Errorf("30 continuations and no end; the last says %q; tables left: %q", ce.Progress,
				slices.DeleteFunc(b.tables(t), func(n string) bool { return !strings.HasPrefix(n, "LoginAttempts2026111") }))
		}
	}
	if !jobs.IsPermanent(last) || !strings.Contains(last.Error(), late) {
		t.Errorf("the purge ended with %v, want the permanent late-write error naming %s", last, late)
	}
	b.wantTables(t, expired()[1:]...)
}
