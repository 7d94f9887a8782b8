package poison

import (
	"testing"
	"time"
)

// TestOperationListsEveryRecordOfAnOperation: a message poisoned, requeued
// and poisoned again leaves two records of one operation; Operation returns
// both, the current (newest) first, in their states, and nothing of
// another operation. GroupRecords gives the group's oldest and newest.
func TestOperationListsEveryRecordOfAnOperation(t *testing.T) {
	b := setup(t)
	first := b.deliver(t, "job text")
	f := b.failure(first, "archive", "boom")
	f.OpID = "op-history"
	if err := b.m.Move(b.ctx, f, first.PopReceipt, "permanent: boom"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{first.ID}}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	second := b.receive(t)
	f = b.failure(second, "archive", "boom again")
	f.OpID = "op-history"
	if err := b.m.Move(b.ctx, f, second.PopReceipt, "permanent: boom again"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	b.poisonNow(t, "other", "archive", "permanent: other")

	recs, err := b.m.Operation(b.ctx, "op-history")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].MessageID != second.ID || recs[0].State != StatePoisoned ||
		recs[1].MessageID != first.ID || recs[1].State != StateRequeued || recs[1].RequeuedMessageID != second.ID {
		t.Fatalf("Operation = %+v, want the second record (poisoned) then the first (requeued as %s)", recs, second.ID)
	}
	if none, err := b.m.Operation(b.ctx, "op-none"); err != nil || len(none) != 0 {
		t.Errorf("Operation(op-none) = %v, %v; want none", none, err)
	}
	if _, err := b.m.Operation(b.ctx, "bad/id"); err == nil {
		t.Error("Operation(bad/id): want an error")
	}

	all, err := b.m.List(b.ctx, "archive")
	if err != nil {
		t.Fatal(err)
	}
	g := GroupRecords(all)
	if len(g) != 1 || g[0].Count != 2 || !g[0].Oldest.Equal(t0.Add(2*time.Minute)) || !g[0].Newest.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("GroupRecords = %+v", g)
	}
}
