package poison

import (
	"cmp"
	"context"
	"errors"
	"sync"
)

// DefaultConcurrency is how many records (or poison messages) Requeue,
// DeleteMany and Purge work on at once when their options leave
// Concurrency at 0: each record is a few round trips, so 16 in flight
// make a thousand records take seconds rather than a minute, while a
// shared storage account's throttling limits (about 2,000 entities or
// messages per second per partition or queue) stay far away.
const DefaultConcurrency = 16

// The phases a Progress names. Requeue reports PhaseRead, PhaseClaimSend,
// PhaseDeletePoison, PhaseSweep and PhaseMarkSwept; Purge PhaseRead,
// PhaseDrops, PhaseDeletePoison, PhaseSweep, PhaseDeleteRecords and
// PhaseCheckpoints; DeleteMany PhaseRead, PhaseDeletePoison, PhaseSweep and
// PhaseDeleteRecords. A phase with nothing to do is not reported.
const (
	// PhaseRead: reading the records to work on (by ids, or a scan whose
	// Total is 0 until the last page).
	PhaseRead = "read records"
	// PhaseClaimSend: claiming each record and sending its original back to
	// the work queue (and deleting its noted poison messages).
	PhaseClaimSend = "claim/send"
	// PhaseDeletePoison: deleting the poison messages records note, by
	// id and pop receipt.
	PhaseDeletePoison = "delete poison messages"
	// PhaseSweep: the pass over the poison queue for the poison messages
	// no record notes (see the package documentation); Done counts the
	// messages looked at, Total the queue's approximate count when the
	// pass began (0 once Done has reached it and the pass goes on), and
	// the last report's Total the messages looked at.
	PhaseSweep = "sweep poison queue"
	// PhaseMarkSwept: marking requeued records whose poison messages the
	// sweep removed.
	PhaseMarkSwept = "mark swept"
	// PhaseDrops: deleting the records of dropped jobs (Total 0 until the
	// last page).
	PhaseDrops = "drop records"
	// PhaseDeleteRecords: deleting each record, then its original's blob.
	PhaseDeleteRecords = "delete records"
	// PhaseCheckpoints: deleting the checkpoints of abandoned operations;
	// Done and Total count operations.
	PhaseCheckpoints = "checkpoints"
)

// Progress reports how far one phase of a Requeue, DeleteMany or Purge has
// got. The options' Progress callback hears, for each phase that has work,
// reports with Done rising to Total (Total 0 while it is not known: the
// records read, the drop records deleted); a phase that completes ends
// with a report whose Done equals its Total, so a phase that reports no
// such end stopped on an error. The callback is called from one goroutine
// at a time and must not block for long: the work waits for it.
type Progress struct {
	// Phase names the phase: one of the Phase constants.
	Phase string
	// Done is how many of the phase's items are done; Total how many
	// there are (0: unknown).
	Done, Total int
}

// reporter calls a Progress callback, one call at a time; nil does
// nothing.
type reporter struct {
	mu sync.Mutex
	fn func(Progress)
}

// report calls the callback with phase, done and total.
func (r *reporter) report(phase string, done, total int) {
	if r == nil || r.fn == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fn(Progress{Phase: phase, Done: done, Total: total})
}

// each runs fn(ctx, i) for every i in [0, n), conc at a time (0:
// DefaultConcurrency), and reports phase's progress after each. After the
// first error (or when ctx ends) it starts no more and returns, once the
// running ones are done, their errors joined. Each i is one record's
// steps in their documented order; records are independent of each other,
// so running them at once keeps every record's crash argument.
func each(ctx context.Context, n, conc int, rep *reporter, phase string, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	conc = min(cmp.Or(conc, DefaultConcurrency), n)
	var (
		mu     sync.Mutex
		next   int
		done   int
		errs   []error
		failed bool
		wg     sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if failed || next == n || ctx.Err() != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range conc {
		wg.Go(func() {
			for {
				i, ok := take()
				if !ok {
					return
				}
				err := fn(ctx, i)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					failed = true
				}
				done++
				rep.report(phase, done, n) // under mu: reports arrive in order
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() != nil && done < n {
		return ctx.Err()
	}
	return errors.Join(errs...)
}
