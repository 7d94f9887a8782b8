package idempotent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// conflictingTables is a Tables on which another writer changes the entity
// right before each of the next `conflicts` writes of UpdateCAS, so that
// write finds a stale ETag. It counts reads.
type conflictingTables struct {
	storeadapter.Tables
	conflicts int
	writes    int // the other writer's writes
	reads     int
}

func (c *conflictingTables) GetEntity(ctx context.Context, table, pk, rk string) (storeadapter.Entity, error) {
	c.reads++
	return c.Tables.GetEntity(ctx, table, pk, rk)
}

func (c *conflictingTables) interfere(ctx context.Context, table, pk, rk string) error {
	if c.conflicts == 0 {
		return nil
	}
	c.conflicts--
	c.writes++
	other := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"Other": int64(c.writes)}}
	_, err := c.Tables.UpsertEntity(ctx, table, other, storeadapter.Merge)
	return err
}

func (c *conflictingTables) UpdateEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode, ifMatch string) (string, error) {
	if err := c.interfere(ctx, table, e.PartitionKey, e.RowKey); err != nil {
		return "", err
	}
	return c.Tables.UpdateEntity(ctx, table, e, mode, ifMatch)
}

func (c *conflictingTables) InsertEntity(ctx context.Context, table string, e storeadapter.Entity) (string, error) {
	if err := c.interfere(ctx, table, e.PartitionKey, e.RowKey); err != nil {
		return "", err
	}
	return c.Tables.InsertEntity(ctx, table, e)
}

// increment is a modify function that adds one to the property N, creating
// the entity when it is missing.
func increment(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
	n := int64(0)
	if cur != nil {
		n, _ = cur.Properties["N"].(int64)
	}
	return &storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"N": n + 1}}, nil
}

// TestUpdateCASRetriesWithJitter: a writer that changes the entity before
// every write makes UpdateCAS give up after Tries rounds with the last
// conflict, pausing between rounds for jittered, doubling times; one that
// stops in time loses nothing of its own writes.
func TestUpdateCASRetriesWithJitter(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	if err := idempotent.EnsureTable(ctx, s.Tables(), "Cas"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tables().InsertEntity(ctx, "Cas", storeadapter.Entity{PartitionKey: "p", RowKey: "r"}); err != nil {
		t.Fatal(err)
	}

	ct := &conflictingTables{Tables: s.Tables(), conflicts: 1000}
	var pauses []time.Duration
	o := idempotent.CASOptions{Tries: 6, Pause: 100 * time.Millisecond,
		Sleep: func(_ context.Context, d time.Duration) error { pauses = append(pauses, d); return nil }}
	_, err := idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, o)
	if !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		t.Fatalf("UpdateCAS against a writer that always interferes = %v, want ErrPreconditionFailed", err)
	}
	if ct.writes != 6 || ct.reads != 6 {
		t.Errorf("%d rounds lost and %d reads, want 6 each (Tries)", ct.writes, ct.reads)
	}
	if len(pauses) != 5 {
		t.Fatalf("%d pauses, want 5 (between the 6 tries): %v", len(pauses), pauses)
	}
	factors := map[float64]bool{}
	for i, d := range pauses {
		base := 100 * time.Millisecond << i
		if d < base/2 || d >= base*3/2 {
			t.Errorf("pause %d = %v, want in [%v, %v)", i, d, base/2, base*3/2)
		}
		factors[float64(d)/float64(base)] = true
	}
	if len(factors) < 2 {
		t.Errorf("pauses %v are not jittered", pauses)
	}

	ct.conflicts, ct.writes, ct.reads = 2, 0, 0
	got, err := idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Sleep: o.Sleep})
	if err != nil {
		t.Fatalf("UpdateCAS against a writer that interferes twice = %v", err)
	}
	e, err := s.Tables().GetEntity(ctx, "Cas", "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if e.Properties["N"] != int64(1) || e.Properties["Other"] != int64(2) || ct.reads != 3 {
		t.Errorf("after 2 lost rounds: entity %v after %d reads; want N 1 (one increment), Other 2 (the other writer's last), 3 reads", e.Properties, ct.reads)
	}
	if got.ETag != e.ETag || got.Properties["Other"] != int64(2) || got.Properties["N"] != int64(1) {
		t.Errorf("UpdateCAS returned %+v, want the entity as stored %+v", got, e)
	}

	// Start saves the first read; a stale Start costs one lost round.
	ct.reads = 0
	got, err = idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Start: &got})
	if err != nil || got.Properties["N"] != int64(2) || ct.reads != 0 {
		t.Fatalf("UpdateCAS from a current Start = %v, N %v, %d reads; want N 2 and no read", err, got.Properties["N"], ct.reads)
	}
	stale := e
	_, err = idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Start: &stale, Sleep: o.Sleep})
	if err != nil || ct.reads != 1 {
		t.Fatalf("UpdateCAS from a stale Start = %v after %d reads; want success after 1 read", err, ct.reads)
	}
}

