package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// purgeSizes are the day sizes of -job purge when -n is not given.
var purgeSizes = []int{10_000, 100_000}

// purgeRuns measures the three ways to delete one day of N entities (the
// high-volume delete pattern), each on a fresh copy of the day seeded
// uncounted: (1) the day kept as its own table, DeleteTable; (2) the purge
// kind's handler on a shared table, EGT batches of 100 from pages of
// 1,000 (and, in a separate run, its peak live heap above the heap before
// it, by the export bench's heapSampler); (3) one by one: the same pages,
// then one DeleteEntity (If-Match) per row, conc at a time per page,
// since sequential deletes with a real round trip take hours at 100,000.
func (b bench) purgeRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	sizes := purgeSizes
	if b.n > 0 {
		sizes = []int{b.n}
	}
	suffix := strings.ToLower(rand.Text()[:6])
	ckpt := "BenchPurgeCkpt" + suffix
	fmt.Printf("%s\n%9s  %-38s %8s %9s %13s  %s\n", title, "entities", "delete the day", "calls", "seconds", "peak live MiB", "calls by operation")
	for _, n := range sizes {
		var seeded []string
		fresh := func(what string) (string, error) {
			table := fmt.Sprintf("BenchPurge%s%d%s", what, n, suffix)
			seeded = append(seeded, table)
			if err := seedDay(ctx, store.Tables(), table, n, b.conc); err != nil {
				return "", fmt.Errorf("seed %s: %w", table, err)
			}
			return table, nil
		}
		row := func(what string, calls *instrument.Counts, took time.Duration, peak string) {
			s := calls.Snapshot()
			fmt.Printf("%9d  %-38s %8d %9.2f %13s  %s\n", n, what, s.Total().Calls, took.Seconds(), peak, opsLine(s, 1))
		}

		// (1) One table per day: one call.
		table, err := fresh("Day")
		if err != nil {
			return err
		}
		calls := &instrument.Counts{}
		start := time.Now()
		if err := instrumented(store, latency, calls).Tables().DeleteTable(ctx, table); err != nil {
			return fmt.Errorf("delete table %s: %w", table, err)
		}
		row("day table: DeleteTable", calls, time.Since(start), "")

		// (2) The purge kind's handler: its transactions one at a time
		// (the baseline), then purge.DefaultTransactions at once.
		purgeOnce := func(st storeadapter.Store, table string, txs int) (string, error) {
			w, err := purge.New(kit.Plain(st), purge.Config{CheckpointTable: ckpt, Transactions: txs})
			if err != nil {
				return "", err
			}
			res, err := work(ctx, w, "op-bench-"+table, purge.Args{Table: table})
			if err != nil {
				return "", fmt.Errorf("purge %s: %w", table, err)
			}
			if want := fmt.Sprintf("deleted %d entities ", n); !strings.HasPrefix(res, want) {
				return "", fmt.Errorf("purge %s: result %q, want %q…", table, res, want)
			}
			return res, nil
		}
		if err := idempotent.EnsureTable(ctx, store.Tables(), ckpt); err != nil {
			return err
		}
		var models []string
		for _, txs := range []int{1, purge.DefaultTransactions} {
			if table, err = fresh(fmt.Sprintf("Egt%d", txs)); err != nil {
				return err
			}
			calls = &instrument.Counts{}
			cpu0, start := cpuTime(), time.Now()
			if _, err := purgeOnce(instrumented(store, latency, calls), table, txs); err != nil {
				return err
			}
			took, cpu := time.Since(start), cpuTime()-cpu0
			row(fmt.Sprintf("purge kind: EGT batches, %d at once", txs), calls, took, "")
			models = append(models, purgeModel(n, txs, calls.Snapshot(), latency, took, cpu))
		}
		// The same purge on another copy, for its memory alone.
		if table, err = fresh("Mem"); err != nil {
			return err
		}
		var heap heapSampler
		heap.start()
		if _, err := purgeOnce(instrument.Wrap(store, instrument.Options{Fault: heap.fault}), table, purge.DefaultTransactions); err != nil {
			return err
		}
		fmt.Printf("%9d  %-38s %8s %9s %13.2f\n", n, "purge kind: peak live heap", "", "", float64(heap.peak)/(1<<20))

		// (3) One by one.
		if table, err = fresh("One"); err != nil {
			return err
		}
		calls = &instrument.Counts{}
		start = time.Now()
		if err := oneByOne(ctx, instrumented(store, latency, calls).Tables(), table, b.conc); err != nil {
			return err
		}
		row(fmt.Sprintf("one by one: DeleteEntity, %d at once", b.conc), calls, time.Since(start), "")
		for _, t := range seeded[1:] { // the day table is gone already
			if err := store.Tables().DeleteTable(ctx, t); err != nil {
				return err
			}
		}
		for _, m := range models {
			fmt.Printf("%9d  %s\n", n, m)
		}
	}
	fmt.Println()
	return nil
}

