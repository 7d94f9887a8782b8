package indexes

import (
	"context"
	"errors"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Prune deletes the expired dead rows of a source table's rows indexes:
// those made dead more than TombstoneGrace ago (tkGen, the generation of
// the write that made them dead, below the grace's cut), which no writer
// can insert live again (see rowEntity). A rows index leaves one such row
// per change of a key's value (a row per generation: see rowsState), and
// a lookup of a value reads past its dead rows; a whole-table rebuild
// ends with a prune too, but a rebuild rewrites every index. Prune reads
// only the dead rows (one filtered query, page by page, which Azure
// evaluates over the whole index table) and deletes them in transactions
// of up to 100 per value partition, each If-Match the row read: a row
// written since (dead again, later) is left for the next prune.
// Checkpointed like Rebuild, under opID: a prune that stops
// (RebuildOptions.Stop, a crash) goes on from the page it was at. It
// counts what it deleted in RebuildResult.Pruned.
//
// A table list (see markers) is folded first: its markers not folded are
// written into its lines (foldList), so that its lookups get a few lines
// back instead of a marker per member (Azure still scans the markers to
// filter them), and then its dead markers past the grace are deleted as a
// rows index's dead rows are, but only those folded: one that is not may
// still hide a line. The fold is the only other thing Prune writes (the
// lines, and the markers' tkFolded); its count is in
// RebuildResult.Folded.
func (x *Set) Prune(ctx context.Context, table string, cp idempotent.Checkpoints, opID string, o RebuildOptions) (RebuildResult, error) {
	return x.runRebuild(ctx, table, nil, cp, opID, o, phasePrune)
}

// prune is a prune's one phase: each rows index and table list in turn,
// from the page the checkpoint names.
func (r *rebuild) prune(ctx context.Context) error {
	cut := r.x.graceCut()
	from := -1 // the index the checkpoint is at
	for i, ix := range r.ti.indexes {
		if ix.Name == r.st.Index {
			from = i
		}
	}
	if from < 0 { // none yet, or one no longer declared: its page names no other's
		from, r.st.Token = 0, ""
	}
	for i := from; i < len(r.ti.indexes); i++ {
		ix := r.ti.indexes[i]
		if ix.Name != r.st.Index {
			r.st.Fold, r.st.FoldDone = "", false
		}
		r.st.Index = ix.Name
		if !ix.rowsKeyed() {
			continue
		}
		q := storeadapter.Query{Filter: storeadapter.And(storeadapter.Compare(propDead, storeadapter.Eq, true), storeadapter.Compare(propGen, storeadapter.Lt, cut))}
		if ix.Kind == KindList {
			if r.st.Token == "" && !r.st.FoldDone { // not yet at the deletes
				if err := r.fold(ctx, ix); err != nil {
					return err
				}
				r.st.Fold, r.st.FoldDone = "", true
			}
			// Only folded markers: an expired dead marker not folded
			// may still hide a line (see markers).
			q.Filter = storeadapter.And(storeadapter.KeyPrefix("PartitionKey", ix.Name+"_"), q.Filter, storeadapter.Compare(propFolded, storeadapter.Eq, true))
		}
		err := paginate(r.st.Token, func(token string) (string, error) {
			q.Continuation = token
			p, err := r.x.tables.Query(ctx, ix.table, q)
			if err != nil {
				return "", err
			}
			n, err := idempotent.DeleteRead(ctx, r.x.tables, ix.table, p.Entities)
			r.st.Res.Pruned += n
			return p.Next, err
		}, func(next string) error {
			if r.st.Token = next; next == "" {
				return nil
			}
			if err := r.save(ctx); err != nil {
				return err
			}
			if r.stop() {
				return r.stopped(ctx)
			}
			return nil
		})
		if err != nil && !idempotent.Missing(err) { // an index never written has nothing to prune
			return err
		}
		r.st.Token = ""
	}
	r.st.Phase, r.st.Index = phaseDone, ""
	return nil
}

// fold folds the markers of every value of the table list ix (see
// foldList): one query of its markers not folded, page by page, from the
// value after the checkpoint's (Fold), and each value met folded in turn.
// Asked to stop (RebuildOptions.Stop), it saves the checkpoint after the
// value it folded, or within one (foldList stops after a transaction:
// that value is folded again, its markers folded so far left out by the
// query), and stops; every delivery folds one transaction at least.
func (r *rebuild) fold(ctx context.Context, ix *index) error {
	f := storeadapter.And(storeadapter.KeyPrefix("PartitionKey", ix.Name+"_"), unfolded())
	if r.st.Fold != "" {
		f = storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Gt, r.st.Fold), f)
	}
	last := ""
	err := queryAll(ctx, r.x.tables, ix.table, storeadapter.Query{Filter: f, Select: []string{propFolded}}, func(e storeadapter.Entity) error {
		if e.PartitionKey == last {
			return nil
		}
		last = e.PartitionKey
		n, err := r.x.foldList(ctx, ix, strings.TrimPrefix(e.PartitionKey, ix.Name+"_"), r.stop)
		r.st.Res.Folded += n
		switch {
		case errors.Is(err, errFoldStopped):
			return r.stopped(ctx)
		case err != nil:
			return err
		}
		r.st.Fold = e.PartitionKey
		if r.stop() {
			return r.stopped(ctx)
		}
		return nil
	})
	if idempotent.Missing(err) {
		return nil
	}
	return err
}
