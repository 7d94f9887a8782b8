package poison

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Move parks a message whose attempt f.Attempt failed for the given reason.
// The poison message's summary covers the attempts recorded so far, so
// Move reads the message's record first, except on the message's first
// delivery (f.Attempt.DequeueCount at most 1): attempts are recorded only
// for deliveries that will be retried, so there is normally no record yet,
// and step 1 inserts it without a read (idempotent.CASOptions.Absent).
// When it finds one after all (a Move retried after its reply was lost),
// it starts step 1 over with that record. Then it takes four steps:
//
//  1. Write into the message's record f.Attempt, State "poisoned", the
//     reason, the summary fields and the original: as the property
//     Original when it fits a string property, and in the blob
//     "<message id>.txt" (written first, the container created if missing)
//     when it does not fit the property or the poison message, with
//     OriginalRef "<container>/<blob>" and OriginalETag, the blob's ETag
//     (Delete and Purge remove only that version of the blob). The same
//     write counts the poison message about to be sent (PoisonSends + 1);
//     it is an ETag-conditional merge (an insert when there is no record),
//     retried by idempotent.UpdateCAS, so no count is lost to a
//     concurrent write. The table is created when the write finds it
//     missing, not before.
//  2. Send the poison message (see the package documentation) to the
//     poison queue, creating the queue when the send finds it missing.
//     It never expires.
//  3. Note the poison message's id and the pop receipt Send returned in
//     the record's PoisonMessages (at most maxPoisonRefs of them), again
//     by compare-and-swap, starting from the record step 1 wrote (no
//     read). With that receipt Requeue, Delete and Purge delete the
//     message directly; while every counted send is noted, they need no
//     sweep of the poison queue. A note that fails does not fail Move
//     (the runner would retry it and send a second poison message): it
//     leaves a send uncounted for, and operators sweep for that record.
//  4. Delete the original from the work queue with popReceipt. A message
//     already gone is fine; a stale receipt returns an error wrapping
//     storeadapter.ErrPopReceiptMismatch: the lease was lost and another
//     worker holds the message.
//
// So a first-delivery poisoning costs five calls (insert, send, note,
// delete; the caller's lease check makes the fifth), a later one six (the
// read), whatever the number of records: no call lists or scans.
//
// Every crash position converges. A crash before or during step 1 changes
// nothing that matters: the blob is rewritten with the same content, the
// record write merges the same values (its send count may grow by one with
// no message sent: it only costs a sweep). After step 1 the original is
// redelivered when its visibility timeout ends, fails again and is
// poisoned again onto the same record (the record key is the message id);
// meanwhile List already shows it, and a Requeue in that window sends a
// copy while the original is still queued, which the handlers absorb (they
// are idempotent by operation id). After step 2 (or 3) the redelivered
// original is poisoned again and a second poison message appears; List
// shows records, one per message id, and Requeue, Delete and Purge remove
// every poison message of that id: the noted ones by id, and when a send
// went unnoted (a crash between 2 and 3), all of them by a sweep.
//
// The caller must hold the message's lease for the whole call: steps 1
// and 2 park the message before step 4 can find the receipt stale, so a
// Move after a lapsed lease would poison a message that is live on another
// worker. The order cannot change (deleting first would lose the message
// on a crash), so the caller confirms the lease right before Move with one
// UpdateMessage of the newest receipt that keeps the message hidden, takes
// the new receipt, and does not poison on ErrPopReceiptMismatch or
// ErrNotFound; the jobs runner does. Poisoning is rare: one call more is
// cheap.
func (r *Recorder) Move(ctx context.Context, f Failure, popReceipt, reason string) error {
	a := r.normalize(f.Attempt)
	wrap := func(step string, err error) error {
		return fmt.Errorf("poison: move message %s: %s: %w", f.MessageID, step, err)
	}
	var start *storeadapter.Entity // the record as read; nil when missing or not read
	if a.DequeueCount > 1 {
		old, err := r.cfg.Tables.GetEntity(ctx, r.cfg.Table, f.MessageID, recordRowKey)
		switch {
		case err == nil:
			start = &old
		case !errors.Is(err, storeadapter.ErrNotFound):
			return wrap("read record", err)
		}
	}
	// Step 1, at most twice: planned without a record that turns out to
	// exist, it starts over with the record found.
	var (
		rec storeadapter.Entity
		msg string
		err error
	)
	for {
		var found *storeadapter.Entity
		rec, msg, found, err = r.park(ctx, f, a, reason, start, a.DequeueCount <= 1 && start == nil)
		if err != nil {
			return err
		}
		if found == nil {
			break
		}
		start = found
	}

	// Step 2: the poison message.
	sent, err := send(ctx, r.cfg.Poison, msg, storeadapter.SendOptions{TTL: storeadapter.NeverExpire})
	if err != nil {
		return wrap("send poison message", err)
	}

	// Step 3: note it in the record, unless the record is gone meanwhile
	// (deleted by an operator: the message is theirs to remove) or full.
	note := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		if cur == nil {
			return nil, nil
		}
		refs, _ := poisonRefs(*cur)
		if len(refs) >= maxPoisonRefs {
			return nil, nil
		}
		refs = append(refs, poisonRef{ID: sent.ID, PopReceipt: sent.PopReceipt})
		return &storeadapter.Entity{PartitionKey: f.MessageID, RowKey: recordRowKey,
			Properties: map[string]any{propPoisonMessages: encodeRefs(refs)}}, nil
	}
	_, _ = idempotent.UpdateCAS(ctx, r.cfg.Tables, r.cfg.Table, f.MessageID, recordRowKey, note, idempotent.CASOptions{Start: &rec})

	// Step 4: the original leaves the work queue.
	err = r.cfg.Source.DeleteMessage(ctx, f.MessageID, popReceipt)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		return wrap("delete original", err)
	}
	return nil
}

