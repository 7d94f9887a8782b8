package purgeday

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exportStepPrefix names each day's export checkpoint: the step is
// "purgeday-" + the day's table, under the operation id.
const exportStepPrefix = "purgeday-"

// LateWriteSlack is how far before its export's start a row's Timestamp
// may lie and still count as a late write: the allowance for the worker's
// clock running ahead of the storage service's.
const LateWriteSlack = 5 * time.Minute

// Worker deletes the expired day tables of a prefix: the handler of the
// "purgeday" kind. Each delivery works from what storage shows now; the
// only state it keeps is each day's export checkpoint (with exportTo).
// Its steps:
//
//  1. Plan (MakePlan): list the prefix's tables page by page (ListTables)
//     and keep the day tables whose date is strictly before the cut-off,
//     computed from the worker's clock at this delivery. Tables whose
//     suffix is not a real date are never touched. A dry run stops here
//     and reports the plan as its result.
//  2. For each expired day, oldest first:
//     a. With exportTo: export the whole table (tableexport.Export, the
//     operation id as its identity, step "purgeday-<table>" in the
//     checkpoint table, the time budget as its Stop), then verify the
//     manifest complete (tableexport.Verify: every part present, its
//     hash, size and line count as listed, the totals agreeing), then
//     look for late writes: one query for a row whose Timestamp is at or
//     after the export's start minus LateWriteSlack, each such row (there
//     are normally none) looked up in the parts by its keys and ETag. A
//     row not found means a writer wrote the day after its export began
//     and the export lacks it: the day is kept, the others go on, and the
//     job ends with a permanent error naming the table. A missing table at any point of
//     this step means the day is gone already.
//     b. When the day table has declared indexes (the config's "index"
//     section names it), drop what they keep outside it first
//     (indexes.Set.Drop: their index tables and blob lists); the
//     partition stores go with the table. Then DeleteTable. Not found or
//     being deleted: gone already, done. The indexes go first so that a
//     crash between the two leaves the day table, which the redelivery
//     plans again and drops again.
//     c. When the time budget is spent and days remain, return
//     jobs.ContinueLater: the continuation plans again and finds the
//     remaining days (the deleted ones are not listed any more).
//  3. Report the result (jobs.SetResult).
//
// Crash positions: during the plan nothing is written. Mid-export, the
// redelivery resumes the day's export from its checkpoint (the exporter's
// own argument). After the export and before the delete, the redelivery's
// Export finds the done checkpoint and returns the same manifest, which is
// verified and guarded again before the delete. After the delete the day
// is not listed any more. So a day is never deleted unexported when
// exportTo is set: its DeleteTable comes only after a complete, verified
// manifest and a guard that found no later row, in that delivery. (A row
// written between the guard's query and the DeleteTable is not seen:
// writers must leave expired days alone.)
//
// Two workers of one operation (a redelivery after a lost lease, or a
// continuation beside the message it replaced): they share each day's
// export checkpoint, a compare-and-swap register, so they write one
// export between them; each verifies it and deletes the table, and the
// second DeleteTable finds it gone. A worker whose listing is stale finds
// the table missing (gone) or, when a late writer has created it again,
// the old export's guard sees the new rows and keeps the table. Two
// operations on one prefix (two schedules) each export a day into their
// own manifest (different operation ids) and one of them deletes it.
//
// The cut-off is evaluated at each delivery: a redelivery or continuation
// after midnight UTC also deletes the day that expired meanwhile, as a new
// purge would; with keepDays it never deletes a day that is not older
// than keepDays days by then.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the purgeday worker on store, configured by cfg (its
// defaults filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// tally counts what one delivery did.
type tally struct {
	deleted, gone   int
	exported        int // days exported (or found exported) before their delete
	entities, parts int64
	// indexTables and indexBlobs count the index tables and blob list
	// blobs of the days' declared indexes dropped with them.
	indexTables, indexBlobs int
	late                    []string
}

