// Package poison parks the messages tablekeeper cannot process and lets
// operators inspect, requeue, delete and purge them.
//
// It has two roles over one record format, each its own type built from
// the same Config: the worker's Recorder (NewRecorder) and the operators'
// Inspector (NewInspector). Both constructors validate the configuration
// (ports, and queue, container and table names) and return its error, so a
// misconfigured worker or CLI stops at start-up. The runner in jobs calls
// the Recorder's RecordAttempt after each failed attempt that will be
// retried, Move when a message fails permanently or too often, Forget when
// it succeeds after all, LastAttempt, and RecordDropped when it drops a job
// whose transaction never committed. The operator CLI calls the
// Inspector's List, Show, Requeue, Delete, DeleteMany and Purge, and
// GroupRecords (groups by kind and failure class, see Class); the
// Inspector reads poison messages with DecodeMessage. Requeue, DeleteMany
// and Purge work on up to DefaultConcurrency records at once (their
// options' Concurrency) and report each phase to their options' Progress.
//
// # Where things live
//
// For a work queue named q:
//
//   - The poison queue is QueueName(q), normally "q-poison". Each poisoned
//     message appears there once (twice at most after a crash; see Move).
//   - The failure records live in the table TableName(q), normally
//     "qPoison": one entity per original message, PartitionKey = the
//     original message id, RowKey = "record". It holds the state (none
//     while the message is still retried, which reads as "failing"; then
//     "poisoned", "requeuing", "requeued"), the reason, the
//     summary fields, one property per attempt (Attempt001, Attempt002, …,
//     each the JSON of an Attempt), the original text (property
//     Original) when it fits a string property, and the poison messages
//     Move sent: PoisonSends (Int64) counts the sends Move started, and
//     PoisonMessages holds the JSON array of those that completed,
//     [{"id": "<poison message id>", "popReceipt": "<its receipt from
//     Send>"}, …] (at most 8). Keying by message id is
//     what makes every write idempotent: a redelivered message poisoned a
//     second time lands on the same record.
//   - An original too large for a string property or for the poison
//     message is stored as the blob "<message id>.txt" in the container
//     QueueName(q), and referred to as "<container>/<blob>" (the record's
//     OriginalRef, with the blob's ETag in OriginalETag).
//   - Jobs the runner dropped because their transaction never committed
//     (see Drop) have a drop record each in the same table: PartitionKey
//     "~tk.dropped.q" (the reserved prefix: no message id starts with it),
//     RowKey = the operation id, with Kind, MessageID, OutboxTable,
//     OutboxPK, OutboxRK, WindowSeconds, Since, DroppedAt and Host, and no
//     Queue property. The Recorder's RecordDropped upserts them; the
//     Inspector counts them (CountDrops) and Purge removes them by age;
//     no other query of the records (List, Show, Requeue, Delete) sees
//     them.
//
// # The poison message format
//
// A poison message's text is the standard base64 encoding of this UTF-8
// JSON (the same encoding as the work envelopes):
//
//	{
//	  "v": 1,
//	  "poison": {
//	    "messageId":    "<original queue message id>",
//	    "opId":         "<operation id, \"\" when the envelope did not decode>",
//	    "kind":         "<job kind, \"\" when the envelope did not decode>",
//	    "reason":       "<why it was poisoned, at most MaxErrorChars characters>",
//	    "dequeueCount": 6,
//	    "firstAttempt": "2026-11-21T10:00:00Z",
//	    "lastAttempt":  "2026-11-21T10:05:00Z",
//	    "host":         "<worker that poisoned it>",
//	    "queue":        "<work queue name>"
//	  },
//	  "original": "<the original message text, untouched>"
//	}
//
// When the original does not fit (the encoded message would exceed
// storeadapter.MaxMessageBytes, or the text is not valid UTF-8), "original"
// is left out and "originalRef": "<container>/<blob>" names the blob that
// holds it. Exactly one of the two is present. Poison messages never
// expire. DecodeMessage parses the format; v must be 1.
//
// The failure record, not the poison message, is the source of truth: List
// and Show read records, and Requeue, Delete and Purge use the poison queue
// only to remove the messages that belong to a record. When PoisonMessages
// lists as many messages as PoisonSends counts, they delete each by its id
// and pop receipt; otherwise (an older record, a send a crash left
// unnoted) and for a message whose receipt is no longer current, one sweep
// of the poison queue removes the messages matched by the original message
// id (so duplicates go together).
//
// # What it must not do
//
// It imports only the standard library, storeadapter and idempotent: never
// jobs (the runner depends on it, not the reverse) and never the Azure SDK.
// It never loses an original: a record or poison message that refers to a
// blob is written only after the blob. Every storage write is an upsert, a
// merge, an ETag-conditional update (or an insert that, when another writer
// came first, re-reads and updates: idempotent.UpdateCAS) or a delete that
// treats "not found" as done, so any step may run twice. It keeps no state
// between calls; all of it lives in storage.
//
// It must not import jobs, a kind, the runner or the Azure SDK: the
// runner calls it through runner.Poisoner.
package poison
