// Package client is how an application sends work to tablekeeper's
// workers from Go: one job (Enqueue), many (EnqueueMany), a stream of
// them too long to hold at once (Stream), or jobs that commit together
// with the application's own writes (Tx). It is the one producer of the
// module: the enqueue command, the demo and the benchmark send through
// it, and nothing else builds an envelope.
//
//	c, err := client.Connect(ctx, client.Account{ConnectionString: cs}, client.Config{})
//	...
//	res, err := c.Enqueue(ctx, archive.Args{Table: "Employees", To: "EmployeesArchive", PK: "Sales", RK: "000123"})
//
// Each kind's Args (jobs/archive, jobs/index, jobs/blobsync, jobs/export,
// jobs/purge, jobs/purgeday) are what a producer passes; the client checks
// them exactly as the worker will before it sends anything, gives each job
// an operation id (its idempotency key) unless ID names one, and puts
// arguments too large for a queue message in a blob. A job it refuses is
// an *InvalidError; Check makes the same checks without a store.
//
// Enqueue is Prepare (check, encode) and then Send. PrepareEnvelope
// prepares an envelope made elsewhere (the enqueue command's raw JSON
// lines) to be sent exactly as it is, checked the same way. A Stream sends
// prepared jobs with bounded concurrency and memory, reporting each one's
// outcome.
//
// # Transactional enqueue
//
// An application that writes an entity and then enqueues the job that
// keeps something consistent with it (its index entries, its offloaded
// blobs) loses the job if it crashes between the two. A Tx closes the
// hole with an outbox row: the writes and one row per job go in one
// entity group transaction, and the worker runs a job only once its row
// exists:
//
//	tx := c.Tx("Employees", "Sales")
//	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: employee})
//	tx.Enqueue(index.Reconcile("Employees", "Sales", "000123"))
//	_, err := tx.Commit(ctx)
//
// Commit documents the producer's steps, jobs/runner the worker's, and
// docs/client.md the whole protocol with its costs.
//
// The client runs on any storeadapter.Store: Connect builds the Azure one
// from the same credential forms the commands accept (Account), and New
// takes any other (localstore in tests). It must not import jobs/runner,
// poison or localstore: it produces work, it does not run it.
package client
