package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func queueCases() []testCase {
	return []testCase{
		{"CreateIdempotentAndDelete", testQueueCreateDelete},
		{"MissingQueue", testQueueMissing},
		{"InvalidNames", testQueueInvalidNames},
		{"SendReceiveDelete", testQueueSendReceiveDelete},
		{"DeleteWithSendReceipt", testQueueDeleteWithSendReceipt},
		{"DequeueCountAndReceipts", testQueueDequeueCount},
		{"UpdateReceipts", testQueueUpdateReceipts},
		{"VisibilityTimeout", testQueueVisibilityTimeout},
		{"UpdateVisibleNowAndText", testQueueUpdateVisibleNow},
		{"UpdateHides", testQueueUpdateHides},
		{"SendDelay", testQueueSendDelay},
		{"TTL", testQueueTTL},
		{"NeverExpire", testQueueNeverExpire},
		{"Peek", testQueuePeek},
		{"Clear", testQueueClear},
		{"ApproximateCount", testQueueApproximateCount},
		{"ApproximateCountNotBelowLive", testQueueApproximateCountNotBelowLive},
		{"InvalidArguments", testQueueInvalidArguments},
		{"MessageSize", testQueueMessageSize},
		{"MessageText", testQueueMessageText},
		{"CompetingReceives", testQueueCompetingReceives},
		{"WholeSecondTimes", testQueueWholeSecondTimes},
		{"LargestMultiByteMessage", testQueueLargestMultiByteMessage},
	}
}

// send sends text and fails the test on error.
func (e *env) send(t *testing.T, q storeadapter.Queue, text string, o storeadapter.SendOptions) storeadapter.Sent {
	t.Helper()
	s, err := q.Send(e.ctx, text, o)
	if err != nil {
		t.Fatalf("Send(%.20q): %v", text, err)
	}
	if s.ID == "" || s.PopReceipt == "" {
		t.Errorf("Send returned ID %q and PopReceipt %q, want both set", s.ID, s.PopReceipt)
	}
	return s
}

// receive receives up to n messages and fails the test on error.
func (e *env) receive(t *testing.T, q storeadapter.Queue, n int, vis time.Duration) []storeadapter.Message {
	t.Helper()
	msgs, err := q.Receive(e.ctx, n, vis)
	if err != nil {
		t.Fatalf("Receive(%d, %v): %v", n, vis, err)
	}
	if len(msgs) > n {
		t.Errorf("Receive(%d) returned %d messages", n, len(msgs))
	}
	for _, m := range msgs {
		if m.ID == "" || m.PopReceipt == "" {
			t.Errorf("Receive returned message ID %q with PopReceipt %q, want both set", m.ID, m.PopReceipt)
		}
	}
	return msgs
}

// receiveOne receives and expects exactly one message, with the given id,
// text and dequeue count.
func (e *env) receiveOne(t *testing.T, q storeadapter.Queue, vis time.Duration, id, text string, dequeues int64) storeadapter.Message {
	t.Helper()
	msgs := e.receive(t, q, storeadapter.MaxReceiveCount, vis)
	if len(msgs) != 1 {
		t.Fatalf("Receive returned %d messages, want 1 (%s)", len(msgs), id)
	}
	m := msgs[0]
	if m.ID != id || m.Text != text || m.DequeueCount != dequeues {
		t.Errorf("Receive = {ID %q, Text %.30q, DequeueCount %d}, want {%q, %.30q, %d}", m.ID, m.Text, m.DequeueCount, id, text, dequeues)
	}
	return m
}

// receiveNone expects no visible message.
func (e *env) receiveNone(t *testing.T, q storeadapter.Queue, when string) {
	t.Helper()
	if msgs := e.receive(t, q, storeadapter.MaxReceiveCount, time.Second); len(msgs) != 0 {
		t.Errorf("%s: Receive returned %d messages (first %q), want none", when, len(msgs), msgs[0].Text)
	}
}

