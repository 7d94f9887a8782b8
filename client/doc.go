// Package client is how an application sends work to tablekeeper's
// workers from Go: one job (Enqueue), many (EnqueueMany), or jobs that
// commit together with the application's own writes (Tx).
//
//	c, err := client.Connect(ctx, client.Account{ConnectionString: cs}, client.Config{})
//	...
//	res, err := c.Enqueue(ctx, archive.Args{Table: "Employees", To: "EmployeesArchive", PK: "Sales", RK: "000123"})
//
// Each kind's Args (jobs/archive, jobs/index, jobs/blobsync, jobs/export,
// jobs/purge, jobs/purgeday) are what a producer passes; the client checks
// them exactly as the worker will before it sends anything, gives each job
// an operation id (its idempotency key) unless ID names one, and puts
// arguments too large for a queue message in a blob.
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
