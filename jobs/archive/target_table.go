package archive

import (
	"context"
	"errors"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// archiveTarget is where moved entities go.
type archiveTarget interface {
	// write makes the copies of source versions of one partition (at most
	// 100) hold their content, fenced as the Worker describes (step 2),
	// reading the source with src when a copy holds other content. It
	// returns each version's placement, in the order of es.
	write(ctx context.Context, es []storeadapter.Entity, src sourceReader) ([]placement, error)
	// has reports whether the target holds the entity.
	has(ctx context.Context, pk, rk string) (bool, error)
	String() string
}

type tableTarget struct {
	t      storeadapter.Tables
	table  string
	rounds int
}

func (tt tableTarget) String() string { return "table " + tt.table }

// write inserts the copies in one transaction (creating the table on first
// use). When some exist, or a write lost a race, it reads the copies of the
// rows still pending with one query and, when some hold other content, the
// sources of those with one more; then it writes in one transaction the
// missing copies (insert) and, If-Match each copy's ETag, the copies that
// hold their row's content and the confirmed ones, until that transaction
// succeeds or is empty.
func (tt tableTarget) write(ctx context.Context, es []storeadapter.Entity, src sourceReader) ([]placement, error) {
	out := make([]placement, len(es))
	ops := make([]storeadapter.TableOp, len(es))
	pending := make([]int, len(es)) // the index in es of each op
	for i, e := range es {
		ops[i], pending[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e}, i
	}
	err := idempotent.Transact(ctx, tt.t, tt.table, ops)
	for round := 0; raced(err); round++ {
		if round == tt.rounds {
			for _, i := range pending {
				out[i].fate = contested
			}
			return out, nil
		}
		copies, rerr := rowsOf(ctx, tt.t, tt.table, pick(es, pending))
		if rerr != nil {
			return nil, rerr
		}
		var next, differ []int
		ops = ops[:0]
		for _, i := range pending {
			switch c, ok := copies[es[i].RowKey]; {
			case !ok:
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: es[i]})
				next = append(next, i)
			case holds(c.Properties, es[i]):
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: es[i], IfMatch: c.ETag})
				next = append(next, i)
			default:
				differ = append(differ, i)
			}
		}
		if len(differ) > 0 {
			current, serr := src(ctx, pick(es, differ))
			if serr != nil {
				return nil, serr
			}
			for _, i := range differ {
				o, ok := confirm(es[i], current)
				if !ok {
					out[i] = o
					continue
				}
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: es[i], IfMatch: copies[es[i].RowKey].ETag})
				next = append(next, i)
			}
		}
		if len(ops) == 0 {
			return out, nil
		}
		pending = next
		err = tt.t.Transact(ctx, tt.table, ops)
	}
	return out, err
}

// pick returns the entities of es at the indexes idx.
func pick(es []storeadapter.Entity, idx []int) []storeadapter.Entity {
	out := make([]storeadapter.Entity, len(idx))
	for j, i := range idx {
		out[j] = es[i]
	}
	return out
}

func (tt tableTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := tt.t.GetEntity(ctx, tt.table, pk, rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
