package poison

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
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
	// Concurrency is how many records (poison messages, checkpoints'
	// operations) are removed at once; 0 means DefaultConcurrency.
	Concurrency int
	// Progress, when set, hears how far each phase has got (see
	// Progress): PhaseDrops, PhaseRead, PhaseDeletePoison, PhaseSweep,
	// PhaseDeleteRecords and PhaseCheckpoints.
	Progress func(Progress)
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
// Like DeleteMany it removes the poison messages (those the records note
// by id, the others in one pass for all; none for a requeued record whose
// requeue removed them), then each record, then its blob (only the version
// the record names; see DeleteMany), so a crash leaves the records not yet
// deleted for the next Purge; checkpoints go after their records. A
// record's delete is conditional on the ETag read: one that changed
// meanwhile (a newer attempt, a requeue, a new Move) is kept with its blob
// and not counted. Each phase works on up to Concurrency records (or
// operations) at once, each record's steps in this order; records are
// independent, so this changes none of the above. After the first storage
// error a phase starts no more and Purge returns what it removed. Run it
// alone: a Requeue working on the same records may find their blobs gone,
// and a poison message hidden by the pass of a concurrent Requeue, Delete
// or Purge is missed and outlives its record.
func (in *Inspector) Purge(ctx context.Context, o PurgeOptions) (PurgeResult, error) {
	if o.OlderThan < 0 {
		return PurgeResult{}, fmt.Errorf("poison: purge: %w: OlderThan %v is negative", storeadapter.ErrInvalidInput, o.OlderThan)
	}
	now := in.now()
	rep := &reporter{fn: o.Progress}
	var res PurgeResult
	if o.Group == "" {
		var cut time.Time
		if o.OlderThan > 0 {
			cut = now.Add(-o.OlderThan)
		}
		var err error
		if res.Drops, err = in.purgeDrops(ctx, cut, o.Kind, o.DryRun, o.Concurrency, rep); err != nil {
			return res, err
		}
	}
	stale := cmp.Or(o.StaleAfter, DefaultStaleAfter)
	var (
		sel      []entry
		requeued []Record            // selected requeued records
		liveOps  = map[string]bool{} // operations with a record that stays or a requeued copy
	)
	err := in.scanReport(ctx, in.filter(o.Kind, ""), rep, func(e entry) {
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
		res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(sel, liveOps), true, o.Concurrency, nil)
		return res, err
	}
	if len(sel) == 0 {
		return res, nil
	}
	if _, err := in.removePoisonMessages(ctx, sel, o.Concurrency, rep); err != nil {
		return res, fmt.Errorf("poison: purge: %w", err)
	}
	removed, err := in.removeRecords(ctx, sel, true, o.Concurrency, rep, func(e entry) { liveOps[e.rec.OpID] = true })
	for _, e := range removed {
		res.Records = append(res.Records, e.rec)
	}
	sortNewest(res.Records)
	if err != nil {
		return res, err
	}
	res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(removed, liveOps), false, o.Concurrency, rep)
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
// entities of operations ops in table, conc operations at a time,
// reporting PhaseCheckpoints; "" does nothing. Each delete is conditional
// on the ETag read, so a checkpoint saved meanwhile by a run of the same
// operation stays.
func (in *Inspector) clearCheckpoints(ctx context.Context, table string, ops []string, dryRun bool, conc int, rep *reporter) (int, error) {
	if table == "" {
		return 0, nil
	}
	var (
		mu sync.Mutex
		n  int
	)
	err := each(ctx, len(ops), conc, rep, PhaseCheckpoints, func(ctx context.Context, i int) error {
		op := ops[i]
		if storeadapter.ValidateKey("op", op) != nil {
			return nil
		}
		p, err := idempotent.Checkpoints{Tables: in.cfg.Tables, Table: table}.ClearOperation(ctx, op, dryRun)
		mu.Lock()
		defer mu.Unlock()
		n += p.Deleted
		if dryRun {
			n += p.Found
		}
		if err != nil {
			return fmt.Errorf("poison: purge: checkpoints of %s: %w", op, err)
		}
		return nil
	})
	return n, err
}
