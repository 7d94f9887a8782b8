package poison

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Attempt is one failed run of a message.
type Attempt struct {
	// DequeueCount is the message's dequeue count during this run.
	DequeueCount int64 `json:"n"`
	// Time is when the run started. A zero Time is recorded as the time of
	// the call, which makes a repeated call write a different value: set it.
	Time time.Time `json:"time"`
	// Duration is how long the run took.
	Duration time.Duration `json:"durationNs"`
	// Host names the worker that ran it.
	Host string `json:"host"`
	// Error is the failure, truncated to MaxErrorChars.
	Error string `json:"error"`
}

// Failure describes the message whose attempt failed.
type Failure struct {
	// MessageID is the original queue message id: the record's key.
	MessageID string
	// Text is the original message text, untouched.
	Text string
	// OpID and Kind come from the envelope when it decoded ("" when not).
	OpID, Kind string
	// Attempt is the attempt that just failed.
	Attempt Attempt
}

// MaxErrorChars bounds a stored error or reason text, in characters. A
// longer text is cut and ends with "…".
const MaxErrorChars = 2000

// MaxAttempts is how many attempts a record keeps, one property each:
// Attempt001 to Attempt200. Attempts with a higher dequeue count overwrite
// Attempt200, so a record stays within Azure's 252 properties and 1 MiB.
const MaxAttempts = 200

// RequeueTimeout is how long a record may stay in StateRequeuing before
// another Requeue assumes the one that claimed it crashed and sends the
// original again. Claiming and sending take a few round trips, so a record
// younger than this belongs to a requeue still running.
const RequeueTimeout = 5 * time.Minute

// Record states.
const (
	// StateFailing: attempts failed, but the message is still being retried
	// on the work queue. It is never stored: a record without a State
	// property is failing (see RecordAttempt).
	StateFailing = "failing"
	// StatePoisoned: the message was moved to the poison queue.
	StatePoisoned = "poisoned"
	// StateRequeuing: a Requeue claimed the record and is sending the
	// original back to the work queue.
	StateRequeuing = "requeuing"
	// StateRequeued: the original was sent back to the work queue.
	StateRequeued = "requeued"
)

// maxNameChars bounds the short texts of a record (op id, kind, host).
const maxNameChars = 256

// QueueName returns the poison queue of a work queue: source + "-poison".
// When that would exceed 63 characters, the source part is cut (and any
// hyphen it then ends with dropped) so the result is a valid queue name.
func QueueName(source string) string {
	const suffix = "-poison"
	base := source
	if len(base)+len(suffix) > 63 {
		base = base[:63-len(suffix)]
	}
	return strings.TrimRight(base, "-") + suffix
}

// TableName returns the poison records table of a work queue: the queue
// name's ASCII letters and digits (hyphens dropped), prefixed with "q" when
// it does not start with a letter, then "Poison"; the first part is cut so
// the whole is at most 63 characters: "orders-eu" gives "orderseuPoison",
// "7-day" gives "q7dayPoison".
//
// Different queue names can map to the same table (such as "a-bc" and
// "abc"); records carry their queue's name and every query filters on it.
func TableName(source string) string {
	const suffix = "Poison"
	var b strings.Builder
	for _, r := range source {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	base := b.String()
	if base == "" || base[0] >= '0' && base[0] <= '9' {
		base = "q" + base
	}
	if len(base)+len(suffix) > 63 {
		base = base[:63-len(suffix)]
	}
	return base + suffix
}

// Config wires a Recorder or an Inspector to one work queue; both take the
// same Config, so they agree on where the records and poison messages are.
type Config struct {
	// Tables holds the records table. Required.
	Tables storeadapter.Tables
	// Source is the work queue. Required.
	Source storeadapter.Queue
	// Poison is the poison queue, normally QueueName(Source.Name()); it is
	// created on first use. Required.
	Poison storeadapter.Queue
	// Blobs is the container for originals too large for a poison message
	// or a string property, normally QueueName(Source.Name()); it is
	// created on first use. Required.
	Blobs storeadapter.Blobs
	// Table is the records table; "" means TableName(Source.Name()). It is
	// created on first use.
	Table string
	// Clock tells the time; nil is the wall clock.
	Clock clock.Clock
	// Host is this host's name, recorded when a Requeue claims and sends a
	// record, and in a poison summary whose attempt names no host; ""
	// means "unknown". The commands pass the machine's name (see cmd/).
	Host string
}

// Validate reports a configuration that cannot work: a missing port, or a
// queue, container or table name the service would refuse (Table "" stands
// for TableName(Source.Name())). NewRecorder and NewInspector call it, so a
// misconfigured worker or CLI stops at start-up instead of failing on every
// message it poisons.
func (c Config) Validate() error {
	switch {
	case c.Tables == nil:
		return errors.New("poison: config: Tables is required")
	case c.Source == nil:
		return errors.New("poison: config: Source is required")
	case c.Poison == nil:
		return errors.New("poison: config: Poison is required")
	case c.Blobs == nil:
		return errors.New("poison: config: Blobs is required")
	}
	if err := storeadapter.ValidateQueueName(c.Source.Name()); err != nil {
		return fmt.Errorf("poison: config: work queue: %w", err)
	}
	if err := storeadapter.ValidateQueueName(c.Poison.Name()); err != nil {
		return fmt.Errorf("poison: config: poison queue: %w", err)
	}
	if err := storeadapter.ValidateContainerName(c.Blobs.Name()); err != nil {
		return fmt.Errorf("poison: config: container: %w", err)
	}
	if err := storeadapter.ValidateTableName(cmp.Or(c.Table, TableName(c.Source.Name()))); err != nil {
		return fmt.Errorf("poison: config: table: %w", err)
	}
	return nil
}

// records is what a Recorder and an Inspector share: the validated
// configuration with its defaults filled in, and the reads both need. It
// holds no other state.
type records struct {
	cfg Config
}

// newRecords validates cfg and fills its defaults.
func newRecords(cfg Config) (records, error) {
	if err := cfg.Validate(); err != nil {
		return records{}, err
	}
	cfg.Table = cmp.Or(cfg.Table, TableName(cfg.Source.Name()))
	cfg.Clock = clock.Or(cfg.Clock)
	cfg.Host = text.Truncate(cmp.Or(cfg.Host, "unknown"), maxNameChars)
	return records{cfg: cfg}, nil
}

// now returns the current time as a table stores it.
func (r records) now() time.Time { return storeadapter.DateTime(r.cfg.Clock.Now()) }
