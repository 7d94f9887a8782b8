package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// The demo runs the whole job on localstore, in two parts. Archive: it
// seeds the employee tables of the Azure Table design guide, enqueues
// archive moves (one entity, a RowKey range, one to a blob), a malformed
// message and one that fails every time, drains the queue with the real
// runner and prints what happened. Indexes: the demo's config declares
// three indexes on Employees (demoIndexes); it enqueues an index rebuild of
// the table, drains, looks values up, then changes a few entities as an
// application would (renames, a delete), enqueues one index message per
// change, drains again and looks the same values up, with the storage
// calls each index job cost. High-volume delete: see runPurgeDemo.

const (
	demoQueue     = "tablekeeper-demo"
	demoCurrent   = "Employees"
	demoArchive   = "EmployeesArchive"
	demoGone      = "EmployeesOld" // deleted just before: the name stays unavailable
	demoContainer = "archive"
)

var demoDepartments = []string{"Sales", "Marketing", "Engineering"}

// demoIndexes are the indexes the demo declares on Employees, as a config
// file's "index" section would.
var demoIndexes = []indexes.Decl{
	{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition, Properties: []string{"FirstName", "LastName", "Email"}},
	{Name: "lastName", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreTable, Table: "EmployeesByLastName"},
	{Name: "lastNameRows", Property: "LastName", Kind: indexes.KindRows, Table: "EmployeesLastNameRows"},
}

