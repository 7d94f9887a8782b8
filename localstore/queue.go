package localstore

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Queue is a handle on one queue of a Store; it implements
// storeadapter.Queue.
type Queue struct {
	s    *Store
	name string
}

// queueState is a queue's messages in a min-heap ordered by the time each
// becomes visible (then by send order), so receive, update and delete are
// O(log n). Expired messages are dropped when they reach the top or are
// touched; their expiry times wait in expired until the garbage collection
// (see ExpiredCountDelay), so ApproximateCount still counts them, as Azure
// does.
type queueState struct {
	byID    map[string]*message
	heap    msgHeap
	seq     uint64
	expired []time.Time
}

type message struct {
	id, text, receipt string
	dequeues          int64
	inserted, expires time.Time // expires zero: never
	visible           time.Time
	seq               uint64
	index             int // position in the heap
}

type msgHeap []*message

func (h msgHeap) Len() int { return len(h) }
func (h msgHeap) Less(i, j int) bool {
	if !h[i].visible.Equal(h[j].visible) {
		return h[i].visible.Before(h[j].visible)
	}
	return h[i].seq < h[j].seq
}
func (h msgHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *msgHeap) Push(x any) {
	m := x.(*message)
	m.index = len(*h)
	*h = append(*h, m)
}
func (h *msgHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

func (m *message) expired(now time.Time) bool { return !m.expires.IsZero() && !now.Before(m.expires) }

// ExpiredCountDelay is how long an expired message stays in ApproximateCount:
// the garbage collection that removes it for good runs this long after it
// expired, on the store's clock. Azure documents only that the count is
// "not lower than the actual number" and that expired messages wait for a
// garbage collection; a few minutes is long enough for a drain that waits for
// a zero count to notice, and short enough for tests on a fake clock.
const ExpiredCountDelay = 5 * time.Minute

func (m *message) public() storeadapter.Message {
	return storeadapter.Message{ID: m.id, Text: m.text, PopReceipt: m.receipt, DequeueCount: m.dequeues,
		Inserted: reported(m.inserted), Expires: reported(m.expires), NextVisible: reported(m.visible)}
}

// reported returns a message time as the service reports it: an RFC 1123
// date, whole seconds (Put Message, Get Messages, Update Message). The
// store keeps the exact times; only what it returns is truncated
// (docs/azure-behaviour.md, "Issue 18 decisions").
func reported(t time.Time) time.Time { return t.Truncate(time.Second) }

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// with runs fn on the queue's state under the queues lock, after counting
// the call and validating the name; a missing queue is ErrQueueNotFound.
func (q *Queue) with(ctx context.Context, op string, fn func(st *queueState, now time.Time) error) error {
	if err := q.s.begin(ctx, op); err != nil {
		return err
	}
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	q.s.queuesMu.Lock()
	defer q.s.queuesMu.Unlock()
	st := q.s.queues[q.name]
	if st == nil {
		return fmt.Errorf("localstore: %s: queue %s: %w", op, q.name, storeadapter.ErrQueueNotFound)
	}
	return fn(st, q.s.time())
}

// Create creates the queue; an existing queue is left as it is.
func (q *Queue) Create(ctx context.Context) error {
	if err := q.s.begin(ctx, "CreateQueue"); err != nil {
		return err
	}
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	q.s.queuesMu.Lock()
	defer q.s.queuesMu.Unlock()
	if q.s.queues[q.name] == nil {
		q.s.queues[q.name] = &queueState{byID: make(map[string]*message)}
	}
	return nil
}

// Delete deletes the queue; a missing queue is not an error.
func (q *Queue) Delete(ctx context.Context) error {
	if err := q.s.begin(ctx, "DeleteQueue"); err != nil {
		return err
	}
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	q.s.queuesMu.Lock()
	delete(q.s.queues, q.name)
	q.s.queuesMu.Unlock()
	return nil
}

// Send adds a message.
func (q *Queue) Send(ctx context.Context, text string, o storeadapter.SendOptions) (storeadapter.Sent, error) {
	if err := storeadapter.ValidateSend(text, o); err != nil {
		return storeadapter.Sent{}, err
	}
	var sent storeadapter.Sent
	err := q.with(ctx, "Send", func(st *queueState, now time.Time) error {
		st.seq++
		m := &message{id: newMessageID(q.s), text: text, receipt: q.s.next(), inserted: now,
			visible: now.Add(time.Duration(storeadapter.Seconds(o.VisibilityDelay)) * time.Second), seq: st.seq}
		switch o.TTL {
		case storeadapter.NeverExpire:
		case 0:
			m.expires = now.Add(storeadapter.DefaultTTL)
		default:
			m.expires = now.Add(time.Duration(storeadapter.Seconds(o.TTL)) * time.Second)
		}
		st.byID[m.id] = m
		heap.Push(&st.heap, m)
		sent = storeadapter.Sent{ID: m.id, PopReceipt: m.receipt, NextVisible: reported(m.visible), Expires: reported(m.expires)}
		return nil
	})
	return sent, err
}

// newMessageID returns a GUID-shaped id unique within the store.
func newMessageID(s *Store) string {
	var g storeadapter.GUID
	n := s.seq.Add(1)
	for i := range 8 {
		g[15-i] = byte(n >> (8 * i))
	}
	g[6] = 0x40 // version nibble, to look like a v4 GUID
	return g.String()
}

// Receive takes up to n visible messages and hides them for visibility.
func (q *Queue) Receive(ctx context.Context, n int, visibility time.Duration) ([]storeadapter.Message, error) {
	if err := storeadapter.ValidateReceive(n, visibility); err != nil {
		return nil, err
	}
	var out []storeadapter.Message
	err := q.with(ctx, "Receive", func(st *queueState, now time.Time) error {
		st.dropExpired(now)
		out = make([]storeadapter.Message, 0, min(n, st.heap.Len()))
		var taken []*message
		for len(out) < n && st.heap.Len() > 0 && !st.heap[0].visible.After(now) {
			m := heap.Pop(&st.heap).(*message)
			if m.expired(now) {
				st.drop(m)
				continue
			}
			m.dequeues++
			m.receipt = q.s.next()
			m.visible = now.Add(time.Duration(storeadapter.Seconds(visibility)) * time.Second)
			out = append(out, m.public())
			taken = append(taken, m)
		}
		for _, m := range taken {
			heap.Push(&st.heap, m)
		}
		return nil
	})
	return out, err
}

// dropExpired removes expired messages at the top of the heap; expired
// messages further down are removed when they surface or are touched.
func (st *queueState) dropExpired(now time.Time) {
	for st.heap.Len() > 0 && st.heap[0].expired(now) {
		st.drop(heap.Pop(&st.heap).(*message))
	}
}

// drop forgets an expired message already out of the heap, keeping its
// expiry for ApproximateCount until the garbage collection.
func (st *queueState) drop(m *message) {
	delete(st.byID, m.id)
	st.expired = append(st.expired, m.expires)
}

// collected reports whether the garbage collection has removed a message
// that expires at expires (zero: never) by now.
func collected(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires.Add(ExpiredCountDelay))
}