// count returns the queue's approximate message count.
func (e *env) count(t *testing.T, q storeadapter.Queue) int {
	t.Helper()
	n, err := q.ApproximateCount(e.ctx)
	if err != nil {
		t.Fatalf("ApproximateCount: %v", err)
	}
	return n
}

// peek peeks up to 32 messages and fails the test on error.
func (e *env) peek(t *testing.T, q storeadapter.Queue) []storeadapter.Message {
	t.Helper()
	msgs, err := q.Peek(e.ctx, storeadapter.MaxReceiveCount)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return msgs
}

func testQueueCreateDelete(t *testing.T, e *env) {
	name := uniqueName("q")
	q := e.h.Store.Queue(name)
	if q.Name() != name {
		t.Errorf("Name() = %q, want %q", q.Name(), name)
	}
	checkNoErr(t, "Create", q.Create(e.ctx))
	t.Cleanup(func() { q.Delete(context.Background()) })
	s := e.send(t, q, "kept", storeadapter.SendOptions{})
	checkNoErr(t, "Create of an existing queue", q.Create(e.ctx))
	// Create again leaves the messages alone.
	e.receiveOne(t, q, 30*time.Second, s.ID, "kept", 1)
	// A second handle on the same name sees the same queue.
	if n := e.count(t, e.h.Store.Queue(name)); n != 1 {
		t.Errorf("ApproximateCount through a second handle = %d, want 1", n)
	}

	checkNoErr(t, "Delete", q.Delete(e.ctx))
	checkNoErr(t, "Delete of a deleted queue", q.Delete(e.ctx))
	_, err := q.Send(e.ctx, "x", storeadapter.SendOptions{})
	checkErr(t, "Send to a deleted queue", err, storeadapter.ErrQueueNotFound)
	_, err = q.ApproximateCount(e.ctx)
	checkErr(t, "ApproximateCount of a deleted queue", err, storeadapter.ErrQueueNotFound)
}

func testQueueMissing(t *testing.T, e *env) {
	q := e.h.Store.Queue(uniqueName("q")) // never created
	calls := []struct {
		op  string
		err error
	}{
		{"Send", second(q.Send(e.ctx, "x", storeadapter.SendOptions{}))},
		{"Receive", second(q.Receive(e.ctx, 1, time.Second))},
		{"Update", second(q.Update(e.ctx, "00000000-0000-0000-0000-000000000000", "receipt", "x", time.Second))},
		{"DeleteMessage", q.DeleteMessage(e.ctx, "00000000-0000-0000-0000-000000000000", "receipt")},
		{"Peek", second(q.Peek(e.ctx, 1))},
		{"Clear", q.Clear(e.ctx)},
		{"ApproximateCount", second(q.ApproximateCount(e.ctx))},
	}
	for _, c := range calls {
		checkErr(t, c.op+" on a missing queue", c.err, storeadapter.ErrQueueNotFound)
	}
	checkNoErr(t, "Delete of a missing queue", q.Delete(e.ctx))
}

