package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Worker moves entities from one table to another table or to blobs: the
// handler of the "archive" kind. The package doc gives its steps and why
// every crash position and every race of two movers converges.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the archive worker on store, configured by cfg (its defaults
// filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work moves the entity or range job.Args names.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	mv := w.mover(job.Args)
	var err error
	switch {
	case job.Args.RK != nil:
		err = mv.one(ctx, *job.Args.RK, nil)
	case job.Args.ToBlob != "":
		err = mv.exportRange(ctx, job.ID)
	default:
		err = mv.rangeMove(ctx, job.ID)
	}
	if err == nil {
		jobs.SetResult(ctx, mv.result())
	}
	return err
}

// prepare returns a source version as its copy must hold it: for a table
// target with its offloaded properties carried to blobs of its new key
// (largeentity.Carry), for a blob target with them read back inline
// (largeentity.Restore). Keys and ETag stay the source's. A blob that is
// missing or does not match its reference is errOffloadChanged: the
// caller reads the source again (offloadChanged) to tell an offload that
// replaced it from a lost blob.
func (m *mover) prepare(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
	if len(largeentity.Refs(e)) == 0 {
		return e, nil
	}
	var out storeadapter.Entity
	var err error
	if m.args.To != "" {
		var n int
		out, n, err = largeentity.Carry(ctx, m.w.Store, m.w.Layout, e, m.args.To)
		m.carried += n
	} else {
		out, err = largeentity.Restore(ctx, m.w.Store, e)
	}
	switch {
	case errors.Is(err, largeentity.ErrMismatch) || errors.Is(err, storeadapter.ErrNotFound):
		return out, fmt.Errorf("archive: %s %s/%s: %w: %w", m.args.Table, e.PartitionKey, e.RowKey, errOffloadChanged, err)
	case err != nil:
		return out, fmt.Errorf("archive: %s %s/%s: offloaded properties: %w", m.args.Table, e.PartitionKey, e.RowKey, err)
	}
	out.ETag = e.ETag
	return out, nil
}

// errOffloadChanged marks an entity whose offloaded blob is gone or
// differs from its reference: an offload that replaced the blob after the
// entity was read (the move then goes on with the version read again,
// see offloadChanged), or a blob lost.
var errOffloadChanged = errors.New("an offloaded property's blob is gone or changed")

// offloadChanged decides about an entity e whose blob prepare found gone
// or changed (err): it reads the source again. Changed since e was read,
// an offload replaced its blob, and the move goes on with cur, the version
// read now; gone (cur nil, no error), the application deleted it. Else
// the blob is lost, and the move fails permanently, naming it.
func (m *mover) offloadChanged(ctx context.Context, e storeadapter.Entity, err error) (cur *storeadapter.Entity, _ error) {
	got, gerr := m.w.Store.Tables().GetEntity(ctx, m.args.Table, e.PartitionKey, e.RowKey)
	switch {
	case errors.Is(gerr, storeadapter.ErrNotFound):
		return nil, nil
	case gerr != nil:
		return nil, fmt.Errorf("archive: read %s %s/%s again: %w", m.args.Table, e.PartitionKey, e.RowKey, gerr)
	case got.ETag != e.ETag:
		return &got, nil
	}
	return nil, jobs.Permanentf("archive: %s %s/%s: its offloaded properties cannot be moved: %w", m.args.Table, e.PartitionKey, e.RowKey, err)
}

// exported is prepare for the rows of a range to blobs, which the
// exporter writes as it reads them: a row whose blob an offload replaced
// (or that the application deleted) since the page was read fails the
// delivery transiently, and the redelivery reads it again; a blob lost
// from an unchanged row is permanent, as in a table move.
func (m *mover) exported(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
	v, err := m.prepare(ctx, e)
	if !errors.Is(err, errOffloadChanged) {
		return v, err
	}
	if _, cerr := m.offloadChanged(ctx, e, err); cerr != nil {
		return v, cerr
	}
	return v, fmt.Errorf("archive: %s %s/%s changed while its page was exported (an offload replaced its blob); retrying: %w", m.args.Table, e.PartitionKey, e.RowKey, err)
}

