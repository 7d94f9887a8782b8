package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

func op(pk, rk string, size int) storeadapter.TableOp {
	e := storeadapter.Entity{PartitionKey: pk, RowKey: rk}
	if size > 0 {
		e.Properties = map[string]any{"B": make([]byte, size)}
	}
	return storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: e}
}

// TestBatches checks that every batch passes the service's rules and that
// order within a partition is kept.
func TestBatches(t *testing.T) {
	var ops []storeadapter.TableOp
	for i := range 250 {
		ops = append(ops, op(fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%03d", i), 0))
	}
	ops = append(ops, op("p0", "r000", 0)) // the same row again: a new batch
	for i := range 80 {                    // 80 × 60 KiB > 4 MiB in one partition
		ops = append(ops, op("big", fmt.Sprintf("b%02d", i), 60000))
	}
	batches := idempotent.Batches(ops)
	total := 0
	seen := map[string][]string{}
	for i, b := range batches {
		if err := storeadapter.ValidateTransaction(b); err != nil {
			t.Fatalf("batch %d breaks a rule: %v", i, err)
		}
		total += len(b)
		for _, o := range b {
			seen[o.Entity.PartitionKey] = append(seen[o.Entity.PartitionKey], o.Entity.RowKey)
		}
	}
	if total != len(ops) {
		t.Fatalf("batches hold %d operations, want %d", total, len(ops))
	}
	if got := seen["p0"]; got[0] != "r000" || got[len(got)-1] != "r000" || len(got) != 85 {
		t.Fatalf("partition p0 order or count wrong: first %s, last %s, %d ops", got[0], got[len(got)-1], len(got))
	}
	if n := len(idempotent.Batches(ops[:0])); n != 0 {
		t.Fatalf("Batches(nil) = %d batches, want 0", n)
	}
}

// TestCheckpoints saves, loads and clears a token; a missing table or
// checkpoint reads as "start from the beginning".
func TestCheckpoints(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	cp := idempotent.Checkpoints{Tables: s.Tables(), Table: "Checkpoints"}
	if tok, err := cp.Load(ctx, "op-1", "archive"); err != nil || tok != "" {
		t.Fatalf("Load before any save = %q, %v; want \"\", nil", tok, err)
	}
	for _, tok := range []string{"a.b", "c.d", "c.d"} {
		if err := cp.Save(ctx, "op-1", "archive", tok); err != nil {
			t.Fatal(err)
		}
		if got, err := cp.Load(ctx, "op-1", "archive"); err != nil || got != tok {
			t.Fatalf("Load = %q, %v; want %q", got, err, tok)
		}
	}
	for range 2 { // clearing twice is harmless
		if err := cp.Clear(ctx, "op-1", "archive"); err != nil {
			t.Fatal(err)
		}
	}
	if tok, _ := cp.Load(ctx, "op-1", "archive"); tok != "" {
		t.Fatalf("Load after Clear = %q, want \"\"", tok)
	}
}

// TestDeleteIfMatch: a missing entity is done, a stale ETag is reported.
func TestDeleteIfMatch(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	tb := s.Tables()
	if err := idempotent.EnsureTable(ctx, tb, "T1x"); err != nil {
		t.Fatal(err)
	}
	if err := idempotent.EnsureTable(ctx, tb, "T1x"); err != nil {
		t.Fatalf("EnsureTable on an existing table = %v, want nil", err)
	}
	etag, err := tb.InsertEntity(ctx, "T1x", storeadapter.Entity{PartitionKey: "p", RowKey: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.UpsertEntity(ctx, "T1x", storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": int32(2)}}, storeadapter.Merge); err != nil {
		t.Fatal(err)
	}
	if err := idempotent.DeleteIfMatch(ctx, tb, "T1x", "p", "r", etag); !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		t.Fatalf("delete with a stale ETag = %v, want ErrPreconditionFailed", err)
	}
	if err := idempotent.DeleteIfMatch(ctx, tb, "T1x", "p", "r", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	if err := idempotent.DeleteIfMatch(ctx, tb, "T1x", "p", "r", storeadapter.ETagAny); err != nil {
		t.Fatalf("second delete = %v, want nil (already done)", err)
	}
}

// TestUpsertCreatesTable writes to a missing table and to a table whose
// name is still being deleted (transient).
func TestUpsertCreatesTable(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	tb := s.Tables()
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r"}
	if err := idempotent.Upsert(ctx, tb, "Fresh", e); err != nil {
		t.Fatal(err)
	}
	if err := idempotent.Transact(ctx, tb, "Fresh2", []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: e}}); err != nil {
		t.Fatal(err)
	}
	if err := tb.DeleteTable(ctx, "Fresh"); err != nil {
		t.Fatal(err)
	}
	err := idempotent.Upsert(ctx, tb, "Fresh", e)
	if !errors.Is(err, storeadapter.ErrTableBeingDeleted) || !storeadapter.IsTransient(err) {
		t.Fatalf("upsert into a table being deleted = %v, want transient ErrTableBeingDeleted", err)
	}
	if !strings.Contains(err.Error(), "Fresh") {
		t.Errorf("error %q does not name the table", err)
	}
}

// racingTables lets another writer create the table right after the first
// Transact failed because the table was missing: the moment the old
// check-then-act query lost the race.
type racingTables struct {
	storeadapter.Tables
	raced bool
}

func (r *racingTables) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	err := r.Tables.Transact(ctx, table, ops)
	if !r.raced && errors.Is(err, storeadapter.ErrTableNotFound) {
		r.raced = true
		if cerr := r.Tables.CreateTable(ctx, table); cerr != nil {
			return cerr
		}
	}
	return err
}

// TestTransactTableCreationRace: a transaction meets a missing table while
// another writer creates it before the retry. Transact must still succeed,
// deciding from the write's own error, with no query to ask whether the
// table exists.
func TestTransactTableCreationRace(t *testing.T) {
	ctx := context.Background()
	counts := &instrument.Counts{}
	s := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{counts}})
	tb := &racingTables{Tables: s.Tables()}
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": int32(1)}}
	if err := idempotent.Transact(ctx, tb, "Raced", []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: e}}); err != nil {
		t.Fatalf("Transact while another writer creates the table = %v, want nil", err)
	}
	if !tb.raced {
		t.Fatal("the race was not staged: the first Transact did not meet a missing table")
	}
	if _, err := s.Tables().GetEntity(ctx, "Raced", "p", "r"); err != nil {
		t.Fatalf("the entity was not written: %v", err)
	}
	calls := counts.Snapshot()
	if calls[instrument.OpQuery].Calls != 0 || calls[instrument.OpListTables].Calls != 0 || calls[instrument.OpTransact].Calls != 2 {
		t.Errorf("calls:\n%vwant 2 Transact and no Query or ListTables", calls)
	}
}

