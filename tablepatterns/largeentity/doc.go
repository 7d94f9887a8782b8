// Package largeentity is the library of the large entities pattern of the
// Azure table design guides: properties too large for an entity (or
// declared so) live in blobs, and the entity holds, instead of property P,
// the string property TkBlob_<P> (RefPrefix + P) with the compact JSON of
// a Ref. Offloaded blobs have immutable, content-addressed managed names
// (BlobName) laid out per table (Layout). Get and Restore read an entity
// back with every such property restored from its blob and checked
// against its SHA-256; Carry gives an entity's offloaded blobs to the key
// it is moved to.
//
// The "blobsync" job kind (package jobs/blobsync) offloads, attaches and
// reconciles; archive uses Carry and Restore so that a moved entity keeps
// its large properties; applications and the CLI read through Get.
//
// It is written against the storeadapter ports only: it must not import
// the Azure SDK, the jobs contract, the runner or any job kind.
package largeentity
