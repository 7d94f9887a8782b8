package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// archiveRun is one concurrency's run of -job archive: the worker and the
// direct loop moving n messages each.
type archiveRun struct {
	conc, n        int
	worker, direct result
	limit          float64 // concurrency / (calls per move × latency), moves/s; 0 without injected latency
	load           string  // the machine's load average before the run
}

// archiveN is how many moves a run at conc makes: -n, or by default enough
// for a run of about a second at the limit with 10 ms calls (at least 1,000).
func (b bench) archiveN(conc int) int { return cmp.Or(b.n, max(1000, 40*conc)) }

// local runs the worker and the direct loop on localstore with latency
// injected into every call, at each -concurrency, and sums them up.
func (b bench) local(ctx context.Context, latency time.Duration) error {
	title := fmt.Sprintf("archive moves on localstore, %v per call", latency)
	var runs []archiveRun
	for _, conc := range b.concs {
		run := archiveRun{conc: conc, n: b.archiveN(conc), load: loadAverage()}
		bc := b
		bc.conc, bc.n = run.conc, run.n
		store := localstore.New(localstore.Options{})
		var err error
		if run.worker, err = bc.worker(ctx, store, latency, "BenchLocalWorker", "bench-local-worker"); err != nil {
			return err
		}
		if err := seed(ctx, store, "BenchLocalDirect", "bench-local-direct", run.n); err != nil {
			return err
		}
		calls := &instrument.Counts{}
		run.direct, err = measure("direct store loop", calls, bc.profiled("direct", func() error {
			return bc.directStore(ctx, instrumented(store, latency, calls), "BenchLocalDirect", "bench-local-direct")
		}))
		if err != nil {
			return err
		}
		run.limit = float64(conc) / (run.worker.callsPerMove(run.n) * latency.Seconds())
		bc.print(title, run.worker, run.direct)
		fmt.Printf("limit concurrency / (calls per move × latency) = %d / (%.2f × %v): %.0f moves/s\n", conc, run.worker.callsPerMove(run.n), latency, run.limit)
		fmt.Printf("worker / limit: %.2f, direct / limit: %.2f\n", run.worker.movesPerSec(run.n)/run.limit, run.direct.movesPerSec(run.n)/run.limit)
		tot := run.worker.calls.Total()
		fmt.Printf("the worker's calls took %v on average (the injected %v, timer wake-up and the store); load average before: %s\n\n",
			(tot.Latency / time.Duration(tot.Calls)).Round(10*time.Microsecond), latency, run.load)
		runs = append(runs, run)
	}
	summary(title, runs)
	return nil
}

// azurite runs the worker on azstore and the direct loop with the Azure SDK
// on Azurite, at each -concurrency.
func (b bench) azurite(ctx context.Context) error {
	return onAzurite(ctx, func(store storeadapter.Store, conn string) error {
		var runs []archiveRun
		for _, conc := range b.concs {
			run := archiveRun{conc: conc, n: b.archiveN(conc), load: loadAverage()}
			bc := b
			bc.conc, bc.n = run.conc, run.n
			var err error
			if run.worker, err = bc.worker(ctx, store, 0, fmt.Sprintf("BenchWorker%d", conc), fmt.Sprintf("bench-worker-%d", conc)); err != nil {
				return err
			}
			table, queue := fmt.Sprintf("BenchDirect%d", conc), fmt.Sprintf("bench-direct-%d", conc)
			if err := seed(ctx, store, table, queue, run.n); err != nil {
				return err
			}
			calls := &instrument.Counts{}
			if run.direct, err = measure("direct SDK loop", calls, bc.profiled("direct", func() error { return bc.directSDK(ctx, conn, table, queue, calls) })); err != nil {
				return err
			}
			bc.print("archive moves on Azurite", run.worker, run.direct)
			fmt.Printf("load average before: %s\n\n", run.load)
			runs = append(runs, run)
		}
		summary("archive moves on Azurite", runs)
		return nil
	})
}

