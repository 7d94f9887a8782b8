package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// checkpointStep names a restore's checkpoint.
const checkpointStep = "restore"

// Worker restores exports into a table: the handler of the "restore" kind.
// Its checkpoint (operation id, "restore") holds a position — the phase,
// the manifest, the part and the line (and in mirror's second pass the
// last key reconciled) — and the counts so far. Its steps:
//
//  1. Read every manifest (missing or unreadable: permanent, naming it;
//     a chain must be one table's). Load the checkpoint; done: report its
//     counts and write nothing.
//  2. Create the target table when it is missing (idempotent.EnsureTable).
//  3. Write phase, for each manifest in order and each of its parts from
//     the checkpoint's: read the part through once and check its length,
//     SHA-256 and line count against the manifest
//     (tableexport.CheckPart); a part missing or different is permanent,
//     naming it, and nothing of it has been written. Then read it again
//     from its start, checked the same way as it goes
//     (tableexport.ReadCheckedPart), and hand its lines, from the
//     checkpoint's line on, to the batch writer (tablewrite: insert, or
//     replace for the modes replace and mirror). Every
//     Config.CheckpointRows lines, and at the part's end once that read's
//     check has passed: Flush (every row handed over is durable), sync the
//     target's indexes (below), then save the position (compare-and-swap
//     on the checkpoint's ETag), then, when the delivery's time budget is
//     spent, return jobs.ContinueLater.
//  4. Mirror only, second phase: check each part again and merge-join its
//     keys, in key order, against a scan of the target in the manifest's
//     scope (storeadapter.Range.Filter: reserved rows are never read), so
//     memory holds one line and one page whatever the table's size. A
//     target row the export does not hold is deleted, If-Match the ETag
//     the scan read, in transactions of one partition; a row changed since
//     is kept. The checkpoint, saved the same way, holds the part, the
//     line and the last key reconciled: every target row up to it has
//     been handled. This read is checked as it goes too. After the last
//     part the target's rows past the last key are handled the same way
//     (the scope's tail).
//  5. Save the done mark with the counts, and report them (jobs.SetResult).
//
// Indexes. When the worker's config declares indexes on the target table
// (kit.Deps.Indexes), every save above first brings them up to date for
// the keys the restore wrote or deleted since the last save, with
// indexes.Set.Sync (the rows written are indexed, the rows deleted leave
// the indexes), after the Flush and the deletes, so Sync reads what is
// durable:
//
//   - Insert and replace: the span from the first key handed to the
//     writer since the last save (inclusive) through the last one
//     (inclusive). Saves fall at every part's end, so a segment lies in
//     one part, whose lines are in key order. A segment without rows
//     syncs nothing.
//   - Mirror: its write phase syncs nothing, since its second pass syncs
//     the whole scope piece by piece: from the last saved key (exclusive;
//     the scope's start at first) through the new saved key (inclusive),
//     and with the done mark through the scope's end. Every key the
//     restore wrote or deleted lies in the scope.
//
// No table with declared indexes, no Sync: the restore makes no extra call.
//
// Crash positions: before the first save nothing is recorded and a
// redelivery starts over, rewriting rows that are in the table already:
// insert skips them (counted Skipped), replace writes the same values
// again. After a save, a redelivery starts at the saved line, so what it
// writes again is at most CheckpointRows lines of one part, with the same
// outcome. A crash between a Flush and its save (before, during or after
// the Sync) is the same case. A resumed part is checked again before any
// of it is written. In mirror's second pass a redelivery scans the target
// from just after the saved key, and the export's lines from just after
// the saved line, whose key it is, so the join is the one the lost run
// was doing; a delete done twice finds the row gone, which is success.
// After the done mark a redelivery writes nothing.
//
// Why the indexes converge after a crash. The checkpoint holds (manifest
// M, part P, line L). A delivery that resumes there hands lines L+1, L+2,
// … of the same part (checked: the same bytes) to the writer in the same
// order, and saves where (line − L) is a multiple of CheckpointRows or at
// the part's end: the boundaries of the run that crashed, whose last save
// (or the checkpoint it started from) is L; a run saves only after its
// Sync, so everything up to L was synced. So the rows a crashed run wrote
// and did not sync are those of lines L+1 to its next boundary, whose
// keys lie between the first and the last key of the redelivery's first
// segment: its Sync reads them, as written by either run, and indexes
// them. Mirror's pass is the same with keys: the crashed run deleted only
// target rows after the saved key and up to the key of its next boundary
// (or, in the tail, up to the scope's end), which is the span of the
// redelivery's first Sync; the membership records of the rows it deleted
// are still there, so Sync removes them from the indexes.
//
// A part that changes between its check and the read that uses it (an
// export is never rewritten: someone replaced the blob) is found at that
// read's end, by its length, SHA-256 or line count, or sooner by a line
// that does not parse: a permanent error naming the part, and the
// checkpoint never moves past it. The saves inside the part are kept:
// checking before them would mean reading the part once more per save,
// or holding it. So the rows of that part this delivery wrote, from the
// checkpoint's line it started at on (up to the last save inside the part
// and maybe beyond), may be from the changed bytes. The operator checks
// the export (enqueue export verify) and restores it again as a new
// operation in mode replace, which rewrites every row from checked parts,
// or mirror, which also deletes rows only the changed bytes held; insert
// would skip the rows as they are. In mirror's pass, target rows up to
// the part's last key read may have been deleted for want of lines the
// changed bytes lack; a new mirror restore writes them again. A delivery
// that stops inside a part (time budget, another run ahead) has not
// checked the bytes it wrote from; the next one checks the part before it
// reads on, so a part that stays changed is caught, one changed and put
// back between two deliveries is not. The rows written or deleted since the last
// save before such a part's permanent error are not synced to the
// indexes either; the new restore in replace or mirror syncs them.
//
// Two deliveries at once (a redelivery after a lost lease, or a
// continuation sent twice): both write the same rows with the same values
// (replace is idempotent; insert lets the first write win and the other
// skip), and a mirror's deletes are conditional and only of rows the
// export does not hold, which neither run writes. Every save is a
// compare-and-swap: the first save is an insert, later ones are If-Match;
// a run whose save loses reloads the checkpoint and, when the other run
// is ahead, goes on from its position, so the checkpoint never moves
// back and one run's progress is never repeated by the other for more
// than CheckpointRows lines. The counts are then those of the run whose
// saves won; rows the other wrote meanwhile may be counted as skipped or
// not at all. Indexes: each run syncs its own segments before its saves.
// A row one run wrote and did not sync (it stopped) was written with the
// same values by the run whose saves went past it, before or after that
// run's Sync (insert: only the first write lands), so the index of what
// the table holds is the one that Sync wrote. Two narrow cases are left to
// the index kind's check and rebuild (docs/restore.md says so): in a chain,
// a run stalled in an earlier manifest can write an older version of a
// row back after the other run synced a later one, and then stop before
// its own Sync (the table holds the older version too); and in a mirror,
// a stalled run can delete a row the application added meanwhile, which
// the other run's scan had not seen, and stop before its Sync.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the restore worker on store, configured by cfg (its
// defaults filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work runs the restore job.Args names.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	src, err := open(ctx, w.Store, job.Args)
	if err != nil {
		return err
	}
	wr, err := tablewrite.New(tablewrite.Options{Tables: w.Store.Tables(), Table: src.table,
		Mode: writeMode(job.Args.Mode), Partitions: w.cfg.Partitions, CreateTable: true})
	if err != nil {
		return jobs.Permanent(fmt.Errorf("restore: %w", err))
	}
	r := &run{w: w, src: src, op: job.ID, mirror: job.Args.Mode == ModeMirror, wr: wr,
		del: &deleter{tables: w.Store.Tables(), table: src.table}, budget: w.Budget(w.cfg.TimeBudget), checked: map[[2]int]bool{}}
	r.syncWrites = !r.mirror && w.Indexes.Declared(src.table)
	err = r.run(ctx)
	switch {
	case errors.Is(err, errBudget):
		return jobs.ContinueLater(0, "restore: "+r.st.summary(src.table)+" so far")
	case err == nil:
		jobs.SetResult(ctx, "restore: "+r.st.summary(src.table))
		return nil
	case jobs.IsPermanent(err):
		return err
	case errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge):
		return jobs.Permanent(fmt.Errorf("restore: %w", err))
	}
	return fmt.Errorf("restore: %w", err)
}

