package poison

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// recordRowKey is the RowKey of every record; the PartitionKey is the
// original message id.
const recordRowKey = "record"

// Record properties. Attempts are stored as attemptPrefix + three digits.
const (
	propQueue             = "Queue"
	propOpID              = "OpID"
	propKind              = "Kind"
	propState             = "State"
	propReason            = "Reason"
	propDequeueCount      = "DequeueCount"
	propLastAttempt       = "LastAttempt"
	propLastError         = "LastError"
	propHost              = "Host"
	propOriginal          = "Original"
	propOriginalRef       = "OriginalRef"
	propOriginalETag      = "OriginalETag"
	propRequeuingAt       = "RequeuingAt"
	propRequeuedAt        = "RequeuedAt"
	propRequeuedBy        = "RequeuedBy"
	propRequeuedMessageID = "RequeuedMessageID"
	propSwept             = "PoisonSwept"
	attemptPrefix         = "Attempt"
)

// maxAttemptChars bounds the JSON of one attempt property, in UTF-16 code
// units (as Azure counts string sizes). With MaxAttempts of them, a
// 32,768-character Original and the other properties at their bounds, a
// record stays under 1 MiB (TestRecordWorstCaseFits checks it): 200 ×
// (32 + 2 × 2,200) bytes of attempts leave about 160 KiB for the rest.
const maxAttemptChars = 2200

// originalContentType is the content type of an original stored in a blob.
const originalContentType = "text/plain; charset=utf-8"

// Record is a poison record as the inspection API returns it.
type Record struct {
	// MessageID is the original queue message id, the record's key.
	MessageID string
	// Queue is the work queue the message came from.
	Queue string
	// OpID and Kind come from the envelope ("" when it did not decode).
	OpID, Kind string
	// Reason says why the message was poisoned ("" while failing).
	Reason string
	// State is StateFailing, StatePoisoned, StateRequeuing or
	// StateRequeued.
	State string
	// Host is the worker of the last recorded attempt.
	Host string
	// DequeueCount is the highest dequeue count recorded.
	DequeueCount int64
	// FirstAttempt and LastAttempt bound the recorded attempts.
	FirstAttempt, LastAttempt time.Time
	// LastError is the error of the last recorded attempt.
	LastError string
	// Attempts are the recorded attempts, sorted by DequeueCount (at most
	// MaxAttempts; the last one is the latest beyond that).
	Attempts []Attempt
	// Original is the original text ("" when only OriginalRef is set and
	// the blob was not loaded).
	Original string
	// OriginalRef is "<container>/<blob>" when the original is also (or
	// only) stored in a blob.
	OriginalRef string
	// RequeuedAt and RequeuedBy say when and by which host the record was
	// last claimed for requeueing or requeued; RequeuedMessageID is the id
	// of the message the requeue sent.
	RequeuedAt        time.Time
	RequeuedBy        string
	RequeuedMessageID string
}

// entry is a record with what the inspection API needs besides it.
type entry struct {
	rec         Record
	etag        string
	hasOriginal bool      // the Original property is present
	blobETag    string    // the ETag of the blob OriginalRef names; "" in records older than OriginalETag
	requeuingAt time.Time // when a Requeue claimed it
	swept       bool      // a requeue removed its poison messages
}

// decodeEntry reads a record entity. Attempt properties that do not decode
// are skipped: the rest of the record is still worth showing.
func decodeEntry(e storeadapter.Entity) entry {
	p := e.Properties
	str := func(name string) string { s, _ := p[name].(string); return s }
	tm := func(name string) time.Time { t, _ := p[name].(time.Time); return t }
	r := Record{
		MessageID:         e.PartitionKey,
		Queue:             str(propQueue),
		OpID:              str(propOpID),
		Kind:              str(propKind),
		Reason:            str(propReason),
		State:             cmp.Or(str(propState), StateFailing),
		Host:              str(propHost),
		LastAttempt:       tm(propLastAttempt),
		LastError:         str(propLastError),
		Original:          str(propOriginal),
		OriginalRef:       str(propOriginalRef),
		RequeuedAt:        tm(propRequeuedAt),
		RequeuedBy:        str(propRequeuedBy),
		RequeuedMessageID: str(propRequeuedMessageID),
	}
	r.DequeueCount, _ = p[propDequeueCount].(int64)
	for name, v := range p {
		s, ok := v.(string)
		if !ok || !isAttemptName(name) {
			continue
		}
		var a Attempt
		if json.Unmarshal([]byte(s), &a) == nil {
			a.Time = storeadapter.DateTime(a.Time)
			r.Attempts = append(r.Attempts, a)
		}
	}
	slices.SortFunc(r.Attempts, func(a, b Attempt) int {
		return cmp.Or(cmp.Compare(a.DequeueCount, b.DequeueCount), a.Time.Compare(b.Time))
	})
	// Merges may arrive out of order (a late attempt of a worker that lost
	// its lease), so the summary fields are recomputed from the attempts.
	for _, a := range r.Attempts {
		r.DequeueCount = max(r.DequeueCount, a.DequeueCount)
		if a.Time.After(r.LastAttempt) {
			r.LastAttempt = a.Time
		}
		if r.FirstAttempt.IsZero() || a.Time.Before(r.FirstAttempt) {
			r.FirstAttempt = a.Time
		}
	}
	if r.FirstAttempt.IsZero() {
		r.FirstAttempt = r.LastAttempt
	}
	_, hasOriginal := p[propOriginal]
	swept, _ := p[propSwept].(bool)
	return entry{rec: r, etag: e.ETag, hasOriginal: hasOriginal, blobETag: str(propOriginalETag), requeuingAt: tm(propRequeuingAt), swept: swept}
}

