package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// restoreSizes are the table sizes of -job restore when -n is not given.
var restoreSizes = []int{10_000, 100_000}

// restoreBaselineRows caps the rows of the baseline loop: single upserts
// cost the same per row at any size, and 100,000 of them take minutes.
const restoreBaselineRows = 10_000

// restoreRuns measures the restore kind on one store. For each size, one
// day of login attempts (seedDay: 100 partitions, so every partition's
// batches are full) is seeded and exported with the default part size,
// neither counted. Then the restore kind's handler restores the export
// into a fresh table, in replace mode and in insert mode, its calls
// counted and delayed by latency; a third restore (replace, no latency)
// measures its peak live heap above the heap before it (heapSampler); and
// a loop of single upserts (UpsertEntity, b.conc at once, the rows read
// from the same parts) writes up to restoreBaselineRows rows: the
// baseline. It prints rows/s, calls per 1,000 rows and, with latency, the
// ratio to the limit of each loop: its calls one after another (the
// restore writes a partition's batches in order, and key order feeds one
// partition at a time), or b.conc at once (the baseline).
func (b bench) restoreRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	sizes := restoreSizes
	if b.n > 0 {
		sizes = []int{b.n}
	}
	suffix := strings.ToLower(rand.Text()[:6])
	ckpt, container := "BenchRestoreCkpt"+suffix, "bench-restore-"+suffix
	if err := idempotent.EnsureTable(ctx, store.Tables(), ckpt); err != nil {
		return err
	}
	fmt.Printf("%s\n%9s  %-28s %8s %9s %8s %12s %8s %13s  %s\n", title, "entities", "loop", "seconds", "rows/s",
		"calls", "calls/1,000", "/ limit", "peak live MiB", "calls by operation")
	var peaks []uint64
	for _, n := range sizes {
		src := fmt.Sprintf("BenchRestoreSrc%d%s", n, suffix)
		if err := seedDay(ctx, store.Tables(), src, n, b.conc); err != nil {
			return fmt.Errorf("seed %s: %w", src, err)
		}
		m, err := tableexport.Export(ctx, store.Tables(), storeadapter.Range{Table: src}, tableexport.Options{
			Blobs: store.Container(container), Prefix: "bench", OpID: "op-bench-export-" + src, CreateContainer: true,
			Checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: ckpt}})
		if err != nil {
			return fmt.Errorf("export %s: %w", src, err)
		}
		manifest := container + "/" + m.Name
		restoreOnce := func(st storeadapter.Store, mode, name string) error {
			w, err := restore.New(kit.Plain(st), restore.Config{CheckpointTable: ckpt,
				TimeBudget: jobs.Duration(time.Hour), MaxRunTime: jobs.Duration(2 * time.Hour)})
			if err != nil {
				return err
			}
			target := fmt.Sprintf("BenchRestore%s%d%s", name, n, suffix)
			defer store.Tables().DeleteTable(ctx, target)
			res, err := work(ctx, w, "op-bench-"+target, restore.Args{Manifests: []string{manifest}, Table: target, Mode: mode})
			if err != nil {
				return fmt.Errorf("restore %s into %s: %w", manifest, target, err)
			}
			if want := fmt.Sprintf("restore: %s: %d rows written, 0 skipped (exist), 0 deleted", target, n); res != want {
				return fmt.Errorf("restore into %s: result %q, want %q", target, res, want)
			}
			return nil
		}
		row := func(what string, rows int, r result, limit float64, peak string) {
			s := r.calls
			ratio := ""
			if limit > 0 {
				ratio = fmt.Sprintf("%.2f", r.movesPerSec(rows)/limit)
			}
			fmt.Printf("%9d  %-28s %8.2f %9.0f %8d %12.2f %8s %13s  %s\n", rows, what, r.took.Seconds(), r.movesPerSec(rows),
				s.Total().Calls, 1000*r.callsPerMove(rows), ratio, peak, opsLine(s, 1))
		}
		// serial is the limit of a loop making its calls one at a time.
		serial := func(r result, rows int) float64 {
			if latency == 0 {
				return 0
			}
			return 1 / (r.callsPerMove(rows) * latency.Seconds())
		}

		var rates [2]float64
		for i, mode := range []string{restore.ModeReplace, restore.ModeInsert} {
			calls := &instrument.Counts{}
			r, err := measure("restore "+mode, calls, func() error { return restoreOnce(instrumented(store, latency, calls), mode, mode) })
			if err != nil {
				return err
			}
			var peak string
			if mode == restore.ModeReplace {
				var heap heapSampler
				heap.start()
				// On localstore the restored rows would stay in this
				// process's heap: the memory run's writes go to a sink.
				mem := storeadapter.Store(sinkWrites{store, fmt.Sprintf("BenchRestorememory%d%s", n, suffix)})
				if err := restoreOnce(instrument.Wrap(mem, instrument.Options{Fault: heap.fault}), mode, "memory"); err != nil {
					return err
				}
				peaks = append(peaks, heap.peak)
				peak = fmt.Sprintf("%.2f", float64(heap.peak)/(1<<20))
			}
			row("restore kind, "+mode, n, r, serial(r, n), peak)
			if tot := r.calls.Total(); latency > 0 {
				fmt.Printf("%9s  (its calls took %v on average: the injected %v, timer wake-ups and the store)\n", "",
					(tot.Latency / time.Duration(tot.Calls)).Round(10*time.Microsecond), latency)
			}
			rates[i] = r.movesPerSec(n)
		}

		rows := min(n, restoreBaselineRows)
		calls := &instrument.Counts{}
		target := fmt.Sprintf("BenchRestoreUpserts%d%s", n, suffix)
		if err := idempotent.EnsureTable(ctx, store.Tables(), target); err != nil {
			return err
		}
		r, err := measure("single upserts", calls, func() error {
			return b.upserts(ctx, instrumented(store, latency, calls), container, m, target, rows)
		})
		if err != nil {
			return err
		}
		var limit float64
		if latency > 0 {
			limit = float64(b.conc) * serial(r, rows)
		}
		row(fmt.Sprintf("single upserts, %d at once", b.conc), rows, r, limit, "")
		fmt.Printf("%9s  restore / single upserts, rows/s: replace %.1f, insert %.1f\n", "", rates[0]/r.movesPerSec(rows), rates[1]/r.movesPerSec(rows))
		for _, t := range []string{src, target} {
			if err := store.Tables().DeleteTable(ctx, t); err != nil {
				return err
			}
		}
	}
	if len(peaks) > 1 && peaks[0] > 0 {
		fmt.Printf("peak live heap, %d rows / %d rows: %.2f\n", sizes[len(sizes)-1], sizes[0], float64(peaks[len(peaks)-1])/float64(peaks[0]))
	}
	if latency > 0 {
		fmt.Printf("limit of the restore: its calls one after another, 1 / (calls per row × %v); of the upserts: %d at once\n", latency, b.conc)
	}
	fmt.Println()
	return nil
}

