package index

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Kind is the envelope kind of index jobs.
const Kind = "index"

// Args are the arguments of an index job (the README documents them):
// {"table","pk","rk"} reconciles one entity's indexes; {"table",
// "rebuild":true} rebuilds every index of the table, and with "pk" only
// that partition's entities.
type Args struct {
	Table   string  `json:"table"`
	PK      *string `json:"pk,omitempty"`
	RK      *string `json:"rk,omitempty"`
	Rebuild bool    `json:"rebuild,omitempty"`
}

// Kind returns "index".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := storeadapter.ValidateTableName(a.Table); err != nil {
		return fmt.Errorf("args.table: %w", err)
	}
	if a.PK != nil {
		if err := storeadapter.ValidateKey("pk", *a.PK); err != nil {
			return fmt.Errorf("args.pk: %w", err)
		}
	}
	if a.Rebuild {
		if a.RK != nil {
			return errors.New("args.rk: a rebuild covers the table (or args.pk's partition); remove rk")
		}
		return nil
	}
	switch {
	case a.PK == nil:
		return errors.New(`args.pk: is required (or "rebuild": true)`)
	case a.RK == nil:
		return errors.New(`args.rk: is required (or "rebuild": true)`)
	}
	if err := storeadapter.ValidateKey("rk", *a.RK); err != nil {
		return fmt.Errorf("args.rk: %w", err)
	}
	if strings.HasPrefix(*a.RK, ReservedPrefix) {
		return fmt.Errorf("args.rk: must not start with %q, which is reserved for the index kind's own rows", ReservedPrefix)
	}
	return nil
}

// Worker runs index jobs.
//
// # Reconcile: steps, crash positions and concurrent workers
//
// The source entity is the truth; its membership record (RowKey
// ReservedPrefix+"m."+rk, in the entity's partition) says, per index, what
// was applied (A_<index>) and, for the table, rows and blob stores, which
// values are still to be settled (S_<index>) at generation Gen. A
// reconcile:
//
//  1. reads its record, then the entity (in that order: see the end);
//  2. computes each index's value from the entity; if every index's
//     applied state matches and nothing is pending, stops (two reads);
//  3. registers: writes the record with a new generation (greater than
//     the last and than the clock in microseconds), the new applied
//     states and, per table/rows/blob index, the pending values: those
//     pending before, the old value and the new. The write is If-Match of
//     the record read in 1 (an insert when there was none), in one
//     transaction with every partition-store change: a partition copy
//     moved to its new RowKey (deleted and inserted on the ETags read), the
//     entity's RowKey moved between partition lists. A lost
//     compare-and-swap restarts at 1;
//  4. settles each pending value of the table, rows and blob indexes at
//     the registered generation: live for the new value, a tombstone for
//     the others (see apply: an entry changes only for a higher
//     generation);
//  5. clears the settled values from the record, If-Match of its
//     registration. When a later generation registered meanwhile, it
//     carries the values on and settles them too; the record then only
//     loses the values this generation tombstoned that no later one made
//     the index's value (see clear), so it stays small however long the
//     reconciles of one entity overlap.
//
// Why it converges. Registrations are serialised by the record's ETag and
// each reads the entity after reading the record, so a higher generation
// always saw an equal or newer version of the entity: the last
// registration after the application's last write saw the truth. A
// partition store changes atomically with its registration, so it always
// matches the record. The pending values of a registration include those
// of every earlier one that was not settled, so the last generation
// writes every entry any earlier one may still write, and an entry keeps
// the highest generation's write whatever order the requests arrive in: a
// reconcile that read an older version can never overwrite a newer one.
//
// Crash positions: before 3 nothing was written; after 3 the record holds
// pending values, so any later reconcile (the redelivered message, or
// another) settles them at that generation (4 and 5 are idempotent: an
// entry that already holds the generation is left alone); after 4 the
// entries are right and only the record's pending values remain, cleared
// by the next reconcile at the cost of rewriting nothing. Two workers
// reconciling one entity: one wins the registration, the other restarts
// and either sees nothing to do or registers a later generation; two
// workers settling one generation write the same entries. Two workers
// changing one shared entry (a list, a copy row): every write is
// If-Match of the ETag read, retried on a loss.
//
// A copy whose value another entity holds is never overwritten: the
// reconcile finishes the other indexes and fails with ErrConflict (retried,
// and reported in the failure record and by Check); nothing re-enqueues
// the entity when the holder moves on, so after its retries are spent it
// waits for its next write, an "enqueue index reconcile" or a rebuild. A
// value that cannot be indexed (too long for a key, or partition copies
// that together exceed one transaction) is removed from that index and
// the job fails permanently, naming it.
//
// A membership record read after the entity could pair an old version
// of the entity with a newer record, and register it above the newer
// version: the record is read first.
type Worker struct {
	x           *Indexes
	checkpoints idempotent.Checkpoints
}

// New returns the worker of the "index" kind for cfg's declarations.
func New(store storeadapter.Store, cfg Config) (*Worker, error) {
	x, err := Open(store, cfg)
	if err != nil {
		return nil, err
	}
	return &Worker{x: x, checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: x.cfg.CheckpointTable}}, nil
}

// MaxRunTime is the configured maximum run time of one index job.
func (w *Worker) MaxRunTime() time.Duration { return time.Duration(w.x.cfg.MaxRunTime) }

// Work runs one index job.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	ti, err := w.x.indexes(a.Table)
	if err != nil {
		return jobs.Permanent(fmt.Errorf("args.table: %w", err))
	}
	if a.Rebuild {
		res, err := w.x.rebuild(ctx, ti, a.PK, w.checkpoints, job.ID)
		jobs.SetResult(ctx, res.String())
		return err
	}
	out, err := w.x.reconcile(ctx, ti, *a.PK, *a.RK, false, nil)
	if errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge) {
		return jobs.Permanent(err) // a reserved key, a list at its limit
	}
	if err != nil {
		return err
	}
	jobs.SetResult(ctx, out.String())
	if len(out.Conflicts) > 0 { // retried: the holder may move on
		return errors.Join(append(out.Conflicts, out.Unindexable...)...)
	}
	if len(out.Unindexable) > 0 {
		return jobs.Permanent(errors.Join(out.Unindexable...))
	}
	return nil
}

// String summarises an outcome for the job's result.
func (o Outcome) String() string {
	s := "indexes unchanged"
	if o.Changed {
		s = "indexes updated"
	}
	if n := len(o.Conflicts); n > 0 {
		s += fmt.Sprintf(", %d conflict(s)", n)
	}
	if n := len(o.Unindexable); n > 0 {
		s += fmt.Sprintf(", %d value(s) cannot be indexed", n)
	}
	return s
}
