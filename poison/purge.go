package poison

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// DefaultStaleAfter is PurgeOptions.StaleAfter's default: the default time
// to live of a queue message. A failing record whose last attempt is older
// belongs to a message that cannot exist any more.
const DefaultStaleAfter = 7 * 24 * time.Hour

// PurgeOptions select the records Purge removes.
type PurgeOptions struct {
	// OlderThan keeps records whose last activity (last attempt, or
	// requeue) is younger than this; 0 removes them whatever their age.
	OlderThan time.Duration
	// Kind and Group, when not "", keep only the records of that kind and
	// of that GroupName.
	Kind, Group string
	// StaleAfter is the age of its last attempt past which a failing record
	// is removed: its message succeeded (and the runner could not drop the
	// record) or expired. It must be at least the work queue's message time
	// to live, or a record of a message still being retried is lost (a new
	// one is started by its next failure). 0 means DefaultStaleAfter; a
	// negative value keeps failing records.
	StaleAfter time.Duration
	// Drop records (see Drop) dropped longer than OlderThan ago (all of
	// them when it is 0), of Kind when it is not "", are removed too;
	// Group selects failure records only, so with a Group they stay.
	//
	// CheckpointTable, when not "", is the table of range checkpoints
	// (PartitionKey = operation id): the checkpoints of the operations whose
	// poisoned or failing records Purge removes are removed too, unless
	// another record of the same operation remains or was requeued.
	CheckpointTable string
	// DryRun returns what would be removed without changing anything.
	DryRun bool
	// Progress, when set, is called after each removed record with how many
	// of the selected records are done.
	Progress func(done, total int)
}

// PurgeResult is what Purge removed (or, with DryRun, would remove).
type PurgeResult struct {
	// Records are the removed records, newest first.
	Records []Record
	// Checkpoints is how many checkpoint entities were removed.
	Checkpoints int
	// Drops is how many drop records were removed.
	Drops int
}

// Purge removes the records of this work queue that are done with:
// poisoned records (with their blobs and poison-queue messages), requeued
// records (their messages were sent back: nothing refers to them any more),
// failing records older than StaleAfter, the range checkpoints of the
// abandoned operations, and drop records (see PurgeOptions). Records being
// requeued are left alone.
//
// Like Delete it removes the poison messages (those the records note by
// id, the others in one pass for all), then each
// record, then its blob (only the version the record names; see Delete),
// so a crash leaves the records not yet deleted for the next Purge;
// checkpoints go after their records. A record's delete is conditional on
// the ETag read: one that changed meanwhile (a newer attempt, a requeue, a
// new Move) is kept with its blob and not counted. Run it alone: a Requeue
// working on the same records may find their blobs gone, and a poison
// message hidden by the pass of a concurrent Requeue, Delete or Purge is
// missed and outlives its record.
func (in *Inspector) Purge(ctx context.Context, o PurgeOptions) (PurgeResult, error) {
	if o.OlderThan < 0 {
		return PurgeResult{}, fmt.Errorf("poison: purge: %w: OlderThan %v is negative", storeadapter.ErrInvalidInput, o.OlderThan)
	}
	now := in.now()
	var res PurgeResult
	if o.Group == "" {
		var cut time.Time
		if o.OlderThan > 0 {
			cut = now.Add(-o.OlderThan)
		}
		var err error
		if res.Drops, err = in.purgeDrops(ctx, cut, o.Kind, o.DryRun); err != nil {
			return res, err
		}
	}
	stale := cmp.Or(o.StaleAfter, DefaultStaleAfter)
	var (
		sel      []entry
		requeued []Record            // selected requeued records
		liveOps  = map[string]bool{} // operations with a record that stays or a requeued copy
	)
	err := in.scan(ctx, in.filter(o.Kind, ""), func(e entry) {
		if o.Group != "" && GroupName(e.rec) != o.Group {
			liveOps[e.rec.OpID] = true
			return
		}
		last := e.rec.LastAttempt
		if e.rec.RequeuedAt.After(last) {
			last = e.rec.RequeuedAt
		}
		old := o.OlderThan == 0 || last.Before(now.Add(-o.OlderThan))
		switch e.rec.State {
		case StatePoisoned:
		case StateRequeued:
			requeued = append(requeued, e.rec)
		case StateFailing:
			old = old && stale > 0 && last.Before(now.Add(-stale))
		default:
			old = false
		}
		if !old {
			liveOps[e.rec.OpID] = true
			return
		}
		sel = append(sel, e)
	})
	if err != nil {
		return res, fmt.Errorf("poison: purge: %w", err)
	}
	// A requeued copy may still run, unless it failed in turn and its
	// record goes too.
	selected := map[string]bool{}
	for _, e := range sel {
		selected[e.rec.MessageID] = true
	}
	for _, r := range requeued {
		if !selected[r.RequeuedMessageID] {
			liveOps[r.OpID] = true
		}
	}
	if o.DryRun {
		for _, e := range sel {
			res.Records = append(res.Records, e.rec)
		}
		sortNewest(res.Records)
		res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(sel, liveOps), true)
		return res, err
	}
	if len(sel) == 0 {
		return res, nil
	}
	var parked []entry // the records that may have poison messages
	for _, e := range sel {
		if e.rec.State != StateFailing {
			parked = append(parked, e)
		}
	}
	if _, err := in.removePoisonMessages(ctx, parked); err != nil {
		return res, fmt.Errorf("poison: purge: %w", err)
	}
	var removed []entry
	for i, e := range sel {
		id := e.rec.MessageID
		err := in.cfg.Tables.DeleteEntity(ctx, in.cfg.Table, id, recordRowKey, e.etag)
		switch {
		case err == nil:
			removed = append(removed, e)
			res.Records = append(res.Records, e.rec)
			if err := in.deleteBlob(ctx, e); err != nil {
				sortNewest(res.Records)
				return res, fmt.Errorf("poison: purge %s: %w", id, err)
			}
		case errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound):
			liveOps[e.rec.OpID] = true // changed meanwhile: it stays
		default:
			sortNewest(res.Records)
			return res, fmt.Errorf("poison: purge %s: %w", id, err)
		}
		if o.Progress != nil {
			o.Progress(i+1, len(sel))
		}
	}
	sortNewest(res.Records)
	res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(removed, liveOps), false)
	return res, err
}