// Work runs the day purge job.Args names.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	budget := w.Budget(w.cfg.TimeBudget)
	p, err := MakePlan(ctx, w.Store.Tables(), a, w.Clock.Now())
	switch {
	case errors.Is(err, storeadapter.ErrInvalidInput):
		return jobs.Permanent(fmt.Errorf("purgeday: %w", err))
	case err != nil:
		return fmt.Errorf("purgeday: %w", err)
	}
	if a.DryRun {
		jobs.SetResult(ctx, p.DryRunResult())
		return nil
	}
	if len(p.Expired) == 0 {
		jobs.SetResult(ctx, p.nothing())
		return nil
	}
	var t tally
	for i, day := range p.Expired {
		gone, late := false, false
		if a.ExportTo != "" {
			gone, late, err = w.export(ctx, job.ID, a.ExportTo, day, budget, &t)
			switch {
			case errors.Is(err, tableexport.ErrStopped):
				return jobs.ContinueLater(0, t.progress(p, "stopped while exporting "+day.Table))
			case err != nil:
				return err
			}
		}
		switch {
		case gone:
			t.gone++
		case late:
			t.late = append(t.late, day.Table)
		default:
			if err := w.drop(ctx, day.Table, &t); err != nil {
				return err
			}
		}
		// A kept day made no progress: continuing after it would plan
		// it again first, and a kept day whose verification alone spends
		// the budget would continue for ever, never reaching the newer
		// days nor the permanent error below. So the budget is asked
		// only after a day that is gone now.
		if !late && i < len(p.Expired)-1 && budget.Spent() {
			return jobs.ContinueLater(0, t.progress(p, "through "+day.Table))
		}
	}
	jobs.SetResult(ctx, t.result(p))
	if len(t.late) > 0 {
		return jobs.Permanentf("purgeday: %s: written after its export began, so the table is kept; writers must not write days older than the cut-off (export the day again under a new operation id once its writer has stopped)",
			strings.Join(t.late, ", "))
	}
	return nil
}

// export exports one day and verifies it (step 2a). gone reports a day
// whose table is missing, late a row written since its export began.
// tableexport.ErrStopped says the budget stopped the export.
func (w *Worker) export(ctx context.Context, opID, exportTo string, day Day, budget jobs.Budget, t *tally) (gone, late bool, err error) {
	container, prefix, _ := tableexport.ParseTarget(exportTo) // validated
	blobs := w.Store.Container(container)
	m, err := tableexport.Export(ctx, w.Store.Tables(), storeadapter.Range{Table: day.Table}, tableexport.Options{
		Blobs: blobs, Prefix: prefix, MaxPartBytes: w.cfg.MaxPartBytes, OpID: opID, Checkpoints: w.Checkpoints,
		Step: exportStepPrefix + day.Table, Clock: w.Clock, Stop: budget.Spent, Transform: largeentity.Embedding(w.Store),
	})
	switch {
	case errors.Is(err, tableexport.ErrStopped):
		return false, false, err
	case errors.Is(err, storeadapter.ErrContainerNotFound):
		return false, false, jobs.Permanentf("purgeday: args.exportTo: container %s does not exist", container)
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return true, false, nil
	case err != nil:
		return false, false, fmt.Errorf("purgeday: export %s: %w", day.Table, err)
	}
	rep, err := tableexport.Verify(ctx, blobs, m.Name)
	if err != nil {
		return false, false, fmt.Errorf("purgeday: verify the export of %s: %w", day.Table, err)
	}
	if !rep.Complete() {
		return false, false, jobs.Permanentf("purgeday: the export of %s (%s/%s) is not complete, so the table is kept: %s",
			day.Table, container, m.Name, strings.Join(rep.Problems, "; "))
	}
	late, err = w.writtenSince(ctx, day.Table, m)
	switch {
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return true, false, nil
	case err != nil:
		return false, false, err
	}
	t.exported++
	t.entities += m.Entities
	t.parts += int64(len(m.Parts))
	return false, late, nil
}

