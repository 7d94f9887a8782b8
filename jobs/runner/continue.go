package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// MaxContinueDelay caps the delay a handler asks for with
// jobs.ContinueLater. A continuation is sent with the default time to live
// (7 days from its own send), and the delay must be shorter than that; the
// cap leaves it at least a day to be received.
const MaxContinueDelay = storeadapter.DefaultTTL - 24*time.Hour

// continueLater carries out a jobs.ContinueLater (ClassContinue): the
// handler has saved its progress and asks to go on in a later delivery.
//
//  1. Re-send the operation: the same envelope with Continued one higher
//     (and, with an outbox reference, its Since set to the first
//     message's insertion time when it was not yet),
//     in the form it came in (base64 as jobs.Encode writes it, or plain
//     JSON; a base64 text that would pass the 64 KiB message limit goes as
//     plain JSON, which DecodeEnvelope reads too), visible after the
//     handler's After (at most MaxContinueDelay), with the default time to
//     live: each continuation lives 7 days from its own send. It is a new
//     message, so its dequeue count starts at 0: pausing never counts
//     towards MaxDequeueCount, however many times a job continues, and
//     each continuation gets the full number of deliveries for its own
//     failures.
//  2. Delete the delivered message with the newest pop receipt (a "not
//     found" is done, as for a success).
//  3. Drop its failure record, best effort (as a success does).
//
// When step 1 fails (after the acknowledgement's retries), or the
// envelope cannot be re-encoded within the message limit, it returns the
// error and sends nothing; the caller takes the transient-failure path
// with it: the attempt is recorded and the delivered message retried after
// RetryDelay (or poisoned once its deliveries reach MaxDequeueCount, like
// any transient failure), and its next delivery resumes from the saved
// checkpoint.
//
// A crash or a failed delete between steps 1 and 2 leaves two messages of
// the operation: the new one and, once its lease runs out, the delivered
// one. Both resume from the same checkpoint, every handler tolerates two
// workers of one operation, and once the operation is done both end as
// successes — but an old copy whose delivery was its last (always with
// MaxDequeueCount 1) comes back over-delivered and is poisoned without
// running, the operation going on in its continuation. A lost send reply that the acknowledgement retries can add
// one more the same way. The copies do not multiply on their own: each
// delivery re-sends at most one continuation (barring lost replies) and
// deletes itself.
func (r *Runner) continueLater(ctx context.Context, h *held, e Event, env jobs.Envelope, receipt string, until time.Time) (Event, error) {
	c := &r.cfg
	ce, _ := jobs.AsContinue(e.Err)
	env.Continued++
	if env.Outbox != nil && env.Outbox.Since.IsZero() {
		// The window runs from the operation's first message, whatever
		// re-sends it (see runOutbox).
		o := *env.Outbox
		o.Since = h.m.Inserted
		env.Outbox = &o
	}
	text, err := reencode(env, h.m.Text)
	if err != nil {
		return e, err
	}
	delay := min(max(ce.After, 0), MaxContinueDelay) // a ContinueError built by hand may hold any After
	var sent storeadapter.Sent
	err = r.acknowledge(until, func(actx context.Context, _ bool) error {
		var err error
		sent, err = c.Queue.Send(actx, text, storeadapter.SendOptions{VisibilityDelay: delay, TTL: storeadapter.DefaultTTL})
		return err
	})
	if err != nil {
		return e, fmt.Errorf("continue: re-send the message (continued %d): %w", env.Continued, err)
	}
	e.Continued, e.Delay, e.NextID = env.Continued, delay, sent.ID
	if err := r.delete(h, receipt, until); err != nil {
		return ackFailed(e, "continue", err), nil
	}
	r.forget(ctx, h)
	e.Type = Continued
	return e, nil
}

// reencode renders env as message text in the form of text, the message
// it came in: base64 (jobs.Encode) or plain JSON. A base64 text over the
// message limit goes as plain JSON; an error says that even that does not
// fit.
func reencode(env jobs.Envelope, text string) (string, error) {
	if !strings.HasPrefix(strings.TrimSpace(text), "{") { // base64: DecodeEnvelope read it so
		out, err := jobs.Encode(env)
		if err == nil {
			return out, nil
		}
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", fmt.Errorf("continue: encode the envelope: %w", err)
	}
	if len(b) > storeadapter.MaxMessageBytes {
		return "", fmt.Errorf("continue: the envelope with continued %d is %d bytes as plain JSON, over the %d-byte message limit: %w",
			env.Continued, len(b), storeadapter.MaxMessageBytes, errTooLargeToContinue)
	}
	return string(b), nil
}

// errTooLargeToContinue marks an envelope that does not fit a message
// once re-encoded. It is not a storage refusal: the delivered message is
// retried (its progress is saved), not poisoned at once.
var errTooLargeToContinue = errors.New("too large to continue")
