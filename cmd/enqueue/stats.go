package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/telemetry"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// queueStats is the message count of one queue.
type queueStats struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`
	// Exists is false for a queue not created yet (counted as empty).
	Exists bool `json:"exists"`
	// OldestAgeSeconds is, for the work queue, the age of its oldest
	// visible message (0 when none is visible); absent for the poison queue.
	OldestAgeSeconds *float64 `json:"oldestAgeSeconds,omitempty"`
	// noneVisible is set when the work queue has no visible message: the
	// table shows "-" as its oldest age, not 0s.
	noneVisible bool
}

// statsOutput is one reading of stats -o json (one line per refresh with
// -watch).
type statsOutput struct {
	Time   time.Time  `json:"time"`
	Queue  queueStats `json:"queue"`
	Poison queueStats `json:"poison"`
	// DroppedJobs counts the work queue's drop records: jobs the workers
	// dropped because their transaction never committed, since poison
	// purge last removed them. At most maxDropCount are counted;
	// DroppedJobsMore says there are more.
	DroppedJobs     int  `json:"droppedJobs"`
	DroppedJobsMore bool `json:"droppedJobsMore,omitempty"`
}

// minWatch is the shortest -watch interval: each refresh makes four
// storage calls or more.
const minWatch = time.Second

// maxDropCount bounds the drop records stats counts: a query reads 1,000,
// so a reading makes at most 10 queries for them.
const maxDropCount = 10_000

// runStats prints the approximate message counts of the work queue and its
// poison queue and the age of the oldest visible message; with -watch it
// prints them again every interval until interrupted. A queue that does not
// exist counts as empty, with a note.
func (m *Main) runStats(ctx context.Context, args []string) error {
	var c common
	var watch time.Duration
	fs := m.newFlagSet("stats", "stats [-watch 10s] [flags]",
		"Prints the approximate number of messages (visible or not) of the work queue and its poison queue, the age\n"+
			"of the oldest visible message of the work queue, and how many jobs the workers dropped because their\n"+
			"transaction never committed (counted up to 10,000; 'poison purge' removes the old ones): 4 storage calls,\n"+
			"and one more per 1,000 dropped jobs. -watch D prints them again every D until interrupted (Ctrl-C ends it\n"+
			"with status 0).", &c)
	cli.DurationVar(fs, &watch, "watch", 0, "refresh every this long (at least 1s) until interrupted; 0: print once")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if watch != 0 && watch < minWatch {
		return &usageError{err: fmt.Errorf("-watch: must be 0 or at least %v, got %v", minWatch, watch)}
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	ins, err := cli.PoisonInspector(store, c.queue, m.Clock)
	if err != nil {
		return err
	}
	for {
		out, err := m.readStats(ctx, store, ins, c.queue)
		if err != nil {
			if watch != 0 && ctx.Err() != nil {
				return nil // interrupted during a reading
			}
			return err
		}
		if err := m.printStats(&c, out, watch != 0); err != nil {
			return err
		}
		if watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watch):
		}
	}
}

// readStats reads both queues (two counts and one peek, each bounded),
// then counts the drop records (one query per 1,000, at most
// maxDropCount).
func (m *Main) readStats(ctx context.Context, store storeadapter.Store, ins *poison.Inspector, queue string) (statsOutput, error) {
	out, err := m.readQueues(ctx, store, queue)
	if err == nil {
		out.DroppedJobs, out.DroppedJobsMore, err = ins.CountDrops(ctx, maxDropCount)
	}
	return out, err
}

// readQueues reads both queues: two counts and one peek, each bounded.
func (m *Main) readQueues(ctx context.Context, store storeadapter.Store, queue string) (statsOutput, error) {
	out := statsOutput{Time: m.now().UTC(), Queue: queueStats{Name: queue}, Poison: queueStats{Name: poison.QueueName(queue)}}
	s, err := telemetry.SampleQueues(ctx, store.Queue(queue), store.Queue(out.Poison.Name), m.now)
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		// The work queue is missing: the poison queue may still exist.
		n, err := store.Queue(out.Poison.Name).ApproximateCount(ctx)
		switch {
		case errors.Is(err, storeadapter.ErrNotFound):
		case err != nil:
			return out, err
		default:
			out.Poison.Messages, out.Poison.Exists = n, true
		}
		return out, nil
	case err != nil:
		return out, err
	}
	age := s.Oldest.Seconds()
	out.Queue.Messages, out.Queue.Exists, out.Queue.OldestAgeSeconds, out.Queue.noneVisible = s.Depth, true, &age, !s.Visible
	out.Poison.Messages = s.PoisonDepth
	// SampleQueues counts a missing poison queue as 0; say whether it exists.
	out.Poison.Exists = s.PoisonExists
	return out, nil
}

// printStats prints one reading: a table (with its time when watching) or
// one JSON object (one line when watching).
func (m *Main) printStats(c *common, out statsOutput, watching bool) error {
	if c.json() {
		if watching {
			return json.NewEncoder(m.Stdout).Encode(out)
		}
		return writeJSON(m.Stdout, out)
	}
	if watching {
		fmt.Fprintf(m.Stdout, "%s\n", out.Time.Format(time.RFC3339))
	}
	tw := newTable(m.Stdout)
	row(tw, "QUEUE", "MESSAGES", "OLDEST", "NOTE")
	for _, s := range []queueStats{out.Queue, out.Poison} {
		note, oldest := "", "-"
		if !s.Exists {
			note = "does not exist (counted as 0)"
		}
		if s.OldestAgeSeconds != nil && !s.noneVisible {
			oldest = (time.Duration(*s.OldestAgeSeconds * float64(time.Second))).Round(time.Second).String()
		}
		row(tw, s.Name, strconv.Itoa(s.Messages), oldest, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := strconv.Itoa(out.DroppedJobs)
	if out.DroppedJobsMore {
		n = "more than " + n
	}
	fmt.Fprintf(m.Stdout, "dropped jobs: %s (not run: their transaction never committed)\n", n)
	if watching {
		fmt.Fprintln(m.Stdout)
	}
	return nil
}