// writtenSince reports whether the day's table holds a row its export
// may lack: a row whose Timestamp is at or after the export's start, less
// LateWriteSlack, and that is not in the export's parts with the same
// ETag. Normally the query finds no such row (nobody writes an expired
// day) and costs one call. Rows it does find (a test that writes its days
// just before, a day written up to its export) are looked up in the
// parts, streamed once; more than one page of them counts as late
// without a look.
func (w *Worker) writtenSince(ctx context.Context, table string, m tableexport.Manifest) (bool, error) {
	started, err := time.Parse(time.RFC3339Nano, m.Started)
	if err != nil {
		return false, fmt.Errorf("purgeday: the manifest %s/%s has no start time: %q", m.Container, m.Name, m.Started)
	}
	q := storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.Compare("Timestamp", storeadapter.Ge, started.Add(-LateWriteSlack))),
		Select: []string{"PartitionKey"}}
	recent := map[[2]string]string{} // keys -> ETag
	for pages := 0; ; pages++ {
		page, err := w.Store.Tables().Query(ctx, table, q)
		if err != nil {
			return false, fmt.Errorf("purgeday: look for late writes in %s: %w", table, err)
		}
		if len(page.Entities) > 0 && pages > 0 || len(recent)+len(page.Entities) > storeadapter.MaxPageSize {
			return true, nil
		}
		for _, e := range page.Entities {
			recent[[2]string{e.PartitionKey, e.RowKey}] = e.ETag
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			break
		}
	}
	if len(recent) == 0 {
		return false, nil
	}
	blobs := w.Store.Container(m.Container)
	for _, p := range m.Parts {
		err := tableexport.ReadPart(ctx, blobs, p.Name, func(e storeadapter.Entity) error {
			k := [2]string{e.PartitionKey, e.RowKey}
			if etag, ok := recent[k]; ok && etag == e.ETag {
				delete(recent, k)
			}
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("purgeday: look for late writes of %s in its export: %w", table, err)
		}
	}
	return len(recent) > 0, nil
}

// drop deletes a day's table (step 2b).
func (w *Worker) drop(ctx context.Context, table string, t *tally) error {
	d, err := w.Indexes.Drop(ctx, table)
	if err != nil {
		return fmt.Errorf("purgeday: %w", err)
	}
	t.indexTables += d.Tables
	t.indexBlobs += d.Blobs
	err = w.Store.Tables().DeleteTable(ctx, table)
	switch {
	case err == nil:
		t.deleted++
	case errors.Is(err, storeadapter.ErrTableNotFound), errors.Is(err, storeadapter.ErrTableBeingDeleted):
		t.gone++
	default:
		return fmt.Errorf("purgeday: delete table %s: %w", table, err)
	}
	return nil
}

// progress is the continuation's progress text.
func (t *tally) progress(p Plan, where string) string {
	return fmt.Sprintf("deleted %d of %d expired day tables so far (%d gone already), %s", t.deleted, len(p.Expired), t.gone, where)
}

// result is the job's result.
func (t *tally) result(p Plan) string {
	s := fmt.Sprintf("deleted %d of %d day tables, those older than %s (%s)", t.deleted, p.DayTables(), p.cutoffText(), names(p.Expired))
	if t.exported > 0 {
		s += fmt.Sprintf("; exported %d first: %d entities in %d parts", t.exported, t.entities, t.parts)
	}
	if t.indexTables+t.indexBlobs > 0 {
		s += fmt.Sprintf("; dropped their indexes' %d tables and %d blobs", t.indexTables, t.indexBlobs)
	}
	if t.gone > 0 {
		s += fmt.Sprintf("; %d gone already", t.gone)
	}
	if len(t.late) > 0 {
		s += fmt.Sprintf("; %d kept for late writes", len(t.late))
	}
	return s
}
