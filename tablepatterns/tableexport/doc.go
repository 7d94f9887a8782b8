// Package tableexport is the shared table-to-blob exporter: the log data
// pattern of the Azure table design guide. It writes the entities of a
// table (or a partition, or a RowKey range) as JSON lines
// (storeadapter.MarshalEntityLine: every EDM type exact, the Timestamp and
// the ETag) into time-named blobs of bounded size,
//
//	<prefix>/<table>/YYYY/MM/DD/HHMM/000001.jsonl   (.jsonl.gz with gzip)
//
// each written whole or not at all through storeadapter.BlobWriter, with
// its entity count, first and last Timestamps and SHA-256 in its metadata,
// and after the last part a manifest (manifest-<op>.json) listing every
// part with its count and hash. Export checkpoints after each committed
// part, so a redelivered or resumed export writes the same parts, never a
// duplicate or a gap; Verify reads a manifest back and checks every part.
//
// It is not a job kind: the export, archive and purgeday kinds use it.
// It is written against the storeadapter ports and the idempotent package
// only; it must not import the Azure SDK, the jobs packages or a kind.
package tableexport
