package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// queueStats is the message count of one queue.
type queueStats struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`
	// Exists is false for a queue not created yet (counted as empty).
	Exists bool `json:"exists"`
}

// runStats prints the approximate message counts of the work queue and its
// poison queue. A queue that does not exist counts as empty, with a note.
func (m *Main) runStats(ctx context.Context, args []string) error {
	var c common
	fs := m.newFlagSet("stats", "stats [flags]",
		"Prints the approximate number of messages (visible or not) of the work queue and its poison queue.", &c)
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	var out struct {
		Queue  queueStats `json:"queue"`
		Poison queueStats `json:"poison"`
	}
	for _, s := range []*queueStats{&out.Queue, &out.Poison} {
		s.Name = c.queue
		if s == &out.Poison {
			s.Name = poison.QueueName(c.queue)
		}
		n, err := store.Queue(s.Name).ApproximateCount(ctx)
		switch {
		case errors.Is(err, storeadapter.ErrNotFound):
		case err != nil:
			return err
		default:
			s.Messages, s.Exists = n, true
		}
	}
	if c.json() {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	row(tw, "QUEUE", "MESSAGES", "NOTE")
	for _, s := range []queueStats{out.Queue, out.Poison} {
		note := ""
		if !s.Exists {
			note = "does not exist (counted as 0)"
		}
		row(tw, s.Name, strconv.Itoa(s.Messages), note)
	}
	return tw.Flush()
}
