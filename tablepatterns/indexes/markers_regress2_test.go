package indexes

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestPruneFoldResumesAfterTheValueItStopped (found in review): a prune stopped in
// its fold (its time budget spent) goes on, run again under the same id,
// with the values it has not folded yet: a value ahead of them that got a
// new marker meanwhile must not take every delivery's budget again, or
// the values after it are never folded (their markers, dead ones
// included, pile up and every lookup reads them).
func TestPruneFoldResumesAfterTheValueItStopped(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	ix := mustIndex(t, f.x, name)
	for i := range 4 {
		rk := fmt.Sprintf("%03d", i)
		f.put("Sales", rk, employee(fmt.Sprintf("Name%d", i), ""))
		f.reconcile("Sales", rk)
	}
	hot := Key{PK: "Sales", RK: "hot"}
	cp := idempotent.Checkpoints{Tables: f.store.Tables(), Table: "Checkpoints"}
	for round := range 8 {
		// A busy key moves in and out of Aaa, which sorts before the others:
		// a new marker (live, then dead) there between deliveries.
		f.put(hot.PK, hot.RK, employee([]string{"Aaa", "Zzz"}[round%2], ""))
		f.reconcile(hot.PK, hot.RK)
		var stopped *Stopped
		_, err := f.x.Prune(f.ctx, employees, cp, "p", RebuildOptions{Stop: func() bool { return true }})
		if err == nil {
			break // done: every value folded
		}
		if !errors.As(err, &stopped) {
			t.Fatalf("delivery %d: %v, want stopped or done", round+1, err)
		}
	}
	for i := range 4 {
		enc, _ := EncodeValue(fmt.Sprintf("Name%d", i))
		n := 0
		err := queryAll(f.ctx, f.raw.Tables(), ix.table, storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(tableListPartition(ix, enc)), unfolded())}, func(storeadapter.Entity) error {
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Errorf("Name%d: %d markers not folded after the prune's deliveries, each stopped after its first value", i, n)
		}
	}
	f.assertTruth()
}

// shortPages is a store whose queries return pages of at most two
// entities, with a continuation token: what storeadapter.Tables.Query
// allows (a page may hold fewer entities than asked, even none, while a
// token is still returned), and Azure does for a query that runs out of
// its five seconds.
type shortPages struct{ storeadapter.Tables }

func (s shortPages) Query(ctx context.Context, table string, q storeadapter.Query) (storeadapter.Page, error) {
	if q.Top == 0 || q.Top > 2 {
		q.Top = 2
	}
	return s.Tables.Query(ctx, table, q)
}

// TestFoldFollowsContinuations (found in review): the fold of a value reads its
// markers not folded until the query's token is empty, not until a page
// comes back short: a short page with a token (which the store may
// return at any time) must not end the fold, or the value's other
// markers wait for the next prune, and with them its dead markers'
// deletes.
func TestFoldFollowsContinuations(t *testing.T) {
	const name = "lastNameAll"
	f := newFixture(t, only(name))
	for i := range 5 {
		rk := fmt.Sprintf("%03d", i)
		f.put("Sales", rk, employee("Jones", ""))
		f.reconcile("Sales", rk)
	}
	f.x.tables = shortPages{f.x.tables}
	if res := f.prune(); res.Folded != 5 {
		t.Errorf("the prune folded %d markers, want the 5 of Jones", res.Folded)
	}
	f.assertTruth()
}