// Phases of a restore's checkpoint.
const (
	phaseWrite  = ""
	phaseMirror = "mirror"
	phaseDone   = "done"
)

// state is a restore's checkpoint: where it is and what it has done.
type state struct {
	Phase string `json:"phase,omitempty"`
	// M, P and L are the manifest, the part and the number of its lines
	// done (in mirror's pass, of the one manifest).
	M int   `json:"m,omitempty"`
	P int   `json:"p,omitempty"`
	L int64 `json:"l,omitempty"`
	// After is mirror's last key reconciled.
	After   *storeadapter.Key `json:"after,omitempty"`
	Written int64             `json:"written,omitempty"`
	Skipped int64             `json:"skipped,omitempty"`
	Deleted int64             `json:"deleted,omitempty"`
	Kept    int64             `json:"kept,omitempty"`
	// Blobs counts offloaded values put back in blobs, Dangling the
	// references kept whose blob was gone (see add).
	Blobs    int64 `json:"blobs,omitempty"`
	Dangling int64 `json:"dangling,omitempty"`
	// Indexed counts the keys whose index entries the saves' Syncs added
	// or changed, Unindexed the keys they removed from the indexes (rows
	// gone from the target).
	Indexed   int64 `json:"indexed,omitempty"`
	Unindexed int64 `json:"unindexed,omitempty"`
}