// errReplan ends the write of park's step 1 when it planned without a
// record and found one: Move starts over with it.
var errReplan = errors.New("poison: record found where none was expected")

// park is Move's step 1: it writes the original (to the blob when needed)
// and the record, counting one more send, and returns the record as
// written with the poison message's text. start is the record as read (nil:
// missing or not read); absent says it was not read because none is
// expected. When absent and a record is there after all, park writes
// nothing and returns it as found, to plan again with.
func (r *Recorder) park(ctx context.Context, f Failure, a Attempt, reason string, start *storeadapter.Entity, absent bool) (rec storeadapter.Entity, msg string, found *storeadapter.Entity, err error) {
	wrap := func(step string, err error) error {
		return fmt.Errorf("poison: move message %s: %s: %w", f.MessageID, step, err)
	}
	s := Summary{MessageID: f.MessageID, OpID: text.Truncate(f.OpID, maxNameChars), Kind: text.Truncate(f.Kind, maxNameChars),
		Reason: text.Truncate(reason, MaxErrorChars), DequeueCount: a.DequeueCount, FirstAttempt: a.Time, LastAttempt: a.Time,
		Host: a.Host, Queue: r.cfg.Source.Name()}
	if start != nil {
		old := decodeEntry(*start).rec
		s.DequeueCount = max(s.DequeueCount, old.DequeueCount)
		if !old.FirstAttempt.IsZero() && old.FirstAttempt.Before(s.FirstAttempt) {
			s.FirstAttempt = old.FirstAttempt
		}
		if old.LastAttempt.After(s.LastAttempt) {
			s.LastAttempt = old.LastAttempt
		}
	}

	// The original (blob first), then the record.
	fits := fitsProperty(f.Text)
	if fits {
		if msg, err = encodeMessage(s, f.Text, ""); err != nil {
			return rec, "", nil, err
		}
	}
	ref, blobETag := "", ""
	if !fits || len(msg) > storeadapter.MaxMessageBytes {
		if ref, blobETag, err = r.putOriginal(ctx, f.MessageID, f.Text); err != nil {
			return rec, "", nil, wrap("store original", err)
		}
		if msg, err = encodeMessage(s, "", ref); err != nil {
			return rec, "", nil, err
		}
	}
	props, err := r.failureProps(f, a)
	if err != nil {
		return rec, "", nil, wrap("encode attempt", err)
	}
	props[propState] = StatePoisoned
	props[propReason] = s.Reason
	if fits {
		props[propOriginal] = f.Text
	}
	if ref != "" {
		props[propOriginalRef] = ref
		props[propOriginalETag] = blobETag
	}
	countSend := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		if cur != nil && absent {
			found = cur
			return nil, errReplan
		}
		p := maps.Clone(props)
		p[propPoisonSends] = int64(1)
		if cur != nil {
			n, _ := cur.Properties[propPoisonSends].(int64)
			p[propPoisonSends] = n + 1
		}
		return &storeadapter.Entity{PartitionKey: f.MessageID, RowKey: recordRowKey, Properties: p}, nil
	}
	err = idempotent.CreateOnMissing(ctx, r.createTable, func(ctx context.Context) (err error) {
		rec, err = idempotent.UpdateCAS(ctx, r.cfg.Tables, r.cfg.Table, f.MessageID, recordRowKey, countSend,
			idempotent.CASOptions{Start: start, Absent: absent})
		start = nil // a retry after creating the table reads again, unless absent
		return err
	})
	switch {
	case errors.Is(err, errReplan):
		return rec, "", found, nil
	case err != nil:
		return rec, "", nil, wrap("write record", err)
	}
	return rec, msg, nil, nil
}

// send sends a message, creating the queue when it is missing, and returns
// what Send returned.
func send(ctx context.Context, q storeadapter.Queue, text string, o storeadapter.SendOptions) (storeadapter.Sent, error) {
	var sent storeadapter.Sent
	err := idempotent.CreateOnMissing(ctx, q.Create, func(ctx context.Context) (err error) {
		sent, err = q.Send(ctx, text, o)
		return err
	})
	return sent, err
}

// blobName returns the blob that holds a message's original.
func blobName(messageID string) string { return messageID + ".txt" }

// putOriginal writes an original to its blob, creating the container when
// it is missing, and returns its reference "<container>/<blob>" and its
// ETag. Writing the same original twice leaves the same content under a
// new ETag.
func (r *Recorder) putOriginal(ctx context.Context, messageID, text string) (ref, etag string, err error) {
	name := blobName(messageID)
	o := storeadapter.PutOptions{ContentType: originalContentType}
	err = idempotent.CreateOnMissing(ctx, r.cfg.Blobs.Create, func(ctx context.Context) (err error) {
		etag, err = r.cfg.Blobs.Put(ctx, name, []byte(text), o)
		return err
	})
	if err != nil {
		return "", "", err
	}
	return r.cfg.Blobs.Name() + "/" + name, etag, nil
}