// reconcile brings the indexes of one key of table (the source or a
// table target) up to date after a step of the move, when the table has
// declared indexes. A conflict or an unindexable value in the target's
// indexes does not fail the move: it is counted for the result (and
// reported by index check).
func (m *mover) reconcile(ctx context.Context, table, rk string) error {
	if !m.w.Indexes.Declared(table) {
		return nil
	}
	out, err := m.w.Indexes.Reconcile(ctx, table, m.pk, rk)
	if err != nil {
		return fmt.Errorf("archive: indexes of %s %s/%s: %w", table, m.pk, rk, err)
	}
	m.indexed.Conflicts += min(len(out.Conflicts), 1)
	m.indexed.Unindexable += min(len(out.Unindexable), 1)
	return nil
}

// sync brings the indexes of a span of table up to date (see
// indexes.Set.Sync) when the table has declared indexes.
func (m *mover) sync(ctx context.Context, table string, sp indexes.Span) error {
	if !m.w.Indexes.Declared(table) {
		return nil
	}
	res, err := m.w.Indexes.Sync(ctx, table, sp)
	m.indexed.Conflicts += res.Conflicts
	m.indexed.Unindexable += res.Unindexable
	if err != nil {
		return fmt.Errorf("archive: indexes of %s: %w", table, err)
	}
	return nil
}

// batchSpan is the span of a batch's keys (one partition, key order).
func batchSpan(es []storeadapter.Entity) indexes.Span {
	pk := es[0].PartitionKey
	return indexes.Span{PK: &pk, From: &indexes.Key{PK: pk, RK: es[0].RowKey}, Through: &indexes.Key{PK: pk, RK: es[len(es)-1].RowKey}}
}

// afterMove brings the indexes of a moved key up to date: the target's
// (a table target), then the source's.
func (m *mover) afterMove(ctx context.Context, rk string) error {
	if m.args.To != "" {
		if err := m.reconcile(ctx, m.args.To, rk); err != nil {
			return err
		}
	}
	return m.reconcile(ctx, m.args.Table, rk)
}

// result says what a finished move did, for the runner's "job done" line.
func (m *mover) result() string {
	switch {
	case m.manifest != nil && m.manifest.Name == "":
		return "no entity left in the range"
	case m.manifest != nil:
		return fmt.Sprintf("archived %d entities in %d parts to %s/%s (%d deleted by this run)",
			m.manifest.Entities, len(m.manifest.Parts), m.manifest.Container, m.manifest.Name, m.moved)
	case m.moved == 0 && m.args.RK != nil:
		return "already done: the source is gone and " + m.target.String() + " holds the copy"
	case m.moved == 0:
		return "no entity left in the range"
	case m.moved == 1:
		return "moved 1 entity to " + m.target.String() + m.notes()
	}
	return fmt.Sprintf("moved %d entities to %s", m.moved, m.target) + m.notes()
}

// notes are what the result adds about blobs and indexes: the offloaded
// blobs carried, and conflicts or unindexable values in the target's
// indexes.
func (m *mover) notes() string {
	var s string
	if m.carried > 0 {
		s += fmt.Sprintf("; %d offloaded blobs carried", m.carried)
	}
	if n := m.indexed.Conflicts + m.indexed.Unindexable; n > 0 {
		s += fmt.Sprintf("; %d entities not in every index (%d conflicts, %d unindexable: see index check)", n, m.indexed.Conflicts, m.indexed.Unindexable)
	}
	return s
}

// mover carries one job's move.
type mover struct {
	w      *Worker
	args   Args
	pk     string
	rounds int
	target archiveTarget
	// moved counts the source entities this run deleted after copying.
	moved int
	// manifest is the export of a range to blobs, once done.
	manifest *tableexport.Manifest
	// carried counts the offloaded blobs put under the target's keys.
	carried int
	// indexed counts keys left out of the target's indexes.
	indexed indexes.SyncResult
}

func (w *Worker) mover(args Args) *mover {
	m := &mover{w: w, args: args, pk: *args.PK, rounds: w.cfg.MaxConflicts}
	if args.To != "" {
		m.target = tableTarget{t: w.Store.Tables(), table: args.To, rounds: m.rounds}
	} else {
		container, prefix, _ := args.blobTarget() // validated
		m.target = blobTarget{b: w.Store.Container(container), prefix: prefix, table: args.Table, rounds: m.rounds}
	}
	return m
}
