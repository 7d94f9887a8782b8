package poison

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// lookup is one id of getMany: its record, or why it has none.
type lookup struct {
	id  string
	e   entry
	err error // wraps ErrNotFound (no record) or ErrInvalidInput (no valid id)
}

// getMany reads the records of ids, conc at a time (0:
// DefaultConcurrency), reporting PhaseRead. It returns one lookup per
// distinct id, in the order of ids; a storage error other than "not found"
// ends it.
func (in *Inspector) getMany(ctx context.Context, ids []string, conc int, rep *reporter) ([]lookup, error) {
	var out []lookup
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, lookup{id: id})
		}
	}
	err := each(ctx, len(out), conc, rep, PhaseRead, func(ctx context.Context, i int) error {
		l := &out[i]
		if l.err = checkID(l.id); l.err != nil {
			return nil
		}
		e, err := in.get(ctx, l.id)
		switch {
		case err == nil:
			l.e = e
		case errors.Is(err, storeadapter.ErrNotFound):
			l.err = err
		default:
			return fmt.Errorf("read %s: %w", l.id, err)
		}
		return nil
	})
	return out, err
}

// scanReport is scan reporting PhaseRead every 1,000 records (Total 0:
// not known yet) and at the end (Total: the records read).
func (in *Inspector) scanReport(ctx context.Context, f storeadapter.Filter, rep *reporter, fn func(entry)) error {
	n := 0
	err := in.scan(ctx, f, func(e entry) {
		fn(e)
		if n++; n%1000 == 0 {
			rep.report(PhaseRead, n, 0)
		}
	})
	if err == nil && n > 0 {
		rep.report(PhaseRead, n, n)
	}
	return err
}

// deleteNoted deletes the poison messages a record notes (see
// Recorder.Move), by id and the pop receipt Send returned: no queue
// message is received. It reports whether the record needs the sweep:
// it does not note every send (written before poison messages were
// noted, or a send left unnoted by a crash), or a delete failed for its
// receipt (received since, by a sweep or another consumer of the poison
// queue: 400 or 404, see below). The queue API deletes a message only with
// a current pop receipt, and only Send and a receive hand one out, so the
// sweep stays as that fallback.
func (in *Inspector) deleteNoted(ctx context.Context, e entry) (needSweep bool, err error) {
	if !e.poisonKnown {
		return true, nil
	}
	for _, p := range e.poisonMsgs {
		err := in.cfg.Poison.DeleteMessage(ctx, p.ID, p.PopReceipt)
		switch {
		case err == nil, errors.Is(err, storeadapter.ErrQueueNotFound):
			// Gone, or the poison queue is.
		case errors.Is(err, storeadapter.ErrNotFound), errors.Is(err, storeadapter.ErrPopReceiptMismatch):
			// A stale receipt: Azurite answers 400 PopReceiptMismatch,
			// Azure's documentation has Delete Message answer 404 when
			// no message has that receipt, so 404 may mean "received
			// since" as well as "gone". The sweep tells them apart.
			needSweep = true
		default:
			return needSweep, fmt.Errorf("delete poison message %s of %s: %w", p.ID, e.rec.MessageID, err)
		}
	}
	return needSweep, nil
}

// mayHavePoison reports whether a record may have poison messages: it was
// poisoned (a failing record never was: Move writes State "poisoned" in
// the write that counts its send, and no later write takes it back), and
// if it was requeued, its requeue did not remove them all.
func mayHavePoison(e entry) bool {
	return e.rec.State != StateFailing && (e.rec.State != StateRequeued || !e.swept)
}

