// Package blobsync is the "blobsync" job kind: the large entities pattern
// of the Azure table design guides, kept eventually consistent by the
// worker. It offloads properties too large for an entity (or declared in
// the config) to blobs under immutable, content-addressed names, links
// blobs an application uploaded itself to their entities (attach), and
// reconciles a table with its container: references to missing blobs,
// stale blob metadata and orphaned blobs older than a grace period.
//
// The references, the managed names and the reads that restore an entity
// (Get, Restore) are the library tablepatterns/largeentity, which
// applications and other kinds use without this worker.
//
// It imports jobs, jobs/kit, idempotent, the tablepatterns libraries and
// storeadapter only: it must not import the Azure SDK, the runner, the
// catalog or another kind.
package blobsync
