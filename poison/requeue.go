package poison

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// RequeueOptions select the records Requeue sends back.
type RequeueOptions struct {
	// IDs are original message ids. Exactly one of IDs and All is required.
	IDs []string
	// All selects every record of the work queue.
	All bool
	// Kind, when not "", keeps only the records of that kind.
	Kind string
	// Group, when not "", keeps only the records of that GroupName.
	Group string
	// DryRun returns what would be requeued without changing anything.
	DryRun bool
	// Skipped, when set, is called for each record named in IDs that is
	// not requeued, with the reason.
	Skipped func(r Record, why string)
	// Concurrency is how many records are read, claimed and sent at once;
	// 0 means DefaultConcurrency.
	Concurrency int
	// Progress, when set, hears how far each phase has got (see
	// Progress): PhaseRead, PhaseClaimSend, PhaseDeletePoison, PhaseSweep
	// and PhaseMarkSwept.
	Progress func(Progress)
}

// Requeue sends poisoned messages back to the work queue and returns the
// records it requeued (or, with DryRun, would requeue), newest first.
//
// For each selected record in State "poisoned" it:
//
//  1. claims the record: an ETag-conditional merge to State "requeuing"
//     (idempotent.UpdateCAS). Of two concurrent requeues of the same
//     record one loses the claim (ErrPreconditionFailed), re-reads the
//     record, finds it claimed and skips it, so the original is sent once;
//  2. sends the original text, untouched (read from the blob when needed),
//     to the work queue as a fresh message with the default time to live;
//  3. deletes the poison messages the record notes, by id and pop receipt,
//     when it notes every send (see the package documentation);
//  4. merges State "requeued", RequeuedAt, RequeuedBy (this host),
//     RequeuedMessageID and, when step 3 deleted every poison message of
//     the record, PoisonSwept, conditional on the claim's ETag.
//
// Up to Concurrency records go through these steps at once, each record's
// steps in this order; the records are independent (one entity each, and
// poison messages matched by their record's message id), so this changes
// none of the arguments below. After the first storage error no more
// records are started; the ones started finish, and a second Requeue
// picks up the rest.
//
// Then it removes the poison messages step 3 could not: those of records
// that do not note every send (written before the notes existed, or a send
// a crash left unnoted), those whose receipt is no longer current, and
// those of selected records already "requeued" but not swept. It deletes
// the noted ones directly, the others in one pass over the poison queue
// (see the package documentation), and marks those records swept. The
// pass receives every poison message, hiding each for 30 seconds, and
// makes the ones it keeps visible again at the end; a concurrent Requeue,
// Delete or Purge therefore cannot see them meanwhile. If the pass may
// have missed some that way, the records stay unswept and the next Requeue
// that selects them removes the rest.
//
// Crash positions: after 1 the record stays "requeuing"; once it is older
// than RequeueTimeout the next Requeue claims it again and sends it (after
// 2 that is a second copy on the work queue, which handlers tolerate: they
// are idempotent by operation id; after 3 its poison messages are gone,
// and their receipts answer as stale ones would, so that Requeue sweeps
// for them and finds none). After 4 without PoisonSwept the poison
// messages may remain; the next Requeue that selects the record finds it
// "requeued" but not swept and removes them without sending anything.
//
// Records in other states are skipped, so a second Requeue does nothing.
// An id without a record (or whose record belongs to another work queue)
// gives an error wrapping storeadapter.ErrNotFound; the other ids are still
// requeued, and the error is returned with them.
func (in *Inspector) Requeue(ctx context.Context, o RequeueOptions) ([]Record, error) {
	if o.All == (len(o.IDs) > 0) {
		return nil, fmt.Errorf("poison: requeue: %w: give either IDs or All", storeadapter.ErrInvalidInput)
	}
	rep := &reporter{fn: o.Progress}
	var (
		entries []entry
		errs    []error
	)
	if o.All {
		err := in.scanReport(ctx, in.filter(o.Kind, ""), rep, func(e entry) {
			if o.Group == "" || GroupName(e.rec) == o.Group {
				entries = append(entries, e)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("poison: requeue: %w", err)
		}
	} else {
		found, err := in.getMany(ctx, o.IDs, o.Concurrency, rep)
		if err != nil {
			return nil, fmt.Errorf("poison: requeue: %w", err)
		}
		for _, l := range found {
			e := l.e
			switch {
			case l.err != nil:
				errs = append(errs, fmt.Errorf("poison: requeue %s: %w", l.id, l.err))
			case e.rec.Queue != in.cfg.Source.Name():
				errs = append(errs, fmt.Errorf("poison: requeue %s: the record belongs to queue %q, not %q: %w",
					l.id, e.rec.Queue, in.cfg.Source.Name(), storeadapter.ErrNotFound))
			case o.Kind != "" && e.rec.Kind != o.Kind:
				skip(o, e.rec, fmt.Sprintf("its kind is %q, not %q", e.rec.Kind, o.Kind))
			case o.Group != "" && GroupName(e.rec) != o.Group:
				skip(o, e.rec, fmt.Sprintf("its group is %s, not %s", GroupName(e.rec), o.Group))
			default:
				entries = append(entries, e)
			}
		}
	}

	now := in.now()
	var (
		out     []Record
		send    []entry // the records to claim and send
		unswept []entry // requeued records whose poison messages may remain
	)
	for _, e := range entries {
		if !o.All {
			if why := notRequeueable(e, now); why != "" {
				skip(o, e.rec, why)
			}
		}
		switch {
		case requeueable(e, now) && o.DryRun:
			out = append(out, e.rec)
		case requeueable(e, now):
			send = append(send, e)
		case e.rec.State == StateRequeued && !e.swept && !o.DryRun:
			unswept = append(unswept, e)
		}
	}
	var (
		mu    sync.Mutex
		sweep = map[string]entry{} // message id -> a record whose poison messages need the sweep, with the ETag to mark it swept with ("": do not)
	)
	err := each(ctx, len(send), o.Concurrency, rep, PhaseClaimSend, func(ctx context.Context, i int) error {
		rec, last, sent, needSweep, err := in.requeueOne(ctx, send[i], now)
		mu.Lock()
		defer mu.Unlock()
		if sent {
			out = append(out, rec)
			if needSweep {
				sweep[rec.MessageID] = last
			}
		}
		return err
	})
	if err != nil {
		errs = append(errs, err)
	}
	sortNewest(out)
	if err := in.finishUnswept(ctx, unswept, sweep, o.Concurrency, rep); err != nil {
		errs = append(errs, fmt.Errorf("poison: requeue: %w", err))
	}
	return out, errors.Join(errs...)
}

// finishUnswept removes the poison messages of requeued records that may
// still have some: unswept (deleted by their noted ids, marked swept when
// that was all), then sweep and the unswept ones whose notes were not
// enough, in one pass over the poison queue, marked swept when the pass
// is complete.
func (in *Inspector) finishUnswept(ctx context.Context, unswept []entry, sweep map[string]entry, conc int, rep *reporter) error {
	var mu sync.Mutex
	err := each(ctx, len(unswept), conc, rep, PhaseDeletePoison, func(ctx context.Context, i int) error {
		e := unswept[i]
		needSweep, err := in.deleteNoted(ctx, e)
		switch {
		case err != nil:
			return err
		case needSweep:
			mu.Lock()
			sweep[e.rec.MessageID] = e
			mu.Unlock()
			return nil
		}
		return in.markSwept(ctx, e)
	})
	if err != nil || len(sweep) == 0 {
		return err
	}
	complete, err := in.sweep(ctx, func(id string) bool { _, ok := sweep[id]; return ok }, conc, rep)
	if err != nil || !complete {
		return err
	}
	marks := slices.Collect(maps.Values(sweep))
	return each(ctx, len(marks), conc, rep, PhaseMarkSwept, func(ctx context.Context, i int) error {
		return in.markSwept(ctx, marks[i])
	})
}

// requeueable reports whether Requeue should send a record: it is
// poisoned, or a requeue claimed it longer than RequeueTimeout ago and
// never finished.
func requeueable(e entry, now time.Time) bool {
	return e.rec.State == StatePoisoned ||
		e.rec.State == StateRequeuing && !now.Before(e.requeuingAt.Add(RequeueTimeout))
}

// notRequeueable says why Requeue does not send a record, or returns "".
func notRequeueable(e entry, now time.Time) string {
	switch {
	case requeueable(e, now):
		return ""
	case e.rec.State == StateFailing:
		return "it is not poisoned: the message is still being retried on the work queue"
	case e.rec.State == StateRequeuing:
		return fmt.Sprintf("a requeue by %s started at %s is still sending it (retried after %v)",
			e.rec.RequeuedBy, e.requeuingAt.UTC().Format(time.RFC3339), RequeueTimeout)
	}
	return fmt.Sprintf("it was already requeued at %s as message %s", e.rec.RequeuedAt.UTC().Format(time.RFC3339), e.rec.RequeuedMessageID)
}

// skip reports a record Requeue does not send.
func skip(o RequeueOptions, r Record, why string) {
	if o.Skipped != nil {
		o.Skipped(r, why)
	}
}

// requeueOne claims, sends and finishes one record, deleting its noted
// poison messages before the finish (see Requeue). sent reports whether the
// original was sent; last is the record as last read, with its ETag after
// the last step ("" when it could not be finished); needSweep says its
// poison messages need the sweep.
func (in *Inspector) requeueOne(ctx context.Context, e entry, now time.Time) (rec Record, last entry, sent, needSweep bool, err error) {
	id := e.rec.MessageID
	claimed := false
	claim := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		claimed = false
		if cur == nil {
			return nil, nil // deleted meanwhile
		}
		if e = decodeEntry(*cur); !requeueable(e, now) {
			return nil, nil // another requeue has it
		}
		claimed = true
		return &storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{
			propState: StateRequeuing, propRequeuingAt: now, propRequeuedBy: in.cfg.Host}}, nil
	}
	claimedAs, err := idempotent.UpdateCAS(ctx, in.cfg.Tables, in.cfg.Table, id, recordRowKey, claim, idempotent.CASOptions{Start: &e.raw})
	if err != nil {
		return Record{}, entry{}, false, false, fmt.Errorf("poison: requeue %s: claim: %w", id, err)
	}
	if !claimed {
		return Record{}, entry{}, false, false, nil
	}

	text, err := in.original(ctx, e)
	if err != nil {
		return Record{}, entry{}, false, false, fmt.Errorf("poison: requeue %s: %w", id, err)
	}
	newMsg, err := send(ctx, in.cfg.Source, text, storeadapter.SendOptions{})
	if err != nil {
		return Record{}, entry{}, false, false, fmt.Errorf("poison: requeue %s: send: %w", id, err)
	}
	rec = e.rec
	rec.Original = text
	rec.State, rec.RequeuedAt, rec.RequeuedBy, rec.RequeuedMessageID = StateRequeued, now, in.cfg.Host, newMsg.ID

	needSweep, delErr := in.deleteNoted(ctx, e)
	if delErr != nil {
		delErr = fmt.Errorf("poison: requeue %s: %w", id, delErr)
	}
	done := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{
		propState: StateRequeued, propRequeuedAt: now, propRequeuedBy: in.cfg.Host,
		propRequeuedMessageID: newMsg.ID, propSwept: !needSweep && delErr == nil}}
	last = e
	last.etag, err = in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, done, storeadapter.Merge, claimedAs.ETag)
	switch {
	case err == nil:
		return rec, last, true, needSweep, delErr
	case errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound):
		// Someone changed the record since the claim (poisoned it again,
		// deleted it); their state stands.
		last.etag = ""
		return rec, last, true, needSweep, delErr
	}
	last.etag = ""
	return rec, last, true, needSweep, errors.Join(delErr, fmt.Errorf("poison: requeue %s: finish: %w", id, err))
}

// markSwept records that the poison messages of a requeued record are
// gone, conditional on its ETag; a record changed meanwhile, or without an
// ETag, is left alone.
func (in *Inspector) markSwept(ctx context.Context, en entry) error {
	if en.etag == "" {
		return nil
	}
	id := en.rec.MessageID
	e := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{propSwept: true}}
	_, err := in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, e, storeadapter.Merge, en.etag)
	if err != nil && !errors.Is(err, storeadapter.ErrPreconditionFailed) && !errors.Is(err, storeadapter.ErrNotFound) {
		return fmt.Errorf("poison: requeue %s: mark swept: %w", id, err)
	}
	return nil
}
