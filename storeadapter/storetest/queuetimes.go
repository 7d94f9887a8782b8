package storetest

import (
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

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
