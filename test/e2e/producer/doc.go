// Command producer is the application of the end-to-end test of
// transactional enqueue (test/e2e's TestTxWithKilledProducersAndWorkers):
// a process the test SIGKILLs at random moments while it writes.
//
// One writer per partition (-partitions) loops until the process is
// killed: it reads one to three of its partition's employees (-employees
// of them, RowKeys e000, e001, …), inserts the missing ones and merges
// (a new LastName, sometimes a new Email), replaces or deletes the others,
// If-Match the ETag read, and commits those writes together with one
// index.Reconcile job per employee in a client.Tx whose commit window is
// -window. It prints one line per committed Tx ("commit …") and per
// failed one ("fail …"), and goes on after a failure: a kill may leave
// anything behind, and the next write must not mind.
//
// It reads the connection string from AZURE_STORAGE_CONNECTION_STRING and
// never prints it. Its random choices come from -seed.
//
// It is an application: it must not import the worker's side (jobs/runner,
// poison, cmd/...) or the in-process store; it sends work through package
// client only and reads the table through the store client.Account gives.
package main
