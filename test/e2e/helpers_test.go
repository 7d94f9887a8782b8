package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/test/syncbuf"
)

// env is one test's view of the emulator: a context bounded by the test's
// time limit and a random suffix that keeps its names apart from the other
// tests'.
type env struct {
	t      *testing.T
	ctx    context.Context
	suffix string
	// environ, when set, replaces childEnv for the processes started next.
	environ []string
}

// setup skips or fails the test when the package could not be set up and
// returns the test's env, whose context ends after timeout.
func setup(t *testing.T, timeout time.Duration) *env {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	var b [4]byte
	rand.Read(b[:])
	return &env{t: t, ctx: ctx, suffix: hex.EncodeToString(b[:])}
}

// sub returns the env of a subtest of e's test: the same context and
// names, the subtest's failures and clean-ups.
func (e *env) sub(t *testing.T) *env { return &env{t: t, ctx: e.ctx, suffix: e.suffix} }

// cleanupContext returns a context for clean-up work, which runs after the
// test's own context has ended.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// queue returns a fresh work queue name, "e2e-<name>-<suffix>". Its queue
// and poison queue, records table and poison container are deleted when
// the test ends.
func (e *env) queue(name string) string {
	e.t.Helper()
	q := "e2e-" + name + "-" + e.suffix
	if err := storeadapter.ValidateQueueName(q); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		for _, name := range []string{q, poison.QueueName(q)} {
			if err := store.Queue(name).Delete(ctx); err != nil {
				e.t.Logf("clean-up: delete queue %s: %v", name, err)
			}
		}
		deleteTable(ctx, e.t, poison.TableName(q))
		deleteContainer(ctx, e.t, poison.QueueName(q))
	})
	return q
}

// table returns a fresh table name, "<name><suffix>", which is deleted when
// the test ends. It does not create the table.
func (e *env) table(name string) string {
	e.t.Helper()
	tbl := name + e.suffix
	if err := storeadapter.ValidateTableName(tbl); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		deleteTable(ctx, e.t, tbl)
	})
	return tbl
}

// container returns a fresh container name, "e2e-<name>-<suffix>", which is
// deleted when the test ends. It does not create the container.
func (e *env) container(name string) string {
	e.t.Helper()
	c := "e2e-" + name + "-" + e.suffix
	if err := storeadapter.ValidateContainerName(c); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		deleteContainer(ctx, e.t, c)
	})
	return c
}

// deleteTable deletes a table if it exists, logging a failure.
func deleteTable(ctx context.Context, t *testing.T, name string) {
	err := store.Tables().DeleteTable(ctx, name)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		t.Logf("clean-up: delete table %s: %v", name, err)
	}
}

// deleteContainer deletes a blob container if it exists, logging a
// failure without the SDK's error text, which quotes request URLs.
func deleteContainer(ctx context.Context, t *testing.T, name string) {
	if _, err := blobService.DeleteContainer(ctx, name, nil); err != nil && !strings.Contains(err.Error(), "ContainerNotFound") {
		t.Logf("clean-up: delete container %s failed", name)
	}
}

// mover returns the operators' poison API of a work queue, wired as the
// binaries wire it (see poison.QueueName and poison.TableName).
func mover(q string) *poison.Inspector {
	pq := poison.QueueName(q)
	in, err := poison.NewInspector(poison.Config{Tables: store.Tables(), Source: store.Queue(q), Poison: store.Queue(pq), Blobs: store.Container(pq)})
	if err != nil {
		panic(err) // the tests' queue names are valid
	}
	return in
}

// proc is a running child process with its output captured.
type proc struct {
	t              *testing.T
	name           string
	args           []string
	cmd            *exec.Cmd
	stdout, stderr syncbuf.Buffer
	done           chan struct{} // closed when the process has exited
	err            error         // from Wait, set before done is closed
}

// start starts bin with args and the child environment. The process is
// killed when the test ends if it still runs, and its output is logged if
// the test failed.
func (e *env) start(bin string, args ...string) *proc {
	e.t.Helper()
	p := &proc{t: e.t, name: filepath.Base(bin), args: args, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = childEnv
	if e.environ != nil {
		p.cmd.Env = e.environ
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", p, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			p.log()
		}
	})
	return p
}

// String returns the command line (which never holds a secret: the
// connection string travels in the environment).
func (p *proc) String() string { return p.name + " " + strings.Join(p.args, " ") }

// log writes the command line and output to the test log.
func (p *proc) log() {
	p.t.Logf("--- %s\nstdout:\n%s\nstderr:\n%s", p, p.stdout.String(), p.stderr.String())
}

