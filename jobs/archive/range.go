package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// checkpointStep names the range checkpoint of an operation.
const checkpointStep = "archive"

// rangeMove moves a RowKey range page by page, resuming from a checkpoint.
func (m *mover) rangeMove(ctx context.Context, opID string) error {
	t := m.w.Store.Tables()
	tok, err := m.w.Checkpoints.Load(ctx, opID, checkpointStep)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	from, to := m.args.rowRange()
	q := storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.RowRange(m.pk, from, to))}
	var unsettled []string
	for {
		q.Continuation = tok
		page, err := t.Query(ctx, m.args.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return jobs.Permanentf("archive: source table %s does not exist", m.args.Table)
		}
		if err != nil {
			return fmt.Errorf("archive: query %s: %w", m.args.Table, err)
		}
		u, err := m.movePage(ctx, page.Entities)
		if err != nil {
			return err
		}
		unsettled = append(unsettled, u...)
		if page.Next == "" {
			break
		}
		tok = page.Next
		if len(unsettled) > 0 {
			continue // a checkpoint past a row left behind would skip it
		}
		if err := m.w.Checkpoints.Save(ctx, opID, checkpointStep, tok); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
	if len(unsettled) > 0 {
		return fmt.Errorf("archive: %s partition %q: every other row of the range moved, but %d %w: %s",
			m.args.Table, m.pk, len(unsettled), errKeptChanging, quoteKeys(unsettled, 10))
	}
	if err := m.syncRange(ctx); err != nil {
		return err
	}
	return m.w.Checkpoints.Clear(ctx, opID, checkpointStep)
}

// syncRange brings the indexes of the whole range up to date in the
// source and a table target, before the move ends: rows an earlier,
// crashed delivery moved after the pages it saved were never synced by
// the batches (their sources are gone, so no page holds them again), but
// their membership records are in the range.
func (m *mover) syncRange(ctx context.Context) error {
	from, to := m.args.rowRange()
	if err := m.sync(ctx, m.args.Table, indexes.Partition(m.pk, from, to)); err != nil {
		return err
	}
	return m.sync(ctx, m.args.To, indexes.Partition(m.pk, from, to))
}

// quoteKeys lists up to max keys, quoted, and how many more there are.
func quoteKeys(keys []string, max int) string {
	var b strings.Builder
	for i, k := range keys {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(keys)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "RowKey %q", k)
	}
	return b.String()
}

// movePage moves one page of source entities in transactions of at most
// 100 (one partition: the range lies in one). It returns the RowKeys of
// rows that kept changing and were left in the source.
func (m *mover) movePage(ctx context.Context, entities []storeadapter.Entity) (unsettled []string, err error) {
	ops := make([]storeadapter.TableOp, len(entities))
	for i, e := range entities {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e} // sized as written
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var es []storeadapter.Entity    // Batches keeps one partition's order
		var later []storeadapter.Entity // rows whose blob an offload replaced since the page was read: moved one by one
		for _, e := range entities[:len(batch)] {
			v, err := m.prepare(ctx, e)
			if errors.Is(err, errOffloadChanged) {
				cur, err := m.offloadChanged(ctx, e, err)
				if err != nil {
					return nil, err
				}
				if cur != nil { // else the application deleted it: nothing to move
					later = append(later, *cur)
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			es = append(es, v)
		}
		entities = entities[len(batch):]
		for _, e := range later {
			switch err := m.one(ctx, e.RowKey, &e); {
			case errors.Is(err, errKeptChanging):
				unsettled = append(unsettled, e.RowKey)
			case err != nil:
				return nil, err
			}
		}
		if len(es) == 0 {
			continue
		}
		out, err := m.target.write(ctx, es, m.sources)
		if err != nil {
			return nil, fmt.Errorf("archive: write %d entities to %s: %w", len(es), m.target, err)
		}
		if err := m.sync(ctx, m.args.To, batchSpan(es)); err != nil { // the copies are indexed before the sources go
			return nil, err
		}
		var written, changed []storeadapter.Entity
		for i, o := range out {
			switch o.fate {
			case copied:
				written = append(written, es[i])
			case superseded:
				changed = append(changed, o.next)
			case contested:
				unsettled = append(unsettled, es[i].RowKey)
			}
		}
		updated, err := m.deleteMoved(ctx, written)
		if err != nil {
			return nil, fmt.Errorf("archive: delete %d moved entities from %s: %w", len(written), m.args.Table, err)
		}
		if err := m.sync(ctx, m.args.Table, batchSpan(es)); err != nil {
			return nil, err
		}
		for _, e := range append(changed, updated...) {
			err := m.one(ctx, e.RowKey, &e)
			switch {
			case errors.Is(err, errKeptChanging):
				unsettled = append(unsettled, e.RowKey)
			case err != nil && !jobs.IsPermanent(err):
				return nil, err
			}
		}
	}
	return unsettled, nil
}
