package indexes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// RebuildResult counts what a rebuild did.
type RebuildResult struct {
	// Entities is how many entities were reconciled.
	Entities int
	// Swept is how many entities were removed from entries they no
	// longer belong in: deleted entities still indexed, and entries the
	// sweep found stale.
	Swept int
	// Pruned is how many expired tombstone rows were deleted.
	Pruned int
	// Conflicts and Unindexable count entities that are not in an index
	// for those reasons (see Outcome).
	Conflicts, Unindexable int
}

// String summarises a rebuild for the job's result.
func (r RebuildResult) String() string {
	return fmt.Sprintf("rebuilt: %d entities reconciled, %d stale entries swept, %d tombstones pruned, %d conflicts, %d unindexable",
		r.Entities, r.Swept, r.Pruned, r.Conflicts, r.Unindexable)
}

// rebuildPage is the page size of a rebuild's scans.
const rebuildPage = 100

// retryTransient runs fn up to three times while it fails with a
// transient error, pausing 100 ms and then 400 ms: one failed call of a
// rebuild's thousands does not send it back to its last checkpoint.
func retryTransient(ctx context.Context, fn func() error) error {
	err := fn()
	for pause := 100 * time.Millisecond; err != nil && storeadapter.IsTransient(err) && pause <= 400*time.Millisecond; pause *= 4 {
		if serr := idempotent.Sleep(ctx, pause); serr != nil {
			return err
		}
		err = fn()
	}
	return err
}

// Checkpoint steps of a rebuild; their tokens are stored with this prefix
// so that a finished step ("done") is told from a page token.
const (
	stepScan      = "index-scan"
	stepSweep     = "index-sweep-"
	tokenPrefix   = "t:"
	tokenFinished = "done"
)

// Rebuild reconciles every entity of a source table (or of partition pk)
// with every index rewritten whatever the membership records say, then
// sweeps each index for entries whose entity is gone or no longer has the
// value, and prunes expired tombstones. It pages through the table and the
// indexes, saving its position after each page in cp under opID, so a
// rebuild that stops resumes there when run again with the same opID;
// memory does not grow with the table.
func (x *Set) Rebuild(ctx context.Context, table string, pk *string, cp idempotent.Checkpoints, opID string) (RebuildResult, error) {
	ti, err := x.indexes(table)
	if err != nil {
		return RebuildResult{}, err
	}
	return x.rebuild(ctx, ti, pk, cp, opID)
}

func (x *Set) rebuild(ctx context.Context, ti *tableIndexes, pk *string, cp idempotent.Checkpoints, opID string) (RebuildResult, error) {
	var res RebuildResult
	count := func(out Outcome, err error) error {
		switch {
		case errors.Is(err, storeadapter.ErrInvalidInput):
			return nil // a key the kind does not index
		case errors.Is(err, storeadapter.ErrTooLarge): // a list at its limit
			res.Unindexable++
			return nil
		}
		res.Conflicts += min(len(out.Conflicts), 1)
		res.Unindexable += min(len(out.Unindexable), 1)
		return err
	}
	// Pages of 100: a rebuild saves its position after each, so a
	// failure costs at most 100 entities' work again.
	q := storeadapter.Query{Top: rebuildPage}
	if pk != nil {
		q.Filter = storeadapter.PartitionEquals(*pk)
	}
	err := x.resume(ctx, cp, opID, stepScan, func(token string, save func(string) error) error {
		q.Continuation = token
		for {
			page, err := x.tables.Query(ctx, ti.source, q)
			if idempotent.Missing(err) {
				return save("")
			}
			if err != nil {
				return err
			}
			for _, e := range page.Entities {
				rk, force, ok := rebuildTarget(ti, e)
				if !ok {
					continue
				}
				if force {
					res.Entities++
				}
				var out Outcome
				err := retryTransient(ctx, func() (err error) {
					out, err = x.reconcile(ctx, ti, e.PartitionKey, rk, force, nil)
					return err
				})
				if !force && out.Changed { // a deleted entity's entries went
					res.Swept++
				}
				if err := count(out, err); err != nil {
					return err
				}
				if !force {
					if err := x.dropMembership(ctx, ti, e.PartitionKey, rk); err != nil {
						return err
					}
				}
			}
			if err := save(page.Next); err != nil || page.Next == "" {
				return err
			}
			q.Continuation = page.Next
		}
	})
	if err != nil {
		return res, err
	}
	for _, ix := range ti.indexes {
		err := x.resume(ctx, cp, opID, stepSweep+ix.Name, func(token string, save func(string) error) error {
			return x.scanEntries(ctx, ix, pk, token, func(en Entry) error {
				if pk != nil && en.PK != *pk {
					return nil
				}
				if en.Dead {
					pruned, err := x.prune(ctx, ix, en)
					res.Pruned += pruned
					return err
				}
				e, err := getOptional(ctx, x.tables, ti.source, en.PK, en.RK)
				if err != nil {
					return err
				}
				if stateValue(wantOf(ix, e).state) == en.Encoded {
					return nil
				}
				res.Swept++
				var out Outcome
				err = retryTransient(ctx, func() (err error) {
					out, err = x.reconcile(ctx, ti, en.PK, en.RK, false, map[string][]string{ix.Name: {en.Encoded}})
					return err
				})
				return count(out, err)
			}, save)
		})
		if err != nil {
			return res, err
		}
	}
	for _, step := range append([]string{stepScan}, sweepSteps(ti)...) {
		if err := cp.Clear(ctx, opID, step); err != nil {
			return res, err
		}
	}
	return res, nil
}

