package poison

import (
	"testing"
	"time"
)

// TestLookupAndGroupsOfARequeuedOperation: a message poisoned, requeued and
// poisoned again leaves two records of one operation; Lookup of the new
// message id returns it and the requeued one, and nothing of another
// operation. GroupRecords gives the group's oldest and newest.
func TestLookupAndGroupsOfARequeuedOperation(t *testing.T) {
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

	rec, others, err := b.m.Lookup(b.ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.MessageID != second.ID || rec.State != StatePoisoned ||
		len(others) != 1 || others[0].MessageID != first.ID || others[0].State != StateRequeued || others[0].RequeuedMessageID != second.ID {
		t.Fatalf("Lookup = %+v, %+v; want the second record (poisoned) and the first (requeued as %s)", rec, others, second.ID)
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
