package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// The producer's figures (-job client), on each run:
//
//   - sends: b.n index reconciles sent by client.EnqueueMany, and the same
//     jobs as JSON lines through enqueue raw's path (jobs.DecodeEnvelope,
//     Client.PrepareEnvelope, Client.Stream: what the command runs for each
//     line), in-process with every call counted; on Azurite also by the
//     built enqueue binary (enqueue raw -file), timed from outside.
//   - the outbox: b.n/5 jobs "write an entity, reconcile its index", sent
//     plain (one Transact of the writes, then EnqueueMany) and by Tx.Commit
//     (the writes and the outbox rows in one Transact), 1 and 10 jobs per
//     commit, then run by the worker; the producer's and the worker's calls
//     are counted apart, per commit and per job, and their difference
//     printed by operation.

// clientRuns prints the producer's figures on store, every counted call
// delayed by latency; conn, when not "", is the connection string the
// enqueue binary reaches the same store with.
func (b bench) clientRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration, conn string) error {
	if err := b.sendRates(ctx, title, store, latency, conn); err != nil {
		return err
	}
	return b.outboxCosts(ctx, title, store, latency)
}

// sendRates prints the send rates of EnqueueMany and of enqueue raw.
func (b bench) sendRates(ctx context.Context, title string, store storeadapter.Store, latency time.Duration, conn string) error {
	const table = "BenchClient"
	args := make([]jobs.Args, b.n)
	var lines bytes.Buffer
	for i := range b.n {
		args[i] = index.Reconcile(table, ixPK(i), ixRK(i))
		// The input of enqueue raw: one envelope per line, as a producer
		// in another language would write it.
		job, err := jobs.NewJob(fmt.Sprintf("op-bench-raw-%d", i), args[i].(index.Args))
		if err != nil {
			return err
		}
		line, err := json.Marshal(job.Envelope)
		if err != nil {
			return err
		}
		lines.Write(append(line, '\n'))
	}
	var rows []result
	limit := float64(b.conc) / latency.Seconds()

	many := &instrument.Counts{}
	c, err := b.client(ctx, store, "bench-client-many", latency, many)
	if err != nil {
		return err
	}
	r, err := measure("client.EnqueueMany", many, func() error {
		_, err := c.EnqueueMany(ctx, args)
		return err
	})
	if err != nil {
		return err
	}
	rows = append(rows, r)

	raw := &instrument.Counts{}
	if c, err = b.client(ctx, store, "bench-client-raw", latency, raw); err != nil {
		return err
	}
	if r, err = measure("enqueue raw's path, in-process", raw, func() error { return rawPath(ctx, c, lines.Bytes(), b.n) }); err != nil {
		return err
	}
	rows = append(rows, r)

	fmt.Printf("%s: sending %d jobs (index reconciles), concurrency %d\n", title, b.n, b.conc)
	fmt.Printf("%-34s %8s %11s %18s  %s\n", "", "seconds", "messages/s", "calls per message", "calls")
	for _, r := range rows {
		fmt.Printf("%-34s %8.2f %11.0f %18.2f  %s\n", r.name, r.took.Seconds(), r.movesPerSec(b.n), r.callsPerMove(b.n), opsLine(r.calls, 1))
	}
	if conn != "" {
		took, err := rawBinary(ctx, store, conn, "bench-client-bin", lines.Bytes(), b.n, b.conc)
		if err != nil {
			return err
		}
		fmt.Printf("%-34s %8.2f %11.0f %18s  %s\n", "enqueue raw, the binary", took.Seconds(), float64(b.n)/took.Seconds(), "-", "not counted (another process)")
	}
	if latency > 0 {
		fmt.Printf("limit concurrency / latency = %d / %v: %.0f messages/s\n", b.conc, latency, limit)
	}
	fmt.Println()
	return nil
}

// client returns a client on queue of store, its calls counted by calls
// and delayed by latency, the queue created first (not counted).
func (b bench) client(ctx context.Context, store storeadapter.Store, queue string, latency time.Duration, calls *instrument.Counts) (*client.Client, error) {
	if err := store.Queue(queue).Create(ctx); err != nil {
		return nil, err
	}
	return client.New(client.Config{Store: instrumented(store, latency, calls), Queue: queue, Concurrency: b.conc})
}

