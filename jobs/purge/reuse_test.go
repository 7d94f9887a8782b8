package purge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestPurgeRefusesReusedOpID: the checkpoint records the digest of the
// arguments that began it, so a second message with the same operation id
// and other arguments (a producer reusing a fixed -id) is refused,
// permanently and by name, instead of adopting the first purge's scan,
// cut-off or done flag; the first purge then finishes exactly.
func TestPurgeRefusesReusedOpID(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 200, 2, "r") // u00 and u01, 100 rows each
	w := b.worker(t, purge.Config{PageSize: 20, TimeBudget: jobs.Duration(time.Second)})
	b.fault = func(_ int, c instrument.Call) error {
		b.clock.Advance(400 * time.Millisecond)
		return nil
	}
	const a = `{"table":"Logins","pk":"u00"}`
	if _, err := run(t, w, "op-nightly", a); err == nil {
		t.Fatal("first delivery of purge A finished; want a continuation")
	} else if _, ok := jobs.AsContinue(err); !ok {
		t.Fatalf("first delivery of purge A = %v, want a continuation", err)
	}
	b.fault = nil
	_, errB := run(t, w, "op-nightly", `{"table":"Logins","pk":"u01"}`)
	if !jobs.IsPermanent(errB) || !strings.Contains(errB.Error(), "op-nightly was used by a purge of other arguments") {
		t.Errorf("purge B under A's op id = %v, want the permanent refusal", errB)
	}
	if res, err := run(t, w, "op-nightly", a); err != nil || !strings.HasPrefix(res, "deleted 100 entities") {
		t.Errorf("purge A's continuation = %q, %v; want all 100 of u00 deleted", res, err)
	}
	u00, u01 := 0, 0
	for _, k := range b.keys(t) {
		switch {
		case strings.HasPrefix(k, "u00/"):
			u00++
		case strings.HasPrefix(k, "u01/"):
			u01++
		}
	}
	if u00 != 0 || u01 != 100 {
		t.Errorf("left %d rows of u00 and %d of u01; want 0 and 100", u00, u01)
	}
}

// TestPurgeTableGoneMidway: a purge whose table is deleted before its
// continuation runs has nothing left to delete: the continuation ends as
// done (not poisoned as a missing table, which is permanent only before
// the checkpoint exists), says so, and a redelivery is "already done".
func TestPurgeTableGoneMidway(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 100, 1, "r")
	w := b.worker(t, purge.Config{PageSize: 20, TimeBudget: jobs.Duration(time.Second)})
	b.fault = func(_ int, c instrument.Call) error {
		b.clock.Advance(400 * time.Millisecond)
		return nil
	}
	const args = `{"table":"Logins"}`
	if _, err := run(t, w, "op-gone", args); err == nil {
		t.Fatal("first delivery finished; want a continuation")
	} else if _, ok := jobs.AsContinue(err); !ok {
		t.Fatalf("first delivery = %v, want a continuation", err)
	}
	b.fault = nil
	if err := b.raw.Tables().DeleteTable(context.Background(), "Logins"); err != nil {
		t.Fatal(err)
	}
	res, err := run(t, w, "op-gone", args)
	if err != nil || !strings.HasPrefix(res, "table Logins is gone") {
		t.Errorf("continuation after the table was deleted = %q, %v; want done, saying the table is gone", res, err)
	}
	if res, err := run(t, w, "op-gone", args); err != nil || !strings.HasPrefix(res, "already done") {
		t.Errorf("redelivery = %q, %v; want already done", res, err)
	}
}
