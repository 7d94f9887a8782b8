// Package idempotent holds the building blocks every tablekeeper handler is
// made of: writes that may run twice in any crash position and still leave
// the same state. Ensure-table, create-on-missing (write; when the table,
// queue or container is missing, create it and write again),
// delete-if-exists (ETag-conditional), the ETag compare-and-swap loop
// (UpdateCAS: read, modify, write with If-Match, bounded and jittered
// retries), entity group transaction batching within Azure's rules,
// checkpoints that let a long scan resume where a crashed run stopped, and
// the Cell that keeps one operation's state in a checkpoint by
// compare-and-swap.
//
// It is written against the storeadapter ports only: it must not import
// the Azure SDK, localstore, jobs or any library or kind built on it.
package idempotent