// wait waits for the process to exit and returns its exit code; it fails
// the test (and kills the process) if it runs longer than timeout or ctx.
// A process killed by a signal has exit code -1.
func (p *proc) wait(ctx context.Context, timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s did not exit within %v", p, timeout)
	case <-ctx.Done():
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s: %v", p, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	p.t.Fatalf("%s: %v", p, p.err)
	return -1
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p, err)
	}
}

// stopWorkers stops running workers as a rollout does, with SIGTERM, and
// fails the test unless each exits 0 within 30 s. It waits first for each
// to log its start: a worker started a moment ago (a restart after a kill)
// may not catch signals yet, and SIGTERM would end it as SIGKILL does.
func (e *env) stopWorkers(ws ...*proc) {
	e.t.Helper()
	for _, p := range ws {
		e.poll(30*time.Second, 20*time.Millisecond, p.String()+" to start", func() bool {
			return len(p.logLines("worker starting")) > 0
		})
		p.signal(syscall.SIGTERM)
		if code := p.wait(e.ctx, 30*time.Second); code != 0 {
			e.t.Errorf("%s exited with %d after SIGTERM, want 0", p, code)
		}
	}
}

// workerArgs are the flags every worker in these tests gets, before the
// test's own: quick polling of an empty queue and JSON logs.
func workerArgs(q string, extra ...string) []string {
	return append([]string{"-queue", q, "-log-format", "json", "-idle-max", "500ms"}, extra...)
}

// startWorker starts a worker on queue q.
func (e *env) startWorker(q string, extra ...string) *proc {
	e.t.Helper()
	return e.start(workerBin, workerArgs(q, extra...)...)
}

// drain runs `worker -drain` on queue q and fails the test unless it exits
// 0 within timeout. It returns the worker's final counters.
func (e *env) drain(q string, timeout time.Duration, extra ...string) workerStats {
	e.t.Helper()
	return e.drainProc(q, timeout, extra...).stats()
}

// drainProc is drain returning the exited worker.
func (e *env) drainProc(q string, timeout time.Duration, extra ...string) *proc {
	e.t.Helper()
	p := e.startWorker(q, append([]string{"-drain"}, extra...)...)
	if code := p.wait(e.ctx, timeout); code != 0 {
		e.t.Fatalf("%s exited with %d, want 0", p, code)
	}
	return p
}

// enqueue runs the enqueue CLI with args, fails the test unless it exits 0
// within 30 s, and returns its standard output.
func (e *env) enqueue(args ...string) string {
	e.t.Helper()
	p := e.start(enqueueBin, args...)
	if code := p.wait(e.ctx, 30*time.Second); code != 0 {
		e.t.Fatalf("%s exited with %d, want 0\nstderr:\n%s", p, code, p.stderr.String())
	}
	return p.stdout.String()
}

// enqueueJSON runs the enqueue CLI with args and -o json and decodes its
// output into v.
func (e *env) enqueueJSON(v any, args ...string) {
	e.t.Helper()
	out := e.enqueue(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		e.t.Fatalf("enqueue %s -o json: decode %T: %v\noutput:\n%s", strings.Join(args, " "), v, err, out)
	}
}

// workerStats are the counters of the worker's final "worker stopped" log
// line.
type workerStats struct {
	Received  int64 `json:"received"`
	Succeeded int64 `json:"succeeded"`
	Continued int64 `json:"continued"`
	Retried   int64 `json:"retried"`
	Poisoned  int64 `json:"poisoned"`
	LeaseLost int64 `json:"lease_lost"`
	Released  int64 `json:"released"`
}

// stats returns the counters the exited worker logged, failing the test
// when it logged none.
func (p *proc) stats() workerStats {
	p.t.Helper()
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			workerStats
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "worker stopped" {
			return line.workerStats
		}
	}
	p.t.Fatalf("%s logged no \"worker stopped\" line", p)
	return workerStats{}
}

// results returns the results of the jobs the exited worker logged as
// done ("job done" lines), in the order logged.
func (p *proc) results() []string {
	var out []string
	for _, l := range p.logLines("job done") {
		res, _ := l["result"].(string)
		out = append(out, res)
	}
	return out
}

// logLines returns the JSON log lines the worker wrote so far whose msg is
// msg, in the order logged.
func (p *proc) logLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// entities returns every entity of a table matching f, in key order; a
// missing table has none.
func (e *env) entities(table string, f storeadapter.Filter) []storeadapter.Entity {
	e.t.Helper()
	var all []storeadapter.Entity
	q := storeadapter.Query{Filter: f}
	for {
		page, err := store.Tables().Query(e.ctx, table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return nil
		}
		if err != nil {
			e.t.Fatalf("query %s: %v", table, err)
		}
		all = append(all, page.Entities...)
		if page.Next == "" {
			return all
		}
		q.Continuation = page.Next
	}
}