// worker seeds table and queue in store, then moves them with runner.Runner
// through the instrument.
func (b bench) worker(ctx context.Context, store storeadapter.Store, latency time.Duration, table, queue string) (result, error) {
	if err := seed(ctx, store, table, queue, b.n); err != nil {
		return result{}, err
	}
	calls := &instrument.Counts{}
	r, err := benchRunner(instrumented(store, latency, calls), queue, catalog.Config{Archive: archive.Config{CheckpointTable: "BenchCheckpoints"}}, b.conc)
	if err != nil {
		return result{}, err
	}
	res, err := measure("worker (runner.Runner)", calls, b.profiled("worker", func() error { return r.Run(ctx) }))
	if err != nil {
		return result{}, err
	}
	if s := r.Stats(); s.Succeeded != int64(b.n) {
		return result{}, fmt.Errorf("worker moved %d of %d (stats %+v)", s.Succeeded, b.n, s)
	}
	return res, nil
}

// profiled returns fn, which writes a CPU profile of itself to
// <-cpuprofile>.<loop>.c<concurrency> when -cpuprofile is set.
func (b bench) profiled(loop string, fn func() error) func() error {
	if b.cpuprofile == "" {
		return fn
	}
	return func() error {
		f, err := os.Create(fmt.Sprintf("%s.%s.c%d", b.cpuprofile, loop, b.conc))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
		return fn()
	}
}

// loadAverage returns the machine's 1, 5 and 15 minute load averages, or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// print reports the two loops of one run.
func (b bench) print(title string, worker, direct result) {
	fmt.Printf("%s: %d single-entity moves, concurrency %d\n", title, b.n, b.conc)
	fmt.Printf("%-22s %8s %9s %15s %16s\n", "", "seconds", "moves/s", "calls per move", "CPU per message")
	for _, r := range []result{worker, direct} {
		fmt.Printf("%-22s %8.2f %9.0f %15.2f %16v\n", r.name, r.took.Seconds(), r.movesPerSec(b.n), r.callsPerMove(b.n),
			(r.cpu / time.Duration(b.n)).Round(time.Microsecond))
	}
	fmt.Printf("worker / direct throughput ratio: %.2f\n", direct.took.Seconds()/worker.took.Seconds())
	if b.verbose {
		for _, r := range []result{worker, direct} {
			fmt.Printf("\n%s, calls by operation:\n%v", r.name, r.calls)
		}
	}
}

// summary prints one line per concurrency: both loops' rates, the
// worker's calls per move, both CPU times per message and the ratios.
func summary(title string, runs []archiveRun) {
	fmt.Printf("%s, by concurrency (W worker, D direct loop, L limit):\n", title)
	fmt.Printf("%5s %6s %8s %8s %7s %8s %8s %6s %6s %6s  %s\n", "conc", "moves", "W/s", "D/s", "W calls", "W CPU", "D CPU", "W/L", "D/L", "W/D", "load before")
	for _, r := range runs {
		wl, dl := "-", "-"
		if r.limit > 0 {
			wl, dl = fmt.Sprintf("%.2f", r.worker.movesPerSec(r.n)/r.limit), fmt.Sprintf("%.2f", r.direct.movesPerSec(r.n)/r.limit)
		}
		fmt.Printf("%5d %6d %8.0f %8.0f %7.2f %8v %8v %6s %6s %6.2f  %s\n", r.conc, r.n, r.worker.movesPerSec(r.n), r.direct.movesPerSec(r.n),
			r.worker.callsPerMove(r.n), (r.worker.cpu / time.Duration(r.n)).Round(time.Microsecond), (r.direct.cpu / time.Duration(r.n)).Round(time.Microsecond),
			wl, dl, r.direct.took.Seconds()/r.worker.took.Seconds(), r.load)
	}
	fmt.Println()
}

// msg is one received message, from the store or the SDK.
type msg struct{ id, popReceipt, text string }