func sweepSteps(ti *tableIndexes) []string {
	var out []string
	for _, ix := range ti.indexes {
		out = append(out, stepSweep+ix.Name)
	}
	return out
}

// rebuildTarget says what a row of the source table means to a rebuild:
// an entity to reconcile with force, the membership record of an entity
// (reconciled without force, which removes a deleted entity from its
// indexes), or nothing (the index kind's other rows, a table copy's
// partitions).
func rebuildTarget(ti *tableIndexes, e storeadapter.Entity) (rk string, force, ok bool) {
	switch {
	case strings.HasPrefix(e.RowKey, memberPrefix):
		return strings.TrimPrefix(e.RowKey, memberPrefix), false, true
	case strings.HasPrefix(e.RowKey, memberHashPrefix):
		rk, ok := e.Properties["Key"].(string)
		return rk, false, ok
	case storeadapter.IsReserved(e.RowKey):
		return "", false, false
	}
	return e.RowKey, true, true
}

// resume runs one checkpointed step: run gets the saved token ("" at the
// start) and a save function to call after each page with the next
// token ("" at the end). A finished step is skipped.
func (x *Set) resume(ctx context.Context, cp idempotent.Checkpoints, opID, step string, run func(token string, save func(string) error) error) error {
	saved, err := cp.Load(ctx, opID, step)
	if err != nil || saved == tokenFinished {
		return err
	}
	return run(strings.TrimPrefix(saved, tokenPrefix), func(next string) error {
		if next == "" {
			return cp.Save(ctx, opID, step, tokenFinished)
		}
		return cp.Save(ctx, opID, step, tokenPrefix+next)
	})
}

// prune deletes an expired tombstone of a rows index (If-Match, so a
// concurrent write wins); the other stores prune tombstones when they
// next write the entry.
func (x *Set) prune(ctx context.Context, ix *index, en Entry) (int, error) {
	if ix.Kind != KindRows || en.Gen >= x.graceCut() {
		return 0, nil
	}
	e, err := getOptional(ctx, x.tables, ix.table, en.Encoded, memberKey(en.PK, en.RK))
	if err != nil || e == nil {
		return 0, err
	}
	if dead, _ := e.Properties[propDead].(bool); !dead || e.Properties[propGen] != en.Gen {
		return 0, nil
	}
	if err := x.tables.DeleteEntity(ctx, ix.table, e.PartitionKey, e.RowKey, e.ETag); err != nil && !idempotent.Lost(err) {
		return 0, err
	}
	return 1, nil
}

// dropMembership deletes the membership record of a deleted entity once
// nothing is indexed or pending for it and its generation is older than
// the tombstone grace period: by then no tombstone can outrank the
// generation a re-created entity starts with (the clock), so the record
// is no longer needed. It is If-Match, so a concurrent reconcile wins.
func (x *Set) dropMembership(ctx context.Context, ti *tableIndexes, pk, rk string) error {
	e, rec, err := x.readEntity(ctx, ti.source, pk, rk)
	if err != nil || e != nil || rec == nil {
		return err
	}
	if m := readMembership(rec); len(m.applied) > 0 || len(m.pending) > 0 || m.gen >= x.graceCut() {
		return nil
	}
	if err := x.tables.DeleteEntity(ctx, ti.source, pk, rec.RowKey, rec.ETag); err != nil && !idempotent.Lost(err) {
		return err
	}
	return nil
}