// isAttemptName reports whether name is an attempt property: "Attempt"
// followed by three digits.
func isAttemptName(name string) bool {
	d, ok := strings.CutPrefix(name, attemptPrefix)
	if !ok || len(d) != 3 {
		return false
	}
	_, err := strconv.ParseUint(d, 10, 16)
	return err == nil
}

// attemptName returns the property of the attempt with dequeue count n,
// clamped to 1..MaxAttempts.
func attemptName(n int64) string {
	return fmt.Sprintf("%s%03d", attemptPrefix, min(max(n, 1), MaxAttempts))
}

// normalize fills an attempt's defaults and bounds its texts: a zero (or
// unstorable) time becomes now, an empty host this host.
func (m *Mover) normalize(a Attempt) Attempt {
	if y := a.Time.UTC().Year(); y < 1601 || y > 9999 {
		a.Time = m.now()
	}
	a.Time = storeadapter.DateTime(a.Time)
	if a.Host == "" {
		a.Host = m.cfg.Host
	}
	a.Host = truncate(a.Host, maxNameChars)
	a.Error = truncate(a.Error, MaxErrorChars)
	return a
}

// encodeAttempt returns the JSON of a normalized attempt, cutting its error
// further when escapes or wide characters would make it longer than
// maxAttemptChars.
func encodeAttempt(a Attempt) (string, error) {
	for {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(a); err != nil {
			return "", err
		}
		s := strings.TrimSuffix(buf.String(), "\n")
		excess := utf16Len(s) - maxAttemptChars
		if excess <= 0 || a.Error == "" {
			return s, nil
		}
		// Every character of the error takes at least one unit of JSON.
		if n := utf8.RuneCountInString(a.Error) - excess - 1; n >= 2 {
			a.Error = truncate(a.Error, n)
		} else {
			a.Error = ""
		}
	}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// fitsProperty reports whether s can be stored as a string property.
func fitsProperty(s string) bool {
	return utf8.ValidString(s) && utf16Len(s) <= storeadapter.MaxStringChars
}

// failureProps returns the properties RecordAttempt and Move both merge
// into a record for a normalized attempt. They hold no State: Move adds it.
func (m *Mover) failureProps(f Failure, a Attempt) (map[string]any, error) {
	js, err := encodeAttempt(a)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		propQueue:                   m.cfg.Source.Name(),
		propOpID:                    truncate(f.OpID, maxNameChars),
		propKind:                    truncate(f.Kind, maxNameChars),
		propDequeueCount:            a.DequeueCount,
		propLastAttempt:             a.Time,
		propLastError:               a.Error,
		propHost:                    a.Host,
		attemptName(a.DequeueCount): js,
	}, nil
}

// RecordAttempt records one failed attempt of a message that will be
// retried. It merges into the message's record (creating the table on first
// use) the summary fields and the property Attempt<dequeue count> holding
// the attempt's JSON, so recording the same attempt twice writes the same
// values. Attempts with a dequeue count above MaxAttempts overwrite the
// last one.
//
// It writes no State: a record without one reads as StateFailing. So a late
// attempt of a worker that lost its lease, merged after another worker
// poisoned the message, cannot turn the record back to failing and hide it
// from List, and no read is needed to know.
func (m *Mover) RecordAttempt(ctx context.Context, f Failure) error {
	if m.err != nil {
		return m.err
	}
	a := m.normalize(f.Attempt)
	props, err := m.failureProps(f, a)
	if err == nil {
		err = m.upsertMerge(ctx, storeadapter.Entity{PartitionKey: f.MessageID, RowKey: recordRowKey, Properties: props})
	}
	if err != nil {
		return fmt.Errorf("poison: record attempt %d of message %s: %w", a.DequeueCount, f.MessageID, err)
	}
	return nil
}

