package poison

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	// Progress, when set, is called after each selected record with how
	// many of them are done.
	Progress func(done, total int)
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
//  3. merges State "requeued", RequeuedAt, RequeuedBy (this host) and
//     RequeuedMessageID, conditional on the claim's ETag.
//
// Then it removes the requeued records' messages from the poison queue (all
// of them, duplicates included) and marks the records swept: by the ids
// and receipts the records note, and for the rest in one pass over the
// poison queue (see the package documentation). The pass receives every
// poison message, hiding each for 30 seconds, and makes the ones it keeps
// visible again at the end; a concurrent Requeue, Delete or Purge
// therefore cannot see them meanwhile. If the pass may have missed some
// that way, the records stay unswept and the next Requeue that selects
// them removes the rest.
//
// Crash positions: after 1 the record stays "requeuing"; once it is older
// than RequeueTimeout the next Requeue claims it again and sends it (after
// 2 that is a second copy on the work queue, which handlers tolerate: they
// are idempotent by operation id). After 3 the poison messages remain; the
// next Requeue that selects the record finds it "requeued" but not swept
// and removes them without sending anything.
//
// Records in other states are skipped, so a second Requeue does nothing.
// An id without a record (or whose record belongs to another work queue)
// gives an error wrapping storeadapter.ErrNotFound; the other ids are still
// requeued, and the error is returned with them.
func (in *Inspector) Requeue(ctx context.Context, o RequeueOptions) ([]Record, error) {
	if o.All == (len(o.IDs) > 0) {
		return nil, fmt.Errorf("poison: requeue: %w: give either IDs or All", storeadapter.ErrInvalidInput)
	}
	var (
		entries []entry
		errs    []error
	)
	if o.All {
		err := in.scan(ctx, in.filter(o.Kind, ""), func(e entry) {
			if o.Group == "" || GroupName(e.rec) == o.Group {
				entries = append(entries, e)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("poison: requeue: %w", err)
		}
	} else {
		seen := map[string]bool{}
		for _, id := range o.IDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			if err := checkID(id); err != nil {
				errs = append(errs, fmt.Errorf("poison: requeue: %w", err))
				continue
			}
			e, err := in.get(ctx, id)
			if errors.Is(err, storeadapter.ErrNotFound) {
				errs = append(errs, fmt.Errorf("poison: requeue %s: %w", id, err))
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("poison: requeue %s: %w", id, err)
			}
			if e.rec.Queue != in.cfg.Source.Name() {
				errs = append(errs, fmt.Errorf("poison: requeue %s: the record belongs to queue %q, not %q: %w",
					id, e.rec.Queue, in.cfg.Source.Name(), storeadapter.ErrNotFound))
				continue
			}
			switch {
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
	var out []Record
	sweep := map[string]entry{} // message id -> the record to remove the poison messages of, with the ETag to mark it swept with ("": do not)
	for i, e := range entries {
		if o.Progress != nil && i > 0 {
			o.Progress(i, len(entries))
		}
		if !o.All {
			if why := notRequeueable(e, now); why != "" {
				skip(o, e.rec, why)
			}
		}
		switch {
		case requeueable(e, now):
			if o.DryRun {
				out = append(out, e.rec)
				continue
			}
			rec, last, sent, err := in.requeueOne(ctx, e, now)
			if sent {
				out = append(out, rec)
				sweep[rec.MessageID] = last
			}
			if err != nil {
				errs = append(errs, err)
			}
		case e.rec.State == StateRequeued && !e.swept && !o.DryRun:
			sweep[e.rec.MessageID] = e
		}
	}
	if o.Progress != nil && len(entries) > 0 {
		o.Progress(len(entries), len(entries))
	}
	sortNewest(out)
	if len(sweep) > 0 {
		complete, err := in.removePoisonMessages(ctx, slices.Collect(maps.Values(sweep)))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("poison: requeue: %w", err))
		case complete:
			errs = append(errs, in.markSwept(ctx, sweep))
		}
	}
	return out, errors.Join(errs...)
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

// requeueOne claims, sends and finishes one record (see Requeue). sent
// reports whether the original was sent; last is the record as last read,
// with its ETag after the last step ("" when it could not be finished).
func (in *Inspector) requeueOne(ctx context.Context, e entry, now time.Time) (rec Record, last entry, sent bool, err error) {
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
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: claim: %w", id, err)
	}
	if !claimed {
		return Record{}, entry{}, false, nil
	}

	text, err := in.original(ctx, e)
	if err != nil {
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: %w", id, err)
	}
	newMsg, err := send(ctx, in.cfg.Source, text, storeadapter.SendOptions{})
	if err != nil {
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: send: %w", id, err)
	}

	rec = e.rec
	rec.Original = text
	rec.State, rec.RequeuedAt, rec.RequeuedBy, rec.RequeuedMessageID = StateRequeued, now, in.cfg.Host, newMsg.ID
	done := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{
		propState: StateRequeued, propRequeuedAt: now, propRequeuedBy: in.cfg.Host,
		propRequeuedMessageID: newMsg.ID, propSwept: false}}
	last = e
	last.etag, err = in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, done, storeadapter.Merge, claimedAs.ETag)
	switch {
	case err == nil:
		return rec, last, true, nil
	case errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound):
		// Someone changed the record since the claim (poisoned it again,
		// deleted it); their state stands.
		last.etag = ""
		return rec, last, true, nil
	}
	last.etag = ""
	return rec, last, true, fmt.Errorf("poison: requeue %s: finish: %w", id, err)
}

// markSwept records that the poison messages of requeued records are gone,
// conditional on each record's ETag; a record changed meanwhile, or without
// an ETag, is left alone.
func (in *Inspector) markSwept(ctx context.Context, entries map[string]entry) error {
	var errs []error
	for id, en := range entries {
		if en.etag == "" {
			continue
		}
		e := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{propSwept: true}}
		_, err := in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, e, storeadapter.Merge, en.etag)
		if err != nil && !errors.Is(err, storeadapter.ErrPreconditionFailed) && !errors.Is(err, storeadapter.ErrNotFound) {
			errs = append(errs, fmt.Errorf("poison: requeue %s: mark swept: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