// pump moves n messages as the runner does: receivers feeding conc movers,
// a receive of up to 32 messages for each 32 movers at once (one receiver
// alone caps a loop at 32 messages per round trip, about 3,000 moves/s
// with 10 ms calls, far below the limit at hundreds of movers). It
// returns the first error.
func (b bench) pump(receive func() ([]msg, error), move func(m msg) error) error {
	msgs := make(chan msg, b.conc)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
	}
	var got atomic.Int64
	var receivers sync.WaitGroup
	for range b.receivers() {
		receivers.Go(func() {
			for got.Load() < int64(b.n) {
				ms, err := receive()
				if err != nil {
					fail(err)
					return
				}
				for _, m := range ms {
					msgs <- m
				}
				got.Add(int64(len(ms)))
			}
		})
	}
	go func() { receivers.Wait(); close(msgs) }()
	var wg sync.WaitGroup
	for range b.conc {
		wg.Go(func() {
			for m := range msgs {
				if err := move(m); err != nil {
					fail(err)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// receivers is how many receives the direct loops keep in flight: one per
// 32 movers.
func (b bench) receivers() int { return (b.conc + 31) / 32 }

// archiveArgs decodes a bench message's archive arguments.
func archiveArgs(text string) (archive.Args, error) {
	var a archive.Args
	env, err := jobs.DecodeEnvelope(text)
	if err != nil {
		return a, err
	}
	err = json.Unmarshal(env.Args, &a)
	return a, err
}

// directStore moves the entities of table through store's interfaces: per
// message a get, an upsert, an If-Match delete and a message delete.
func (b bench) directStore(ctx context.Context, store storeadapter.Store, table, queue string) error {
	tb, q := store.Tables(), store.Queue(queue)
	receive := func() ([]msg, error) {
		got, err := q.Receive(ctx, min(32, b.conc), time.Minute)
		ms := make([]msg, len(got))
		for i, m := range got {
			ms[i] = msg{m.ID, m.PopReceipt, m.Text}
		}
		return ms, err
	}
	return b.pump(receive, func(m msg) error {
		a, err := archiveArgs(m.text)
		if err != nil {
			return err
		}
		e, err := tb.GetEntity(ctx, table, *a.PK, *a.RK)
		if err != nil {
			return err
		}
		if _, err := tb.UpsertEntity(ctx, a.To, e, storeadapter.Replace); err != nil {
			return err
		}
		if err := tb.DeleteEntity(ctx, table, *a.PK, *a.RK, e.ETag); err != nil {
			return err
		}
		return q.DeleteMessage(ctx, m.id, m.popReceipt)
	})
}

// directSDK moves the entities of table with the Azure SDK, making
// the same calls as directStore; calls hears each of them.
func (b bench) directSDK(ctx context.Context, conn, table, queue string, calls *instrument.Counts) error {
	ts, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	qs, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	src, dst, q := ts.NewClient(table), ts.NewClient(table+"Archive"), qs.NewQueueClient(queue)
	receive := func() ([]msg, error) {
		resp, err := observe(calls, instrument.OpReceive, func() (azqueue.DequeueMessagesResponse, error) {
			return q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(min(32, b.conc))), VisibilityTimeout: to.Ptr(int32(60))})
		})
		ms := make([]msg, len(resp.Messages))
		for i, m := range resp.Messages {
			ms[i] = msg{*m.MessageID, *m.PopReceipt, *m.MessageText}
		}
		return ms, err
	}
	return b.pump(receive, func(m msg) error {
		a, err := archiveArgs(m.text)
		if err != nil {
			return err
		}
		got, err := observe(calls, instrument.OpGetEntity, func() (aztables.GetEntityResponse, error) { return src.GetEntity(ctx, *a.PK, *a.RK, nil) })
		if err != nil {
			return err
		}
		if _, err := observe(calls, instrument.OpUpsertEntity, func() (aztables.UpsertEntityResponse, error) {
			return dst.UpsertEntity(ctx, got.Value, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		}); err != nil {
			return err
		}
		if _, err := observe(calls, instrument.OpDeleteEntity, func() (aztables.DeleteEntityResponse, error) {
			return src.DeleteEntity(ctx, *a.PK, *a.RK, &aztables.DeleteEntityOptions{IfMatch: &got.ETag})
		}); err != nil {
			return err
		}
		_, err = observe(calls, instrument.OpDeleteMessage, func() (azqueue.DeleteMessageResponse, error) { return q.DeleteMessage(ctx, m.id, m.popReceipt, nil) })
		return err
	})
}

// observe makes one SDK call and reports it to calls as the instrument
// would report the store's call op.
func observe[T any](calls *instrument.Counts, op instrument.Op, fn func() (T, error)) (T, error) {
	start := time.Now()
	v, err := fn()
	calls.Observe(instrument.Call{Op: op}, time.Since(start), err)
	return v, err
}
