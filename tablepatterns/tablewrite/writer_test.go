package tablewrite_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// recorder wraps Tables and records every transaction's operations; a
// hold, when set, is called inside Transact while it counts as in flight.
type recorder struct {
	storeadapter.Tables
	mu       sync.Mutex
	batches  [][]storeadapter.TableOp
	inFlight int
	maxIn    int
	hold     func(ops []storeadapter.TableOp) error
}

func (r *recorder) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	r.mu.Lock()
	r.batches = append(r.batches, ops)
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	hold := r.hold
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	if hold != nil {
		if err := hold(ops); err != nil {
			return err
		}
	}
	return r.Tables.Transact(ctx, table, ops)
}

func (r *recorder) snapshot() (batches [][]storeadapter.TableOp, inFlight, maxIn int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]storeadapter.TableOp(nil), r.batches...), r.inFlight, r.maxIn
}

func newStore(t *testing.T, tables ...string) *recorder {
	t.Helper()
	s := localstore.New(localstore.Options{})
	for _, name := range tables {
		if err := s.Tables().CreateTable(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	return &recorder{Tables: s.Tables()}
}

// entities returns n rows in each of parts partitions, in key order, with
// every EDM type.
func entities(parts, n int) []storeadapter.Entity {
	var out []storeadapter.Entity
	for p := range parts {
		for i := range n {
			out = append(out, storeadapter.Entity{
				PartitionKey: fmt.Sprintf("p%03d", p),
				RowKey:       fmt.Sprintf("r%05d", i),
				Properties: map[string]any{
					"S": fmt.Sprintf("row %d of %d", i, p), "B": i%2 == 0, "I32": int32(i), "I64": int64(math.MaxInt64 - i),
					"F": float64(i) / 3, "T": time.Date(2026, 1, 2, 3, 4, 5, 100*i, time.UTC),
					"G": storeadapter.GUID{byte(p), byte(i)}, "Bin": []byte{0, byte(i), 0xff},
				},
				ETag:      `W/"datetime'2026-01-01T00%3A00%3A00Z'"`,
				Timestamp: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
			})
		}
	}
	return out
}

func readAll(t *testing.T, tables storeadapter.Tables, table string) []storeadapter.Entity {
	t.Helper()
	var out []storeadapter.Entity
	q := storeadapter.Query{}
	for {
		page, err := tables.Query(context.Background(), table, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Entities...)
		if page.Next == "" {
			return out
		}
		q.Continuation = page.Next
	}
}

// sameRows fails unless got holds exactly want's keys and properties.
func sameRows(t *testing.T, got, want []storeadapter.Entity) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("table holds %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PartitionKey != w.PartitionKey || g.RowKey != w.RowKey || !reflect.DeepEqual(g.Properties, w.Properties) {
			t.Fatalf("row %d: got %s/%s %v, want %s/%s %v", i, g.PartitionKey, g.RowKey, g.Properties, w.PartitionKey, w.RowKey, w.Properties)
		}
	}
}