func (s state) rank() int {
	switch s.Phase {
	case phaseMirror:
		return 1
	case phaseDone:
		return 2
	}
	return 0
}

// ahead reports whether s is a later position than o.
func (s state) ahead(o state) bool {
	if s.rank() != o.rank() {
		return s.rank() > o.rank()
	}
	if s.M != o.M {
		return s.M > o.M
	}
	if s.P != o.P {
		return s.P > o.P
	}
	return s.L > o.L
}

func (s state) summary(table string) string {
	out := fmt.Sprintf("%s: %d rows written, %d skipped (exist), %d deleted", table, s.Written, s.Skipped, s.Deleted)
	if s.Kept > 0 {
		out += fmt.Sprintf(", %d kept (changed during the mirror)", s.Kept)
	}
	if s.Indexed > 0 || s.Unindexed > 0 {
		out += fmt.Sprintf(", indexes: %d updated, %d removed", s.Indexed, s.Unindexed)
	}
	out += largeentity.Summary(s.Blobs, s.Dangling)
	return out
}

var (
	// errBudget stops a delivery after a save when its time budget is spent.
	errBudget = errors.New("restore: time budget spent, progress saved")
	// errMoved says a lost save adopted another run's later position.
	errMoved = errors.New("restore: another run of the operation is ahead; going on from its checkpoint")
)

// run is one delivery of a restore.
type run struct {
	w       *Worker
	src     source
	op      string
	mirror  bool
	wr      *tablewrite.Writer
	del     *deleter
	budget  jobs.Budget
	checked map[[2]int]bool // parts checked in this delivery
	// syncWrites is set when the target has declared indexes and the
	// write phase syncs them (not in mirror mode: see Worker).
	syncWrites bool

	st   state // the checkpoint as last loaded or saved
	etag string
	// base is st's counts when mark was taken of the writer and the deleter.
	base       state
	mark       tablewrite.Counts
	markDel    [2]int64
	placed     largeentity.Placed // by add, in this delivery
	markPlaced largeentity.Placed
	checkpoint idempotent.Checkpoints
	// seg is the write phase's keys handed to the writer since the last
	// save, when the target has indexes to sync.
	seg segment
}

