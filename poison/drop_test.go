package poison

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// drop returns the drop of operation op of kind, dropped now.
func (b *bundle) drop(op, kind string) Drop {
	return Drop{OpID: op, Kind: kind, MessageID: "m-" + op, Table: "Employees", PK: "Sales", RK: "~tk.o." + op,
		Window: 30 * time.Second, Since: b.clock.Now().Add(-time.Minute), Time: b.clock.Now(), Host: "worker-1"}
}

// countDrops counts the drop records without a limit.
func (b *bundle) countDrops(t *testing.T) int {
	t.Helper()
	n, more, err := b.m.CountDrops(b.ctx, 0)
	if err != nil || more {
		t.Fatalf("CountDrops = %d, %v, %v", n, more, err)
	}
	return n
}

// TestRecordDroppedIsIdempotent: a drop is one row per operation, however
// often it is recorded, with what the runner knew; the table is created
// on first use.
func TestRecordDroppedIsIdempotent(t *testing.T) {
	b := setup(t)
	if n := b.countDrops(t); n != 0 {
		t.Fatalf("%d drops before any, without a table", n)
	}
	d := b.drop("op-1", "index")
	for range 2 {
		if err := b.m.RecordDropped(b.ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.m.RecordDropped(b.ctx, b.drop("op-2", "archive")); err != nil {
		t.Fatal(err)
	}
	if n := b.countDrops(t); n != 2 {
		t.Errorf("%d drop records, want 2 (one per operation)", n)
	}
	e, err := b.store.Tables().GetEntity(b.ctx, TableName(sourceName), "~tk.dropped."+sourceName, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	p := e.Properties
	if p[dropKind] != "index" || p[dropMessageID] != "m-op-1" || p[dropTable] != "Employees" || p[dropPK] != "Sales" || p[dropRK] != "~tk.o.op-1" ||
		p[dropWindow] != int64(30) || p[dropHost] != "worker-1" || !p[dropTime].(time.Time).Equal(t0) || !p[dropSince].(time.Time).Equal(t0.Add(-time.Minute)) {
		t.Errorf("drop record %v", p)
	}
	if _, ok := p[propQueue]; ok {
		t.Errorf("a drop record has a %s property: the records' queries would select it", propQueue)
	}
	if err := b.m.RecordDropped(b.ctx, Drop{OpID: "a/b"}); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("RecordDropped of a bad op id = %v, want ErrInvalidInput", err)
	}
}

// TestCountDropsStopsAtItsLimit: with a limit, CountDrops reads pages until
// the count reaches it, and says whether more were left.
func TestCountDropsStopsAtItsLimit(t *testing.T) {
	b := setup(t)
	for i := range 1001 {
		if err := b.m.RecordDropped(b.ctx, b.drop(fmt.Sprintf("op-%04d", i), "index")); err != nil {
			t.Fatal(err)
		}
	}
	before := b.calls.Snapshot().Total().Calls
	for _, c := range []struct {
		limit, n int
		more     bool
		queries  int64
	}{{10, 1000, true, 1}, {1000, 1000, true, 1}, {1001, 1001, false, 2}, {0, 1001, false, 2}} {
		n, more, err := b.m.CountDrops(b.ctx, c.limit)
		if err != nil || n != c.n || more != c.more {
			t.Errorf("CountDrops(%d) = %d, %v, %v; want %d, %v", c.limit, n, more, err, c.n, c.more)
		}
		now := b.calls.Snapshot().Total().Calls
		if now-before != c.queries {
			t.Errorf("CountDrops(%d) made %d calls, want %d", c.limit, now-before, c.queries)
		}
		before = now
	}
	// Another queue of the same records table counts its own.
	other := newSplit(t, Config{Tables: b.store.Tables(), Source: b.store.Queue("workitems"), Poison: b.poison, Blobs: b.blobs, Table: TableName(sourceName)})
	if n, _, err := other.CountDrops(b.ctx, 0); err != nil || n != 0 {
		t.Errorf("CountDrops of queue workitems, which shares the table = %d, %v; want 0", n, err)
	}
}

// TestDropRecordsAreNoFailureRecords: list, show, requeue, delete and
// purge's failure records never see a drop record, even one whose RowKey
// is the records' own ("record", a valid operation id); purge removes drop
// records by age and kind, never with a group, and a dry run only counts
// them.
func TestDropRecordsAreNoFailureRecords(t *testing.T) {
	b := setup(t)
	msg := b.poisonNow(t, "cG9pc29u", "archive", "permanent: args.pk: is required")
	for _, op := range []string{"record", "op-old"} {
		if err := b.m.RecordDropped(b.ctx, b.drop(op, "archive")); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Advance(48 * time.Hour)
	if err := b.m.RecordDropped(b.ctx, b.drop("op-young", "index")); err != nil {
		t.Fatal(err)
	}

	recs, err := b.m.List(b.ctx, "")
	if err != nil || len(recs) != 1 || recs[0].MessageID != msg.ID {
		t.Errorf("List = %+v, %v; want only the poisoned record", recs, err)
	}
	for _, id := range []string{"~tk.dropped." + sourceName, "record", "op-old"} {
		if r, err := b.m.Show(b.ctx, id); !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("Show(%s) = %+v, %v; want ErrNotFound", id, r, err)
		}
		if err := b.m.Delete(b.ctx, id); !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("Delete(%s) = %v; want ErrNotFound", id, err)
		}
	}
	if got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true, DryRun: true}); err != nil || len(got) != 1 || got[0].MessageID != msg.ID {
		t.Errorf("Requeue -all -dry-run = %+v, %v; want the poisoned record alone", got, err)
	}
	if ops, err := b.m.PoisonedOps(b.ctx); err != nil || len(ops) != 1 || !ops[b.failure(msg, "", "").OpID] {
		t.Errorf("PoisonedOps = %v, %v; want the poisoned record's", ops, err)
	}

	for _, c := range []struct {
		o     PurgeOptions
		drops int
	}{
		{PurgeOptions{DryRun: true}, 3},
		{PurgeOptions{DryRun: true, Group: "archive/validation"}, 0},
		{PurgeOptions{DryRun: true, Kind: "index"}, 1},
		{PurgeOptions{DryRun: true, OlderThan: 24 * time.Hour}, 2},
	} {
		res, err := b.m.Purge(b.ctx, c.o)
		if err != nil || res.Drops != c.drops {
			t.Errorf("Purge(%+v) = %d drops, %v; want %d", c.o, res.Drops, err, c.drops)
		}
	}
	if n := b.countDrops(t); n != 3 {
		t.Fatalf("%d drop records after dry runs, want 3", n)
	}
	res, err := b.m.Purge(b.ctx, PurgeOptions{OlderThan: 24 * time.Hour})
	if err != nil || res.Drops != 2 || len(res.Records) != 1 {
		t.Fatalf("Purge(24h) = %d drops, %d records, %v; want 2 and 1", res.Drops, len(res.Records), err)
	}
	var left []string
	page, err := b.store.Tables().Query(b.ctx, TableName(sourceName), storeadapter.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Entities {
		left = append(left, e.PartitionKey+"/"+e.RowKey)
	}
	if want := []string{"~tk.dropped." + sourceName + "/op-young"}; !slices.Equal(left, want) {
		t.Errorf("records table after Purge(24h) holds %v, want %v", left, want)
	}
}
