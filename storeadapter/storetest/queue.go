package storetest

import (
	"context"
	"fmt"
	"strings"
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

func testQueueInvalidNames(t *testing.T, e *env) {
	names := []string{"", "ab", "Abc", "a_b", "a--b", "-ab", "ab-", "a b", "qé-x", strings.Repeat("q", 64)}
	for _, name := range names {
		q := e.h.Store.Queue(name)
		calls := []struct {
			op  string
			err error
		}{
			{"Create", q.Create(e.ctx)},
			{"Delete", q.Delete(e.ctx)},
			{"Send", second(q.Send(e.ctx, "x", storeadapter.SendOptions{}))},
			{"Receive", second(q.Receive(e.ctx, 1, time.Second))},
			{"Update", second(q.Update(e.ctx, "id", "receipt", "x", time.Second))},
			{"DeleteMessage", q.DeleteMessage(e.ctx, "id", "receipt")},
			{"Peek", second(q.Peek(e.ctx, 1))},
			{"Clear", q.Clear(e.ctx)},
			{"ApproximateCount", second(q.ApproximateCount(e.ctx))},
		}
		for _, c := range calls {
			checkErr(t, fmt.Sprintf("%s on queue %q", c.op, name), c.err, storeadapter.ErrInvalidInput)
		}
	}
	// The longest valid name, with a hyphen and digits, works.
	name := uniqueName("q")
	name += strings.Repeat("9", 63-len(name))
	q := e.h.Store.Queue(name)
	checkNoErr(t, "Create of a 63-character name", q.Create(e.ctx))
	checkNoErr(t, "Delete of a 63-character name", q.Delete(e.ctx))
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

func testQueueVisibilityTimeout(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "v", storeadapter.SendOptions{})
	m := e.receiveOne(t, q, time.Second, s.ID, "v", 1)
	e.receiveNone(t, q, "right after a receive")
	if p := e.peek(t, q); len(p) != 0 {
		t.Errorf("Peek of an invisible message returned %d messages, want none", len(p))
	}
	if n := e.count(t, q); n != 1 {
		t.Errorf("ApproximateCount with one invisible message = %d, want 1", n)
	}
	if e.fake() {
		e.h.Advance(999 * time.Millisecond)
		e.receiveNone(t, q, "999 ms into a 1 s visibility timeout")
		e.h.Advance(time.Millisecond)
	} else {
		e.outlast(time.Second)
	}
	m2 := e.receiveOne(t, q, 30*time.Second, s.ID, "v", 2)
	if m2.PopReceipt == m.PopReceipt {
		t.Errorf("second receive returned the first receipt %q", m.PopReceipt)
	}
	// The first receiver's lease is gone.
	checkErr(t, "DeleteMessage with the first receive's receipt", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt), storeadapter.ErrPopReceiptMismatch)
	checkNoErr(t, "DeleteMessage with the second receive's receipt", q.DeleteMessage(e.ctx, m2.ID, m2.PopReceipt))
}

func testQueueUpdateVisibleNow(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "old", storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, "old", 1)
	rc, err := q.Update(e.ctx, m.ID, m.PopReceipt, "new text", 0)
	if err != nil {
		t.Fatalf("Update(new text, 0): %v", err)
	}
	if e.fake() && rc.NextVisible.After(e.now()) {
		t.Errorf("Update(0) NextVisible = %v, after now %v", rc.NextVisible, e.now())
	}
	m = e.receiveOne(t, q, 30*time.Second, s.ID, "new text", 2)
	// Passing the received text back keeps it.
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, m.Text, 0); err != nil {
		t.Fatalf("Update(same text, 0): %v", err)
	}
	m = e.receiveOne(t, q, 30*time.Second, s.ID, "new text", 3)
	// An empty text replaces it too.
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, "", 0); err != nil {
		t.Fatalf("Update(empty text, 0): %v", err)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, "", 4)
}

func testQueueUpdateHides(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "h", storeadapter.SendOptions{})
	m := e.receiveOne(t, q, time.Second, s.ID, "h", 1)
	before := e.now()
	rc, err := q.Update(e.ctx, m.ID, m.PopReceipt, m.Text, 30*time.Second)
	if err != nil {
		t.Fatalf("Update(30 s): %v", err)
	}
	e.checkRecent(t, "Receipt.NextVisible - 30 s", rc.NextVisible.Add(-30*time.Second), before, e.now())
	// Past the receive's 1 s timeout, the update's 30 s still hide it.
	e.outlast(time.Second)
	e.receiveNone(t, q, "after the receive's timeout, within the update's")
	if e.fake() {
		e.h.Advance(30 * time.Second)
		e.receiveOne(t, q, 30*time.Second, s.ID, "h", 2)
	}
}

