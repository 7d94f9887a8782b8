package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// errKeptChanging marks an entity (or a target copy) that other writers
// changed in every round of a move: the move is retried later.
var errKeptChanging = errors.New("kept changing while being moved; retrying later")

// one moves one entity (steps 1–3), starting from the version e when it
// is known (nil: read it first).
func (m *mover) one(ctx context.Context, rk string, e *storeadapter.Entity) error {
	t := m.w.Store.Tables()
	for range m.rounds {
		if e == nil {
			got, err := t.GetEntity(ctx, m.args.Table, m.pk, rk)
			if errors.Is(err, storeadapter.ErrNotFound) {
				moved, err := m.target.has(ctx, m.pk, rk)
				switch {
				case err != nil:
					return fmt.Errorf("archive: check target for %s/%s: %w", m.pk, rk, err)
				case moved: // done before: its indexes may not be
					return m.afterMove(ctx, rk)
				}
				return jobs.Permanentf("archive: %s %s/%s does not exist and %s holds no copy", m.args.Table, m.pk, rk, m.target)
			}
			if err != nil {
				return fmt.Errorf("archive: read %s %s/%s: %w", m.args.Table, m.pk, rk, err)
			}
			e = &got
		}
		v, err := m.prepare(ctx, *e)
		if errors.Is(err, errOffloadChanged) {
			cur, err := m.offloadChanged(ctx, *e, err)
			if err != nil {
				return err
			}
			e = cur // an offload replaced the blob: move the new version (nil: gone, read again)
			continue
		}
		if err != nil {
			return err
		}
		out, err := m.target.write(ctx, []storeadapter.Entity{v}, m.sources)
		if err != nil {
			return fmt.Errorf("archive: write %s/%s to %s: %w", m.pk, rk, m.target, err)
		}
		switch out[0].fate {
		case gone:
			return m.afterMove(ctx, rk)
		case contested:
			return fmt.Errorf("archive: the copy of %s/%s at %s %w", m.pk, rk, m.target, errKeptChanging)
		case superseded:
			e = &out[0].next
			continue
		}
		if m.args.To != "" {
			if err := m.reconcile(ctx, m.args.To, rk); err != nil { // the copy is indexed before the source goes
				return err
			}
		}
		err = idempotent.DeleteIfMatch(ctx, t, m.args.Table, m.pk, rk, e.ETag)
		if !errors.Is(err, storeadapter.ErrPreconditionFailed) {
			if err != nil {
				return fmt.Errorf("archive: delete %s %s/%s: %w", m.args.Table, m.pk, rk, err)
			}
			m.moved++
			return m.reconcile(ctx, m.args.Table, rk)
		}
		e = nil // the source changed since it was read: move the new version
	}
	return fmt.Errorf("archive: %s %s/%s %w", m.args.Table, m.pk, rk, errKeptChanging)
}

// sources reads the current versions of source entities of one partition
// (see rowsOf).
func (m *mover) sources(ctx context.Context, es []storeadapter.Entity) (map[string]storeadapter.Entity, error) {
	return rowsOf(ctx, m.w.Store.Tables(), m.args.Table, es)
}

// deleteMoved deletes moved entities from the source, each with the ETag
// it was read with, in transactions. When rows changed or vanished since
// they were read (the transaction rolled back), one query reads the rows'
// current versions: a vanished row was moved by another mover, a changed
// row's new version is returned to be moved on its own, and the unchanged
// rows are deleted in a new transaction. Each round drops at least the row
// that failed, so it ends.
func (m *mover) deleteMoved(ctx context.Context, es []storeadapter.Entity) (changed []storeadapter.Entity, err error) {
	t := m.w.Store.Tables()
	for len(es) > 0 {
		deletes := make([]storeadapter.TableOp, len(es))
		for i, e := range es {
			deletes[i] = storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: e, IfMatch: e.ETag}
		}
		txErr := t.Transact(ctx, m.args.Table, deletes)
		if !raced(txErr) {
			if txErr == nil {
				m.moved += len(es)
			}
			return changed, txErr
		}
		current, err := rowsOf(ctx, t, m.args.Table, es)
		if err != nil {
			return changed, err
		}
		var kept []storeadapter.Entity
		for _, e := range es {
			switch cur, ok := current[e.RowKey]; {
			case !ok: // moved by another mover
			case cur.ETag != e.ETag:
				changed = append(changed, cur)
			default:
				kept = append(kept, e)
			}
		}
		if len(kept) == len(es) {
			return changed, txErr // a conflict the read does not show: retry the job later
		}
		es = kept
	}
	return changed, nil
}

// raced reports whether a conditional write lost to another writer: the
// entity or blob existed, changed or vanished since it was read (not its
// table or container).
func raced(err error) bool {
	return errors.Is(err, storeadapter.ErrAlreadyExists) || errors.Is(err, storeadapter.ErrPreconditionFailed) ||
		errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err)
}

// rowsOf reads, with one query (paged), the entities of a table whose keys
// lie in the span of es's RowKeys (one partition), by RowKey.
func rowsOf(ctx context.Context, t storeadapter.Tables, table string, es []storeadapter.Entity) (map[string]storeadapter.Entity, error) {
	lo, hi := es[0].RowKey, es[0].RowKey
	for _, e := range es[1:] {
		if storeadapter.LessUTF16(e.RowKey, lo) {
			lo = e.RowKey
		}
		if storeadapter.LessUTF16(hi, e.RowKey) {
			hi = e.RowKey
		}
	}
	q := storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(es[0].PartitionKey),
		storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi))}
	rows := make(map[string]storeadapter.Entity, len(es))
	for {
		page, err := t.Query(ctx, table, q)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		for _, e := range page.Entities {
			rows[e.RowKey] = e
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return rows, nil
		}
	}
}

// holds reports whether a copy's properties are exactly those of the
// source version e: the same names, EDM types and values.
func holds(props map[string]any, e storeadapter.Entity) bool {
	if len(props) != len(e.Properties) {
		return false
	}
	for name, v := range e.Properties {
		if c, ok := props[name]; !ok || !storeadapter.Equal(v, c) {
			return false
		}
	}
	return true
}

// fate is what writing the copy of one source version came to.
type fate uint8

const (
	// copied: the copy holds the version's content, written by this mover
	// after it read the version; delete the source with If-Match.
	copied fate = iota
	// superseded: the copy held other content and the source holds another
	// version now (placement.next); move that one.
	superseded
	// gone: the copy held other content and the source is gone; the copy
	// stays as it is and nothing is left to do.
	gone
	// contested: other movers changed the copy in every round.
	contested
)

// placement is the fate of one source version's copy.
type placement struct {
	fate fate
	next storeadapter.Entity // the source's current version when superseded
}

// confirm decides, by the source's current versions, what happens to a
// version e whose copy holds other content: ok when the source still has
// e's ETag (replace the copy), else its placement.
func confirm(e storeadapter.Entity, current map[string]storeadapter.Entity) (o placement, ok bool) {
	cur, found := current[e.RowKey]
	switch {
	case !found:
		return placement{fate: gone}, false
	case cur.ETag != e.ETag:
		return placement{fate: superseded, next: cur}, false
	}
	return placement{}, true
}

// sourceReader reads the current versions of source entities by RowKey
// (missing: gone).
type sourceReader func(ctx context.Context, es []storeadapter.Entity) (map[string]storeadapter.Entity, error)