// received finds a message by id and checks its pop receipt.
func (st *queueState) received(op, id, receipt string, now time.Time) (*message, error) {
	m := st.byID[id]
	if m != nil && m.expired(now) {
		heap.Remove(&st.heap, m.index)
		st.drop(m)
		m = nil
	}
	if m == nil {
		return nil, fmt.Errorf("localstore: %s message %s: %w", op, id, storeadapter.ErrNotFound)
	}
	if m.receipt != receipt {
		return nil, fmt.Errorf("localstore: %s message %s: %w", op, id, storeadapter.ErrPopReceiptMismatch)
	}
	return m, nil
}

// Update changes a received message's visibility and text and returns
// its new pop receipt.
func (q *Queue) Update(ctx context.Context, id, popReceipt, text string, visibility time.Duration) (storeadapter.Receipt, error) {
	if err := storeadapter.ValidateVisibility("visibility timeout", visibility); err != nil {
		return storeadapter.Receipt{}, err
	}
	if err := storeadapter.ValidateMessageText(text); err != nil {
		return storeadapter.Receipt{}, err
	}
	var rc storeadapter.Receipt
	err := q.with(ctx, "UpdateMessage", func(st *queueState, now time.Time) error {
		m, err := st.received("update", id, popReceipt, now)
		if err != nil {
			return err
		}
		m.text = text
		m.receipt = q.s.next()
		m.visible = now.Add(time.Duration(storeadapter.Seconds(visibility)) * time.Second)
		heap.Fix(&st.heap, m.index)
		rc = storeadapter.Receipt{PopReceipt: m.receipt, NextVisible: reported(m.visible)}
		return nil
	})
	return rc, err
}

