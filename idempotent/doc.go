// Package idempotent holds the building blocks every tablekeeper handler is
// made of: writes that may run twice in any crash position and still leave
// the same state. Ensure-table, delete-if-exists (ETag-conditional), entity
// group transaction batching within Azure's rules, and checkpoints that let
// a long scan resume where a crashed run stopped.
//
// It is written against the storeadapter ports only.
package idempotent
