// Package localstore is tablekeeper's in-process store: the storeadapter
// Tables, Queue and Blobs interfaces in memory, with Azure's semantics —
// entities ordered by (PartitionKey, RowKey) in a B-tree (and found by their
// keys in a map for the point operations), strings compared
// in Azure's UTF-16 code-unit order (storeadapter.CompareUTF16) for keys,
// range bounds, filters, table and blob listings, pages of at most
// 1,000 with continuation tokens, ETags that change on every write, a
// store-maintained Timestamp, atomic entity group transactions under all of
// Azure's rules, the OData filter subset storeadapter's builder produces,
// table names that stay unavailable for a while after a delete, queues with
// visibility timeouts, pop receipts, dequeue counts and expiry, and blobs
// with ETags, conditions and metadata (names read back in lower case, as
// through the Azure SDK).
//
// Time comes from an injectable clock (Options.Clock; tests pass a
// tablekeeper/internal/clock.Fake), so tests move time instead of sleeping.
// It is safe for concurrent use. To count, time, delay or fail its calls,
// wrap it with storeadapter/instrument; it keeps no counters of its own.
//
// It must not import the Azure SDK or anything of the jobs, and keeps no
// files: it serves fast tests and
// the demo, and the shared contract suite (storeadapter/storetest) holds it
// to the same behaviour as the Azure implementation.
package localstore
