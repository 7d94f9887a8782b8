package poison

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// barrier holds the first n calls that match until all n wait at once,
// which proves they run concurrently; it fails the test when they do not
// gather within a deadline.
type barrier struct {
	t     *testing.T
	n     int
	match func(instrument.Call) bool
	mu    sync.Mutex
	seen  int
	open  chan struct{}
}

func newBarrier(t *testing.T, n int, match func(instrument.Call) bool) *barrier {
	return &barrier{t: t, n: n, match: match, open: make(chan struct{})}
}

// fault is the store instrument's fault hook.
func (b *barrier) fault(ctx context.Context, c instrument.Call) error {
	if b == nil || !b.match(c) {
		return nil
	}
	b.mu.Lock()
	b.seen++
	if b.seen > b.n {
		b.mu.Unlock()
		return nil
	}
	if b.seen == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
		return nil
	case <-time.After(10 * time.Second):
		b.t.Errorf("%s: %d calls gathered within 10s, want %d at once", c.Op, min(b.seen, b.n), b.n)
		return errors.New("barrier: not concurrent")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// phases records the Progress reports of one run and checks them.
type phases struct {
	mu      sync.Mutex
	reports []Progress
}

func (p *phases) hear(pr Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports = append(p.reports, pr)
}

// check asserts that the phases reported are want, in that order, each
// with Done rising and ending at its Total, and that the totals of those
// in totals are as given.
func (p *phases) check(t *testing.T, want []string, totals map[string]int) {
	t.Helper()
	var got []string
	last := map[string]Progress{}
	for _, r := range p.reports {
		if len(got) == 0 || got[len(got)-1] != r.Phase {
			if slices.Contains(got, r.Phase) {
				t.Errorf("phase %q reported again after another phase: %v", r.Phase, p.reports)
			}
			got = append(got, r.Phase)
		} else if r.Done < last[r.Phase].Done {
			t.Errorf("phase %q went back from %d to %d", r.Phase, last[r.Phase].Done, r.Done)
		}
		last[r.Phase] = r
	}
	if !slices.Equal(got, want) {
		t.Errorf("phases reported %q, want %q", got, want)
	}
	for ph, r := range last {
		if r.Total == 0 || r.Done != r.Total {
			t.Errorf("phase %q ended at %d/%d, want Done == Total", ph, r.Done, r.Total)
		}
		if n, ok := totals[ph]; ok && r.Total != n {
			t.Errorf("phase %q total %d, want %d", ph, r.Total, n)
		}
	}
}

// poisonMany poisons n messages (every fifth too large for a property, so
// its original goes to a blob) and returns them.
func (b *bundle) poisonMany(t *testing.T, n int) []storeadapter.Message {
	t.Helper()
	var msgs []storeadapter.Message
	for i := range n {
		text := fmt.Sprintf(`{"v":1,"id":"op-%d","kind":"archive","args":{}}`, i)
		if i%5 == 0 {
			text += strings.Repeat(" ", storeadapter.MaxStringChars)
		}
		msgs = append(msgs, b.poisonNow(t, text, "archive", fmt.Sprintf("permanent: case %d", i)))
	}
	return msgs
}

// TestRequeueManyConcurrently: a requeue of many records claims and sends
// several at once, sends each original exactly once, removes every poison
// message directly (no sweep: the records note them all), writes each
// record twice (claim, then finish marked swept), and reports its phases
// up to their totals.
func TestRequeueManyConcurrently(t *testing.T) {
	const n, conc = 60, 8
	var bar *barrier
	b := setupWithFault(t, func(ctx context.Context, c instrument.Call) error { return bar.fault(ctx, c) })
	msgs := b.poisonMany(t, n)
	bar = newBarrier(t, conc, func(c instrument.Call) bool { return c.Op == instrument.OpSend && c.Name == sourceName })
	before := b.calls.Snapshot()

	var p phases
	recs, err := b.m.Requeue(b.ctx, RequeueOptions{All: true, Concurrency: conc, Progress: p.hear})
	if err != nil || len(recs) != n {
		t.Fatalf("Requeue = %d records, %v; want %d", len(recs), err, n)
	}
	used := diff(before, b.calls.Snapshot())
	for op, want := range map[instrument.Op]int64{instrument.OpUpdateEntity: 2 * n, instrument.OpSend: n, instrument.OpDeleteMessage: n, instrument.OpReceive: 0, instrument.OpGetEntity: 0} {
		if used[op] != want {
			t.Errorf("%s calls: %d, want %d (all: %v)", op, used[op], want, used)
		}
	}
	p.check(t, []string{PhaseRead, PhaseClaimSend}, map[string]int{PhaseRead: n, PhaseClaimSend: n})
	sent := map[string]int{}
	b.receiveAll(t, b.src, func(m storeadapter.Message) { sent[m.Text]++ })
	for _, m := range msgs {
		if sent[m.Text] != 1 {
			t.Errorf("original of %s sent %d times, want once", m.ID, sent[m.Text])
		}
	}
	if len(sent) != n {
		t.Errorf("%d distinct texts on the work queue, want %d", len(sent), n)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages after the requeue, want 0", c)
	}
	for _, m := range msgs {
		if e := decodeEntry(b.entity(t, m.ID)); e.rec.State != StateRequeued || !e.swept {
			t.Errorf("record %s: state %s swept %v, want requeued and swept", m.ID, e.rec.State, e.swept)
		}
	}

	// A second requeue finds nothing to do and calls nothing but its scan.
	before = b.calls.Snapshot()
	if recs, err := b.m.Requeue(b.ctx, RequeueOptions{All: true}); err != nil || len(recs) != 0 {
		t.Errorf("second Requeue = %d records, %v; want none", len(recs), err)
	}
	if used := diff(before, b.calls.Snapshot()); len(used) != 1 || used[instrument.OpQuery] != 1 {
		t.Errorf("second Requeue called %v, want one Query", used)
	}
}

// receiveAll receives every visible message of q, hiding each for a
// minute, and calls fn with it.
func (b *bundle) receiveAll(t *testing.T, q storeadapter.Queue, fn func(storeadapter.Message)) {
	t.Helper()
	for {
		got, err := q.Receive(b.ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return
		}
		for _, m := range got {
			fn(m)
		}
	}
}

// diff returns the calls per operation made between two snapshots.
func diff(before, after instrument.Snapshot) map[instrument.Op]int64 {
	d := map[instrument.Op]int64{}
	for op, s := range after {
		if n := s.Calls - before[op].Calls; n != 0 {
			d[op] = n
		}
	}
	return d
}

// TestRequeueSweepsStaleReceipts: when the poison messages were received
// since their send (by an earlier sweep, another consumer), the receipts
// the records note are stale; the requeue finds that out, sweeps once for
// all of them, deletes exactly the requeued records' messages, makes the
// others visible again, marks the requeued records swept and reports the
// sweep's progress.
func TestRequeueSweepsStaleReceipts(t *testing.T) {
	const n = 40
	b := setup(t)
	msgs := b.poisonMany(t, n)
	touched := 0
	b.receiveAll(t, b.poison, func(m storeadapter.Message) {
		touched++
		if _, err := b.poison.Update(b.ctx, m.ID, m.PopReceipt, m.Text, time.Second); err != nil {
			t.Fatal(err)
		}
	})
	if touched != n {
		t.Fatalf("touched %d poison messages, want %d", touched, n)
	}
	b.clock.Advance(2 * time.Second)
	var ids []string
	for _, m := range msgs[:n/2] {
		ids = append(ids, m.ID)
	}
	var p phases
	recs, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: ids, Concurrency: 4, Progress: p.hear})
	if err != nil || len(recs) != n/2 {
		t.Fatalf("Requeue = %d records, %v; want %d", len(recs), err, n/2)
	}
	p.check(t, []string{PhaseRead, PhaseClaimSend, PhaseSweep, PhaseMarkSwept}, map[string]int{PhaseRead: n / 2, PhaseClaimSend: n / 2, PhaseMarkSwept: n / 2})
	left := map[string]bool{}
	for _, m := range b.peek(t, b.poison) {
		s, _, _, err := DecodeMessage(m.Text)
		if err != nil {
			t.Fatal(err)
		}
		left[s.MessageID] = true
	}
	for i, m := range msgs {
		if left[m.ID] != (i >= n/2) {
			t.Errorf("poison message of %s (requeued %v) left visible: %v", m.ID, i < n/2, left[m.ID])
		}
		if e := decodeEntry(b.entity(t, m.ID)); i < n/2 && !e.swept {
			t.Errorf("record %s not marked swept", m.ID)
		}
	}
}

