package e2e

// The tests in this file run one at a time (no t.Parallel): they load the
// emulator and depend on how far a worker gets before a signal, which other
// tests running at once would make unpredictable.

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// checkNumbered checks that a table holds exactly the entities of want
// (from numbered), each with its own N, so none is lost or duplicated.
func checkNumbered(t *testing.T, e *env, what, table string, want []storeadapter.Entity) {
	t.Helper()
	got := e.entities(table, storeadapter.Filter{})
	wantKeys, gotKeys := keys(want), keys(got)
	slices.Sort(wantKeys)
	slices.Sort(gotKeys)
	if !slices.Equal(wantKeys, gotKeys) {
		missing, extra := 0, 0
		for _, k := range wantKeys {
			if _, ok := slices.BinarySearch(gotKeys, k); !ok {
				missing++
			}
		}
		for _, k := range gotKeys {
			if _, ok := slices.BinarySearch(wantKeys, k); !ok {
				extra++
			}
		}
		t.Errorf("%s %s holds %d entities, want %d: %d missing, %d unexpected", what, table, len(got), len(want), missing, extra)
		return
	}
	wantN := map[string]any{}
	for _, en := range want {
		wantN[en.PartitionKey+"/"+en.RowKey] = en.Properties["N"]
	}
	for _, en := range got {
		if w := wantN[en.PartitionKey+"/"+en.RowKey]; !storeadapter.Equal(en.Properties["N"], w) {
			t.Errorf("%s %s: %s/%s has N = %s, want %s", what, table, en.PartitionKey, en.RowKey,
				storeadapter.Format(en.Properties["N"]), storeadapter.Format(w))
		}
	}
}

// checkNoPoison checks that nothing of work queue q was poisoned.
func checkNoPoison(t *testing.T, e *env, q string) {
	t.Helper()
	if n := e.count(poison.QueueName(q)); n != 0 {
		t.Errorf("poison queue holds %d messages, want 0", n)
	}
	recs, err := mover(q).List(e.ctx, "")
	if err != nil {
		t.Fatalf("poison List: %v", err)
	}
	if len(recs) != 0 {
		t.Errorf("%d poison records, want none; the first: %+v", len(recs), recs[0])
	}
}

// TestTwoWorkersLoseAndDuplicateNothing runs two draining workers at once on
// a queue of single-entity archives and checks that every entity was moved
// exactly once.
func TestTwoWorkersLoseAndDuplicateNothing(t *testing.T) {
	e := setup(t, 90*time.Second)
	src, arc := e.table("TwoSrc"), e.table("TwoArc")
	q := e.queue("two")
	var seeded []storeadapter.Entity
	for p := range 4 {
		seeded = append(seeded, numbered(fmt.Sprintf("p%d", p), 100)...)
	}
	e.seed(src, seeded)
	e.sendArchives(q, src, arc, seeded)

	start := time.Now()
	w1, w2 := e.startWorker(q, "-drain"), e.startWorker(q, "-drain")
	for _, w := range []*proc{w1, w2} {
		if code := w.wait(e.ctx, 60*time.Second); code != 0 {
			t.Fatalf("%s exited with %d, want 0", w, code)
		}
	}
	s1, s2 := w1.stats(), w2.stats()
	t.Logf("%d archives by two workers in %v: %+v and %+v", len(seeded), time.Since(start).Round(time.Millisecond), s1, s2)
	if s1.Poisoned+s2.Poisoned != 0 || s1.Succeeded+s2.Succeeded < int64(len(seeded)) {
		t.Errorf("worker counters %+v and %+v: want at least %d succeeded together and none poisoned", s1, s2, len(seeded))
	}

	checkNumbered(t, e, "archive table", arc, seeded)
	if left := e.entities(src, storeadapter.Filter{}); len(left) != 0 {
		t.Errorf("source table still holds %d entities, want 0", len(left))
	}
	if n := e.count(q); n != 0 {
		t.Errorf("work queue holds %d messages, want 0", n)
	}
	checkNoPoison(t, e, q)
}