// purgeModel compares a purge's wall time with its model: the larger of
// the round trips on its critical path and the CPU it used. With txs
// transactions at once and the next page read meanwhile, a page costs
// ⌈transactions per page / txs⌉ round trips of deletes and one save (its
// query overlapped, but the first); three more start the checkpoint and
// the scan (load, first query, create). One at a time (txs 1) the query
// is still overlapped.
func purgeModel(n, txs int, s instrument.Snapshot, latency, took, cpu time.Duration) string {
	pages := max(s[instrument.OpQuery].Calls, 1)
	perPage := math.Ceil(float64(s[instrument.OpTransact].Calls)/float64(pages)/float64(txs)) + 1
	critical := time.Duration(float64(3+float64(pages)*perPage) * float64(latency))
	model := max(critical, cpu)
	return fmt.Sprintf("model of %d at once: %.2f s (critical path %.0f round trips = %.2f s, CPU %.2f s); wall / model %.2f",
		txs, model.Seconds(), 3+float64(pages)*perPage, critical.Seconds(), cpu.Seconds(), took.Seconds()/model.Seconds())
}

// oneByOne deletes every entity of a table with one DeleteEntity (If-Match
// its ETag) each, conc at a time, reading pages of 1,000 keys.
func oneByOne(ctx context.Context, t storeadapter.Tables, table string, conc int) error {
	q := storeadapter.Query{Select: []string{}}
	for {
		page, err := t.Query(ctx, table, q)
		if err != nil {
			return err
		}
		es := page.Entities
		if err := parallel(conc, len(es), func(i int) error {
			return t.DeleteEntity(ctx, table, es[i].PartitionKey, es[i].RowKey, es[i].ETag)
		}); err != nil {
			return fmt.Errorf("delete from %s: %w", table, err)
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return nil
		}
	}
}

// seedDay fills table with one day of n login attempts: PartitionKey one
// of 100 users, RowKey a time-ordered id, about 150 bytes each, in
// transactions of 100 sent by conc goroutines.
func seedDay(ctx context.Context, t storeadapter.Tables, table string, n, conc int) error {
	if err := idempotent.EnsureTable(ctx, t, table); err != nil {
		return err
	}
	const users = 100
	type batch struct{ user, from int }
	var batches []batch
	for u := range users {
		for from := u; from < n; from += users * storeadapter.MaxBatchOps {
			batches = append(batches, batch{u, from})
		}
	}
	day := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	return parallel(conc, len(batches), func(i int) error {
		bt := batches[i]
		var ops []storeadapter.TableOp
		for j := bt.from; j < n && len(ops) < storeadapter.MaxBatchOps; j += users {
			at := day.Add(time.Duration(j) * (24 * time.Hour / time.Duration(n)))
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{
				PartitionKey: fmt.Sprintf("user%03d", bt.user), RowKey: fmt.Sprintf("%s-%08d", at.Format("150405.000"), j),
				Properties: map[string]any{
					"At":      at,
					"Address": fmt.Sprintf("10.%d.%d.%d", j%256, j/256%256, j/65536%256),
					"Outcome": []string{"ok", "bad password", "locked", "mfa"}[j%4],
				}}})
		}
		return t.Transact(ctx, table, ops)
	})
}
