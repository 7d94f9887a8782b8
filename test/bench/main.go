// Command bench measures the worker against Azurite: archive moves per
// second through runner.Runner next to a tight loop that makes the same
// storage calls directly with the Azure SDK at the same concurrency (their
// ratio is the runner's overhead), and storage calls per archive move,
// receives amortised. It starts its own Azurite (see test/azurite) unless
// TABLEKEEPER_AZURITE_CONNECTION_STRING names one.
//
//	go run ./test/bench -n 2000 -concurrency 16
//
// Keep -n to a few thousand: Azurite's receive slows down on deep queues.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

func main() {
	n := flag.Int("n", 2000, "archive moves per run (keep to a few thousand on Azurite)")
	conc := flag.Int("concurrency", 16, "concurrent moves, the same for both runs")
	flag.Parse()
	if err := run(*n, *conc); err != nil {
		log.Fatal(err)
	}
}

// counter counts HTTP requests, i.e. storage calls.
type counter struct{ n atomic.Int64 }

func (c *counter) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultClient.Do(r)
}

func run(n, conc int) error {
	ctx := context.Background()
	em, err := azurite.Start(ctx)
	if err != nil {
		return err
	}
	defer em.Stop()
	calls := &counter{}
	co := azcore.ClientOptions{Transport: calls}
	store, err := azstore.NewFromConnectionString(em.ConnectionString, &azstore.Options{
		Tables: &aztables.ClientOptions{ClientOptions: co}, Queues: &azqueue.ClientOptions{ClientOptions: co}, Blobs: &azblob.ClientOptions{ClientOptions: co}})
	if err != nil {
		return err
	}

	// Through the worker.
	if err := seed(ctx, store, "BenchWorker", "bench-worker", n); err != nil {
		return err
	}
	reg, err := catalog.NewRegistry(store, catalog.Config{Archive: archive.Config{CheckpointTable: "BenchCheckpoints"}})
	if err != nil {
		return err
	}
	r, err := runner.New(runner.Config{Queue: store.Queue("bench-worker"), Registry: reg,
		Poison: poison.New(poison.Config{Tables: store.Tables(), Source: store.Queue("bench-worker"),
			Poison: store.Queue("bench-worker-poison"), Blobs: store.Container("bench-worker-poison")}), Concurrency: conc, Drain: true, IdleMin: 10 * time.Millisecond, IdleMax: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	before := calls.n.Load()
	start := time.Now()
	if err := r.Run(ctx); err != nil {
		return err
	}
	workerTime := time.Since(start)
	workerCalls := calls.n.Load() - before
	if s := r.Stats(); s.Succeeded != int64(n) {
		return fmt.Errorf("worker moved %d of %d (stats %+v)", s.Succeeded, n, s)
	}

	// The same calls, directly with the SDK.
	if err := seed(ctx, store, "BenchDirect", "bench-direct", n); err != nil {
		return err
	}
	directTime, directCalls, err := direct(ctx, em.ConnectionString, n, conc)
	if err != nil {
		return err
	}

	fmt.Printf("archive moves on Azurite, %d single-entity moves, concurrency %d\n", n, conc)
	fmt.Printf("%-28s %10s %14s %16s\n", "", "seconds", "moves/s", "calls per move")
	fmt.Printf("%-28s %10.2f %14.0f %16.2f\n", "worker (runner.Runner)", workerTime.Seconds(), float64(n)/workerTime.Seconds(), float64(workerCalls)/float64(n))
	fmt.Printf("%-28s %10.2f %14.0f %16.2f\n", "direct SDK loop", directTime.Seconds(), float64(n)/directTime.Seconds(), float64(directCalls)/float64(n))
	fmt.Printf("worker / direct throughput ratio: %.2f\n", directTime.Seconds()/workerTime.Seconds())
	return nil
}

// seed fills table with n entities in 10 partitions and queue with one
// archive message per entity.
func seed(ctx context.Context, store *azstore.Store, table, queue string, n int) error {
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
	q := store.Queue(queue)
	if err := q.Create(ctx); err != nil {
		return err
	}
	return parallel(16, n, func(i int) error {
		args, _ := json.Marshal(archive.Args{Table: table, To: table + "Archive", PK: to.Ptr(fmt.Sprintf("P%d", i%10)), RK: to.Ptr(fmt.Sprintf("%08d", i))})
		text, err := jobs.Encode(jobs.Envelope{V: 1, ID: fmt.Sprintf("op-bench-%d", i), Kind: archive.Kind, Args: args})
		if err != nil {
			return err
		}
		_, err = q.Send(ctx, text, storeadapter.SendOptions{})
		return err
	})
}

// direct moves the entities of BenchDirect with the SDK: per message a get,
// an upsert, an If-Match delete and a message delete, receiving 32 at a time.
func direct(ctx context.Context, conn string, n, conc int) (time.Duration, int64, error) {
	calls := &counter{}
	co := policy.ClientOptions{Transport: calls}
	ts, err := aztables.NewServiceClientFromConnectionString(conn, &aztables.ClientOptions{ClientOptions: co})
	if err != nil {
		return 0, 0, err
	}
	qs, err := azqueue.NewServiceClientFromConnectionString(conn, &azqueue.ClientOptions{ClientOptions: co})
	if err != nil {
		return 0, 0, err
	}
	src, dst, q := ts.NewClient("BenchDirect"), ts.NewClient("BenchDirectArchive"), qs.NewQueueClient("bench-direct")
	// One receiver feeds conc movers, as the runner does.
	msgs := make(chan *azqueue.DequeuedMessage, conc)
	var moved atomic.Int64
	start := time.Now()
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
	}
	go func() {
		defer close(msgs)
		for got := 0; got < n; {
			resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(min(32, conc))), VisibilityTimeout: to.Ptr(int32(60))})
			if err != nil {
				fail(err)
				return
			}
			for _, m := range resp.Messages {
				msgs <- m
			}
			got += len(resp.Messages)
		}
	}()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				if err := moveDirect(ctx, src, dst, q, m); err != nil {
					fail(err)
				}
				moved.Add(1)
			}
		}()
	}
	wg.Wait()
	return time.Since(start), calls.n.Load(), firstErr
}

// moveDirect makes the storage calls of one archive move with the SDK.
func moveDirect(ctx context.Context, src, dst *aztables.Client, q *azqueue.QueueClient, m *azqueue.DequeuedMessage) error {
	env, err := jobs.DecodeEnvelope(*m.MessageText)
	if err != nil {
		return err
	}
	var a archive.Args
	if err := json.Unmarshal(env.Args, &a); err != nil {
		return err
	}
	got, err := src.GetEntity(ctx, *a.PK, *a.RK, nil)
	if err != nil {
		return err
	}
	if _, err := dst.UpsertEntity(ctx, got.Value, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		return err
	}
	if _, err := src.DeleteEntity(ctx, *a.PK, *a.RK, &aztables.DeleteEntityOptions{IfMatch: &got.ETag}); err != nil {
		return err
	}
	_, err = q.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil)
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
