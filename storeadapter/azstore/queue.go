package azstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Queue implements storeadapter.Queue over azqueue. Message text is sent as
// it is given: azqueue does not base64-encode (tablekeeper's producers do),
// and ValidateMessageText rejects what XML would silently change.
type Queue struct {
	name string
	c    *azqueue.QueueClient
	callTimeout
	receiveRetry policy.RetryOptions // see Receive
}

var _ storeadapter.Queue = (*Queue)(nil)

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

func (q *Queue) op(verb string) string { return verb + " queue " + q.name }

// Create creates the queue; an existing queue is not an error.
func (q *Queue) Create(ctx context.Context) error {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	_, err := q.c.Create(ctx, nil)
	return interpretError(q.op("create"), err)
}

// Delete deletes the queue; a missing queue is not an error.
func (q *Queue) Delete(ctx context.Context) error {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	_, err := q.c.Delete(ctx, nil)
	err = interpretError(q.op("delete"), err)
	if isNotFound(err) {
		return nil
	}
	return err
}

// Send adds a message.
func (q *Queue) Send(ctx context.Context, text string, o storeadapter.SendOptions) (storeadapter.Sent, error) {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return storeadapter.Sent{}, err
	}
	if err := storeadapter.ValidateSend(text, o); err != nil {
		return storeadapter.Sent{}, err
	}
	opts := &azqueue.EnqueueMessageOptions{VisibilityTimeout: to.Ptr(storeadapter.Seconds(o.VisibilityDelay))}
	switch o.TTL {
	case storeadapter.NeverExpire:
		opts.TimeToLive = to.Ptr(int32(-1))
	case 0:
	default:
		opts.TimeToLive = to.Ptr(storeadapter.Seconds(o.TTL))
	}
	resp, err := q.c.EnqueueMessage(ctx, text, opts)
	if err != nil {
		return storeadapter.Sent{}, interpretError(q.op("send to"), err)
	}
	if len(resp.Messages) == 0 {
		return storeadapter.Sent{}, interpretError(q.op("send to"), errEmptyResponse)
	}
	m := resp.Messages[0]
	sent := storeadapter.Sent{ID: deref(m.MessageID), PopReceipt: deref(m.PopReceipt), NextVisible: tm(m.TimeNextVisible)}
	if o.TTL != storeadapter.NeverExpire {
		sent.Expires = tm(m.ExpirationTime)
	}
	return sent, nil
}

// errEmptyResponse is a successful send whose response lists no message.
var errEmptyResponse = errors.New("the service returned no message")

func isNotFound(err error) bool { return errors.Is(err, storeadapter.ErrNotFound) }

// tm dereferences a time, as UTC.
func tm(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// expires maps the service's "never" (year 9999) to the zero time.
func expires(t *time.Time) time.Time {
	if t == nil || t.Year() >= 9999 {
		return time.Time{}
	}
	return t.UTC()
}

// Receive takes up to n visible messages and hides them for visibility.
//
// The SDK does not retry it, whatever the client's retry options (its try
// timeout still holds): a try whose answer was lost or failed may have
// hidden the messages it was to return, and a retry would silently return
// the next ones instead, leaving those hidden for a whole visibility
// timeout — or, for a message the service cannot return (see
// storeadapter.ErrServiceFailed), for good, with no error ever reaching
// the caller. The caller sees the failure and retries itself.
func (q *Queue) Receive(ctx context.Context, n int, visibility time.Duration) ([]storeadapter.Message, error) {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	ctx = policy.WithRetryOptions(ctx, q.receiveRetry)
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return nil, err
	}
	if err := storeadapter.ValidateReceive(n, visibility); err != nil {
		return nil, err
	}
	resp, err := q.c.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
		NumberOfMessages:  to.Ptr(int32(n)),
		VisibilityTimeout: to.Ptr(storeadapter.Seconds(visibility)),
	})
	if err != nil {
		return nil, interpretError(q.op("receive from"), err)
	}
	out := make([]storeadapter.Message, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		out = append(out, storeadapter.Message{ID: deref(m.MessageID), Text: deref(m.MessageText), PopReceipt: deref(m.PopReceipt),
			DequeueCount: derefInt(m.DequeueCount), Inserted: tm(m.InsertionTime), Expires: expires(m.ExpirationTime), NextVisible: tm(m.TimeNextVisible)})
	}
	return out, nil
}

func derefInt(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

// Update sets a received message's visibility and text and returns the new
// pop receipt. The SDK always replaces the text and, without options, makes
// the message visible at once: both are always passed.
func (q *Queue) Update(ctx context.Context, id, popReceipt, text string, visibility time.Duration) (storeadapter.Receipt, error) {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return storeadapter.Receipt{}, err
	}
	if err := storeadapter.ValidateVisibility("visibility timeout", visibility); err != nil {
		return storeadapter.Receipt{}, err
	}
	if err := storeadapter.ValidateMessageText(text); err != nil {
		return storeadapter.Receipt{}, err
	}
	if err := validateMessageRef(id, popReceipt); err != nil {
		return storeadapter.Receipt{}, err
	}
	resp, err := q.c.UpdateMessage(ctx, id, popReceipt, text, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(storeadapter.Seconds(visibility))})
	if err != nil {
		return storeadapter.Receipt{}, interpretError(q.op("update message "+id+" in"), err)
	}
	return storeadapter.Receipt{PopReceipt: deref(resp.PopReceipt), NextVisible: tm(resp.TimeNextVisible)}, nil
}

// validateMessageRef rejects an empty id or pop receipt, which the SDK
// would turn into a request on the wrong URL.
func validateMessageRef(id, popReceipt string) error {
	if id == "" || popReceipt == "" {
		return fmt.Errorf("%w: message id and pop receipt must not be empty", storeadapter.ErrInvalidInput)
	}
	return nil
}

// DeleteMessage deletes a received message.
func (q *Queue) DeleteMessage(ctx context.Context, id, popReceipt string) error {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	if err := validateMessageRef(id, popReceipt); err != nil {
		return err
	}
	_, err := q.c.DeleteMessage(ctx, id, popReceipt, nil)
	return interpretError(q.op("delete message "+id+" from"), err)
}

// Peek returns up to n visible messages without receiving them.
func (q *Queue) Peek(ctx context.Context, n int) ([]storeadapter.Message, error) {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return nil, err
	}
	if err := storeadapter.ValidateReceive(n, time.Second); err != nil {
		return nil, err
	}
	resp, err := q.c.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(n))})
	if err != nil {
		return nil, interpretError(q.op("peek"), err)
	}
	out := make([]storeadapter.Message, 0, len(resp.Messages))
	for _, m := range resp.Messages {
		out = append(out, storeadapter.Message{ID: deref(m.MessageID), Text: deref(m.MessageText),
			DequeueCount: derefInt(m.DequeueCount), Inserted: tm(m.InsertionTime), Expires: expires(m.ExpirationTime)})
	}
	return out, nil
}

// Clear deletes every message.
func (q *Queue) Clear(ctx context.Context) error {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return err
	}
	_, err := q.c.ClearMessages(ctx, nil)
	return interpretError(q.op("clear"), err)
}

// ApproximateCount returns the approximate number of messages.
func (q *Queue) ApproximateCount(ctx context.Context) (int, error) {
	ctx, cancel := q.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQueueName(q.name); err != nil {
		return 0, err
	}
	resp, err := q.c.GetProperties(ctx, nil)
	if err != nil {
		return 0, interpretError(q.op("count"), err)
	}
	if resp.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*resp.ApproximateMessagesCount), nil
}