// TestCheckpointsCompareAndSwap: Create inserts only, SaveIfMatch writes
// only at the ETag given, LoadETag gives the ETag to use; losers learn it
// from the error and nothing of theirs is written.
func TestCheckpointsCompareAndSwap(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	cp := idempotent.Checkpoints{Tables: s.Tables(), Table: "Checkpoints"} // the table is created on first use
	if tok, etag, err := cp.LoadETag(ctx, "op-1", "export"); err != nil || tok != "" || etag != "" {
		t.Fatalf("LoadETag before any save = %q, %q, %v; want none", tok, etag, err)
	}
	e1, err := cp.Create(ctx, "op-1", "export", "first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Create(ctx, "op-1", "export", "second"); !errors.Is(err, storeadapter.ErrAlreadyExists) {
		t.Fatalf("second Create = %v, want ErrAlreadyExists", err)
	}
	e2, err := cp.SaveIfMatch(ctx, "op-1", "export", "next", e1)
	if err != nil || e2 == "" || e2 == e1 {
		t.Fatalf("SaveIfMatch at the current ETag = %q, %v; want a new ETag", e2, err)
	}
	if _, err := cp.SaveIfMatch(ctx, "op-1", "export", "stale", e1); !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		t.Fatalf("SaveIfMatch at a stale ETag = %v, want ErrPreconditionFailed", err)
	}
	if tok, etag, err := cp.LoadETag(ctx, "op-1", "export"); err != nil || tok != "next" || etag != e2 {
		t.Fatalf("LoadETag = %q, %q, %v; want \"next\", %q", tok, etag, err, e2)
	}
	// WrittenAt: the service's time of the last write, and whether one
	// came after the caller's.
	row, err := s.Tables().GetEntity(ctx, "Checkpoints", "op-1", "export")
	if err != nil {
		t.Fatal(err)
	}
	if at, changed, err := cp.WrittenAt(ctx, "op-1", "export", e2); err != nil || changed || !at.Equal(row.Timestamp) {
		t.Fatalf("WrittenAt at the current ETag = %v, %v, %v; want %v, unchanged", at, changed, err, row.Timestamp)
	}
	if _, changed, err := cp.WrittenAt(ctx, "op-1", "export", e1); err != nil || !changed {
		t.Fatalf("WrittenAt at a stale ETag = changed %v, %v; want changed", changed, err)
	}
	if err := cp.Clear(ctx, "op-1", "export"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.SaveIfMatch(ctx, "op-1", "export", "late", e2); !idempotent.Lost(err) {
		t.Fatalf("SaveIfMatch after Clear = %v, want a lost race", err)
	}
}