// upsertMerge merges e into the records table, creating the table when it
// is missing (the merge variant of idempotent.Upsert).
func (m *Mover) upsertMerge(ctx context.Context, e storeadapter.Entity) error {
	_, err := m.cfg.Tables.UpsertEntity(ctx, m.cfg.Table, e, storeadapter.Merge)
	if errors.Is(err, storeadapter.ErrNotFound) {
		if err = idempotent.EnsureTable(ctx, m.cfg.Tables, m.cfg.Table); err == nil {
			_, err = m.cfg.Tables.UpsertEntity(ctx, m.cfg.Table, e, storeadapter.Merge)
		}
	}
	return err
}

// Move parks a message whose attempt f.Attempt failed for the given reason.
// It reads the message's record (if any) for the summary's first attempt
// and highest dequeue count, then takes three steps:
//
//  1. Merge into the message's record f.Attempt, State "poisoned", the
//     reason, the summary fields and the original: as the property
//     Original when it fits a string property, and in the blob
//     "<message id>.txt" (written first, the container created if missing)
//     when it does not fit the property or the poison message, with
//     OriginalRef "<container>/<blob>" and OriginalETag, the blob's ETag
//     (Delete and Purge remove only that version of the blob).
//  2. Send the poison message (see the package documentation) to the
//     poison queue, creating the queue if missing. It never expires.
//  3. Delete the original from the work queue with popReceipt. A message
//     already gone is fine; a stale receipt returns an error wrapping
//     storeadapter.ErrPopReceiptMismatch: the lease was lost and another
//     worker holds the message.
//
// Every crash position converges. A crash before or during step 1 changes
// nothing that matters: the blob is rewritten with the same content, the
// record merge is an upsert. After step 1 the original is redelivered when
// its visibility timeout ends, fails again and is poisoned again onto the
// same record (the record key is the message id); meanwhile List already
// shows it, and a Requeue in that window sends a copy while the original is
// still queued, which the handlers absorb (they are idempotent by operation
// id). After step 2 the redelivered original is poisoned again and a
// second poison message appears; List shows records, one per message id,
// and Requeue, Delete and Purge remove every poison message of that id.
//
// The caller must hold the message's lease for the whole call: steps 1
// and 2 park the message before step 3 can find the receipt stale, so a
// Move after a lapsed lease would poison a message that is live on another
// worker. The order cannot change (deleting first would lose the message
// on a crash), so the caller confirms the lease right before Move with one
// UpdateMessage of the newest receipt that keeps the message hidden, takes
// the new receipt, and does not poison on ErrPopReceiptMismatch or
// ErrNotFound; the jobs runner does. Poisoning is rare: one call more is
// cheap.
func (m *Mover) Move(ctx context.Context, f Failure, popReceipt, reason string) error {
	if m.err != nil {
		return m.err
	}
	a := m.normalize(f.Attempt)
	wrap := func(step string, err error) error {
		return fmt.Errorf("poison: move message %s: %s: %w", f.MessageID, step, err)
	}

	// The summary covers the attempts recorded so far.
	s := Summary{MessageID: f.MessageID, OpID: truncate(f.OpID, maxNameChars), Kind: truncate(f.Kind, maxNameChars),
		Reason: truncate(reason, MaxErrorChars), DequeueCount: a.DequeueCount, FirstAttempt: a.Time, LastAttempt: a.Time,
		Host: a.Host, Queue: m.cfg.Source.Name()}
	old, err := m.cfg.Tables.GetEntity(ctx, m.cfg.Table, f.MessageID, recordRowKey)
	switch {
	case err == nil:
		r := decodeEntry(old).rec
		s.DequeueCount = max(s.DequeueCount, r.DequeueCount)
		if !r.FirstAttempt.IsZero() && r.FirstAttempt.Before(s.FirstAttempt) {
			s.FirstAttempt = r.FirstAttempt
		}
		if r.LastAttempt.After(s.LastAttempt) {
			s.LastAttempt = r.LastAttempt
		}
	case !errors.Is(err, storeadapter.ErrNotFound):
		return wrap("read record", err)
	}

	// Step 1: the original (blob first), then the record.
	text := ""
	fits := fitsProperty(f.Text)
	if fits {
		if text, err = encodeMessage(s, f.Text, ""); err != nil {
			return err
		}
	}
	ref, blobETag := "", ""
	if !fits || len(text) > storeadapter.MaxMessageBytes {
		if ref, blobETag, err = m.putOriginal(ctx, f.MessageID, f.Text); err != nil {
			return wrap("store original", err)
		}
		if text, err = encodeMessage(s, "", ref); err != nil {
			return err
		}
	}
	props, err := m.failureProps(f, a)
	if err != nil {
		return wrap("encode attempt", err)
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
	if err := m.upsertMerge(ctx, storeadapter.Entity{PartitionKey: f.MessageID, RowKey: recordRowKey, Properties: props}); err != nil {
		return wrap("write record", err)
	}

	// Step 2: the poison message.
	if err := sendCreating(ctx, m.cfg.Poison, text, storeadapter.SendOptions{TTL: storeadapter.NeverExpire}); err != nil {
		return wrap("send poison message", err)
	}

	// Step 3: the original leaves the work queue.
	err = m.cfg.Source.DeleteMessage(ctx, f.MessageID, popReceipt)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		return wrap("delete original", err)
	}
	return nil
}

