package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

func main() {
	job := flag.String("job", "archive", "what to measure: archive (moves through the runner), index (reconciles of each kind of index), rebuild (an index rebuild from scratch, and archive and purge of indexed entities), export (the table-to-blob exporter), restore (the restore kind beside single upserts), blobsync (calls per offload, attach and reconcile), purge (deleting a day: DeleteTable, EGT batches, one by one), client (the producer: send rates of EnqueueMany and enqueue raw, the outbox's calls) or poison (poisoning by the worker, poison requeue and purge)")
	n := flag.Int("n", 0, "archive moves per run, entities per index, or jobs sent by -job client or poisoned by -job poison (default 1000 moves, 500 entities, 1000 jobs; keep to a few thousand on Azurite)")
	conc := flag.Int("concurrency", 16, "concurrent moves or reconciles, the same for every run")
	latency := flag.Duration("latency", 10*time.Millisecond, "round trip injected into every localstore call")
	runs := flag.String("runs", "local,azurite", "which runs to make, comma-separated: local, azurite")
	verbose := flag.Bool("v", false, "print each run's calls by operation")
	flag.Parse()
	b := bench{n: *n, conc: *conc, verbose: *verbose}
	if !slices.Contains([]string{"archive", "index", "rebuild", "export", "restore", "blobsync", "purge", "client", "poison"}, *job) {
		log.Fatalf("-job: must be archive, index, rebuild, export, restore, blobsync, purge, client or poison, got %q", *job)
	}
	if b.n == 0 && (*job == "archive" || *job == "index" || *job == "client" || *job == "poison") {
		b.n = map[string]int{"archive": 1000, "index": 500, "client": 1000, "poison": 1000}[*job]
	}
	for _, r := range strings.Split(*runs, ",") {
		var err error
		switch {
		case r == "local" && *job == "export":
			err = b.exportRuns(context.Background(), fmt.Sprintf("export on localstore, %v per call, parts to a counting sink", *latency), localstore.New(localstore.Options{}), *latency, true)
		case r == "azurite" && *job == "export":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.exportRuns(context.Background(), "export on Azurite (azstore)", store, 0, false)
			})
		case r == "local" && *job == "restore":
			err = b.restoreRuns(context.Background(), fmt.Sprintf("restore on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "azurite" && *job == "restore":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.restoreRuns(context.Background(), "restore on Azurite (azstore)", store, 0)
			})
		case r == "local" && *job == "purge":
			err = b.purgeRuns(context.Background(), fmt.Sprintf("purge on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "azurite" && *job == "purge":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.purgeRuns(context.Background(), "purge on Azurite (azstore)", store, 0)
			})
		case r == "local" && *job == "client":
			err = b.clientRuns(context.Background(), fmt.Sprintf("producer on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency, "")
		case r == "azurite" && *job == "client":
			err = onAzurite(context.Background(), func(store storeadapter.Store, conn string) error {
				return b.clientRuns(context.Background(), "producer on Azurite (azstore)", store, 0, conn)
			})
		case r == "local" && *job == "poison":
			err = b.poisonRuns(context.Background(), fmt.Sprintf("poison on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "azurite" && *job == "poison":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.poisonRuns(context.Background(), "poison on Azurite (azstore)", store, 0)
			})
		case r == "local" && *job == "rebuild":
			err = b.rebuildRuns(context.Background(), fmt.Sprintf("index rebuild on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "azurite" && *job == "rebuild":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.rebuildRuns(context.Background(), "index rebuild on Azurite (azstore)", store, 0)
			})
		case r == "local" && *job == "blobsync":
			err = b.blobsyncRuns(context.Background(), fmt.Sprintf("blobsync on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "azurite" && *job == "blobsync":
			err = onAzurite(context.Background(), func(store storeadapter.Store, _ string) error {
				return b.blobsyncRuns(context.Background(), "blobsync on Azurite (azstore)", store, 0)
			})
		case r == "local" && *job == "index":
			err = b.indexRuns(context.Background(), fmt.Sprintf("index reconciles on localstore, %v per call", *latency), localstore.New(localstore.Options{}), *latency)
		case r == "local":
			err = b.local(context.Background(), *latency)
		case r == "azurite" && *job == "index":
			err = b.indexAzurite(context.Background())
		case r == "azurite":
			err = b.azurite(context.Background())
		default:
			err = fmt.Errorf("-runs: unknown run %q (local, azurite)", r)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

// indexAzurite runs the index job on azstore on Azurite.
func (b bench) indexAzurite(ctx context.Context) error {
	return onAzurite(ctx, func(store storeadapter.Store, _ string) error {
		return b.indexRuns(ctx, "index reconciles on Azurite (azstore)", store, 0)
	})
}

type bench struct {
	n, conc int
	verbose bool
}

// result is one loop's figures.
type result struct {
	name  string
	took  time.Duration
	cpu   time.Duration // process CPU time, user and system
	calls instrument.Snapshot
}

func (r result) movesPerSec(n int) float64 { return float64(n) / r.took.Seconds() }
func (r result) callsPerMove(n int) float64 {
	return float64(r.calls.Total().Calls) / float64(n)
}

// measure runs fn and returns its wall and CPU time and calls counts.
func measure(name string, calls *instrument.Counts, fn func() error) (result, error) {
	cpu0, start := cpuTime(), time.Now()
	if err := fn(); err != nil {
		return result{}, fmt.Errorf("%s: %w", name, err)
	}
	return result{name: name, took: time.Since(start), cpu: cpuTime() - cpu0, calls: calls.Snapshot()}, nil
}

// cpuTime returns the CPU time this process has used so far (children, such
// as Azurite, excluded).
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		log.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// instrumented wraps store so that calls counts every call, each delayed
// by latency.
func instrumented(store storeadapter.Store, latency time.Duration, calls *instrument.Counts) *instrument.Store {
	return instrument.Wrap(store, instrument.Options{Latency: instrument.Fixed(latency), Observers: []instrument.Observer{calls}})
}

// local runs the worker and the direct loop on localstore with latency
// injected into every call.
func (b bench) local(ctx context.Context, latency time.Duration) error {
	store := localstore.New(localstore.Options{})
	worker, err := b.worker(ctx, store, latency, "BenchLocalWorker", "bench-local-worker")
	if err != nil {
		return err
	}
	if err := seed(ctx, store, "BenchLocalDirect", "bench-local-direct", b.n); err != nil {
		return err
	}
	calls := &instrument.Counts{}
	direct, err := measure("direct store loop", calls, func() error {
		return b.directStore(ctx, instrumented(store, latency, calls), "BenchLocalDirect", "bench-local-direct")
	})
	if err != nil {
		return err
	}
	limit := float64(b.conc) / (worker.callsPerMove(b.n) * latency.Seconds())
	b.print(fmt.Sprintf("archive moves on localstore, %v per call", latency), worker, direct)
	fmt.Printf("limit concurrency / (calls per move × latency) = %d / (%.2f × %v): %.0f moves/s\n", b.conc, worker.callsPerMove(b.n), latency, limit)
	fmt.Printf("worker / limit: %.2f, direct / limit: %.2f\n", worker.movesPerSec(b.n)/limit, direct.movesPerSec(b.n)/limit)
	tot := worker.calls.Total()
	fmt.Printf("the worker's calls took %v on average (the injected %v, timer wake-up and the store)\n\n",
		(tot.Latency / time.Duration(tot.Calls)).Round(10*time.Microsecond), latency)
	return nil
}

// azurite runs the worker on azstore and the direct loop with the Azure SDK
// on Azurite.
func (b bench) azurite(ctx context.Context) error {
	return onAzurite(ctx, func(store storeadapter.Store, connectionString string) error {
		return b.azuriteArchive(ctx, store, connectionString)
	})
}

// onAzurite starts Azurite, runs fn on an azstore connected to it, and
// stops Azurite.
func onAzurite(ctx context.Context, fn func(store storeadapter.Store, connectionString string) error) error {
	em, err := azurite.Start(ctx)
	if err != nil {
		return err
	}
	defer em.Stop()
	store, err := azstore.NewFromConnectionString(em.ConnectionString, nil)
	if err != nil {
		return err
	}
	return fn(store, em.ConnectionString)
}

func (b bench) azuriteArchive(ctx context.Context, store storeadapter.Store, connectionString string) error {
	worker, err := b.worker(ctx, store, 0, "BenchWorker", "bench-worker")
	if err != nil {
		return err
	}
	if err := seed(ctx, store, "BenchDirect", "bench-direct", b.n); err != nil {
		return err
	}
	calls := &instrument.Counts{}
	direct, err := measure("direct SDK loop", calls, func() error { return b.directSDK(ctx, connectionString, calls) })
	if err != nil {
		return err
	}
	b.print("archive moves on Azurite", worker, direct)
	fmt.Println()
	return nil
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
	res, err := measure("worker (runner.Runner)", calls, func() error { return r.Run(ctx) })
	if err != nil {
		return result{}, err
	}
	if s := r.Stats(); s.Succeeded != int64(b.n) {
		return result{}, fmt.Errorf("worker moved %d of %d (stats %+v)", s.Succeeded, b.n, s)
	}
	return res, nil
}

// benchRunner returns a worker of queue on st running the kinds of cfg
// until the queue is drained, conc jobs at once, with the outbox rows of
// transactional enqueues read from st's tables.
func benchRunner(st storeadapter.Store, queue string, cfg catalog.Config, conc int) (*runner.Runner, error) {
	reg, err := catalog.NewRegistry(st, nil, cfg)
	if err != nil {
		return nil, err
	}
	rec, err := poison.NewRecorder(poison.Config{Tables: st.Tables(), Source: st.Queue(queue),
		Poison: st.Queue(queue + "-poison"), Blobs: st.Container(queue + "-poison")})
	if err != nil {
		return nil, err
	}
	return runner.New(runner.Config{Queue: st.Queue(queue), Registry: reg, Tables: st.Tables(),
		Poison: rec, Concurrency: conc, Drain: true, IdleMin: 10 * time.Millisecond, IdleMax: 100 * time.Millisecond})
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

// msg is one received message, from the store or the SDK.
type msg struct{ id, popReceipt, text string }

// pump moves n messages as the runner does: one receiver feeding conc
// movers. It returns the first error.
func (b bench) pump(receive func() ([]msg, error), move func(m msg) error) error {
	msgs := make(chan msg, b.conc)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
	}
	go func() {
		defer close(msgs)
		for got := 0; got < b.n; {
			ms, err := receive()
			if err != nil {
				fail(err)
				return
			}
			for _, m := range ms {
				msgs <- m
			}
			got += len(ms)
		}
	}()
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

// directSDK moves the entities of BenchDirect with the Azure SDK, making
// the same calls as directStore; calls hears each of them.
func (b bench) directSDK(ctx context.Context, conn string, calls *instrument.Counts) error {
	ts, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	qs, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return err
	}
	src, dst, q := ts.NewClient("BenchDirect"), ts.NewClient("BenchDirectArchive"), qs.NewQueueClient("bench-direct")
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

// seed fills table with n entities in 10 partitions and queue with one
// archive message per entity.
func seed(ctx context.Context, store storeadapter.Store, table, queue string, n int) error {
	t := store.Tables()
	for _, name := range []string{table, table + "Archive"} {
		if err := idempotent.EnsureTable(ctx, t, name); err != nil {
			return err
		}
	}
	var ops []storeadapter.TableOp
	for i := range n {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{
			PartitionKey: fmt.Sprintf("P%d", i%10), RowKey: fmt.Sprintf("%08d", i),
			Properties: map[string]any{"Name": "Jones", "Salary": int64(i) << 40, "Rating": 4.0, "Hired": time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)}}})
	}
	for _, b := range idempotent.Batches(ops) {
		if err := t.Transact(ctx, table, b); err != nil {
			return err
		}
	}
	if err := store.Queue(queue).Create(ctx); err != nil {
		return err
	}
	c, err := client.New(client.Config{Store: store, Queue: queue, Concurrency: 16})
	if err != nil {
		return err
	}
	args, ids := make([]jobs.Args, n), make([]string, n)
	for i := range n {
		args[i] = archive.Args{Table: table, To: table + "Archive", PK: to.Ptr(fmt.Sprintf("P%d", i%10)), RK: to.Ptr(fmt.Sprintf("%08d", i))}
		ids[i] = fmt.Sprintf("op-bench-%d", i)
	}
	_, err = c.EnqueueMany(ctx, args, client.IDs(ids...))
	return err
}

// parallel runs fn(0..n-1) on k goroutines and returns the first error.
func parallel(k, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func init() {
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	if os.Getenv(azurite.EnvSkip) == "1" {
		log.Print("note: " + azurite.EnvSkip + " is ignored: the benchmark needs Azurite")
	}
}