func testQueueSendDelay(t *testing.T, e *env) {
	q := e.newQueue(t)
	before := e.now()
	s := e.send(t, q, "later", storeadapter.SendOptions{VisibilityDelay: time.Second})
	e.checkRecent(t, "Sent.NextVisible - 1 s", s.NextVisible.Add(-time.Second), before, e.now())
	e.receiveNone(t, q, "within the send delay")
	if p := e.peek(t, q); len(p) != 0 {
		t.Errorf("Peek within the send delay returned %d messages, want none", len(p))
	}
	if n := e.count(t, q); n != 1 {
		t.Errorf("ApproximateCount with one delayed message = %d, want 1", n)
	}
	e.outlast(time.Second)
	e.receiveOne(t, q, 30*time.Second, s.ID, "later", 1)
}

func testQueueTTL(t *testing.T, e *env) {
	q := e.newQueue(t)
	before := e.now()
	s := e.send(t, q, "short-lived", storeadapter.SendOptions{TTL: time.Second})
	e.checkRecent(t, "Sent.Expires - 1 s", s.Expires.Add(-time.Second), before, e.now())
	keep := e.send(t, q, "kept", storeadapter.SendOptions{})
	if e.fake() {
		// Against a real service the 1 s may be nearly gone already.
		if p := e.peek(t, q); len(p) != 2 {
			t.Errorf("Peek before the TTL returned %d messages, want 2", len(p))
		}
		e.h.Advance(999 * time.Millisecond)
		if p := e.peek(t, q); len(p) != 2 {
			t.Errorf("Peek 999 ms into a 1 s TTL returned %d messages, want 2", len(p))
		}
		e.h.Advance(time.Millisecond)
	} else {
		e.outlast(time.Second)
	}
	if p := e.peek(t, q); len(p) != 1 || p[0].ID != keep.ID {
		t.Errorf("Peek after the TTL returned %d messages, want only %q", len(p), "kept")
	}
	e.receiveOne(t, q, 30*time.Second, keep.ID, "kept", 1)
	e.receiveNone(t, q, "after the TTL")
	checkItemNotFound(t, "DeleteMessage of an expired message", q.DeleteMessage(e.ctx, s.ID, s.PopReceipt))
}

func testQueueNeverExpire(t *testing.T, e *env) {
	q := e.newQueue(t)
	s := e.send(t, q, "forever", storeadapter.SendOptions{TTL: storeadapter.NeverExpire})
	if !s.Expires.IsZero() {
		t.Errorf("Sent.Expires of a message that never expires = %v, want zero", s.Expires)
	}
	if e.fake() {
		e.h.Advance(30 * 24 * time.Hour)
	}
	m := e.receiveOne(t, q, 30*time.Second, s.ID, "forever", 1)
	if !m.Expires.IsZero() {
		t.Errorf("Message.Expires of a message that never expires = %v, want zero", m.Expires)
	}
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

func testQueueInvalidArguments(t *testing.T, e *env) {
	q := e.h.Store.Queue(uniqueName("q")) // missing: validation answers first
	week := storeadapter.MaxVisibility
	calls := []struct {
		name string
		err  error
	}{
		{"Receive of 0", second(q.Receive(e.ctx, 0, time.Second))},
		{"Receive of 33", second(q.Receive(e.ctx, storeadapter.MaxReceiveCount+1, time.Second))},
		{"Receive of -1", second(q.Receive(e.ctx, -1, time.Second))},
		{"Receive with visibility 0", second(q.Receive(e.ctx, 1, 0))},
		{"Receive with visibility 999 ms", second(q.Receive(e.ctx, 1, 999*time.Millisecond))},
		{"Receive with visibility 7 d + 1 s", second(q.Receive(e.ctx, 1, week+time.Second))},
		{"Receive with negative visibility", second(q.Receive(e.ctx, 1, -time.Second))},
		{"Peek of 0", second(q.Peek(e.ctx, 0))},
		{"Peek of 33", second(q.Peek(e.ctx, storeadapter.MaxReceiveCount+1))},
		{"Update with visibility -1 s", second(q.Update(e.ctx, "id", "receipt", "x", -time.Second))},
		{"Update with visibility 7 d + 1 s", second(q.Update(e.ctx, "id", "receipt", "x", week+time.Second))},
		{"Send with delay -1 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: -time.Second}))},
		{"Send with delay 7 d + 1 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: week + time.Second}))},
		{"Send with TTL 500 ms", second(q.Send(e.ctx, "x", storeadapter.SendOptions{TTL: 500 * time.Millisecond}))},
		{"Send with TTL -2 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{TTL: -2 * time.Second}))},
		{"Send with delay equal to TTL", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: 2 * time.Second, TTL: 2 * time.Second}))},
		{"Send with delay beyond the default TTL", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: week}))},
	}
	for _, c := range calls {
		checkErr(t, c.name, c.err, storeadapter.ErrInvalidInput)
	}
}