// TestKilledRangeArchiveConverges kills a worker with SIGKILL in the middle
// of a range archive and checks that a second worker, once the message's
// lease has run out, finishes the move with every entity archived once.
func TestKilledRangeArchiveConverges(t *testing.T) {
	e := setup(t, 90*time.Second)
	src, arc := e.table("KillSrc"), e.table("KillArc")
	q := e.queue("kill")
	const pk, n = "kill", 3000
	seeded := numbered(pk, n)
	e.seed(src, seeded)
	// An open range: every row of the partition.
	var sent archiveOutput
	e.enqueueJSON(&sent, "archive", "-queue", q, "-table", src, "-to", arc, "-pk", pk, "-rk-from", "")

	// Kill it past the middle, after the first page of 1,000 (so a
	// checkpoint was saved), before the end.
	w := e.startWorker(q, "-visibility", "5s")
	e.poll(30*time.Second, 50*time.Millisecond, "the archive to pass the middle of the range", func() bool {
		return e.exists(arc, pk, rowKey(n/2))
	})
	w.signal(syscall.SIGKILL)
	if code := w.wait(e.ctx, 10*time.Second); code != -1 {
		t.Fatalf("%s killed with SIGKILL exited with %d", w, code)
	}
	archived, left := len(e.entities(arc, storeadapter.Filter{})), len(e.entities(src, storeadapter.Filter{}))
	t.Logf("killed with %d entities archived and %d left in the source", archived, left)
	if left == 0 {
		t.Fatalf("the worker moved all %d entities before it was killed: raise the count", n)
	}

	start := time.Now()
	stats := e.drain(q, 60*time.Second, "-visibility", "5s")
	t.Logf("second worker finished in %v: %+v", time.Since(start).Round(time.Millisecond), stats)
	if stats.Succeeded != 1 || stats.Poisoned != 0 {
		t.Errorf("second worker's counters = %+v, want 1 succeeded", stats)
	}
	checkNumbered(t, e, "archive table", arc, seeded)
	if left := e.entities(src, storeadapter.Filter{}); len(left) != 0 {
		t.Errorf("source table still holds %d entities, want 0", len(left))
	}
	checkNoPoison(t, e, q)
}

// TestSigtermReleasesUnstartedMessages stops a busy worker with SIGTERM and
// checks that it exits 0 within its grace period and leaves no message
// hidden: every message left can be received at once, and there is one
// for each entity not yet archived.
func TestSigtermReleasesUnstartedMessages(t *testing.T) {
	e := setup(t, 90*time.Second)
	src, arc := e.table("TermSrc"), e.table("TermArc")
	q := e.queue("term")
	const n = 300
	seeded := numbered("term", n)
	e.seed(src, seeded)
	e.sendArchives(q, src, arc, seeded)

	const grace = 10 * time.Second
	// A short lease, so that messages a stopped worker left hidden can be
	// looked at again (see below) without a long wait.
	const visibility = 5 * time.Second
	w := e.startWorker(q, "-concurrency", "4", "-shutdown-grace", grace.String(), "-visibility", visibility.String())
	e.poll(30*time.Second, 50*time.Millisecond, "some entities archived", func() bool {
		return len(e.entities(arc, storeadapter.Filter{})) >= 20
	})
	stopped := time.Now()
	w.signal(syscall.SIGTERM)
	if code := w.wait(e.ctx, grace); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", w, code)
	}
	t.Logf("worker exited %v after SIGTERM: %+v", time.Since(stopped).Round(time.Millisecond), w.stats())

	// At once, no sleep: whatever the worker left hidden would be missing.
	received := 0
	for {
		msgs, err := store.Queue(q).Receive(e.ctx, storeadapter.MaxReceiveCount, 60*time.Second)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(msgs) == 0 {
			break
		}
		received += len(msgs)
	}
	count := e.count(q)
	left := len(e.entities(src, storeadapter.Filter{}))
	archived := len(e.entities(arc, storeadapter.Filter{}))
	t.Logf("after SIGTERM: %d messages received, approximate count %d, %d entities left, %d archived", received, count, left, archived)
	if left == 0 {
		t.Fatalf("the worker archived all %d entities before SIGTERM: raise the count", n)
	}
	if received != count {
		t.Errorf("received %d messages right after the worker stopped, but the queue holds %d: %d were left hidden", received, count, count-received)
		// Once the worker's lease on them has run out, the hidden ones show
		// how often they were delivered: once more than the worker reported
		// means a receive whose answer the worker never used.
		var hidden []storeadapter.Message
		e.poll(visibility+5*time.Second, 200*time.Millisecond, "the hidden messages to reappear", func() bool {
			msgs, err := store.Queue(q).Receive(e.ctx, storeadapter.MaxReceiveCount, 60*time.Second)
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			hidden = append(hidden, msgs...)
			return len(hidden) >= count-received
		})
		for _, m := range hidden {
			t.Logf("hidden message %s reappeared with dequeue count %d", m.ID, m.DequeueCount)
		}
	}
	if count != left {
		t.Errorf("the queue holds %d messages for %d entities left in the source", count, left)
	}
	if left+archived != n {
		t.Errorf("%d entities left and %d archived, want %d together", left, archived, n)
	}
	checkNoPoison(t, e, q)
}