// TestCheckpointsPrune: only checkpoints last written before the cut-off
// go, a dry run only counts them, and one written again between the read
// and the delete stays.
func TestCheckpointsPrune(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	store := localstore.New(localstore.Options{Clock: clk})
	cp := idempotent.Checkpoints{Tables: store.Tables(), Table: "Checkpoints"}
	if p, err := cp.Prune(ctx, clk.Now(), false); err != nil || p.Found != 0 {
		t.Fatalf("Prune of a missing table = %+v, %v; want nothing", p, err)
	}
	for i := range 150 {
		if err := cp.Save(ctx, fmt.Sprintf("op-old-%d", i%3), fmt.Sprint("step", i), "done"); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(9 * 24 * time.Hour)
	if err := cp.Save(ctx, "op-new", "export", "t:1"); err != nil {
		t.Fatal(err)
	}
	cut := clk.Now().Add(-8 * 24 * time.Hour)
	if p, err := cp.Prune(ctx, cut, true); err != nil || p.Found != 150 || p.Deleted != 0 {
		t.Fatalf("dry run = %+v, %v; want 150 found, none deleted", p, err)
	}
	// A delivery of op-old-0 saves again while the prune runs: the
	// instrument lets it write just before the first delete.
	saved := false
	raced := instrument.Wrap(store, instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
		if !saved && c.Op == instrument.OpTransact {
			saved = true
			return cp.Save(ctx, "op-old-0", "step0", "t:again")
		}
		return nil
	}})
	p, err := idempotent.Checkpoints{Tables: raced.Tables(), Table: "Checkpoints"}.Prune(ctx, cut, false)
	if err != nil || p.Found != 150 || p.Deleted != 149 || p.Raced != 1 {
		t.Fatalf("Prune = %+v, %v; want 149 deleted and the one written again left", p, err)
	}
	for _, k := range [][2]string{{"op-new", "export"}, {"op-old-0", "step0"}} {
		if tok, err := cp.Load(ctx, k[0], k[1]); err != nil || tok == "" {
			t.Errorf("checkpoint %s/%s = %q, %v; want it kept", k[0], k[1], tok, err)
		}
	}
}