// removePoisonMessages deletes the poison messages of the records es that
// may have some (mayHavePoison) and reports whether it is sure every one
// is gone: first each record's noted messages (deleteNoted, conc records
// at a time, PhaseDeletePoison), then, for the records that need it, one
// sweep of the whole poison queue (PhaseSweep), matched by their original
// message id.
func (in *Inspector) removePoisonMessages(ctx context.Context, all []entry, conc int, rep *reporter) (complete bool, err error) {
	var es []entry
	for _, e := range all {
		if mayHavePoison(e) {
			es = append(es, e)
		}
	}
	var mu sync.Mutex
	rest := map[string]bool{} // message ids to sweep for
	err = each(ctx, len(es), conc, rep, PhaseDeletePoison, func(ctx context.Context, i int) error {
		needSweep, err := in.deleteNoted(ctx, es[i])
		if needSweep {
			mu.Lock()
			rest[es[i].rec.MessageID] = true
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if len(rest) == 0 {
		return true, nil
	}
	return in.sweep(ctx, func(id string) bool { return rest[id] }, conc, rep)
}

// sweepPasses is how many times a sweep looks again when the queue holds
// more messages than it saw, before it reports itself incomplete.
const sweepPasses = 3

// sweep makes one pass over the poison queue and deletes the messages whose
// original message id matches; it returns whether it is sure it saw every
// message. It receives batches of 32, hiding them for sweepVisibility,
// until a receive returns nothing (or returns a message the pass already
// holds, which means the pass outlasted the visibility timeout), deleting
// each batch's matches conc at a time. Then it compares the queue's
// approximate message count with the messages it holds: more means
// messages it never saw (hidden by a concurrent pass, sent meanwhile, or a
// count that lags behind deletes, as Azure's may), and it receives again,
// up to sweepPasses times, before reporting itself incomplete. Messages it
// keeps, including those that do not decode, are made visible again at the
// end with their own text, conc at a time. A missing poison queue holds
// nothing. It reports PhaseSweep: the messages received so far of the
// queue's approximate count when it began (read only when rep listens).
func (in *Inspector) sweep(ctx context.Context, match func(messageID string) bool, conc int, rep *reporter) (complete bool, err error) {
	type held struct{ id, receipt, text string }
	var kept []held
	index := map[string]int{}
	total, seen := 0, 0 // messages the queue held when the pass began, messages received
	defer func() {
		// Restore even when ctx is done: otherwise the messages stay hidden
		// until their visibility timeout ends, which is harmless but slow.
		rerr := each(context.WithoutCancel(ctx), len(kept), conc, nil, "", func(ctx context.Context, i int) error {
			h := kept[i]
			_, uerr := in.cfg.Poison.Update(ctx, h.id, h.receipt, h.text, 0)
			if uerr != nil && !errors.Is(uerr, storeadapter.ErrNotFound) && !errors.Is(uerr, storeadapter.ErrPopReceiptMismatch) {
				return fmt.Errorf("sweep: restore poison message %s: %w", h.id, uerr)
			}
			return nil
		})
		err = errors.Join(err, rerr)
		rep.report(PhaseSweep, seen, seen)
	}()
	if rep != nil && rep.fn != nil {
		if n, err := in.cfg.Poison.ApproximateCount(ctx); err == nil {
			total = n
		}
		rep.report(PhaseSweep, 0, total)
	}
	var mu sync.Mutex
	missed, passes := 0, 0
	for {
		msgs, err := in.cfg.Poison.Receive(ctx, storeadapter.MaxReceiveCount, sweepVisibility)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("sweep: receive: %w", err)
		}
		wrapped := false
		var matched []storeadapter.Message
		for _, msg := range msgs {
			if i, ok := index[msg.ID]; ok {
				kept[i].receipt = msg.PopReceipt
				wrapped = true
				continue
			}
			seen++
			if s, _, _, derr := DecodeMessage(msg.Text); derr == nil && match(s.MessageID) {
				matched = append(matched, msg)
				continue
			}
			index[msg.ID] = len(kept)
			kept = append(kept, held{msg.ID, msg.PopReceipt, msg.Text})
		}
		err = each(ctx, len(matched), conc, nil, "", func(ctx context.Context, i int) error {
			err := in.cfg.Poison.DeleteMessage(ctx, matched[i].ID, matched[i].PopReceipt)
			switch {
			case err == nil, errors.Is(err, storeadapter.ErrNotFound):
				// Deleted (or deleted by another pass).
			case errors.Is(err, storeadapter.ErrPopReceiptMismatch):
				mu.Lock()
				missed++ // our hold expired and another pass has it
				mu.Unlock()
			default:
				return fmt.Errorf("sweep: delete poison message %s: %w", matched[i].ID, err)
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		if seen < total {
			rep.report(PhaseSweep, seen, total)
		} else {
			rep.report(PhaseSweep, seen, 0) // more than the count said: the total is not known
		}
		if len(msgs) > 0 && !wrapped {
			continue
		}
		n, err := in.cfg.Poison.ApproximateCount(ctx)
		if err != nil {
			return false, fmt.Errorf("sweep: count: %w", err)
		}
		if n <= len(kept) {
			return missed == 0, nil
		}
		if passes++; passes == sweepPasses || wrapped {
			return false, nil
		}
	}
}