// TestUpdateCASMissing: modify decides what a missing entity means, and an
// insert that loses to another writer's becomes an update.
func TestUpdateCASMissing(t *testing.T) {
	ctx := context.Background()
	s := localstore.New(localstore.Options{})
	tb := s.Tables()
	none := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		if cur == nil {
			return nil, nil
		}
		return increment(cur)
	}
	if got, err := idempotent.UpdateCAS(ctx, tb, "Absent", "p", "r", none, idempotent.CASOptions{}); err != nil || got.ETag != "" {
		t.Fatalf("UpdateCAS of a missing table with nothing to do = %+v, %v; want the zero entity, nil", got, err)
	}
	missing := errors.New("missing")
	refuse := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		if cur == nil {
			return nil, missing
		}
		return increment(cur)
	}
	if _, err := idempotent.UpdateCAS(ctx, tb, "Absent", "p", "r", refuse, idempotent.CASOptions{}); err != missing {
		t.Fatalf("UpdateCAS whose modify refuses a missing entity = %v, want modify's error as it is", err)
	}
	if _, err := idempotent.UpdateCAS(ctx, tb, "Absent", "p", "r", increment, idempotent.CASOptions{}); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Fatalf("UpdateCAS inserting into a missing table = %v, want ErrTableNotFound", err)
	}
	if err := idempotent.EnsureTable(ctx, tb, "Cas"); err != nil {
		t.Fatal(err)
	}
	ct := &conflictingTables{Tables: tb, conflicts: 1}
	got, err := idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Pause: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if got.Properties["N"] != int64(1) || got.Properties["Other"] != int64(1) || ct.reads != 2 {
		t.Errorf("insert that lost to another writer: %v after %d reads; want N 1 and Other 1 after 2 reads", got.Properties, ct.reads)
	}
}

// TestUpdateCASAbsent: told the entity is missing, UpdateCAS inserts
// without reading; when it is there after all, the insert loses the round
// and the next one reads it and updates it, losing nothing.
func TestUpdateCASAbsent(t *testing.T) {
	ctx := context.Background()
	tb := localstore.New(localstore.Options{}).Tables()
	if err := idempotent.EnsureTable(ctx, tb, "Cas"); err != nil {
		t.Fatal(err)
	}
	ct := &conflictingTables{Tables: tb}
	got, err := idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Absent: true})
	if err != nil || got.Properties["N"] != int64(1) || ct.reads != 0 {
		t.Fatalf("insert of a missing entity = %v, %v after %d reads; want N 1 and no read", got.Properties, err, ct.reads)
	}
	got, err = idempotent.UpdateCAS(ctx, ct, "Cas", "p", "r", increment, idempotent.CASOptions{Absent: true, Pause: time.Nanosecond})
	if err != nil || got.Properties["N"] != int64(2) || ct.reads != 1 {
		t.Errorf("Absent on an entity that exists = %v, %v after %d reads; want N 2 after 1 read", got.Properties, err, ct.reads)
	}
	stored, err := tb.GetEntity(ctx, "Cas", "p", "r")
	if err != nil || stored.Properties["N"] != int64(2) {
		t.Errorf("stored %v, %v; want N 2", stored.Properties, err)
	}
}