// TestPurgeManyConcurrently: a purge of many records, some requeued (their
// poison messages already deleted by the requeue), removes every record,
// poison message and blob, deletes each poison message once (none of the
// requeued records'), runs its deletes concurrently and reports each phase
// up to its total.
func TestPurgeManyConcurrently(t *testing.T) {
	const n, conc = 50, 6
	var bar *barrier
	b := setupWithFault(t, func(ctx context.Context, c instrument.Call) error { return bar.fault(ctx, c) })
	msgs := b.poisonMany(t, n)
	var requeue []string
	for _, m := range msgs[:10] {
		requeue = append(requeue, m.ID)
	}
	if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: requeue}); err != nil {
		t.Fatal(err)
	}
	bar = newBarrier(t, conc, func(c instrument.Call) bool { return c.Op == instrument.OpDeleteEntity })
	before := b.calls.Snapshot()
	var p phases
	res, err := b.m.Purge(b.ctx, PurgeOptions{Concurrency: conc, Progress: p.hear})
	if err != nil || len(res.Records) != n {
		t.Fatalf("Purge = %d records, %v; want %d", len(res.Records), err, n)
	}
	p.check(t, []string{PhaseRead, PhaseDeletePoison, PhaseDeleteRecords}, map[string]int{PhaseRead: n, PhaseDeletePoison: n - 10, PhaseDeleteRecords: n})
	used := diff(before, b.calls.Snapshot())
	if used[instrument.OpDeleteMessage] != n-10 || used[instrument.OpReceive] != 0 || used[instrument.OpDeleteEntity] != n {
		t.Errorf("purge calls %v: want %d DeleteMessage (none for the requeued), %d DeleteEntity, no Receive", used, n-10, n)
	}
	if page, err := b.store.Tables().Query(b.ctx, TableName(sourceName), storeadapter.Query{}); err != nil || len(page.Entities) != 0 {
		t.Errorf("records table after Purge: %d entities, %v", len(page.Entities), err)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages after Purge", c)
	}
	if blobs, err := b.blobs.List(b.ctx, "", ""); err != nil || len(blobs.Blobs) != 0 {
		t.Errorf("container after Purge: %v, %v", blobs, err)
	}
	for _, r := range res.Records[1:] {
		if r.LastAttempt.After(res.Records[0].LastAttempt) {
			t.Errorf("records not newest first")
			break
		}
	}
}