func (r *run) run(ctx context.Context) error {
	r.checkpoint = r.w.Checkpoints
	token, etag, err := r.checkpoint.LoadETag(ctx, r.op, checkpointStep)
	if err != nil {
		return err
	}
	if err := r.adopt(token, etag); err != nil {
		return err
	}
	if r.st.Phase == phaseDone {
		return nil
	}
	if err := idempotent.EnsureTable(ctx, r.w.Store.Tables(), r.src.table); err != nil {
		return err
	}
	for {
		switch r.st.Phase {
		case phaseDone:
			return nil
		case phaseMirror:
			err = r.mirrorPass(ctx)
		default:
			err = r.writePart(ctx)
		}
		if err != nil && !errors.Is(err, errMoved) {
			return err
		}
	}
}

// adopt takes a loaded checkpoint as this run's position and counts.
func (r *run) adopt(token, etag string) error {
	var st state
	if token != "" {
		if err := json.Unmarshal([]byte(token), &st); err != nil {
			return jobs.Permanent(fmt.Errorf("restore: checkpoint %s/%s: %w", r.op, checkpointStep, err))
		}
	}
	r.st, r.etag, r.base = st, etag, st
	r.mark, r.markDel, r.markPlaced = r.wr.Counts(), [2]int64{r.del.deleted, r.del.kept}, r.placed
	r.seg = segment{}
	return nil
}

// next is the position after part p of manifest m.
func (r *run) next(m, p int) state {
	switch {
	case p+1 < len(r.src.manifests[m].Parts):
		return state{M: m, P: p + 1}
	case m+1 < len(r.src.manifests):
		return state{M: m + 1}
	case r.mirror:
		return state{Phase: phaseMirror}
	}
	return state{Phase: phaseDone}
}

// checkOnce checks a part unless this delivery has; done is how many of
// its lines the checkpoint says are used already (for the error).
func (r *run) checkOnce(ctx context.Context, m, p int, done int64) error {
	if r.checked[[2]int{m, p}] {
		return nil
	}
	if err := r.src.check(ctx, m, p, done); err != nil {
		return err
	}
	r.checked[[2]int{m, p}] = true
	return nil
}

// writePart writes the checkpoint's part from its line on.
func (r *run) writePart(ctx context.Context) error {
	m, p, from := r.st.M, r.st.P, r.st.L
	parts := r.src.manifests[m].Parts
	if p >= len(parts) { // a manifest without parts
		return r.save(ctx, r.next(m, len(parts)-1))
	}
	if err := r.checkOnce(ctx, m, p, from); err != nil {
		return err
	}
	var line int64
	err := tableexport.ReadCheckedPart(ctx, r.src.blobs[m], parts[p], func(e storeadapter.Entity) error {
		line++
		if line <= from {
			return nil
		}
		if err := r.add(ctx, e); err != nil {
			return err
		}
		if r.syncWrites {
			r.seg.add(e)
		}
		if (line-from)%int64(r.w.cfg.CheckpointRows) == 0 {
			return r.save(ctx, state{M: m, P: p, L: line})
		}
		return nil
	})
	if err != nil {
		return r.src.changed(err, m, p, fmt.Sprintf("its rows from line %d on may have been written from the changed bytes", from+1))
	}
	return r.save(ctx, r.next(m, p))
}

