package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

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
	concs := flag.String("concurrency", "16", "concurrent moves or reconciles, the same for every run; -job archive takes a comma-separated list (16,64,256,512) and runs each")
	latency := flag.Duration("latency", 10*time.Millisecond, "round trip injected into every localstore call")
	runs := flag.String("runs", "local,azurite", "which runs to make, comma-separated: local, azurite")
	verbose := flag.Bool("v", false, "print each run's calls by operation")
	cpuprofile := flag.String("cpuprofile", "", "-job archive: write a CPU profile of each loop to `prefix`.worker.c<concurrency> and prefix.direct.c<concurrency>")
	flag.Parse()
	b := bench{n: *n, verbose: *verbose, cpuprofile: *cpuprofile}
	for _, c := range strings.Split(*concs, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || k < 1 {
			log.Fatalf("-concurrency: want positive numbers, comma-separated, got %q", *concs)
		}
		b.concs = append(b.concs, k)
	}
	if b.conc = b.concs[0]; len(b.concs) > 1 && *job != "archive" {
		log.Fatalf("-concurrency: a list is for -job archive only, got %q", *concs)
	}
	if !slices.Contains([]string{"archive", "index", "rebuild", "export", "restore", "blobsync", "purge", "client", "poison"}, *job) {
		log.Fatalf("-job: must be archive, index, rebuild, export, restore, blobsync, purge, client or poison, got %q", *job)
	}
	if b.n == 0 && (*job == "index" || *job == "client" || *job == "poison") { // archive: see archiveN
		b.n = map[string]int{"index": 500, "client": 1000, "poison": 1000}[*job]
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
	n, conc    int
	concs      []int // -concurrency: conc is the first; -job archive runs each
	verbose    bool
	cpuprofile string // see profiled
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