func write(t *testing.T, o tablewrite.Options, es []storeadapter.Entity) *tablewrite.Writer {
	t.Helper()
	w, err := tablewrite.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range es {
		if err := w.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWritesEveryRowInBatchesOfOnePartition(t *testing.T) {
	r := newStore(t, "Target")
	es := entities(5, 250)
	w := write(t, tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Insert}, es)
	sameRows(t, readAll(t, r.Tables, "Target"), es)
	batches, _, _ := r.snapshot()
	// 250 rows a partition: 100, 100, 50, five times.
	if len(batches) != 15 {
		t.Fatalf("%d transactions, want 15", len(batches))
	}
	perPartition := map[string][]int{}
	for _, b := range batches {
		pk := b[0].Entity.PartitionKey
		for _, op := range b {
			if op.Entity.PartitionKey != pk || op.Action != storeadapter.TxInsert || op.Entity.ETag != "" || !op.Entity.Timestamp.IsZero() {
				t.Fatalf("batch of %s holds %+v", pk, op)
			}
		}
		perPartition[pk] = append(perPartition[pk], len(b))
	}
	for pk, sizes := range perPartition {
		if !reflect.DeepEqual(sizes, []int{100, 100, 50}) {
			t.Errorf("partition %s sent batches of %v, want [100 100 50] in order", pk, sizes)
		}
	}
	if c := w.Counts(); c != (tablewrite.Counts{Written: 1250, Transactions: 15}) {
		t.Errorf("counts %+v", c)
	}
}

func TestCutsBatchesBefore4MiB(t *testing.T) {
	r := newStore(t, "Target")
	var es []storeadapter.Entity
	for i := range 150 {
		// About 84 KiB each on the wire: 48 fit in 4 MiB, not 100.
		es = append(es, storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%04d", i), Properties: map[string]any{
			"A": make([]byte, 60000), "S": strings.Repeat("x", 1000+i),
		}})
	}
	write(t, tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Replace}, es)
	sameRows(t, readAll(t, r.Tables, "Target"), es)
	batches, _, _ := r.snapshot()
	next := 0
	for i, b := range batches {
		size := 0
		for _, op := range b {
			size += storeadapter.BatchOpSize(op.Entity)
		}
		next += len(b)
		if size > storeadapter.MaxBatchBytes {
			t.Fatalf("batch %d: %d bytes", i, size)
		}
		if next < len(es) && size+storeadapter.BatchOpSize(es[next]) <= storeadapter.MaxBatchBytes && len(b) < storeadapter.MaxBatchOps {
			t.Fatalf("batch %d cut at %d bytes although the next row fitted", i, size)
		}
	}
	if len(batches) < 3 {
		t.Fatalf("%d batches: the 4 MiB cut never happened", len(batches))
	}
}

func TestInsertSkipsExistingRowsAndLeavesThem(t *testing.T) {
	r := newStore(t, "Target")
	es := entities(3, 120)
	ctx := context.Background()
	want := append([]storeadapter.Entity(nil), es...)
	// Rows 10, 20, ... of every partition exist with other values.
	for i := range es {
		if i%10 == 0 {
			old := storeadapter.Entity{PartitionKey: es[i].PartitionKey, RowKey: es[i].RowKey, Properties: map[string]any{"Old": true}}
			if _, err := r.Tables.InsertEntity(ctx, "Target", old); err != nil {
				t.Fatal(err)
			}
			want[i] = old
		}
	}
	w := write(t, tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Insert}, es)
	sameRows(t, readAll(t, r.Tables, "Target"), want)
	if c := w.Counts(); c.Written != 360-36 || c.Skipped != 36 {
		t.Errorf("counts %+v, want 324 written, 36 skipped", c)
	}
	// Writing it all again skips everything.
	w = write(t, tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Insert}, es)
	if c := w.Counts(); c.Written != 0 || c.Skipped != 360 {
		t.Errorf("second run counts %+v, want 360 skipped", c)
	}
	sameRows(t, readAll(t, r.Tables, "Target"), want)
}

