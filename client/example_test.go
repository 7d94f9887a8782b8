package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// exampleClient returns a client on an in-process store (an application
// uses client.Connect), and the store.
func exampleClient() (*client.Client, storeadapter.Store) {
	store := localstore.New(localstore.Options{})
	c, err := client.New(client.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	return c, store
}

// show prints the jobs waiting on the work queue as a worker will read
// them.
func show(store storeadapter.Store) {
	ms, err := store.Queue(client.DefaultQueue).Peek(context.Background(), 32)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		env, err := jobs.DecodeEnvelope(m.Text)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s %s\n", env.ID, env.Kind, env.Args)
	}
}

// An application moves an employee who left to the archive table (the
// eventually consistent transactions pattern): the worker copies the
// entity, with its index entries and offloaded blobs, and deletes it.
func ExampleClient_Enqueue_archive() {
	c, store := exampleClient()
	pk, rk := "Sales", "000123"
	_, err := c.Enqueue(context.Background(), archive.Args{Table: "Employees", To: "EmployeesArchive", PK: &pk, RK: &rk}, client.ID("op-leaver-000123"))
	if err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-leaver-000123 archive {"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"000123"}
}

// After a write of an indexed entity, an application has its indexes
// reconciled; a Tx (see ExampleTx) commits the write and this job
// together.
func ExampleClient_Enqueue_index() {
	c, store := exampleClient()
	if _, err := c.Enqueue(context.Background(), index.Reconcile("Employees", "Sales", "000123"), client.ID("op-reindex-000123")); err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-reindex-000123 index {"table":"Employees","pk":"Sales","rk":"000123"}
}

// An entity's large properties go to blobs (the large entities pattern);
// the entity keeps references the worker keeps consistent.
func ExampleClient_Enqueue_blobsync() {
	c, store := exampleClient()
	args := blobsync.Args{Mode: blobsync.ModeOffload, Table: "Employees", PK: "Sales", RK: "000123", Property: "Photo", Container: "employee-blobs"}
	if _, err := c.Enqueue(context.Background(), args, client.ID("op-offload-000123")); err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-offload-000123 blobsync {"mode":"offload","table":"Employees","pk":"Sales","rk":"000123","property":"Photo","container":"employee-blobs"}
}

// A day's log partition is written to JSON-lines blobs with a manifest
// (the log data pattern).
func ExampleClient_Enqueue_export() {
	c, store := exampleClient()
	pk := "2026-11-25"
	if _, err := c.Enqueue(context.Background(), export.Args{Table: "Logs", PK: &pk, To: "exports/logs", Gzip: true}, client.ID("op-export-20261125")); err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-export-20261125 export {"table":"Logs","pk":"2026-11-25","to":"exports/logs","gzip":true}
}

// Entities older than 90 days are deleted in batches of 100 (the
// high-volume delete pattern's fallback, for data not kept in day tables).
func ExampleClient_Enqueue_purge() {
	c, store := exampleClient()
	older := jobs.Duration(90 * 24 * time.Hour)
	if _, err := c.Enqueue(context.Background(), purge.Args{Table: "Sessions", OlderThan: &older}, client.ID("op-purge-sessions")); err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-purge-sessions purge {"table":"Sessions","olderThan":"2160h0m0s"}
}

// Day tables older than 30 days are deleted, one DeleteTable each (the
// high-volume delete pattern).
func ExampleClient_Enqueue_purgeday() {
	c, store := exampleClient()
	keep := 30
	if _, err := c.Enqueue(context.Background(), purgeday.Args{Prefix: "LoginAttempts", KeepDays: &keep}, client.ID("op-purgeday-daily")); err != nil {
		log.Fatal(err)
	}
	show(store)
	// Output: op-purgeday-daily purgeday {"prefix":"LoginAttempts","keepDays":30}
}

// An application writes an employee and has its indexes reconciled in
// one transaction: both happen, or neither. The worker runs the job once
// the transaction's outbox row exists.
func ExampleTx() {
	c, store := exampleClient()
	ctx := context.Background()
	if err := store.Tables().CreateTable(ctx, "Employees"); err != nil {
		log.Fatal(err)
	}
	tx := c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: storeadapter.Entity{
		PartitionKey: "Sales", RowKey: "000123", Properties: map[string]any{"LastName": "Jones"}}})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000123"), client.ID("op-hire-000123"))
	if _, err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	show(store)
	row, err := store.Tables().GetEntity(ctx, "Employees", "Sales", "~tk.o.op-hire-000123")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("outbox row:", row.RowKey, row.Properties[jobs.OutboxKind])
	// Output:
	// op-hire-000123 index {"table":"Employees","pk":"Sales","rk":"000123"}
	// outbox row: ~tk.o.op-hire-000123 index
}
