package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// blobsyncRuns measures the storage calls of the blobsync kind on one
// store, per entity: an offload naming one property, an offload of the two
// properties the config declares, an offload of a property whose earlier
// offload it replaces (the previous blob is deleted last), an attach of a
// blob the application uploaded, a repeated attach (nothing changed), and
// the reconcile of the whole table. Each step runs once per entity, at the
// bench's concurrency.
func (b bench) blobsyncRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	n := b.n
	if n == 0 {
		n = 200
	}
	suffix := strings.ToLower(rand.Text()[:6])
	table, container := "BenchBlobsync"+suffix, "bench-blobsync-"+suffix
	calls := &instrument.Counts{}
	st := instrumented(store, latency, calls)
	w, err := blobsync.New(kit.Plain(st), blobsync.Config{CheckpointTable: "BenchCheckpoints" + suffix, Tables: largeentity.Layout{
		{Table: table, Container: container, Properties: []string{"Photo", "Resume"}}}})
	if err != nil {
		return err
	}
	if err := seedLarge(ctx, store, table, container, n, b.conc); err != nil {
		return err
	}
	steps := []struct {
		what string
		args func(i int) blobsync.Args
		// before changes the entity or blob i outside the count.
		before func(i int) error
	}{
		{what: "offload of one named property (31 KiB string)", args: func(i int) blobsync.Args {
			return blobsync.Args{Mode: blobsync.ModeOffload, Table: table, PK: bsPK(i), RK: bsRK(i), Property: "Doc", Container: container}
		}},
		{what: "offload of the 2 declared properties (48 KiB binary, 20 KiB string)", args: func(i int) blobsync.Args {
			return blobsync.Args{Mode: blobsync.ModeOffload, Table: table, PK: bsPK(i), RK: bsRK(i)}
		}},
		{what: "offload replacing an earlier offload (previous blob deleted)", before: func(i int) error {
			_, err := store.Tables().UpdateEntity(ctx, table, storeadapter.Entity{PartitionKey: bsPK(i), RowKey: bsRK(i),
				Properties: map[string]any{"Doc": strings.Repeat("v2 ", 10_000)}}, storeadapter.Merge, storeadapter.ETagAny)
			return err
		}, args: func(i int) blobsync.Args {
			return blobsync.Args{Mode: blobsync.ModeOffload, Table: table, PK: bsPK(i), RK: bsRK(i), Property: "Doc", Container: container}
		}},
		{what: "attach of an application's blob (100 KiB, hashed)", args: func(i int) blobsync.Args {
			return blobsync.Args{Mode: blobsync.ModeAttach, Table: table, PK: bsPK(i), RK: bsRK(i), Property: "Scan", Container: container, Blob: bsAppBlob(i)}
		}},
		{what: "attach again, blob unchanged", args: func(i int) blobsync.Args {
			return blobsync.Args{Mode: blobsync.ModeAttach, Table: table, PK: bsPK(i), RK: bsRK(i), Property: "Scan", Container: container, Blob: bsAppBlob(i)}
		}},
	}
	fmt.Printf("%s: %d entities, concurrency %d\n%-70s %8s %10s %6s  %s\n", title, n, b.conc, "", "seconds", "per entity", "calls", "calls by operation")
	for _, s := range steps {
		if s.before != nil {
			if err := parallel(b.conc, n, s.before); err != nil {
				return fmt.Errorf("%s: prepare: %w", s.what, err)
			}
		}
		before := calls.Snapshot()
		start := time.Now()
		if err := parallel(b.conc, n, func(i int) error {
			_, err := w.Run(ctx, fmt.Sprintf("op-bench-%d", i), s.args(i))
			return err
		}); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		b.bsPrint(s.what, n, time.Since(start), subSnapshot(calls.Snapshot(), before))
	}
	before := calls.Snapshot()
	start := time.Now()
	res, err := w.Run(ctx, "op-bench-reconcile-"+suffix, blobsync.Args{Mode: blobsync.ModeReconcile, Table: table, Container: container})
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	b.bsPrint("reconcile of the table (one job; per entity)", n, time.Since(start), subSnapshot(calls.Snapshot(), before))
	fmt.Printf("reconcile: %v\n\n", res)
	return nil
}

func (b bench) bsPrint(what string, n int, took time.Duration, s instrument.Snapshot) {
	fmt.Printf("%-70s %8.2f %10.2f %6d  %s\n", what, took.Seconds(), float64(s.Total().Calls)/float64(n), s.Total().Calls, opsLine(s, n))
}

func bsPK(i int) string      { return fmt.Sprintf("P%d", i%10) }
func bsRK(i int) string      { return fmt.Sprintf("%06d", i) }
func bsAppBlob(i int) string { return fmt.Sprintf("scans/%s/%s.pdf", bsPK(i), bsRK(i)) }

// seedLarge makes table with n entities holding a 31 KiB string Doc, a
// 48 KiB binary Photo and a 20 KiB string Resume, and uploads one
// application blob of 100 KiB per entity to container.
func seedLarge(ctx context.Context, store storeadapter.Store, table, container string, n, conc int) error {
	if err := idempotent.EnsureTable(ctx, store.Tables(), table); err != nil {
		return err
	}
	if err := store.Container(container).Create(ctx); err != nil {
		return err
	}
	photo := make([]byte, 48<<10)
	scan := make([]byte, 100<<10)
	return parallel(conc, n, func(i int) error {
		e := storeadapter.Entity{PartitionKey: bsPK(i), RowKey: bsRK(i), Properties: map[string]any{
			"Name": fmt.Sprintf("employee %d", i), "Doc": strings.Repeat(fmt.Sprintf("%07d ", i), 4000),
			"Photo": photo, "Resume": strings.Repeat("r", 20<<10)}}
		if err := idempotent.Upsert(ctx, store.Tables(), table, e); err != nil {
			return err
		}
		_, err := store.Container(container).Put(ctx, bsAppBlob(i), scan, storeadapter.PutOptions{ContentType: "application/pdf"})
		return err
	})
}
