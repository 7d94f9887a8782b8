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
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/internal/text"

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
	propPoisonSends       = "PoisonSends"
	propPoisonMessages    = "PoisonMessages"
	attemptPrefix         = "Attempt"
)

// maxPoisonRefs bounds the poison messages a record lists (PoisonMessages).
// A message is moved once, or a few times after crashes and retries; a
// record that would list more leaves the rest unknown (see Move).
const maxPoisonRefs = 8

// poisonRef names one poison message: its id and the pop receipt its Send
// returned, which deletes it as long as nobody has received it since.
type poisonRef struct {
	ID         string `json:"id"`
	PopReceipt string `json:"popReceipt"`
}

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
	raw         storeadapter.Entity // as read
	rec         Record
	etag        string
	hasOriginal bool      // the Original property is present
	blobETag    string    // the ETag of the blob OriginalRef names; "" in records older than OriginalETag
	requeuingAt time.Time // when a Requeue claimed it
	swept       bool      // a requeue removed its poison messages
	// poisonMsgs are the poison messages Move noted; poisonKnown says
	// they are all of them (every send Move counted was noted).
	poisonMsgs  []poisonRef
	poisonKnown bool
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
	en := entry{rec: r, etag: e.ETag, hasOriginal: hasOriginal, blobETag: str(propOriginalETag), requeuingAt: tm(propRequeuingAt), swept: swept}
	en.raw = e
	en.poisonMsgs, en.poisonKnown = poisonRefs(e)
	return en
}

// poisonRefs returns the poison messages a record lists, and whether they
// are all of its poison messages: the record has the property (records
// written before it have not) and lists as many messages as Move counted
// sends.
func poisonRefs(e storeadapter.Entity) ([]poisonRef, bool) {
	js, ok := e.Properties[propPoisonMessages].(string)
	if !ok {
		return nil, false
	}
	var refs []poisonRef
	if json.Unmarshal([]byte(js), &refs) != nil {
		return nil, false
	}
	sends, _ := e.Properties[propPoisonSends].(int64)
	return refs, int64(len(refs)) >= sends
}

// encodeRefs returns the PoisonMessages property of refs.
func encodeRefs(refs []poisonRef) string {
	js, _ := json.Marshal(refs) // of strings: cannot fail
	return string(js)
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

// Recorder is the worker's side of poison handling: it records failed
// attempts, moves messages to the poison queue and forgets the records of
// messages that succeeded in the end. Its method set is what the runner in
// jobs needs (runner.Poisoner). It holds no state besides its configuration
// and is safe for concurrent use; so are several Recorders on several
// hosts.
type Recorder struct {
	records
}

// NewRecorder returns the Recorder of cfg with its defaults filled in, or
// the error of cfg.Validate.
func NewRecorder(cfg Config) (*Recorder, error) {
	r, err := newRecords(cfg)
	if err != nil {
		return nil, err
	}
	return &Recorder{records: r}, nil
}

// normalize fills an attempt's defaults and bounds its texts: a zero (or
// unstorable) time becomes now, an empty host this host.
func (r *Recorder) normalize(a Attempt) Attempt {
	if y := a.Time.UTC().Year(); y < 1601 || y > 9999 {
		a.Time = r.now()
	}
	a.Time = storeadapter.DateTime(a.Time)
	if a.Host == "" {
		a.Host = r.cfg.Host
	}
	a.Host = text.Truncate(a.Host, maxNameChars)
	a.Error = text.Truncate(a.Error, MaxErrorChars)
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
		excess := storeadapter.UTF16Len(s) - maxAttemptChars
		if excess <= 0 || a.Error == "" {
			return s, nil
		}
		// Every character of the error takes at least one unit of JSON.
		if n := utf8.RuneCountInString(a.Error) - excess - 1; n >= 2 {
			a.Error = text.Truncate(a.Error, n)
		} else {
			a.Error = ""
		}
	}
}

// fitsProperty reports whether s can be stored as a string property.
func fitsProperty(s string) bool {
	return utf8.ValidString(s) && storeadapter.UTF16Len(s) <= storeadapter.MaxStringChars
}

// failureProps returns the properties RecordAttempt and Move both merge
// into a record for a normalized attempt. They hold no State: Move adds it.
func (r *Recorder) failureProps(f Failure, a Attempt) (map[string]any, error) {
	js, err := encodeAttempt(a)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		propQueue:                   r.cfg.Source.Name(),
		propOpID:                    text.Truncate(f.OpID, maxNameChars),
		propKind:                    text.Truncate(f.Kind, maxNameChars),
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
func (r *Recorder) RecordAttempt(ctx context.Context, f Failure) error {
	a := r.normalize(f.Attempt)
	props, err := r.failureProps(f, a)
	if err == nil {
		e := storeadapter.Entity{PartitionKey: f.MessageID, RowKey: recordRowKey, Properties: props}
		err = idempotent.CreateOnMissing(ctx, r.createTable, func(ctx context.Context) error {
			_, err := r.cfg.Tables.UpsertEntity(ctx, r.cfg.Table, e, storeadapter.Merge)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("poison: record attempt %d of message %s: %w", a.DequeueCount, f.MessageID, err)
	}
	return nil
}

// createTable creates the records table unless it exists: the create step
// of idempotent.CreateOnMissing.
func (r records) createTable(ctx context.Context) error {
	return idempotent.EnsureTable(ctx, r.cfg.Tables, r.cfg.Table)
}

// Forget deletes the failure record of a message that succeeded after
// failed attempts, so records of transient trouble do not pile up. A record
// in any state but failing is kept (a competing worker may have poisoned
// the message meanwhile), and the delete is conditional on the ETag read,
// so a concurrent Move is never undone. A missing record is success.
func (r *Recorder) Forget(ctx context.Context, messageID string) error {
	en, err := r.get(ctx, messageID)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("poison: forget %s: %w", messageID, err)
	}
	if en.rec.State != StateFailing {
		return nil
	}
	err = r.cfg.Tables.DeleteEntity(ctx, r.cfg.Table, messageID, recordRowKey, en.etag)
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
func (r *Recorder) LastAttempt(ctx context.Context, messageID string) (Attempt, bool, error) {
	en, err := r.get(ctx, messageID)
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

// get reads one record. An id in a reserved partition (drop records) has
// none.
func (r records) get(ctx context.Context, id string) (entry, error) {
	if reservedPartition(id) {
		return entry{}, fmt.Errorf("%q is no message id: %w", id, storeadapter.ErrNotFound)
	}
	e, err := r.cfg.Tables.GetEntity(ctx, r.cfg.Table, id, recordRowKey)
	if err != nil {
		return entry{}, err
	}
	return decodeEntry(e), nil
}