// DeleteMessage deletes a received message.
func (q *Queue) DeleteMessage(ctx context.Context, id, popReceipt string) error {
	return q.with(ctx, "DeleteMessage", func(st *queueState, now time.Time) error {
		m, err := st.received("delete", id, popReceipt, now)
		if err != nil {
			return err
		}
		heap.Remove(&st.heap, m.index)
		delete(st.byID, id)
		return nil
	})
}

// Peek returns up to n visible messages without receiving them, in the
// order Receive would take them.
func (q *Queue) Peek(ctx context.Context, n int) ([]storeadapter.Message, error) {
	if n < 1 || n > storeadapter.MaxReceiveCount {
		return nil, fmt.Errorf("%w: count: must be 1-%d, got %d", storeadapter.ErrInvalidInput, storeadapter.MaxReceiveCount, n)
	}
	var out []storeadapter.Message
	err := q.with(ctx, "Peek", func(st *queueState, now time.Time) error {
		st.dropExpired(now)
		// The n first messages of a heap: start from the root and repeatedly
		// take the least candidate, whose children become candidates.
		var cand []int
		if st.heap.Len() > 0 {
			cand = append(cand, 0)
		}
		for len(cand) > 0 && len(out) < n {
			best := 0
			for j := range cand {
				if st.heap.Less(cand[j], cand[best]) {
					best = j
				}
			}
			i := cand[best]
			cand = slices.Delete(cand, best, best+1)
			if st.heap[i].visible.After(now) {
				continue
			}
			if m := st.heap[i]; !m.expired(now) {
				pm := m.public()
				pm.PopReceipt = ""
				out = append(out, pm)
			}
			for _, c := range []int{2*i + 1, 2*i + 2} {
				if c < st.heap.Len() {
					cand = append(cand, c)
				}
			}
		}
		return nil
	})
	return out, err
}

// Clear deletes every message.
func (q *Queue) Clear(ctx context.Context) error {
	return q.with(ctx, "ClearMessages", func(st *queueState, _ time.Time) error {
		st.byID = make(map[string]*message)
		st.heap = nil
		st.expired = nil
		return nil
	})
}

// ApproximateCount returns the number of messages, visible or not,
// including those that expired less than ExpiredCountDelay ago: like
// Azure's, the count is never lower than the number of live messages, and
// expired ones leave it only when the garbage collection runs.
func (q *Queue) ApproximateCount(ctx context.Context) (int, error) {
	var n int
	err := q.with(ctx, "GetQueueProperties", func(st *queueState, now time.Time) error {
		st.expired = slices.DeleteFunc(st.expired, func(t time.Time) bool { return collected(t, now) })
		n = len(st.expired)
		for _, m := range st.heap {
			if !collected(m.expires, now) {
				n++
			}
		}
		return nil
	})
	return n, err
}