// upserts writes the first rows lines of the export m (in container) into
// target with one UpsertEntity (replace) each, b.conc at once: the loop
// an application without EGT batches would run. The parts are read as the
// restore reads them (counted).
func (b bench) upserts(ctx context.Context, st storeadapter.Store, container string, m tableexport.Manifest, target string, rows int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the reader when an upsert failed
	es := make(chan storeadapter.Entity, b.conc)
	errs := make(chan error, 1)
	go func() {
		defer close(es)
		sent := 0
		for _, p := range m.Parts {
			err := tableexport.ReadPart(ctx, st.Container(container), p.Name, func(e storeadapter.Entity) error {
				if sent == rows {
					return errEnough
				}
				sent++
				select {
				case es <- storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, Properties: e.Properties}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if err != nil && !errors.Is(err, errEnough) {
				errs <- err
				return
			}
			if sent == rows {
				return
			}
		}
	}()
	err := parallel(b.conc, rows, func(int) error {
		e, ok := <-es
		if !ok {
			return fmt.Errorf("the export holds fewer than %d rows", rows)
		}
		_, err := st.Tables().UpsertEntity(ctx, target, e, storeadapter.Replace)
		return err
	})
	select {
	case rerr := <-errs:
		return rerr
	default:
		return err
	}
}

var errEnough = errors.New("bench: enough rows read")

// sinkWrites is a store whose table target takes writes and keeps
// nothing: the restore's memory run on localstore, whose tables live in
// the benchmark's own heap.
type sinkWrites struct {
	storeadapter.Store
	target string
}

func (s sinkWrites) Tables() storeadapter.Tables { return sinkTables{s.Store.Tables(), s.target} }

type sinkTables struct {
	storeadapter.Tables
	target string
}

func (s sinkTables) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	if table == s.target {
		return nil
	}
	return s.Tables.Transact(ctx, table, ops)
}
