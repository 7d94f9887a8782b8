package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// rebuildRuns measures the index kind's rebuild on the table —
// -n entities (default 5,000) in 10 partitions, with a partition copy by
// Email, a table list and a rows index by LastName (40 last names) —
// rebuilt from scratch (no membership record, no entry), and then what
// the kinds that remove entities cost on those indexes: archiving one
// indexed entity to a table with no indexes, archiving a 100-row range,
// purging a 100-row partition; then the prune of the rows index's dead
// rows those left, a day later. It prints calls, calls per entity and wall
// time.
func (b bench) rebuildRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	n := b.n
	if n == 0 {
		n = 5000
	}
	suffix := strings.ToLower(rand.Text()[:6])
	source, archived := "BenchRebuild"+suffix, "BenchRebuildArchive"+suffix
	cfg := indexes.Config{Tables: map[string][]indexes.Decl{source: {
		{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
		{Name: "lastNameAll", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreTable, Table: "BenchRebuildByLastName" + suffix},
		{Name: "lastNameRows", Property: "LastName", Kind: indexes.KindRows, Table: "BenchRebuildRows" + suffix},
	}}, CheckpointTable: "BenchRebuildCkpt" + suffix}
	var ops []storeadapter.TableOp
	for i := range n {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{
			PartitionKey: fmt.Sprintf("dept%02d", i%10), RowKey: fmt.Sprintf("%06d", i),
			Properties: map[string]any{"LastName": fmt.Sprintf("Name%02d", i%40), "Email": fmt.Sprintf("e%d@contoso.example", i), "Dept": "x"}}})
	}
	for _, t := range []string{source, archived} {
		if err := store.Tables().CreateTable(ctx, t); err != nil {
			return err
		}
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := store.Tables().Transact(ctx, source, batch); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	fmt.Printf("%s\n%-44s %8s %9s %10s  %s\n", title, "what", "calls", "per row", "seconds", "calls by operation")
	row := func(what string, rows int, calls *instrument.Counts, took time.Duration) {
		s := calls.Snapshot()
		fmt.Printf("%-44s %8d %9.3f %10.2f  %s\n", what, s.Total().Calls, float64(s.Total().Calls)/float64(rows), took.Seconds(), opsLine(s, 1))
	}

	calls := &instrument.Counts{}
	st := instrumented(store, latency, calls)
	x, err := indexes.Open(st, nil, cfg)
	if err != nil {
		return err
	}
	cp := idempotent.Checkpoints{Tables: st.Tables(), Table: cfg.CheckpointTable}
	start := time.Now()
	res, err := x.Rebuild(ctx, source, nil, cp, "op-bench-rebuild", indexes.RebuildOptions{})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	if res.Entities != n {
		return fmt.Errorf("rebuild reconciled %d entities, want %d", res.Entities, n)
	}
	row(fmt.Sprintf("rebuild from scratch, %d entities", n), n, calls, time.Since(start))

	// The kinds that remove indexed entities, on the rebuilt indexes.
	deps := kit.Deps{Store: st, Indexes: x}
	run := func(what string, rows int, do func() (string, error)) error {
		*calls = instrument.Counts{}
		start := time.Now()
		got, err := do()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		row(what, rows, calls, time.Since(start))
		if b.verbose {
			fmt.Printf("  %s\n", got)
		}
		return nil
	}
	aw, err := archive.New(deps, archive.Config{CheckpointTable: cfg.CheckpointTable})
	if err != nil {
		return err
	}
	archiveJob := func(id string, a archive.Args) (string, error) {
		return work(ctx, aw, id, a)
	}
	pk, rk, empty := "dept00", "000000", ""
	if err := run("archive one indexed entity", 1, func() (string, error) {
		return archiveJob("op-bench-one", archive.Args{Table: source, To: archived, PK: &pk, RK: &rk})
	}); err != nil {
		return err
	}
	pk1 := "dept01"
	if err := run(fmt.Sprintf("archive the range of partition %s", pk1), n/10, func() (string, error) {
		return archiveJob("op-bench-range", archive.Args{Table: source, To: archived, PK: &pk1, RKFrom: &empty})
	}); err != nil {
		return err
	}
	pw, err := purge.New(deps, purge.Config{CheckpointTable: cfg.CheckpointTable})
	if err != nil {
		return err
	}
	pk2 := "dept02"
	if err := run(fmt.Sprintf("purge partition %s", pk2), n/10, func() (string, error) {
		return work(ctx, pw, "op-bench-purge", purge.Args{Table: source, PK: &pk2})
	}); err != nil {
		return err
	}
	// A day later, the rows index's dead rows and the table list's dead
	// markers those left (one each per entity removed) are past the
	// tombstone grace: a prune folds the markers into the list's lines and
	// deletes both.
	later, err := indexes.Open(st, clock.NewFake(time.Now().Add(24*time.Hour)), cfg)
	if err != nil {
		return err
	}
	removed := 2 * (1 + 2*(n/10))
	return run(fmt.Sprintf("prune the %d dead rows and markers a day later", removed), removed, func() (string, error) {
		res, err := later.Prune(ctx, source, cp, "op-bench-prune", indexes.RebuildOptions{})
		if err == nil && res.Pruned != removed {
			err = fmt.Errorf("pruned %d rows, want %d", res.Pruned, removed)
		}
		return fmt.Sprintf("pruned %d (%d markers folded)", res.Pruned, res.Folded), err
	})
}

// work runs the job of args under op id with worker w directly, as the
// runner would run it (jobs.NewJob), and returns its result.
func work[T jobs.Args](ctx context.Context, w jobs.Worker[T], id string, args T) (string, error) {
	job, err := jobs.NewJob(id, args)
	if err != nil {
		return "", err
	}
	jctx, res := jobs.WithResult(ctx)
	err = w.Work(jctx, job)
	return res.Text(), err
}