// TestDeleteMany: several ids are deleted at once with their poison
// messages and blobs; an id without a record is listed as not found, an
// invalid one is an error, and the rest are still deleted.
func TestDeleteMany(t *testing.T) {
	b := setup(t)
	msgs := b.poisonMany(t, 12)
	ids := []string{"no-such-id"}
	for _, m := range msgs[:10] {
		ids = append(ids, m.ID)
	}
	ids = append(ids, "bad/id", msgs[0].ID)
	var p phases
	res, err := b.m.DeleteMany(b.ctx, DeleteOptions{IDs: ids, Concurrency: 3, Progress: p.hear})
	if !errors.Is(err, storeadapter.ErrInvalidInput) || !strings.Contains(err.Error(), "bad/id") {
		t.Errorf("DeleteMany error %v, want one naming the invalid id", err)
	}
	if !slices.Equal(res.NotFound, []string{"no-such-id"}) {
		t.Errorf("NotFound = %v", res.NotFound)
	}
	if !slices.Equal(res.Deleted, ids[1:11]) {
		t.Errorf("Deleted = %v, want %v", res.Deleted, ids[1:11])
	}
	p.check(t, []string{PhaseRead, PhaseDeletePoison, PhaseDeleteRecords}, map[string]int{PhaseRead: 12, PhaseDeleteRecords: 10})
	if c := b.count(t, b.poison); c != 2 {
		t.Errorf("poison queue holds %d messages, want the 2 not deleted", c)
	}
	if recs, err := b.m.List(b.ctx, ""); err != nil || len(recs) != 2 {
		t.Errorf("List after DeleteMany = %d records, %v; want 2", len(recs), err)
	}
	// Of the blobs (every fifth message's), the one of msgs[10] stays.
	if blobs, err := b.blobs.List(b.ctx, "", ""); err != nil || len(blobs.Blobs) != 1 || blobs.Blobs[0].Name != blobName(msgs[10].ID) {
		t.Errorf("container after deleting the records with blobs: %v, %v; want only %s", blobs, err, blobName(msgs[10].ID))
	}
	if err := b.m.Delete(b.ctx, msgs[0].ID); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Delete of a deleted record = %v, want ErrNotFound", err)
	}
}