// abandoned returns the operation ids of the poisoned and failing records
// among sel whose operation has no record in live.
func abandoned(sel []entry, live map[string]bool) []string {
	var ops []string
	for _, e := range sel {
		op := e.rec.OpID
		if op != "" && !live[op] && e.rec.State != StateRequeued && !slices.Contains(ops, op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// clearCheckpoints deletes (or, with dryRun, counts) the checkpoint
// entities of operations ops in table; "" does nothing. Each delete is
// conditional on the ETag read, so a checkpoint saved meanwhile by a run of
// the same operation stays.
func (in *Inspector) clearCheckpoints(ctx context.Context, table string, ops []string, dryRun bool) (int, error) {
	n := 0
	for _, op := range ops {
		if table == "" || storeadapter.ValidateKey("op", op) != nil {
			continue
		}
		p, err := idempotent.Checkpoints{Tables: in.cfg.Tables, Table: table}.ClearOperation(ctx, op, dryRun)
		if err != nil {
			return n, fmt.Errorf("poison: purge: checkpoints of %s: %w", op, err)
		}
		n += p.Deleted
		if dryRun {
			n += p.Found
		}
	}
	return n, nil
}

// removePoisonMessages deletes the poison messages of the records es and
// reports whether it is sure every one is gone. A record whose every poison
// message is noted (see Recorder.Move) has them deleted directly, by id and
// the pop receipt Send returned: no queue message is received. The others
// (records written before poison messages were noted, or with a send left
// unnoted by a crash) and the noted messages whose delete fails for their
// receipt (received since, by a sweep or another consumer of the poison
// queue: 400 or 404, see below) are removed by one sweep of the whole poison queue, matched by
// their original message id. The queue API deletes a message only with a
// current pop receipt, and only Send and a receive hand one out, so the
// sweep stays as that fallback.
func (in *Inspector) removePoisonMessages(ctx context.Context, es []entry) (complete bool, err error) {
	rest := map[string]bool{} // message ids to sweep for
	for _, e := range es {
		if !e.poisonKnown {
			rest[e.rec.MessageID] = true
			continue
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
				rest[e.rec.MessageID] = true
			default:
				return false, fmt.Errorf("delete poison message %s of %s: %w", p.ID, e.rec.MessageID, err)
			}
		}
	}
	if len(rest) == 0 {
		return true, nil
	}
	return in.sweep(ctx, func(id string) bool { return rest[id] })
}

// sweepPasses is how many times a sweep looks again when the queue holds
// more messages than it saw, before it reports itself incomplete.
const sweepPasses = 3

// sweep makes one pass over the poison queue and deletes the messages whose
// original message id matches; it returns whether it is sure it saw every
// message. It receives batches of 32, hiding them for
// sweepVisibility, until a receive returns nothing (or returns a message the
// pass already holds, which means the pass outlasted the visibility
// timeout). Then it compares the queue's approximate message count with
// the messages it holds: more means messages it never saw (hidden by a
// concurrent pass, sent meanwhile, or a count that lags behind deletes, as
// Azure's may), and it receives again, up to sweepPasses times, before
// reporting itself incomplete. Messages it
// keeps, including those that do not decode, are made visible again at the
// end with their own text. A missing poison queue holds nothing.
func (in *Inspector) sweep(ctx context.Context, match func(messageID string) bool) (complete bool, err error) {
	type held struct{ id, receipt, text string }
	var kept []held
	index := map[string]int{}
	defer func() {
		// Restore even when ctx is done: otherwise the messages stay hidden
		// until their visibility timeout ends, which is harmless but slow.
		rctx := context.WithoutCancel(ctx)
		for _, h := range kept {
			_, uerr := in.cfg.Poison.Update(rctx, h.id, h.receipt, h.text, 0)
			if uerr != nil && !errors.Is(uerr, storeadapter.ErrNotFound) && !errors.Is(uerr, storeadapter.ErrPopReceiptMismatch) {
				err = errors.Join(err, fmt.Errorf("sweep: restore poison message %s: %w", h.id, uerr))
			}
		}
	}()
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
		for _, msg := range msgs {
			if i, ok := index[msg.ID]; ok {
				kept[i].receipt = msg.PopReceipt
				wrapped = true
				continue
			}
			if s, _, _, derr := DecodeMessage(msg.Text); derr == nil && match(s.MessageID) {
				err := in.cfg.Poison.DeleteMessage(ctx, msg.ID, msg.PopReceipt)
				switch {
				case err == nil, errors.Is(err, storeadapter.ErrNotFound):
					// Deleted (or deleted by another pass).
				case errors.Is(err, storeadapter.ErrPopReceiptMismatch):
					missed++ // our hold expired and another pass has it
				default:
					return false, fmt.Errorf("sweep: delete poison message %s: %w", msg.ID, err)
				}
				continue
			}
			index[msg.ID] = len(kept)
			kept = append(kept, held{msg.ID, msg.PopReceipt, msg.Text})
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