// rawPath sends the envelopes of lines as enqueue raw does each line: the
// worker's decoding of the envelope, the client's PrepareEnvelope and
// Stream. It fails unless all n were sent.
func rawPath(ctx context.Context, c *client.Client, lines []byte, n int) error {
	s := c.Stream(ctx)
	var mu sync.Mutex
	sent := 0
	sc := bufio.NewScanner(bytes.NewReader(lines))
	for sc.Scan() {
		env, err := jobs.DecodeEnvelope(sc.Text())
		if err != nil {
			return err
		}
		m, err := c.PrepareEnvelope(ctx, env)
		if err != nil {
			return err
		}
		if err := s.Send(m, func(_ client.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				sent++
			}
		}); err != nil {
			break
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	if sent != n {
		return fmt.Errorf("sent %d of %d", sent, n)
	}
	return nil
}

// rawBinary builds the enqueue command, runs enqueue raw on lines against
// the account of conn and returns how long the run took, start-up
// included. The queue is created first.
func rawBinary(ctx context.Context, store storeadapter.Store, conn, queue string, lines []byte, n, conc int) (time.Duration, error) {
	if err := store.Queue(queue).Create(ctx); err != nil {
		return 0, err
	}
	root, err := azurite.ModuleRoot()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "bench-enqueue-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	bin, file := filepath.Join(dir, "enqueue"), filepath.Join(dir, "jobs.jsonl")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/enqueue")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build ./cmd/enqueue: %v\n%s", err, out)
	}
	if err := os.WriteFile(file, lines, 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "raw", "-file", file, "-queue", queue, "-concurrency", fmt.Sprint(conc))
	cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+conn)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if want := fmt.Sprintf("sent %d, failed 0\n", n); err != nil || string(out) != want {
		return 0, fmt.Errorf("enqueue raw: %v: %q, want %q", err, out, want)
	}
	return took, nil
}

// outboxCosts prints what the outbox costs: the calls of jobs sent plain
// and by Tx.Commit, producer and worker apart.
func (b bench) outboxCosts(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	n := max(b.n/5, 10)
	type run struct {
		perCommit        int
		tx               bool
		producer, worker instrument.Snapshot
		took             time.Duration // one commit's, on average
	}
	var runs []run
	for _, k := range []int{1, 10} {
		for _, tx := range []bool{false, true} {
			r := run{perCommit: k, tx: tx}
			var err error
			if r.producer, r.worker, r.took, err = b.outboxRun(ctx, store, latency, n, k, tx); err != nil {
				return fmt.Errorf("outbox, %d per commit, tx %v: %w", k, tx, err)
			}
			runs = append(runs, r)
		}
	}
	how := func(tx bool) string {
		if tx {
			return "Tx.Commit"
		}
		return "plain: Transact, EnqueueMany"
	}
	fmt.Printf("%s: the outbox, %d jobs (write an entity, reconcile its index), concurrency %d\n", title, n, b.conc)
	fmt.Printf("%-4s %-30s %17s %14s %13s %14s %14s\n", "per", "", "producer calls", "producer", "worker calls", "total calls", "producer")
	fmt.Printf("%-4s %-30s %17s %14s %13s %14s %14s\n", "tx", "", "per commit", "per job", "per job", "per job", "ms per commit")
	for _, r := range runs {
		p, w := float64(r.producer.Total().Calls), float64(r.worker.Total().Calls)
		commits := float64(n / r.perCommit)
		fmt.Printf("%-4d %-30s %17.2f %14.2f %13.2f %14.2f %14.1f\n", r.perCommit, how(r.tx), p/commits, p/float64(n), w/float64(n), (p+w)/float64(n),
			float64(r.took.Microseconds())/1000)
	}
	for i := 0; i < len(runs); i += 2 {
		plain, tx := runs[i], runs[i+1]
		fmt.Printf("%d per commit, by operation per job:\n", plain.perCommit)
		fmt.Printf("  %-10s producer: %s\n  %-10s worker:   %s\n", "plain", opsLine(plain.producer, n), "", opsLine(plain.worker, n))
		fmt.Printf("  %-10s producer: %s\n  %-10s worker:   %s\n", "Tx", opsLine(tx.producer, n), "", opsLine(tx.worker, n))
		fmt.Printf("  %-10s producer: %s\n  %-10s worker:   %s\n", "Tx - plain", diffLine(tx.producer, plain.producer, n), "", diffLine(tx.worker, plain.worker, n))
	}
	fmt.Printf("(producer ms per commit: how long one commit took, %d at once)\n", b.conc)
	fmt.Println()
	return nil
}

