// Package purge is the "purge" job kind: the fallback of the high-volume
// delete pattern for tables not designed with one table per day. It
// deletes the entities of a table, a partition or a RowKey range, all of
// them or only those older than a duration, page by page in entity group
// transactions of up to 100 deletes, each If-Match the ETag it was read
// with, from a checkpoint that survives crashes, and continues later
// (jobs.ContinueLater) when its time budget is spent. See Worker for the
// steps and why every crash position and every interleaving converges.
//
// It is written against the storeadapter ports, the idempotent packages
// and the jobs contract only: it must not import the Azure SDK, the
// runner or another kind.
package purge