func TestReplaceOverwritesChangedRows(t *testing.T) {
	r := newStore(t, "Target")
	es := entities(2, 150)
	ctx := context.Background()
	for i := 0; i < len(es); i += 7 {
		old := storeadapter.Entity{PartitionKey: es[i].PartitionKey, RowKey: es[i].RowKey, Properties: map[string]any{"Old": true, "S": "stale"}}
		if _, err := r.Tables.UpsertEntity(ctx, "Target", old, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
	w := write(t, tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Replace}, es)
	sameRows(t, readAll(t, r.Tables, "Target"), es)
	if c := w.Counts(); c.Written != 300 || c.Skipped != 0 || c.Transactions != 4 {
		t.Errorf("counts %+v", c)
	}
}

func TestRefusesKeysOutOfOrder(t *testing.T) {
	r := newStore(t, "Target")
	w, err := tablewrite.New(tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Insert})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es := entities(2, 2)
	for _, e := range es[1:] {
		if err := w.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []storeadapter.Entity{es[0], es[3]} {
		if err := w.Add(ctx, e); !errors.Is(err, storeadapter.ErrInvalidInput) || !strings.Contains(err.Error(), "key order") {
			t.Errorf("Add(%s/%s) out of order = %v", e.PartitionKey, e.RowKey, err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// After a Flush the order starts again.
	if err := w.Add(ctx, es[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sameRows(t, readAll(t, r.Tables, "Target"), es)
}

func TestBoundsPartitionsInFlight(t *testing.T) {
	r := newStore(t, "Target")
	release := make(chan struct{})
	r.hold = func([]storeadapter.TableOp) error { <-release; return nil }
	w, err := tablewrite.New(tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Replace, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es := entities(10, 30)
	done := make(chan error, 1)
	go func() {
		for _, e := range es {
			if err := w.Add(ctx, e); err != nil {
				done <- err
				return
			}
		}
		done <- w.Flush(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, in, _ := r.snapshot(); in == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("three partitions never were in flight at once")
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	select {
	case err := <-done:
		t.Fatalf("the writer finished (%v) while three partitions were held", err)
	default:
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not finish")
	}
	if _, _, maxIn := r.snapshot(); maxIn != 3 {
		t.Errorf("at most %d transactions were in flight, want 3", maxIn)
	}
	sameRows(t, readAll(t, r.Tables, "Target"), es)
}

func TestErrorSurfacesFromFlushAndLaterAdds(t *testing.T) {
	r := newStore(t, "Target")
	boom := fmt.Errorf("injected: %w", storeadapter.ErrUnavailable)
	r.hold = func(ops []storeadapter.TableOp) error {
		if ops[0].Entity.PartitionKey == "p001" {
			return boom
		}
		return nil
	}
	w, err := tablewrite.New(tablewrite.Options{Tables: r, Table: "Target", Mode: tablewrite.Insert, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es := entities(3, 5)
	for _, e := range es {
		_ = w.Add(ctx, e) // a later Add may or may not see the failure yet
	}
	err = w.Flush(ctx)
	if !errors.Is(err, storeadapter.ErrUnavailable) || !strings.Contains(err.Error(), `"p001"`) {
		t.Fatalf("Flush = %v, want the injected error naming the partition", err)
	}
	if err := w.Add(ctx, es[0]); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Errorf("Add after the failure = %v", err)
	}
	if err := w.Flush(ctx); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Errorf("second Flush = %v", err)
	}
	// Partitions are written one at a time, in order: p000 committed, p002
	// never started.
	sameRows(t, readAll(t, r.Tables, "Target"), es[:5])
}

func TestCreatesTheTableOnlyWhenAsked(t *testing.T) {
	r := newStore(t)
	es := entities(2, 3)
	w, err := tablewrite.New(tablewrite.Options{Tables: r, Table: "Fresh", Mode: tablewrite.Insert})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range es {
		_ = w.Add(ctx, e)
	}
	if err := w.Flush(ctx); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Fatalf("Flush without CreateTable = %v, want ErrTableNotFound", err)
	}
	write(t, tablewrite.Options{Tables: r, Table: "Fresh", Mode: tablewrite.Insert, CreateTable: true, Partitions: 2}, es)
	sameRows(t, readAll(t, r.Tables, "Fresh"), es)
}

func TestNewRefusesBadOptions(t *testing.T) {
	r := newStore(t)
	for name, o := range map[string]tablewrite.Options{
		"Tables":     {Table: "T1x", Mode: tablewrite.Insert},
		"Mode":       {Tables: r, Table: "T1x"},
		"Partitions": {Tables: r, Table: "T1x", Mode: tablewrite.Replace, Partitions: -1},
		"table name": {Tables: r, Table: "a-b", Mode: tablewrite.Replace},
	} {
		if _, err := tablewrite.New(o); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("New with a bad %s = %v", name, err)
		}
	}
}
