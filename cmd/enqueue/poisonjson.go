package main

import (
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
)

// recordJSON is a poison record as -o json prints it.
type recordJSON struct {
	MessageID         string    `json:"messageId"`
	Queue             string    `json:"queue"`
	State             string    `json:"state"`
	OpID              string    `json:"opId"`
	Kind              string    `json:"kind"`
	Reason            string    `json:"reason"`
	DequeueCount      int64     `json:"dequeueCount"`
	FirstAttempt      time.Time `json:"firstAttempt,omitzero"`
	LastAttempt       time.Time `json:"lastAttempt,omitzero"`
	Host              string    `json:"host,omitempty"`
	LastError         string    `json:"lastError,omitempty"`
	OriginalRef       string    `json:"originalRef,omitempty"`
	RequeuedAt        time.Time `json:"requeuedAt,omitzero"`
	RequeuedBy        string    `json:"requeuedBy,omitempty"`
	RequeuedMessageID string    `json:"requeuedMessageId,omitempty"`
}

// toRecordJSON converts a record.
func toRecordJSON(r poison.Record) recordJSON {
	return recordJSON{
		MessageID: r.MessageID, Queue: r.Queue, State: r.State, OpID: r.OpID, Kind: r.Kind, Reason: r.Reason,
		DequeueCount: r.DequeueCount, FirstAttempt: r.FirstAttempt, LastAttempt: r.LastAttempt, Host: r.Host,
		LastError: r.LastError, OriginalRef: r.OriginalRef, RequeuedAt: r.RequeuedAt, RequeuedBy: r.RequeuedBy,
		RequeuedMessageID: r.RequeuedMessageID,
	}
}

// showJSON is what "poison show -o json" prints: the record, its attempts,
// the original text and, when it decodes, the envelope.
type showJSON struct {
	recordJSON
	Attempts []attemptJSON  `json:"attempts"`
	Original string         `json:"original"`
	Envelope *jobs.Envelope `json:"envelope,omitempty"`
	// Outbox is the envelope's outbox reference, for a job sent by a
	// transactional enqueue.
	Outbox        *jobs.OutboxRef `json:"outbox,omitempty"`
	EnvelopeError string          `json:"envelopeError,omitempty"`
	// OriginalDecoded is the original decoded from base64 (JSON indented)
	// when it is no envelope but base64 of text.
	OriginalDecoded string `json:"originalDecoded,omitempty"`
	// Current says whether this is its operation's current record (see
	// poison.Current); OtherRecords are the operation's others, newest
	// first.
	Current      bool              `json:"current"`
	OtherRecords []otherRecordJSON `json:"otherRecords"`
}

// otherRecordJSON is another record of the shown one's operation, in
// "poison show -o json".
type otherRecordJSON struct {
	MessageID         string    `json:"messageId"`
	State             string    `json:"state"`
	Group             string    `json:"group"`
	LastAttempt       time.Time `json:"lastAttempt,omitzero"`
	RequeuedAt        time.Time `json:"requeuedAt,omitzero"`
	RequeuedMessageID string    `json:"requeuedMessageId,omitempty"`
}

// attemptJSON is one attempt in "poison show -o json".
type attemptJSON struct {
	N          int64     `json:"n"`
	Time       time.Time `json:"time"`
	DurationNs int64     `json:"durationNs"`
	Host       string    `json:"host"`
	Error      string    `json:"error"`
}

// groupJSON is one group of "poison list -group -o json".
type groupJSON struct {
	Group   string    `json:"group"`
	Kind    string    `json:"kind"`
	Class   string    `json:"class"`
	Count   int       `json:"count"`
	Newest  time.Time `json:"newest"`
	Example string    `json:"example"`
}

// requeueJSON is one record of "poison requeue -o json".
type requeueJSON struct {
	MessageID    string `json:"messageId"`
	OpID         string `json:"opId"`
	Kind         string `json:"kind"`
	Group        string `json:"group"`
	Reason       string `json:"reason"`
	NewMessageID string `json:"newMessageId,omitempty"`
}
