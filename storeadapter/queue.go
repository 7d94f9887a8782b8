package storeadapter

import (
	"context"
	"time"
)

// Queue is one Azure Storage queue. Messages are text (tablekeeper sends
// base64; see ValidateMessageText). Every method validates its input first
// and returns ErrInvalidInput or ErrTooLarge without calling the service.
// A missing queue is ErrQueueNotFound (which wraps ErrNotFound) for every
// method but Create and Delete; a missing message is plain ErrNotFound.
// Transient service failures wrap ErrUnavailable (see IsTransient).
type Queue interface {
	// Name returns the queue's name.
	Name() string
	// Create creates the queue; it returns nil if the queue exists already.
	Create(ctx context.Context) error
	// Delete deletes the queue and its messages; it returns nil if the
	// queue does not exist.
	Delete(ctx context.Context) error
	// Send adds a message and returns its id and first pop receipt.
	Send(ctx context.Context, text string, o SendOptions) (Sent, error)
	// Receive takes up to n (1–32) visible messages and hides them for the
	// visibility timeout (1 s–7 d). Each message's DequeueCount grows by one
	// and it gets a new pop receipt. It returns an empty slice when no
	// message is visible.
	Receive(ctx context.Context, n int, visibility time.Duration) ([]Message, error)
	// Update hides a received message for visibility (0–7 d; 0 makes it
	// visible now) from now on, sets its text (pass the received text to
	// keep it: the service always replaces it), and returns the new pop
	// receipt, which replaces the old one for every later Update or
	// DeleteMessage. It returns ErrNotFound if the message is gone and
	// ErrPopReceiptMismatch if popReceipt is no longer current.
	Update(ctx context.Context, id, popReceipt, text string, visibility time.Duration) (Receipt, error)
	// DeleteMessage deletes a received message. It returns ErrNotFound if
	// the message is gone and ErrPopReceiptMismatch if popReceipt is stale.
	DeleteMessage(ctx context.Context, id, popReceipt string) error
	// Peek returns up to n (1–32) visible messages without hiding them or
	// changing their dequeue counts; PopReceipt is empty.
	Peek(ctx context.Context, n int) ([]Message, error)
	// Clear deletes every message.
	Clear(ctx context.Context) error
	// ApproximateCount returns the approximate number of messages, visible
	// or not.
	ApproximateCount(ctx context.Context) (int, error)
}

// DefaultTTL is the time to live of a message sent with a zero TTL.
const DefaultTTL = 7 * 24 * time.Hour

// NeverExpire as SendOptions.TTL keeps a message until it is deleted.
const NeverExpire time.Duration = -1

// SendOptions tune Send. The zero value sends a message visible at once that
// lives 7 days.
type SendOptions struct {
	// VisibilityDelay hides the new message for 0–7 days.
	VisibilityDelay time.Duration
	// TTL is how long the message lives: at least 1 s, 0 for DefaultTTL,
	// or NeverExpire. It must be longer than VisibilityDelay.
	TTL time.Duration
}

// Sent describes a message just sent. Like every time the Queue port
// returns (Sent, Receipt, Message), its times are whole seconds in UTC: the
// service reports them as RFC 1123 dates.
type Sent struct {
	ID         string
	PopReceipt string
	// NextVisible is when the message becomes visible.
	NextVisible time.Time
	// Expires is when the message expires (zero if it never does).
	Expires time.Time
}

// Receipt is the result of a successful Update.
type Receipt struct {
	PopReceipt  string
	NextVisible time.Time
}

// Message is a received or peeked message.
type Message struct {
	ID   string
	Text string
	// PopReceipt authorises Update and DeleteMessage; empty for peeked ones.
	PopReceipt string
	// DequeueCount is how many times the message has been received,
	// including this time.
	DequeueCount int64
	Inserted     time.Time
	Expires      time.Time // zero if the message never expires
	NextVisible  time.Time
}
