// Package blobsync is the "blobsync" job kind: the large entities pattern
// of the Azure table design guides, kept eventually consistent by the
// worker. It offloads properties too large for an entity (or declared in
// the config) to blobs under immutable, content-addressed names, links
// blobs an application uploaded itself to their entities (attach), and
// reconciles a table with its container: references to missing blobs,
// stale blob metadata and orphaned blobs older than a grace period.
//
// An entity whose property P lives in a blob holds, instead of P, the
// string property TkBlob_<P> (RefPrefix + P) with the compact JSON of a
// Ref. Get reads an entity back with every such property restored from its
// blob and checked against its SHA-256.
//
// It imports jobs, idempotent and storeadapter only; never the Azure SDK,
// the runner or another kind.
package blobsync