// sendCreating sends a message, creating the queue when it is missing.
func sendCreating(ctx context.Context, q storeadapter.Queue, text string, o storeadapter.SendOptions) error {
	_, err := sendCreatingID(ctx, q, text, o)
	return err
}

// sendCreatingID is sendCreating returning the new message's id.
func sendCreatingID(ctx context.Context, q storeadapter.Queue, text string, o storeadapter.SendOptions) (string, error) {
	sent, err := q.Send(ctx, text, o)
	if errors.Is(err, storeadapter.ErrNotFound) {
		if err = q.Create(ctx); err == nil {
			sent, err = q.Send(ctx, text, o)
		}
	}
	return sent.ID, err
}

// blobName returns the blob that holds a message's original.
func blobName(messageID string) string { return messageID + ".txt" }

// putOriginal writes an original to its blob, creating the container when
// it is missing, and returns its reference "<container>/<blob>" and its
// ETag. Writing the same original twice leaves the same content under a
// new ETag.
func (m *Mover) putOriginal(ctx context.Context, messageID, text string) (ref, etag string, err error) {
	name := blobName(messageID)
	o := storeadapter.PutOptions{ContentType: originalContentType}
	etag, err = m.cfg.Blobs.Put(ctx, name, []byte(text), o)
	if errors.Is(err, storeadapter.ErrNotFound) {
		if err = m.cfg.Blobs.Create(ctx); err == nil {
			etag, err = m.cfg.Blobs.Put(ctx, name, []byte(text), o)
		}
	}
	if err != nil {
		return "", "", err
	}
	return m.cfg.Blobs.Name() + "/" + name, etag, nil
}

// original returns a record's original text: the Original property when
// present, else the blob OriginalRef names.
func (m *Mover) original(ctx context.Context, e entry) (string, error) {
	if e.hasOriginal || e.rec.OriginalRef == "" {
		return e.rec.Original, nil
	}
	container, name, ok := strings.Cut(e.rec.OriginalRef, "/")
	if !ok || container != m.cfg.Blobs.Name() {
		return "", fmt.Errorf("poison: original of %s: reference %q is not in container %s", e.rec.MessageID, e.rec.OriginalRef, m.cfg.Blobs.Name())
	}
	data, _, err := m.cfg.Blobs.Get(ctx, name)
	if err != nil {
		return "", fmt.Errorf("poison: original of %s: read blob %s: %w", e.rec.MessageID, e.rec.OriginalRef, err)
	}
	return string(data), nil
}

// Forget deletes the failure record of a message that succeeded after
// failed attempts, so records of transient trouble do not pile up. A record
// in any state but failing is kept (a competing worker may have poisoned
// the message meanwhile), and the delete is conditional on the ETag read,
// so a concurrent Move is never undone. A missing record is success.
func (m *Mover) Forget(ctx context.Context, messageID string) error {
	if m.err != nil {
		return m.err
	}
	en, err := m.get(ctx, messageID)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("poison: forget %s: %w", messageID, err)
	}
	if en.rec.State != StateFailing {
		return nil
	}
	err = m.cfg.Tables.DeleteEntity(ctx, m.cfg.Table, messageID, recordRowKey, en.etag)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		return fmt.Errorf("poison: forget %s: %w", messageID, err)
	}
	return nil
}

// LastAttempt returns the latest attempt recorded for a message (the one
// with the highest dequeue count), and false when the message has no record
// or its record holds no attempt. The runner puts its error in the reason of
// a message poisoned for its delivery count, whose own last run (if any)
// left no error.
func (m *Mover) LastAttempt(ctx context.Context, messageID string) (Attempt, bool, error) {
	if m.err != nil {
		return Attempt{}, false, m.err
	}
	en, err := m.get(ctx, messageID)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return Attempt{}, false, nil
	}
	if err != nil {
		return Attempt{}, false, fmt.Errorf("poison: last attempt of %s: %w", messageID, err)
	}
	if len(en.rec.Attempts) == 0 {
		return Attempt{}, false, nil
	}
	return en.rec.Attempts[len(en.rec.Attempts)-1], true, nil
}