func testQueueSendReceiveDelete(t *testing.T, e *env) {
	q := e.newQueue(t)
	before := e.now()
	s := e.send(t, q, "hello", storeadapter.SendOptions{})
	after := e.now()
	e.checkRecent(t, "Sent.NextVisible", s.NextVisible, before, after)
	e.checkRecent(t, "Sent.Expires - 7 days", s.Expires.Add(-storeadapter.DefaultTTL), before, after)

	m := e.receiveOne(t, q, 30*time.Second, s.ID, "hello", 1)
	after2 := e.now()
	e.checkRecent(t, "Message.Inserted", m.Inserted, before, after)
	if d := m.Expires.Sub(m.Inserted); d < storeadapter.DefaultTTL-time.Second || d > storeadapter.DefaultTTL+time.Second {
		t.Errorf("Message.Expires - Inserted = %v, want the default TTL %v", d, storeadapter.DefaultTTL)
	}
	e.checkRecent(t, "Message.NextVisible - 30 s", m.NextVisible.Add(-30*time.Second), before, after2)
	if m.PopReceipt == s.PopReceipt {
		t.Errorf("Receive returned the pop receipt Send did, %q; want a new one", m.PopReceipt)
	}
	e.receiveNone(t, q, "while the message is invisible")

	checkNoErr(t, "DeleteMessage", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
	checkItemNotFound(t, "DeleteMessage of a deleted message", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
	_, err := q.Update(e.ctx, m.ID, m.PopReceipt, m.Text, 0)
	checkItemNotFound(t, "Update of a deleted message", err)
	if n := e.count(t, q); n != 0 {
		t.Errorf("ApproximateCount after delete = %d, want 0", n)
	}
}

// testQueueDeleteWithSendReceipt: the pop receipt Send returns deletes the
// message until a receive replaces it (poison relies on it to delete a
// poison message without receiving the queue).
func testQueueDeleteWithSendReceipt(t *testing.T, e *env) {
	q := e.newQueue(t)
	kept := e.send(t, q, "kept", storeadapter.SendOptions{})
	gone := e.send(t, q, "gone", storeadapter.SendOptions{})
	checkNoErr(t, "DeleteMessage with the receipt of Send", q.DeleteMessage(e.ctx, gone.ID, gone.PopReceipt))
	checkItemNotFound(t, "DeleteMessage of a deleted message", q.DeleteMessage(e.ctx, gone.ID, gone.PopReceipt))
	m := e.receiveOne(t, q, time.Second, kept.ID, "kept", 1)
	checkErr(t, "DeleteMessage with the receipt of Send after a receive", q.DeleteMessage(e.ctx, kept.ID, kept.PopReceipt), storeadapter.ErrPopReceiptMismatch)
	checkNoErr(t, "DeleteMessage with the receipt of the receive", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
}

func testQueueDequeueCount(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "m", storeadapter.SendOptions{})
	receipts := map[string]string{s.PopReceipt: "Send"}
	note := func(receipt, what string) {
		t.Helper()
		if prev, ok := receipts[receipt]; ok {
			t.Errorf("%s returned pop receipt %q, already returned by %s", what, receipt, prev)
		}
		receipts[receipt] = what
	}
	var prev []string // receipts no longer current
	for i := int64(1); i <= 3; i++ {
		m := e.receiveOne(t, q, 30*time.Second, s.ID, "m", i)
		note(m.PopReceipt, fmt.Sprintf("receive %d", i))
		for _, old := range prev {
			checkErr(t, "DeleteMessage with an older receipt", q.DeleteMessage(e.ctx, s.ID, old), storeadapter.ErrPopReceiptMismatch)
		}
		// Make it visible again at once rather than wait out the timeout.
		rc, err := q.Update(e.ctx, m.ID, m.PopReceipt, m.Text, 0)
		if err != nil {
			t.Fatalf("Update(visibility 0): %v", err)
		}
		note(rc.PopReceipt, fmt.Sprintf("update %d", i))
		prev = append(prev, m.PopReceipt, rc.PopReceipt)
	}
	// Peek does not count as a receive.
	if p := e.peek(t, q); len(p) != 1 || p[0].DequeueCount != 3 {
		t.Errorf("Peek = %+v, want the message with DequeueCount 3", p)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, "m", 4)
}

func testQueueUpdateReceipts(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "one", storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, "one", 1)

	rc1, err := q.Update(e.ctx, m.ID, m.PopReceipt, "two", 30*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if rc1.PopReceipt == "" || rc1.PopReceipt == m.PopReceipt {
		t.Errorf("Update returned pop receipt %q, want a new one (old %q)", rc1.PopReceipt, m.PopReceipt)
	}
	// The old receipt is dead for both Update and DeleteMessage.
	_, err = q.Update(e.ctx, m.ID, m.PopReceipt, "two", 30*time.Second)
	checkErr(t, "Update with the receipt Update replaced", err, storeadapter.ErrPopReceiptMismatch)
	checkErr(t, "DeleteMessage with the receipt Update replaced", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt), storeadapter.ErrPopReceiptMismatch)

	rc2, err := q.Update(e.ctx, m.ID, rc1.PopReceipt, "two", 30*time.Second)
	if err != nil {
		t.Fatalf("Update with the newest receipt: %v", err)
	}
	if rc2.PopReceipt == rc1.PopReceipt {
		t.Errorf("second Update returned the same pop receipt %q", rc2.PopReceipt)
	}
	checkErr(t, "DeleteMessage with the previous receipt", q.DeleteMessage(e.ctx, m.ID, rc1.PopReceipt), storeadapter.ErrPopReceiptMismatch)
	e.receiveNone(t, q, "after Update with 30 s")

	checkNoErr(t, "DeleteMessage with the newest receipt", q.DeleteMessage(e.ctx, m.ID, rc2.PopReceipt))
	checkItemNotFound(t, "second DeleteMessage", q.DeleteMessage(e.ctx, m.ID, rc2.PopReceipt))
	_, err = q.Update(e.ctx, m.ID, rc2.PopReceipt, "two", 0)
	checkItemNotFound(t, "Update of a deleted message", err)
}

func testQueuePeek(t *testing.T, e *env) {
	q := e.newQueue(t)
	if p := e.peek(t, q); len(p) != 0 {
		t.Errorf("Peek of an empty queue returned %d messages", len(p))
	}
	ids := map[string]string{}
	for _, text := range []string{"a", "b", "c"} {
		ids[e.send(t, q, text, storeadapter.SendOptions{}).ID] = text
	}
	for range 2 { // peeking twice changes nothing
		p := e.peek(t, q)
		if len(p) != 3 {
			t.Fatalf("Peek returned %d messages, want 3", len(p))
		}
		for _, m := range p {
			if ids[m.ID] != m.Text || m.PopReceipt != "" || m.DequeueCount != 0 {
				t.Errorf("Peek = {ID %q, Text %q, PopReceipt %q, DequeueCount %d}, want text %q, no receipt, count 0", m.ID, m.Text, m.PopReceipt, m.DequeueCount, ids[m.ID])
			}
		}
	}
	if p, err := q.Peek(e.ctx, 1); err != nil || len(p) != 1 {
		t.Errorf("Peek(1) = %d messages, %v; want 1", len(p), err)
	}
	got := e.receive(t, q, 1, 30*time.Second)
	if len(got) != 1 {
		t.Fatalf("Receive(1) returned %d messages", len(got))
	}
	p := e.peek(t, q)
	if len(p) != 2 {
		t.Errorf("Peek after receiving one of three returned %d messages, want the 2 visible ones", len(p))
	}
	for _, m := range p {
		if m.ID == got[0].ID {
			t.Errorf("Peek returned the received (invisible) message %q", m.ID)
		}
	}
	// Peeked messages can still be received, first time.
	for _, m := range e.receive(t, q, storeadapter.MaxReceiveCount, 30*time.Second) {
		if m.DequeueCount != 1 {
			t.Errorf("receive after peeks: DequeueCount = %d, want 1", m.DequeueCount)
		}
	}
}

func testQueueClear(t *testing.T, e *env) {
	q := e.newQueue(t)
	for i := range 5 {
		e.send(t, q, fmt.Sprint(i), storeadapter.SendOptions{})
	}
	e.send(t, q, "delayed", storeadapter.SendOptions{VisibilityDelay: time.Hour})
	m := e.receive(t, q, 1, 30*time.Second) // one invisible
	checkNoErr(t, "Clear", q.Clear(e.ctx))
	if n := e.count(t, q); n != 0 {
		t.Errorf("ApproximateCount after Clear = %d, want 0", n)
	}
	if p := e.peek(t, q); len(p) != 0 {
		t.Errorf("Peek after Clear returned %d messages", len(p))
	}
	e.receiveNone(t, q, "after Clear")
	if len(m) == 1 {
		checkItemNotFound(t, "DeleteMessage of a cleared message", q.DeleteMessage(e.ctx, m[0].ID, m[0].PopReceipt))
	}
	checkNoErr(t, "Clear of an empty queue", q.Clear(e.ctx))
	s := e.send(t, q, "after", storeadapter.SendOptions{})
	e.receiveOne(t, q, 30*time.Second, s.ID, "after", 1)
}

func testQueueApproximateCount(t *testing.T, e *env) {
	q := e.newQueue(t)
	if n := e.count(t, q); n != 0 {
		t.Errorf("ApproximateCount of a new queue = %d, want 0", n)
	}
	for i := range 3 {
		e.send(t, q, fmt.Sprint(i), storeadapter.SendOptions{})
	}
	e.send(t, q, "delayed", storeadapter.SendOptions{VisibilityDelay: time.Hour})
	if n := e.count(t, q); n != 4 {
		t.Errorf("ApproximateCount = %d, want 4 (one delayed)", n)
	}
	msgs := e.receive(t, q, 2, 30*time.Second)
	if n := e.count(t, q); n != 4 {
		t.Errorf("ApproximateCount after receiving 2 = %d, want 4: invisible messages count", n)
	}
	for _, m := range msgs {
		checkNoErr(t, "DeleteMessage", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
	}
	if n := e.count(t, q); n != 4-len(msgs) {
		t.Errorf("ApproximateCount after deleting %d = %d, want %d", len(msgs), n, 4-len(msgs))
	}
}

// testQueueApproximateCountNotBelowLive: Azure documents the count as "not
// lower than the actual number"; expired messages may stay counted until the
// service collects them, but a live message, visible, received or delayed,
// is always counted.
func testQueueApproximateCountNotBelowLive(t *testing.T, e *env) {
	q := e.newQueue(t)
	r := e.send(t, q, "received", storeadapter.SendOptions{})
	e.receiveOne(t, q, time.Hour, r.ID, "received", 1)
	for i := range 3 {
		e.send(t, q, fmt.Sprint("short-lived ", i), storeadapter.SendOptions{TTL: time.Second})
	}
	e.send(t, q, "visible", storeadapter.SendOptions{})
	e.send(t, q, "delayed", storeadapter.SendOptions{VisibilityDelay: time.Hour})
	e.outlast(time.Second)
	if p := e.peek(t, q); len(p) != 1 {
		t.Errorf("Peek after the short TTL returned %d messages, want only the visible one", len(p))
	}
	const live = 3 // received, visible, delayed: the short-lived ones expired
	if n := e.count(t, q); n < live {
		t.Errorf("ApproximateCount = %d with %d live messages (received, visible, delayed) and 3 expired; want at least %d", n, live, live)
	}
}

func testQueueCompetingReceives(t *testing.T, e *env) {
	const messages, workers = 24, 4
	q := e.newQueue(t)
	for i := range messages {
		e.send(t, q, fmt.Sprint(i), storeadapter.SendOptions{})
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		errs []error
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for empty := 0; empty < 2; {
				msgs, err := q.Receive(e.ctx, 5, 30*time.Second)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				for _, m := range msgs {
					seen[m.Text]++
				}
				mu.Unlock()
				if len(msgs) == 0 {
					empty++
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("Receive: %v", err)
	}
	for i := range messages {
		if n := seen[fmt.Sprint(i)]; n != 1 {
			t.Errorf("message %d was received %d times by competing receivers within its visibility timeout, want once", i, n)
		}
	}
}
