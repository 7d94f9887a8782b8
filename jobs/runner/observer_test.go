package runner

import (
	"context"
	"log/slog"
	"testing"
)

// recording is a slog handler that keeps the level of each record it
// handles and counts the WithAttrs calls made on it.
type recording struct {
	min    slog.Level
	levels *[]slog.Level
	with   *int
}

func (h recording) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }
func (h recording) Handle(_ context.Context, r slog.Record) error {
	*h.levels = append(*h.levels, r.Level)
	return nil
}
func (h recording) WithAttrs([]slog.Attr) slog.Handler { *h.with++; return h }
func (h recording) WithGroup(string) slog.Handler      { return h }

// TestLoggerLineLevels: the logger writes one line per event at the level
// lineLevel gives, and none for the events lineLevel says have none; at a
// level above an event's it builds nothing for it (no attributes).
func TestLoggerLineLevels(t *testing.T) {
	events := []Event{
		{Type: Received}, {Type: Started}, {Type: Finished, Ran: true}, {Type: LeaseRenewed},
		{Type: Succeeded, Ran: true}, {Type: Retried}, {Type: Poisoned}, {Type: LeaseLost},
		{Type: Released}, {Type: Released, Class: ClassShutdown}, {Type: AckFailed}, {Type: Abandoned},
		{Type: Continued}, {Type: Succeeded, Stage: "delete"}, {Type: Poisoned, Stage: "poison"},
	}
	for _, e := range events {
		var levels []slog.Level
		var with int
		logger{slog.New(recording{min: slog.LevelDebug, levels: &levels, with: &with})}.Observe(context.Background(), e)
		level, ok := lineLevel(e)
		switch {
		case !ok && len(levels) != 0:
			t.Errorf("%v (stage %q): %d lines, want none", e.Type, e.Stage, len(levels))
		case ok && (len(levels) != 1 || levels[0] != level):
			t.Errorf("%v (stage %q): lines at %v, want one at %v", e.Type, e.Stage, levels, level)
		}
		levels, with = nil, 0
		logger{slog.New(recording{min: level + 1, levels: &levels, with: &with})}.Observe(context.Background(), e)
		if len(levels) != 0 || with != 0 {
			t.Errorf("%v (stage %q) below the logger's level: %d lines, %d WithAttrs calls; want none", e.Type, e.Stage, len(levels), with)
		}
	}
}