// outboxRun sends n jobs "write entity i, reconcile its index", perCommit
// to a partition, plain or by Tx.Commit, at b.conc commits at once, then
// runs them with the worker. It returns the producer's and the worker's
// calls and how long a commit took on average.
func (b bench) outboxRun(ctx context.Context, store storeadapter.Store, latency time.Duration, n, perCommit int, tx bool) (producer, worker instrument.Snapshot, perCommitTook time.Duration, err error) {
	mode := map[bool]string{false: "Plain", true: "Tx"}[tx]
	table := fmt.Sprintf("BenchOutbox%s%d", mode, perCommit)
	queue := strings.ToLower(fmt.Sprintf("bench-outbox-%s-%d", mode, perCommit))
	if err = idempotent.EnsureTable(ctx, store.Tables(), table); err != nil {
		return
	}
	pc, wc := &instrument.Counts{}, &instrument.Counts{}
	c, err := b.client(ctx, store, queue, latency, pc)
	if err != nil {
		return
	}
	st := instrumented(store, latency, pc)
	commit := func(i int) error {
		pk := fmt.Sprintf("P%04d", i)
		var ops []storeadapter.TableOp
		var args []jobs.Args
		for j := range perCommit {
			rk := fmt.Sprintf("%04d", j)
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: rk,
				Properties: map[string]any{"Email": fmt.Sprintf("e%04d.%s@contoso.example", i, rk), "Name": "Jones"}}})
			args = append(args, index.Reconcile(table, pk, rk))
		}
		if !tx {
			if err := st.Tables().Transact(ctx, table, ops); err != nil {
				return err
			}
			_, err := c.EnqueueMany(ctx, args)
			return err
		}
		t := c.Tx(table, pk)
		t.Write(ops...)
		for _, a := range args {
			t.Enqueue(a)
		}
		_, err := t.Commit(ctx)
		return err
	}
	var total atomic.Int64 // the commits' durations, summed
	if err = parallel(b.conc, n/perCommit, func(i int) error {
		start := time.Now()
		defer func() { total.Add(int64(time.Since(start))) }()
		return commit(i)
	}); err != nil {
		return
	}
	perCommitTook = time.Duration(total.Load()) / time.Duration(n/perCommit)

	kinds := catalog.Config{Index: indexes.Config{Tables: map[string][]indexes.Decl{table: {
		{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition, Properties: []string{"Email", "Name"}},
	}}}}
	r, err := benchRunner(instrumented(store, latency, wc), queue, kinds, b.conc)
	if err != nil {
		return
	}
	if err = r.Run(ctx); err != nil {
		return
	}
	if s := r.Stats(); s.Succeeded != int64(n) {
		err = fmt.Errorf("the worker ran %d of %d jobs (stats %+v)", s.Succeeded, n, s)
		return
	}
	// Every outbox row was deleted once its job was done.
	rows := storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, jobs.OutboxPrefix),
		storeadapter.Compare("RowKey", storeadapter.Lt, jobs.OutboxPrefix[:len(jobs.OutboxPrefix)-1]+"/"))
	for tok := ""; err == nil; {
		var page storeadapter.Page
		if page, err = store.Tables().Query(ctx, table, storeadapter.Query{Filter: rows, Continuation: tok}); err == nil && len(page.Entities) > 0 {
			err = fmt.Errorf("outbox row %s/%s left behind", page.Entities[0].PartitionKey, page.Entities[0].RowKey)
		}
		if tok = page.Next; tok == "" {
			break
		}
	}
	return pc.Snapshot(), wc.Snapshot(), perCommitTook, err
}

// diffLine renders the calls a made more (or fewer) than b, by operation,
// per unit of n: "Update +1.00, GetEntity +1.00"; "none" when they made
// the same calls.
func diffLine(a, b instrument.Snapshot, n int) string {
	ops := map[instrument.Op]bool{}
	for op := range a {
		ops[op] = true
	}
	for op := range b {
		ops[op] = true
	}
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		if d := a[op].Calls - b[op].Calls; d != 0 {
			parts = append(parts, fmt.Sprintf("%s %+.2f", op, float64(d)/float64(n)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