// runDemo seeds, enqueues, drains and reports. cfg's runner settings are
// kept except the pacing ones, shortened so the demo takes seconds; the
// demo's indexes replace any declared in kinds.
func runDemo(ctx context.Context, out io.Writer, log *slog.Logger, cfg runner.Config, kinds catalog.Config) error {
	start := time.Now()
	store := localstore.New(localstore.Options{})
	if err := seedDemo(ctx, store); err != nil {
		return fmt.Errorf("demo: seed: %w", err)
	}
	ops, err := enqueueDemo(ctx, store)
	if err != nil {
		return fmt.Errorf("demo: enqueue: %w", err)
	}

	cfg.Drain = true
	cfg.RetryBase, cfg.RetryMax = 100*time.Millisecond, time.Second
	cfg.IdleMin, cfg.IdleMax = 10*time.Millisecond, 200*time.Millisecond
	cfg.Concurrency = min(cmp.Or(cfg.Concurrency, 4), 8)
	if !cli.IsTerminal(out) {
		log = slog.New(slog.DiscardHandler) // keep piped output to the summary
	}
	kinds.Index.Tables = map[string][]indexes.Decl{demoCurrent: demoIndexes}
	if err := kinds.Validate(); err != nil {
		return fmt.Errorf("demo: config: %w", err)
	}
	// The worker's calls alone go through the instrument: seeding and the
	// report below use the store directly.
	calls := &instrument.Counts{}
	worker := instrument.Wrap(store, instrument.Options{Observers: []instrument.Observer{calls}})
	r, err := cli.NewRunner(worker, demoQueue, cfg, kinds, log)
	if err != nil {
		return err
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	var report bytes.Buffer
	if err := printDemo(ctx, &report, store, r.Stats(), ops, calls.Snapshot()); err != nil {
		return err
	}
	if err := runIndexDemo(ctx, &report, store, log, cfg, kinds); err != nil {
		return err
	}
	if err := runPurgeDemo(ctx, &report, log, cfg, kinds); err != nil {
		return err
	}
	fmt.Fprintf(out, "tablekeeper demo: archive moves, indexes and high-volume deletes on the in-process store (%v)\n\n", time.Since(start).Round(time.Millisecond))
	_, err = report.WriteTo(out)
	return err
}

func seedDemo(ctx context.Context, store *localstore.Store) error {
	t := store.Tables()
	for _, name := range []string{demoCurrent, demoArchive, demoGone} {
		if err := t.CreateTable(ctx, name); err != nil {
			return err
		}
	}
	if err := t.DeleteTable(ctx, demoGone); err != nil {
		return err
	}
	first := []string{"Ana", "Ben", "Chloe", "Dev", "Eve", "Farid", "Gita", "Hugo", "Ines", "Jonas"}
	last := []string{"Brown", "Smith", "Garcia", "Jones", "Chen", "Okafor", "Novak"} // Jones: 000003, 000010, 000017, 000024
	for d, dept := range demoDepartments {
		var ops []storeadapter.TableOp
		for i := 1; i <= 30; i++ {
			e := storeadapter.Entity{PartitionKey: dept, RowKey: fmt.Sprintf("%06d", i), Properties: map[string]any{
				"FirstName":  first[i%len(first)],
				"LastName":   last[i%len(last)],
				"Email":      fmt.Sprintf("%s.%d@contoso.example", strings.ToLower(first[i%len(first)]), i),
				"Age":        int32(22 + (i*7)%40),
				"Salary":     int64(40000+1000*i) * 1_000_000, // micro-units: beyond 2^53
				"Rating":     float64(i%5) + 1,                // integral doubles stay doubles
				"HireDate":   time.Date(2010+i%15, time.Month(1+i%12), 1+i%28, 9, 0, 0, 0, time.UTC),
				"EmployeeID": storeadapter.GUID{byte(d), byte(i), 0x4a, 0x11},
				"Badge":      []byte{byte(d), byte(i)},
				"Active":     i%9 != 0,
			}}
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
		}
		if err := t.Transact(ctx, demoCurrent, ops); err != nil {
			return err
		}
	}
	return store.Queue(demoQueue).Create(ctx)
}

// demoOp is one enqueued message and what it is meant to show.
type demoOp struct{ id, what string }

// enqueueDemo enqueues the archive part's jobs through the client, as an
// application would, and one malformed message by hand.
func enqueueDemo(ctx context.Context, store *localstore.Store) ([]demoOp, error) {
	c, err := demoClient(store)
	if err != nil {
		return nil, err
	}
	ops := []demoOp{
		{"op-demo-single", "archive Sales/000007 to " + demoArchive},
		{"op-demo-range", "archive Marketing [000010, 000020) to " + demoArchive},
		{"op-demo-blob", "archive Engineering/000003 to blob " + demoContainer + "/2026"},
		{"op-demo-stuck", "archive Sales/000008 to " + demoGone + " (deleted moments ago: fails every time)"},
		{"op-demo-bad", "malformed: archive args without rk or to"},
	}
	args := []archive.Args{
		{Table: demoCurrent, To: demoArchive, PK: ptr("Sales"), RK: ptr("000007")},
		{Table: demoCurrent, To: demoArchive, PK: ptr("Marketing"), RKFrom: ptr("000010"), RKTo: ptr("000020")},
		{Table: demoCurrent, ToBlob: demoContainer + "/2026", PK: ptr("Engineering"), RK: ptr("000003")},
		{Table: demoCurrent, To: demoGone, PK: ptr("Sales"), RK: ptr("000008")},
	}
	for i, a := range args {
		if err := sendDemo(ctx, c, ops[i].id, a); err != nil {
			return nil, err
		}
	}
	// The malformed one is sent by hand as plain JSON, as a hand-written
	// producer might: the client would refuse it (which is its point).
	if _, err := store.Queue(demoQueue).Send(ctx, `{"v":1,"id":"op-demo-bad","kind":"archive","args":{"table":"Employees","pk":"Sales"}}`, storeadapter.SendOptions{}); err != nil {
		return nil, err
	}
	return ops, nil
}

// demoClient returns the client the demo sends its jobs through, on the
// demo's queue of store.
func demoClient(store storeadapter.Store) (*client.Client, error) {
	return client.New(client.Config{Store: store, Queue: demoQueue})
}

// sendDemo enqueues one job through c under op id id.
func sendDemo(ctx context.Context, c *client.Client, id string, args jobs.Args) error {
	_, err := c.Enqueue(ctx, args, client.ID(id))
	return err
}

func ptr(s string) *string { return &s }

// printDemo reports the run; calls are the worker's storage calls.
func printDemo(ctx context.Context, out io.Writer, store *localstore.Store, s runner.Stats, ops []demoOp, calls instrument.Snapshot) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "archive moves, enqueued:")
	for _, op := range ops {
		fmt.Fprintf(w, "  %s\t%s\n", op.id, op.what)
	}
	fmt.Fprintf(w, "\nmessages:\treceived %d\tprocessed %d\tretried %d\tpoisoned %d\n", s.Received, s.Succeeded, s.Retried, s.Poisoned)

	ins, err := cli.PoisonInspector(store, demoQueue, nil)
	if err != nil {
		return err
	}
	records, err := ins.List(ctx, "")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\npoisoned (reason):")
	for _, rec := range records {
		fmt.Fprintf(w, "  %s\tdelivery %d\t%s\n", rec.OpID, rec.DequeueCount, firstLine(rec.Reason, 200))
	}

	fmt.Fprintln(w, "\nstorage after the run:")
	for _, table := range []string{demoCurrent, demoArchive} {
		n, err := countEntities(ctx, store.Tables(), table)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  table %s\t%d entities\n", table, n)
	}
	page, err := store.Container(demoContainer).List(ctx, "", "")
	if err != nil {
		return err
	}
	for _, b := range page.Blobs {
		fmt.Fprintf(w, "  blob %s/%s\t%d bytes\n", demoContainer, b.Name, b.Size)
	}

	fmt.Fprintln(w, "\nstorage calls by the worker, by operation:")
	for _, op := range calls.Ops() {
		fmt.Fprintf(w, "  %s\t%d\n", op, calls[op].Calls)
	}
	fmt.Fprintf(w, "  total\t%d\n\n", calls.Total().Calls)
	return w.Flush()
}

// countEntities counts a table's entities, leaving out the index kind's
// own rows (membership records and partition indexes).
func countEntities(ctx context.Context, t storeadapter.Tables, table string) (int, error) {
	n, tok := 0, ""
	entities := storeadapter.Or(storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix),
		storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix[:len(storeadapter.ReservedPrefix)-1]+"/"))
	for {
		p, err := t.Query(ctx, table, storeadapter.Query{Filter: entities, Select: []string{}, Continuation: tok})
		if err != nil {
			return 0, err
		}
		n += len(p.Entities)
		if tok = p.Next; tok == "" {
			return n, nil
		}
	}
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
