package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// DefaultSampleInterval is the worker's -metrics-sample default.
const DefaultSampleInterval = 30 * time.Second

// sampleTimeout bounds each call of a sample.
const sampleTimeout = 10 * time.Second

// QueueSample is what one sample read.
type QueueSample struct {
	// Depth and PoisonDepth are the approximate message counts (visible or
	// not) of the work and poison queues; a poison queue not created yet
	// counts 0.
	Depth, PoisonDepth int
	// PoisonExists is false when the poison queue was not created yet.
	PoisonExists bool
	// Oldest is the age of the oldest visible message of the work queue:
	// now minus its insertion time (0 when none is visible). A message that
	// came back from a retry backoff keeps its insertion time, so its age
	// says how long the operation has waited in all.
	Oldest time.Duration
	// Visible says whether the peek found a visible message (Oldest is 0
	// otherwise).
	Visible bool
}

// SampleQueues reads a QueueSample with three calls: the approximate
// count of each queue and a peek of one message. A missing work queue is
// an error (the worker creates it at start); a missing poison queue is 0.
func SampleQueues(ctx context.Context, work, poison storeadapter.Queue, now func() time.Time) (QueueSample, error) {
	var s QueueSample
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		defer cancel()
		return f(ctx)
	}
	err := call(func(ctx context.Context) (err error) { s.Depth, err = work.ApproximateCount(ctx); return err })
	if err != nil {
		return s, fmt.Errorf("queue %s: count: %w", work.Name(), err)
	}
	err = call(func(ctx context.Context) (err error) { s.PoisonDepth, err = poison.ApproximateCount(ctx); return err })
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		return s, fmt.Errorf("queue %s: count: %w", poison.Name(), err)
	}
	s.PoisonExists = err == nil
	var peeked []storeadapter.Message
	if err := call(func(ctx context.Context) (err error) { peeked, err = work.Peek(ctx, 1); return err }); err != nil {
		return s, fmt.Errorf("queue %s: peek: %w", work.Name(), err)
	}
	s.Visible = len(peeked) > 0
	if len(peeked) > 0 && !peeked[0].Inserted.IsZero() {
		s.Oldest = max(now().Sub(peeked[0].Inserted), 0)
	}
	return s, nil
}

// Sampler sets the queue gauges from a sample every Interval: never on a
// poll, so a busy worker's bill does not grow with its metrics (three calls
// per interval).
type Sampler struct {
	Metrics      *Metrics
	Work, Poison storeadapter.Queue
	// Interval between samples; the first is taken at once.
	Interval time.Duration
	// Clock paces the samples and ages the oldest message; nil is the wall
	// clock.
	Clock clock.Clock
	// Log receives a warning per failed sample; nil discards.
	Log *slog.Logger
}

// Run samples until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	for {
		s.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.clock().After(s.Interval):
		}
	}
}

func (s *Sampler) clock() clock.Clock {
	if s.Clock == nil {
		return clock.Real{}
	}
	return s.Clock
}

// Sample takes one sample and sets the gauges; a failure is counted and
// logged, and leaves the gauges as they were.
func (s *Sampler) Sample(ctx context.Context) {
	name := s.Work.Name()
	now := s.clock().Now
	q, err := SampleQueues(ctx, s.Work, s.Poison, now)
	if err != nil {
		if ctx.Err() == nil {
			s.Metrics.sampleFailure.WithLabelValues(name).Inc()
			if s.Log != nil {
				s.Log.WarnContext(ctx, "could not sample the queues for the metrics", "err", err)
			}
		}
		return
	}
	s.Metrics.depth.WithLabelValues(name).Set(float64(q.Depth))
	s.Metrics.poisonDepth.WithLabelValues(s.Poison.Name()).Set(float64(q.PoisonDepth))
	s.Metrics.oldest.WithLabelValues(name).Set(q.Oldest.Seconds())
	s.Metrics.sampled.WithLabelValues(name).Set(float64(now().UnixNano()) / 1e9)
}