// TestMoveCalls: poisoning a message on its first delivery costs four
// calls once the table and the queue exist (insert, send, note, delete:
// no read), and the same however many records the table holds; a later
// delivery reads the record first; a Move retried after its reply was lost
// finds the record where it expected none and writes it once more, one
// record with two sends.
func TestMoveCalls(t *testing.T) {
	b := setup(t)
	b.poisonMany(t, 3) // the table, queue and container exist
	first := func() map[instrument.Op]int64 {
		msg := b.deliver(t, `{"v":1,"id":"op-x","kind":"archive","args":{}}`)
		before := b.calls.Snapshot()
		if err := b.m.Move(b.ctx, b.failure(msg, "archive", "boom"), msg.PopReceipt, "permanent"); err != nil {
			t.Fatal(err)
		}
		return diff(before, b.calls.Snapshot())
	}
	want := map[instrument.Op]int64{instrument.OpInsertEntity: 1, instrument.OpSend: 1, instrument.OpUpdateEntity: 1, instrument.OpDeleteMessage: 1}
	if got := first(); !mapsEqual(got, want) {
		t.Errorf("first-delivery Move calls %v, want %v", got, want)
	}
	b.poisonMany(t, 100)
	if got := first(); !mapsEqual(got, want) {
		t.Errorf("first-delivery Move with 100 more records calls %v, want %v", got, want)
	}

	// A later delivery: one read more.
	msg := b.deliver(t, `{"v":1,"id":"op-y","kind":"archive","args":{}}`)
	if err := b.m.RecordAttempt(b.ctx, b.failure(msg, "archive", "first")); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	msg = b.receive(t)
	before := b.calls.Snapshot()
	if err := b.m.Move(b.ctx, b.failure(msg, "archive", "second"), msg.PopReceipt, "dequeue count"); err != nil {
		t.Fatal(err)
	}
	want2 := map[instrument.Op]int64{instrument.OpGetEntity: 1, instrument.OpUpdateEntity: 2, instrument.OpSend: 1, instrument.OpDeleteMessage: 1}
	if got := diff(before, b.calls.Snapshot()); !mapsEqual(got, want2) {
		t.Errorf("second-delivery Move calls %v, want %v", got, want2)
	}

	// A first-delivery Move run twice (its first reply lost): the second
	// finds the record, plans again with it, and counts a second send.
	msg = b.deliver(t, `{"v":1,"id":"op-z","kind":"archive","args":{}}`)
	f := b.failure(msg, "archive", "boom")
	for range 2 {
		if err := b.m.Move(b.ctx, f, msg.PopReceipt, "permanent"); err != nil {
			t.Fatal(err)
		}
	}
	e := b.entity(t, msg.ID)
	refs, known := poisonRefs(e)
	if sends, _ := e.Properties[propPoisonSends].(int64); sends != 2 || len(refs) != 2 || !known {
		t.Errorf("after two Moves: PoisonSends %v, %d noted (all %v); want 2, 2, true", e.Properties[propPoisonSends], len(refs), known)
	}
	if recs, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{msg.ID}}); err != nil || len(recs) != 1 {
		t.Fatalf("Requeue = %v, %v", recs, err)
	}
	for _, m := range b.peek(t, b.poison) {
		if s, _, _, _ := DecodeMessage(m.Text); s.MessageID == msg.ID {
			t.Errorf("a poison message of %s outlived its requeue", msg.ID)
		}
	}
}

func mapsEqual(a, b map[instrument.Op]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDeleteFailingRecordNeedsNoSweep: a record still failing was never
// poisoned, so deleting it (or purging it) receives nothing from the poison
// queue, where another record's message stays untouched.
func TestDeleteFailingRecordNeedsNoSweep(t *testing.T) {
	b := setup(t)
	b.poisonMany(t, 2)
	msg := b.deliver(t, `{"v":1,"id":"op-f","kind":"archive","args":{}}`)
	if err := b.m.RecordAttempt(b.ctx, b.failure(msg, "archive", "transient")); err != nil {
		t.Fatal(err)
	}
	before := b.calls.Snapshot()
	res, err := b.m.DeleteMany(b.ctx, DeleteOptions{IDs: []string{msg.ID}})
	if err != nil || !slices.Equal(res.Deleted, []string{msg.ID}) {
		t.Fatalf("DeleteMany = %+v, %v", res, err)
	}
	if used := diff(before, b.calls.Snapshot()); !mapsEqual(used, map[instrument.Op]int64{instrument.OpGetEntity: 1, instrument.OpDeleteEntity: 1}) {
		t.Errorf("deleting a failing record called %v, want one read and one delete", used)
	}
	if c := len(b.peek(t, b.poison)); c != 2 {
		t.Errorf("%d poison messages visible, want the other records' 2", c)
	}
}