// mirrorPass deletes the target's rows in the scope that the export does
// not hold, from the checkpoint's position on.
func (r *run) mirrorPass(ctx context.Context) error {
	parts := r.src.manifests[0].Parts
	startP, startL, after := r.st.P, r.st.L, r.st.After
	t := newTarget(r.w.Store.Tables(), r.src.scope(), after)
	extra := func(e storeadapter.Entity) error { return r.del.add(ctx, e) }
	for p := startP; p < len(parts); p++ {
		var from, line int64
		if p == startP {
			from = startL
		}
		if err := r.checkOnce(ctx, 0, p, from); err != nil {
			return err
		}
		err := tableexport.ReadCheckedPart(ctx, r.src.blobs[0], parts[p], func(e storeadapter.Entity) error {
			line++
			if line <= from {
				return nil
			}
			k := storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
			after = &k
			if _, err := t.upTo(ctx, &k, extra); err != nil {
				return err
			}
			if (line-from)%int64(r.w.cfg.CheckpointRows) == 0 {
				return r.save(ctx, state{Phase: phaseMirror, P: p, L: line, After: after})
			}
			return nil
		})
		if err != nil {
			return r.src.changed(err, 0, p, "target rows in the scope up to its last key read may have been deleted for want of lines the changed bytes lack")
		}
		if err := r.save(ctx, state{Phase: phaseMirror, P: p + 1, After: after}); err != nil {
			return err
		}
	}
	if err := t.rest(ctx, extra); err != nil {
		return err
	}
	return r.save(ctx, state{Phase: phaseDone})
}

// save makes everything handed over durable (the writer's and the
// deleter's Flush), then records pos with the counts: a compare-and-swap
// on the checkpoint. When another run saved first and is ahead, it takes
// that run's checkpoint and returns errMoved; when the time budget is
// spent it returns errBudget.
func (r *run) save(ctx context.Context, pos state) error {
	if err := r.wr.Flush(ctx); err != nil {
		return err
	}
	if err := r.del.flush(ctx); err != nil {
		return err
	}
	if err := r.syncIndexes(ctx, &pos); err != nil {
		return err
	}
	c := r.wr.Counts()
	pos.Written = r.base.Written + c.Written - r.mark.Written
	pos.Skipped = r.base.Skipped + c.Skipped - r.mark.Skipped
	pos.Deleted = r.base.Deleted + r.del.deleted - r.markDel[0]
	pos.Kept = r.base.Kept + r.del.kept - r.markDel[1]
	pos.Blobs = r.base.Blobs + int64(r.placed.Blobs-r.markPlaced.Blobs)
	pos.Dangling = r.base.Dangling + int64(r.placed.Dangling-r.markPlaced.Dangling)
	token, _ := json.Marshal(pos) // plain fields
	for tries := 0; ; tries++ {
		var etag string
		var err error
		if r.etag == "" {
			etag, err = r.checkpoint.Create(ctx, r.op, checkpointStep, string(token))
		} else {
			etag, err = r.checkpoint.SaveIfMatch(ctx, r.op, checkpointStep, string(token), r.etag)
		}
		if err == nil {
			r.st, r.etag = pos, etag
			break
		}
		if !idempotent.Lost(err) || tries == 5 {
			return fmt.Errorf("save checkpoint: %w", err)
		}
		otherToken, otherETag, lerr := r.checkpoint.LoadETag(ctx, r.op, checkpointStep)
		if lerr != nil {
			return fmt.Errorf("reload checkpoint: %w", lerr)
		}
		var other state
		if otherToken != "" {
			_ = json.Unmarshal([]byte(otherToken), &other) // checked by adopt below when it is used
		}
		if otherToken != "" && (other.ahead(pos) || other.Phase == phaseDone) {
			if err := r.adopt(otherToken, otherETag); err != nil {
				return err
			}
			return errMoved
		}
		r.etag = otherETag // behind us (or gone): save ours over it
	}
	if pos.Phase != phaseDone && r.budget.Spent() {
		return errBudget
	}
	return nil
}
