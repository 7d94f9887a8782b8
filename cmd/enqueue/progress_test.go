package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
)

// runPhases feeds phaseLines a purge of 3,000 records: a read, a sweep
// whose total it learns late, and the deletes, one report per record, a
// millisecond apart (3 s per phase at that pace, the records slower in the
// middle), and returns what it wrote.
func runPhases(t *testing.T, terminal bool) string {
	t.Helper()
	var out strings.Builder
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	p := &phaseLines{w: &out, verb: "purged", terminal: terminal, now: func() time.Time { return now }}
	step := func(pr poison.Progress, d time.Duration) {
		now = now.Add(d)
		p.report(pr)
	}
	step(poison.Progress{Phase: poison.PhaseRead, Done: 1000}, time.Second)
	step(poison.Progress{Phase: poison.PhaseRead, Done: 3000, Total: 3000}, time.Second)
	for i := 1; i <= 3000; i += 32 {
		total := 2000 // the count when the sweep began; unknown once passed
		if i >= total {
			total = 0
		}
		step(poison.Progress{Phase: poison.PhaseSweep, Done: i, Total: total}, 10*time.Millisecond)
	}
	step(poison.Progress{Phase: poison.PhaseSweep, Done: 3001, Total: 3001}, 0)
	for i := 1; i <= 3000; i++ {
		d := time.Millisecond
		if i > 1000 && i <= 1500 {
			d = 20 * time.Millisecond // 10 s of slow deletes
		}
		step(poison.Progress{Phase: poison.PhaseDeleteRecords, Done: i, Total: 3000}, d)
	}
	return out.String()
}

// TestProgressOnATerminal: every phase ends on its own line with its final
// count, and the line is redrawn at most every progressEvery, not once per
// record.
func TestProgressOnATerminal(t *testing.T) {
	out := runPhases(t, true)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{"purged: read records 3000/3000", "purged: sweep poison queue 3001/3001", "purged: delete records 3000/3000"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%q", len(lines), len(want), out)
	}
	for i, l := range lines {
		draws := strings.Split(l, "\r")
		if last := strings.TrimSuffix(draws[len(draws)-1], "\x1b[K"); last != want[i] {
			t.Errorf("line %d ends %q, want %q", i, last, want[i])
		}
		// 3 s of deletes and 10 s of slow ones: about 130 redraws at
		// 100 ms, not 3,000.
		if len(draws) > 200 {
			t.Errorf("line %d redrawn %d times: throttled to one per %v, it should not be", i, len(draws), progressEvery)
		}
	}
}

// TestProgressInALog: not on a terminal, a long phase writes a line every
// few seconds and its final count; a quick phase writes nothing.
func TestProgressInALog(t *testing.T) {
	out := runPhases(t, false)
	if strings.Contains(out, "\r") || strings.Contains(out, "\x1b") {
		t.Errorf("terminal controls in a log:\n%q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// The read (2 s) and the sweep (1 s) are quick; the deletes (11.5 s)
	// write a line at 5 s and 10 s, and their end.
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "purged: delete records ") || lines[2] != "purged: delete records 3000/3000" {
		t.Errorf("log lines:\n%s\nwant two delete records lines at 5 s and 10 s, then 3000/3000", out)
	}
}