func testQueueMessageSize(t *testing.T, e *env) {
	missing := e.h.Store.Queue(uniqueName("q"))
	big := []struct {
		name, text string
	}{
		{"65537 ASCII bytes", strings.Repeat("a", storeadapter.MaxMessageBytes+1)},
		// 21846 characters, but 65538 bytes: the limit counts UTF-8 bytes.
		{"21846 euro signs", strings.Repeat("€", storeadapter.MaxMessageBytes/3+1)},
	}
	for _, b := range big {
		_, err := missing.Send(e.ctx, b.text, storeadapter.SendOptions{})
		checkErr(t, "Send of "+b.name, err, storeadapter.ErrTooLarge)
		_, err = missing.Update(e.ctx, "id", "receipt", b.text, 0)
		checkErr(t, "Update with "+b.name, err, storeadapter.ErrTooLarge)
	}

	q := e.newQueue(t)
	largest := strings.Repeat("a", storeadapter.MaxMessageBytes)
	s := e.send(t, q, largest, storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, largest, 1)
	mixed := strings.Repeat("€", storeadapter.MaxMessageBytes/3) + "a" // 65536 bytes
	if e.h.Azurite {
		// Azurite decodes each chunk of a request body as UTF-8 on its own,
		// so a "€" split across a chunk boundary becomes replacement
		// characters and the text outgrows the limit (413). The byte count
		// was validated above; send ASCII of the same length here.
		mixed = strings.Repeat("b", storeadapter.MaxMessageBytes)
	}
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, mixed, 0); err != nil {
		t.Fatalf("Update with 65536 bytes of text: %v", err)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, mixed, 2)
}

func testQueueMessageText(t *testing.T, e *env) {
	missing := e.h.Store.Queue(uniqueName("q"))
	for _, text := range []string{"\x00", "a\x01b", "\x1f", "x\x08", "\ufffe", "\uffff", "a\xffb"} {
		_, err := missing.Send(e.ctx, text, storeadapter.SendOptions{})
		checkErr(t, fmt.Sprintf("Send(%q)", text), err, storeadapter.ErrInvalidInput)
		_, err = missing.Update(e.ctx, "id", "receipt", text, 0)
		checkErr(t, fmt.Sprintf("Update with text %q", text), err, storeadapter.ErrInvalidInput)
	}

	q := e.newQueue(t)
	for _, text := range []string{
		"",
		"eyJ2IjoxLCJpZCI6Im9wLTEiLCJraW5kIjoiYXJjaGl2ZSJ9", // base64, as tablekeeper sends
		`{"v":1,"id":"op-1","kind":"archive","args":{"table":"T"}}`,
		"tab\t newline\n CR\r <xml> & \"quotes\" 'apos' ]]> é 日本 😀 \u0085",
	} {
		s := e.send(t, q, text, storeadapter.SendOptions{})
		m := e.receiveOne(t, q, 30*time.Second, s.ID, text, 1)
		checkNoErr(t, "DeleteMessage", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
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

// testQueueWholeSecondTimes: the queue service reports InsertionTime,
// ExpirationTime and TimeNextVisible as RFC 1123 dates (Put Message, Get
// Messages, Update Message), so every time a Queue returns is a whole
// second, whatever the clock's fraction when the call ran
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testQueueWholeSecondTimes(t *testing.T, e *env) {
	q := e.newQueue(t)
	if e.fake() {
		e.h.Advance(1234567 * time.Microsecond) // certainly within a second
	}
	whole := func(what string, tm time.Time) {
		t.Helper()
		if tm.IsZero() || tm.Nanosecond() != 0 {
			t.Errorf("%s = %v, want a whole second", what, tm)
		}
	}
	s := e.send(t, q, "a", storeadapter.SendOptions{TTL: time.Hour})
	whole("Sent.NextVisible", s.NextVisible)
	whole("Sent.Expires", s.Expires)
	delayed := e.send(t, q, "b", storeadapter.SendOptions{VisibilityDelay: time.Hour})
	whole("Sent.NextVisible of a delayed message", delayed.NextVisible)
	for _, m := range e.peek(t, q) {
		whole("peeked Message.Inserted", m.Inserted)
		whole("peeked Message.Expires", m.Expires)
	}
	m := e.receiveOne(t, q, 30*time.Second, s.ID, "a", 1)
	whole("Message.Inserted", m.Inserted)
	whole("Message.Expires", m.Expires)
	whole("Message.NextVisible", m.NextVisible)
	if e.fake() {
		e.h.Advance(2345678 * time.Microsecond)
	}
	rc, err := q.Update(e.ctx, m.ID, m.PopReceipt, "a2", 30*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	whole("Receipt.NextVisible", rc.NextVisible)
}

// testQueueLargestMultiByteMessage: the limit is 64 KiB of UTF-8 (Put
// Message: "The encoded message can be up to 64 KB"), so 21,845 euro signs
// (65,535 bytes) are sent, received and updated whole
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testQueueLargestMultiByteMessage(t *testing.T, e *env) {
	text := strings.Repeat("€", storeadapter.MaxMessageBytes/3) // 65,535 bytes
	if e.h.Azurite {
		t.Skip("Azurite decodes each chunk of a request body as UTF-8 on its own, so a \"€\" split across a chunk " +
			"boundary becomes replacement characters and the text outgrows the limit (413); Azure takes 64 KiB of " +
			"UTF-8 (docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	q := e.newQueue(t)
	s := e.send(t, q, text, storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, text, 1)
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, text, 0); err != nil {
		t.Fatalf("Update with %d bytes of euro signs: %v", len(text), err)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, text, 2)
}
