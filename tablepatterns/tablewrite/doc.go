// Package tablewrite writes entities given in key order to one table in
// entity group transactions: the bulk writer the restore and copy kinds
// share.
//
// Entities arrive one at a time (Writer.Add) in key order. The writer
// keeps the open partition's rows in one batch and sends it when it holds
// storeadapter.MaxBatchOps operations, when the next row would take its
// payload (counted with storeadapter.BatchOpSize) past
// storeadapter.MaxBatchBytes, or when the partition ends. Each partition's
// batches go in order on one goroutine; up to Options.Partitions
// partitions are written at once, and Add waits when that many are busy,
// so memory is bounded by about Partitions+1 batches whatever the table's
// size.
//
// Its rules:
//
//   - Every write is idempotent. Insert mode inserts each batch in one
//     transaction; a batch that fails because one of its rows exists is
//     inserted again row by row, an existing row left as it is and counted
//     Skipped, so a batch written twice (a crash before the caller's
//     checkpoint) ends the same. Replace mode upserts (insert or replace),
//     which may run any number of times.
//   - Entities must come in key order (PartitionKey, then RowKey, in the
//     service's UTF-16 order) between two Flushes; one out of order, or a
//     key given twice, is refused (storeadapter.ErrInvalidInput) before
//     anything of it is sent. After a Flush the order starts again, so a
//     caller may write several ordered streams one after another.
//   - System properties (ETag, Timestamp) are not written: the service
//     sets them.
//   - Flush writes what is buffered and waits for every batch in flight.
//     When it returns nil, every entity Added before it is durable, so a
//     caller saves its checkpoint after a Flush, never before. The first
//     error of any batch is returned by Flush and by every later Add.
//   - With Options.CreateTable, a write that finds the table missing
//     creates it (idempotent.EnsureTable, which another writer may race)
//     and writes again once.
//
// Every storage call is bounded by the store's own call timeout (see
// storeadapter/azstore Options.CallTimeout) and by the context given to Add
// or Flush.
//
// It is written against the storeadapter ports and the idempotent package
// only: it must not import the Azure SDK, the jobs packages, localstore or
// a kind.
package tablewrite
