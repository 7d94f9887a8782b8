package index

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// Kind is the envelope kind of index jobs.
const Kind = "index"

// Args are the arguments of an index job (docs/index.md documents them):
// {"table","pk","rk"} reconciles one entity's indexes; {"table",
// "rebuild":true} rebuilds every index of the table, and with "pk" only
// that partition's entities; {"table","prune":true} folds the table's
// table lists' markers into their lines and deletes the expired dead rows
// of its rows indexes and dead markers of its table lists
// (indexes.Set.Prune).
type Args struct {
	Table   string  `json:"table"`
	PK      *string `json:"pk,omitempty"`
	RK      *string `json:"rk,omitempty"`
	Rebuild bool    `json:"rebuild,omitempty"`
	Prune   bool    `json:"prune,omitempty"`
}

// Kind returns "index".
func (Args) Kind() string { return Kind }

// Reconcile returns the args of the job that brings every index of table
// up to date with entity (pk, rk) as it is now: the job an application
// sends after each write of an indexed entity.
func Reconcile(table, pk, rk string) Args { return Args{Table: table, PK: &pk, RK: &rk} }

// Rebuild returns the args of the job that rebuilds every index of table.
func Rebuild(table string) Args { return Args{Table: table, Rebuild: true} }

// Prune returns the args of the job that folds table's table lists and
// deletes the expired dead rows of its rows indexes and table lists.
func Prune(table string) Args { return Args{Table: table, Prune: true} }

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
	if a.Prune {
		switch {
		case a.Rebuild:
			return errors.New(`args.prune: a prune is a job of its own; send "rebuild" or "prune", not both`)
		case a.PK != nil || a.RK != nil:
			return errors.New("args.pk: a prune covers the whole table; remove pk and rk")
		}
		return nil
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
	if storeadapter.IsReserved(*a.RK) {
		return fmt.Errorf("args.rk: must not start with %q, which is reserved for tablekeeper's own rows", storeadapter.ReservedPrefix)
	}
	return nil
}

// Worker runs index jobs: it is the handler of the "index" kind. A
// reconcile message runs indexes.Set.Reconcile for its entity (that method's
// doc comment gives the steps and why every crash position and every
// interleaving of workers converges); a rebuild message runs
// indexes.Set.Rebuild for its table or partition, and a prune message
// indexes.Set.Prune for its table, checkpointed under the operation id.
//
// A copy whose value another entity holds is never overwritten: the
// reconcile finishes the other indexes and fails with indexes.ErrConflict
// (retried, and reported in the failure record and by Check). A value
// that cannot be indexed (too long for a key, or partition copies that
// together exceed one transaction) is removed from that index and the job
// fails permanently, naming it.
type Worker struct {
	kit.Base
	cfg indexes.Config
}

// New returns the worker of the "index" kind: it keeps the indexes of
// d.Indexes, opened by the catalog from cfg (the "index" section), whose
// checkpoint table and maximum run time it uses.
func New(d kit.Deps, cfg indexes.Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Indexes == nil {
		return nil, errors.New("index: no index set: open cfg with indexes.Open and pass it in kit.Deps.Indexes")
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work runs one index job.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	if !w.Indexes.Declared(a.Table) {
		return jobs.Permanentf("args.table: %s has no index declared in this worker's config (declared: %v)", a.Table, w.Indexes.Tables())
	}
	if a.Rebuild || a.Prune {
		return w.rebuild(ctx, job)
	}
	out, err := w.Indexes.Reconcile(ctx, a.Table, *a.PK, *a.RK)
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

// redeliveryBudget is the time budget of a rebuild's delivery whose
// message was delivered before: its worker died, so it hands on to a
// fresh message as soon as it has saved some progress, and a rebuild on
// crash-prone workers never spends its deliveries.
const redeliveryBudget = time.Second

// rebuild runs a rebuild or a prune message: until done, or until the
// delivery's time budget is spent, when it continues later from its
// checkpoint.
func (w *Worker) rebuild(ctx context.Context, job *jobs.Job[Args]) error {
	budget := w.cfg.TimeBudget
	if job.Message.DequeueCount > 1 {
		budget = min(budget, jobs.Duration(redeliveryBudget))
	}
	b := w.Budget(budget)
	o := indexes.RebuildOptions{Stop: b.Spent, Parallel: w.cfg.RebuildParallel}
	var res indexes.RebuildResult
	var err error
	summary := indexes.RebuildResult.String
	if job.Args.Prune {
		res, err = w.Indexes.Prune(ctx, job.Args.Table, w.Checkpoints, job.ID, o)
		summary = func(r indexes.RebuildResult) string {
			return fmt.Sprintf("pruned: %d table list markers folded, %d expired dead rows deleted", r.Folded, r.Pruned)
		}
	} else {
		res, err = w.Indexes.Rebuild(ctx, job.Args.Table, job.Args.PK, w.Checkpoints, job.ID, o)
	}
	var stopped *indexes.Stopped
	if errors.As(err, &stopped) {
		return jobs.ContinueLater(0, summary(stopped.Result))
	}
	jobs.SetResult(ctx, summary(res))
	return err
}
