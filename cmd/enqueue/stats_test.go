package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestStatsOldestAge: the oldest visible message's age is now minus its
// insertion; a message still hidden does not count.
func TestStatsOldestAge(t *testing.T) {
	b := setup(t)
	b.mustRun("", "archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "p", "-rk", "1")
	b.clock.Advance(90 * time.Second)
	if _, err := b.queue.Send(t.Context(), "later", storeadapter.SendOptions{VisibilityDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var out statsOutput
	if err := json.Unmarshal([]byte(b.mustRun("", "stats", "-o", "json").stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Queue.Messages != 2 || out.Queue.OldestAgeSeconds == nil || *out.Queue.OldestAgeSeconds != 90 || out.Poison.Exists || out.Poison.OldestAgeSeconds != nil {
		t.Errorf("stats = %+v, want 2 messages, the oldest visible 90 s old, no poison queue", out)
	}
	if r := b.mustRun("", "stats"); !strings.Contains(r.stdout, "1m30s") || !strings.Contains(r.stdout, "OLDEST") {
		t.Errorf("stats table lacks the oldest age 1m30s:\n%s", r.stdout)
	}
}

// TestStatsEmptyQueueHasNoOldestAge: a queue with no visible message shows
// "-" as its oldest age, not 0s.
func TestStatsEmptyQueueHasNoOldestAge(t *testing.T) {
	b := setup(t)
	if err := b.queue.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := b.mustRun("", "stats")
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], queueName+" ") || strings.Fields(lines[1])[2] != "-" || strings.Contains(r.stdout, "0s") {
		t.Errorf("stats of an empty queue:\n%s\nwant its OLDEST to be -", r.stdout)
	}
}

// TestStatsWatch: -watch prints one reading per interval, three storage
// calls each, and ends with status 0 when interrupted; an interval under
// 1 s is a usage error.
func TestStatsWatch(t *testing.T) {
	b := setup(t)
	b.mustRun("", "archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "p", "-rk", "1")
	counts := &instrument.Counts{}
	var out, errOut bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Clock: b.clock,
		Connect: func() (storeadapter.Store, error) {
			return instrument.Wrap(b.store, instrument.Options{Observers: []instrument.Observer{counts}}), nil
		}}
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond) // as SIGINT would: readings at 0, 1 and 2 s
	defer cancel()
	if code := m.Run(ctx, []string{"stats", "-watch", "1s", "-o", "json"}); code != 0 {
		t.Fatalf("stats -watch interrupted: exit %d, want 0\n%s", code, errOut.String())
	}
	var lines int
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var s statsOutput
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil || s.Queue.Messages != 1 {
			t.Errorf("line %q: %v, want a reading of 1 message", sc.Text(), err)
		}
		lines++
	}
	if lines != 3 {
		t.Errorf("%d readings in 2.5 s with -watch 1s, want 3", lines)
	}
	if n := counts.Snapshot().Total().Calls; n != int64(4*lines) {
		t.Errorf("%d storage calls for %d readings, want 4 each", n, lines)
	}
	if r := b.run("", "stats", "-watch", "10ms"); r.code != 2 || !strings.Contains(r.stderr, "-watch: must be 0 or at least 1s") {
		t.Errorf("stats -watch 10ms: exit %d, stderr %q; want 2 naming the rule", r.code, r.stderr)
	}
}