// exists reports whether a table holds the entity pk/rk.
func (e *env) exists(table, pk, rk string) bool {
	e.t.Helper()
	_, err := store.Tables().GetEntity(e.ctx, table, pk, rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false
	}
	if err != nil {
		e.t.Fatalf("get %s %s/%s: %v", table, pk, rk, err)
	}
	return true
}

// seed creates table and inserts es in entity group transactions of up to
// 100 entities of one partition.
func (e *env) seed(table string, es []storeadapter.Entity) {
	e.t.Helper()
	if err := store.Tables().CreateTable(e.ctx, table); err != nil {
		e.t.Fatalf("create table %s: %v", table, err)
	}
	byPK := map[string][]storeadapter.TableOp{}
	var pks []string
	for _, en := range es {
		if _, ok := byPK[en.PartitionKey]; !ok {
			pks = append(pks, en.PartitionKey)
		}
		byPK[en.PartitionKey] = append(byPK[en.PartitionKey], storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: en})
	}
	for _, pk := range pks {
		for ops := range slices.Chunk(byPK[pk], 100) {
			if err := store.Tables().Transact(e.ctx, table, ops); err != nil {
				e.t.Fatalf("seed %s partition %q: %v", table, pk, err)
			}
		}
	}
}

// numbered returns n small entities of partition pk with RowKeys
// r00000, r00001, … and an Int64 property N holding the number.
func numbered(pk string, n int) []storeadapter.Entity {
	es := make([]storeadapter.Entity, n)
	for i := range es {
		es[i] = storeadapter.Entity{PartitionKey: pk, RowKey: rowKey(i), Properties: map[string]any{"N": int64(i), "Note": "entity " + rowKey(i)}}
	}
	return es
}

// rowKey is the RowKey numbered gives entity i.
func rowKey(i int) string { return fmt.Sprintf("r%05d", i) }

// sendArchives sends one single-entity archive message per entity straight
// to queue q (with 16 senders), encoded as the CLI encodes them.
func (e *env) sendArchives(q, from, to string, es []storeadapter.Entity) {
	e.t.Helper()
	if err := store.Queue(q).Create(e.ctx); err != nil {
		e.t.Fatalf("create queue %s: %v", q, err)
	}
	texts := make([]string, len(es))
	for i, en := range es {
		raw, err := json.Marshal(archive.Args{Table: from, To: to, PK: &en.PartitionKey, RK: &en.RowKey})
		if err != nil {
			e.t.Fatal(err)
		}
		id := fmt.Sprintf("op-%s-%s-%s", e.suffix, en.PartitionKey, en.RowKey)
		if texts[i], err = jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: archive.Kind, Args: raw}); err != nil {
			e.t.Fatal(err)
		}
	}
	work := make(chan string)
	errs := make(chan error, len(texts))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for text := range work {
				if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, text := range texts {
		work <- text
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("send to %s: %v", q, err)
	}
}

// count returns the approximate message count of a queue; a missing queue
// holds none.
func (e *env) count(q string) int {
	e.t.Helper()
	n, err := store.Queue(q).ApproximateCount(e.ctx)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return 0
	}
	if err != nil {
		e.t.Fatalf("count %s: %v", q, err)
	}
	return n
}

// poll calls cond every interval until it returns true, failing the test
// with what if that takes longer than timeout.
func (e *env) poll(timeout, interval time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-time.After(interval):
		case <-e.ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, e.ctx.Err())
		}
	}
}

// diffProperties returns one line per property that differs between want
// and got in type or value (storeadapter.Equal), or is missing on one side.
func diffProperties(want, got map[string]any) []string {
	var d []string
	for _, name := range slices.Sorted(mapsKeys(want, got)) {
		w, inWant := want[name]
		g, inGot := got[name]
		switch {
		case !inGot:
			d = append(d, fmt.Sprintf("%s: missing, want %s", name, storeadapter.Format(w)))
		case !inWant:
			d = append(d, fmt.Sprintf("%s: unexpected %s", name, storeadapter.Format(g)))
		case !storeadapter.Equal(w, g):
			d = append(d, fmt.Sprintf("%s: got %s, want %s", name, storeadapter.Format(g), storeadapter.Format(w)))
		}
	}
	return d
}

// mapsKeys returns the union of the maps' keys.
func mapsKeys(ms ...map[string]any) iter.Seq[string] {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

// keys returns "pk/rk" of each entity.
func keys(es []storeadapter.Entity) []string {
	out := make([]string, len(es))
	for i, en := range es {
		out[i] = en.PartitionKey + "/" + en.RowKey
	}
	return out
}
