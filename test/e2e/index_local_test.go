package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// TestIndexConvergesOnLocalstore is TestIndexConvergesWithKilledWorkers on
// localstore, in-process and larger: three runners share one store, each
// through its own fault layer that fails about 1% of its storage calls
// before they reach the store and turns about 1% of its successful table
// writes and blob puts into errors after they landed (an answer lost on
// the way back). A crash is simulated by making every later call of one
// runner fail and cancelling it: its messages come back after their
// visibility timeout, as a killed process's do. The rebuild from scratch
// runs under rarer faults, with one crash, and index table names that
// stay unavailable for a moment after their delete, as on Azure.
func TestIndexConvergesOnLocalstore(t *testing.T) {
	localConvergence(t, indexWorkload{Employees: 8000, Window: [2]int{10, 200}, DupRate: 0.1, MaxBacklog: 400, Hot: 4})
}

// TestIndexConvergesOnLocalstoreDeferred is TestIndexConvergesOnLocalstore,
// smaller, without the rows index, so that the table copy's and the lists'
// clears are left to the next reconcile, whose reads show what the one
// before settled (a copy row, a list line flagged P). After convergence no
// membership record holds more than an index's old and new value.
func TestIndexConvergesOnLocalstoreDeferred(t *testing.T) {
	localConvergence(t, indexWorkload{Employees: 3000, Window: [2]int{10, 200}, DupRate: 0.1, MaxBacklog: 400, Hot: 4, NoRows: true})
}

// TestIndexConvergesOnLocalstoreWithLongKeys is TestIndexConvergesOnLocalstore
// with RowKeys of 480 characters, so that membership records are keyed by
// a hash of the RowKey and list lines are long, and with most employees of
// one partition sharing one last name, so that its lists, in the
// partition and in the table, outgrow one entity and spill over to more
// parts.
func TestIndexConvergesOnLocalstoreWithLongKeys(t *testing.T) {
	localConvergence(t, indexWorkload{Employees: 1600, Partitions: 1, Window: [2]int{5, 50}, DupRate: 0.1, MaxBacklog: 200, Hot: 2,
		LastNames: []string{"Jones", "Smith", "Brown", "Lee"}, RowKeyLen: 480})
}

// localConvergence runs a convergence test on localstore (see
// TestIndexConvergesOnLocalstore) with the workload w (its Table and Seed
// are filled in).
func localConvergence(t *testing.T, w indexWorkload) {
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	start := time.Now()
	seed := indexSeed(t)
	base := localstore.New(localstore.Options{TableDeleteDelay: 2 * time.Second})
	names := indexNames{Source: "Employees", ByEmail: "EmployeesByEmail", ByLastName: "EmployeesByLastName",
		LastNameRows: "EmployeesLastNameRows", Container: "employee-index", Checkpoints: "IndexCheckpoints"}
	if w.NoRows {
		names.LastNameRows = ""
	}
	cfg := indexConfig(names)
	const q = "index-local"
	if err := base.Tables().CreateTable(ctx, names.Source); err != nil {
		t.Fatal(err)
	}
	if err := base.Queue(q).Create(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := indexes.Open(base, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := newLocalFleet(ctx, t, base, q, cfg, seed)
	f.failBefore.Store(10_000) // per million calls
	f.failAfter.Store(10_000)
	f.delayed.Store(200_000)
	for range 3 {
		f.start()
	}
	w.Table, w.Seed = names.Source, seed
	convergence(ctx, t, base, q, w, 9, 100*time.Second, f.crash)
	f.stop()
	f.checkNoPoison()
	t.Logf("converged in %v: %s", time.Since(start).Round(time.Millisecond), f)
	if !compareIndexes(ctx, t, base.Tables(), x, names.Source) {
		t.Fatal("the indexes differ from the table after the runners converged")
	}
	if w.RowKeyLen > 0 {
		checkSpilled(ctx, t, base.Tables(), x, names)
	}
	if !checkIndexes(ctx, t, x, names.Source) {
		t.Fatal("Check found problems after the runners converged")
	}
	checkPendingBound(ctx, t, base.Tables(), names.Source, w.NoRows)

	err = wipeIndexes(ctx, base, x, names.Source, func(ctx context.Context, container string) error {
		c := base.Container(container)
		page, err := c.List(ctx, "", "")
		for ; err == nil; page, err = c.List(ctx, "", page.Next) {
			for _, b := range page.Blobs {
				if err := c.Delete(ctx, b.Name, storeadapter.ETagAny); err != nil {
					return err
				}
			}
			if page.Next == "" {
				return nil
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := time.Now()
	text, err := rebuildMessage(names.Source, "rebuild-local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.Queue(q).Send(ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	// A rebuild fails on any storage error and resumes from the page it
	// was on: faults as frequent as above would fail every page.
	f.failBefore.Store(20)
	f.failAfter.Store(20)
	f.delayed.Store(0)
	f.restart()
	f.logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	for range 3 {
		f.start()
	}
	// Crash the runner of the rebuild once it has registered a random
	// share of the entities again.
	entities, err := sourceEntities(ctx, base.Tables(), names.Source)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	at := int(float64(len(entities)) * (0.1 + 0.8*rng.Float64()))
	// Membership records are keyed "~tk.m." + RowKey, or "~tk.h." + a
	// hash of a long RowKey.
	members := storeadapter.Or(
		storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix+"h."),
			storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix+"h/")),
		storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix+"m."),
			storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix+"m/")))
	deadline := time.Now().Add(60 * time.Second)
	for crashed := false; ; {
		n := f.count()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild did not finish within 60s (%d messages in the queue)", n)
		}
		if !crashed && countRows(ctx, t, base.Tables(), names.Source, members) >= at {
			crashed = true
			t.Logf("crashing the rebuild's runner after %d membership records", at)
			f.crashBusy(rng)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.stop()
	f.checkNoPoison()
	t.Logf("rebuilt in %v: %s", time.Since(rebuilt).Round(time.Millisecond), f)
	if !compareIndexes(ctx, t, base.Tables(), x, names.Source) {
		t.Fatal("the rebuilt indexes differ from the table")
	}
	if !checkIndexes(ctx, t, x, names.Source) {
		t.Fatal("Check found problems after the rebuild")
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// checkSpilled fails the test unless some list, in the partition and in
// the table, has more than one part: more list entities than values.
func checkSpilled(ctx context.Context, t *testing.T, tables storeadapter.Tables, x *indexes.Set, names indexNames) {
	t.Helper()
	// A partition list has entities per partition and value, a table
	// list per value.
	values := func(name string, perPartition bool) int {
		seen := map[string]bool{}
		err := x.Entries(ctx, names.Source, name, func(en indexes.Entry) error {
			if perPartition {
				seen[en.PK+"\t"+en.Encoded] = true
			} else {
				seen[en.Encoded] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(seen)
	}
	lists := storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix+"l."),
		storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix+"l/"))
	inPartitions, inTable := countRows(ctx, t, tables, names.Source, lists), countRows(ctx, t, tables, names.ByLastName, storeadapter.Filter{})
	t.Logf("list entities: %d in the partitions, %d in table %s", inPartitions, inTable, names.ByLastName)
	if n := values("lastName", true); inPartitions <= n {
		t.Errorf("the partition lists of %d values are %d entities: none spilled over", n, inPartitions)
	}
	if n := values("lastNameAll", false); inTable <= n {
		t.Errorf("the table lists of %d values are %d entities: none spilled over", n, inTable)
	}
}

// errCrashed is what every storage call of a crashed runner returns.
var errCrashed = errors.New("the runner crashed")

// localFleet runs index runners on one localstore, each behind its own
// fault layer, and crashes them.
type localFleet struct {
	ctx   context.Context
	t     *testing.T
	base  storeadapter.Store
	queue string
	kinds catalog.Config
	// failBefore and failAfter are the rates, per million calls, of calls
	// failed before they reach the store and of writes whose success is
	// turned into an error.
	failBefore, failAfter atomic.Int64
	// delayed is the rate, per million table and blob calls, of calls
	// delayed by 200µs; one in twenty as many are delayed by 30ms.
	delayed  atomic.Int64
	mu       sync.Mutex
	rng      *rand.Rand
	running  []*localRunner
	wg       sync.WaitGroup
	stats    runner.Stats // of the runners stopped
	crashes  int
	injected atomic.Int64
	// logger, when set, logs the runners' lines started next.
	logger *slog.Logger
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type localRunner struct {
	r       *runner.Runner
	cancel  context.CancelFunc
	crashed atomic.Bool
}

// newLocalFleet returns a fleet with no runner yet. Its runners are
// stopped when the test ends, so none logs after it.
func newLocalFleet(ctx context.Context, t *testing.T, base storeadapter.Store, queue string, cfg indexes.Config, seed uint64) *localFleet {
	f := &localFleet{ctx: ctx, t: t, base: base, queue: queue, kinds: catalog.Config{Index: cfg}, rng: rand.New(rand.NewPCG(seed, 5))}
	t.Cleanup(f.stop)
	return f
}

// roll reports whether an event of rate per million happens.
func (f *localFleet) roll(rate int64) bool {
	if rate == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Int64N(1_000_000) < rate
}

// start starts one more runner.
func (f *localFleet) start() {
	f.t.Helper()
	lr := &localRunner{}
	st := instrument.Wrap(&lossyStore{Store: f.base, f: f, crashed: &lr.crashed}, instrument.Options{
		Fault: func(ctx context.Context, c instrument.Call) error {
			if lr.crashed.Load() {
				return errCrashed
			}
			if f.roll(f.failBefore.Load()) {
				f.injected.Add(1)
				return fmt.Errorf("injected before %s: %w", c.Op, storeadapter.ErrUnavailable)
			}
			return nil
		},
		// A little latency on table and blob calls, so that the
		// requests of concurrent jobs interleave, and now and then a
		// slow answer (a retried request), during which other jobs go on.
		Latency: func(c instrument.Call) time.Duration {
			switch c.Op {
			case instrument.OpReceive, instrument.OpUpdate, instrument.OpDeleteMessage, instrument.OpApproximateCount, instrument.OpSend:
				return 0
			}
			rate := f.delayed.Load()
			switch {
			case f.roll(rate / 20):
				return 30 * time.Millisecond
			case f.roll(rate):
				return 200 * time.Microsecond
			}
			return 0
		},
	})
	kinds := f.kinds
	if err := kinds.Validate(); err != nil {
		f.t.Fatal(err)
	}
	reg, err := catalog.NewRegistry(st, nil, kinds)
	if err != nil {
		f.t.Fatal(err)
	}
	pq := poison.QueueName(f.queue)
	rec, err := poison.NewRecorder(poison.Config{Tables: st.Tables(), Source: st.Queue(f.queue), Poison: st.Queue(pq), Blobs: st.Container(pq), Host: "local"})
	if err != nil {
		f.t.Fatal(err)
	}
	lr.r, err = runner.New(runner.Config{Queue: st.Queue(f.queue), Registry: reg, Poison: rec,
		Concurrency: 16, BatchSize: 32, Visibility: 2 * time.Second, MaxDequeueCount: runner.MaxMaxDequeueCount,
		RetryBase: 100 * time.Millisecond, RetryMax: time.Second, IdleMin: 5 * time.Millisecond, IdleMax: 50 * time.Millisecond,
		ShutdownGrace: 10 * time.Second, Logger: f.logger})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	lr.cancel = cancel
	f.mu.Lock()
	f.running = append(f.running, lr)
	f.mu.Unlock()
	f.wg.Go(func() {
		if err := lr.r.Run(ctx); err != nil && !lr.crashed.Load() {
			f.t.Errorf("runner: %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		s := lr.r.Stats()
		f.stats.Received += s.Received
		f.stats.Succeeded += s.Succeeded
		f.stats.Retried += s.Retried
		f.stats.Poisoned += s.Poisoned
		f.stats.LeaseLost += s.LeaseLost
	})
}

// crash crashes a random runner and starts another in its place.
func (f *localFleet) crash(rng *rand.Rand) {
	f.mu.Lock()
	lr := f.running[rng.IntN(len(f.running))]
	f.mu.Unlock()
	f.crashOne(lr)
}

// crashOne crashes one runner and starts another in its place.
func (f *localFleet) crashOne(lr *localRunner) {
	f.mu.Lock()
	f.running = slices.DeleteFunc(f.running, func(r *localRunner) bool { return r == lr })
	f.crashes++
	f.mu.Unlock()
	lr.crashed.Store(true)
	lr.cancel()
	f.start()
}

// countRows counts the rows of a table that match filter.
func countRows(ctx context.Context, t *testing.T, tables storeadapter.Tables, table string, filter storeadapter.Filter) int {
	t.Helper()
	n := 0
	q := storeadapter.Query{Filter: filter, Select: []string{"RowKey"}}
	for {
		page, err := tables.Query(ctx, table, q)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Entities)
		if page.Next == "" {
			return n
		}
		q.Continuation = page.Next
	}
}

// crashBusy crashes every runner that holds a message and starts as many
// in their place.
func (f *localFleet) crashBusy(rng *rand.Rand) {
	f.mu.Lock()
	var busy []*localRunner
	for _, lr := range f.running {
		if lr.r.Running() > 0 {
			busy = append(busy, lr)
		}
	}
	f.mu.Unlock()
	for _, lr := range busy {
		f.crashOne(lr)
	}
}

// stop stops every runner (not a crash) and waits for them.
func (f *localFleet) stop() {
	f.mu.Lock()
	running := f.running
	f.running = nil
	f.mu.Unlock()
	for _, lr := range running {
		lr.cancel()
	}
	f.wg.Wait()
}

// restart clears the counters for a new phase.
func (f *localFleet) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats, f.crashes = runner.Stats{}, 0
	f.injected.Store(0)
}

func (f *localFleet) count() int {
	n, err := f.base.Queue(f.queue).ApproximateCount(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *localFleet) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	return fmt.Sprintf("%d received, %d succeeded, %d retried, %d poisoned, %d leases lost; %d crashes, %d faults injected",
		s.Received, s.Succeeded, s.Retried, s.Poisoned, s.LeaseLost, f.crashes, f.injected.Load())
}

// checkNoPoison fails the test if a message was poisoned, naming the
// reasons.
func (f *localFleet) checkNoPoison() {
	f.t.Helper()
	pq := poison.QueueName(f.queue)
	n, err := f.base.Queue(pq).ApproximateCount(f.ctx)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return
	}
	if err != nil {
		f.t.Fatal(err)
	}
	if n == 0 {
		return
	}
	in, err := poison.NewInspector(poison.Config{Tables: f.base.Tables(), Source: f.base.Queue(f.queue), Poison: f.base.Queue(pq), Blobs: f.base.Container(pq)})
	if err != nil {
		f.t.Fatal(err)
	}
	recs, err := in.List(f.ctx, "")
	if err != nil {
		f.t.Fatal(err)
	}
	for i, r := range recs[:min(len(recs), 5)] {
		f.t.Errorf("poisoned %d: %+v", i, r)
	}
	f.t.Fatalf("%d messages were poisoned", n)
}

// lossyStore turns some successful table writes and blob puts of one
// runner into errors, as if the answer were lost on the way back: the
// write landed, the runner does not know it.
type lossyStore struct {
	storeadapter.Store
	f       *localFleet
	crashed *atomic.Bool
}

func (s *lossyStore) Tables() storeadapter.Tables {
	return &lossyTables{Tables: s.Store.Tables(), s: s}
}

func (s *lossyStore) Container(name string) storeadapter.Blobs {
	return &lossyBlobs{Blobs: s.Store.Container(name), s: s}
}

// lose returns err, or an error in its place when the answer is lost.
func (s *lossyStore) lose(op string, err error) error {
	if err != nil {
		return err
	}
	if s.crashed.Load() {
		return errCrashed
	}
	if s.f.roll(s.f.failAfter.Load()) {
		s.f.injected.Add(1)
		return fmt.Errorf("injected after %s landed: %w", op, storeadapter.ErrUnavailable)
	}
	return nil
}

type lossyTables struct {
	storeadapter.Tables
	s *lossyStore
}

func (t *lossyTables) InsertEntity(ctx context.Context, table string, e storeadapter.Entity) (string, error) {
	etag, err := t.Tables.InsertEntity(ctx, table, e)
	return etag, t.s.lose("InsertEntity", err)
}

func (t *lossyTables) UpsertEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode) (string, error) {
	etag, err := t.Tables.UpsertEntity(ctx, table, e, mode)
	return etag, t.s.lose("UpsertEntity", err)
}

func (t *lossyTables) UpdateEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode, ifMatch string) (string, error) {
	etag, err := t.Tables.UpdateEntity(ctx, table, e, mode, ifMatch)
	return etag, t.s.lose("UpdateEntity", err)
}

func (t *lossyTables) DeleteEntity(ctx context.Context, table, pk, rk, ifMatch string) error {
	return t.s.lose("DeleteEntity", t.Tables.DeleteEntity(ctx, table, pk, rk, ifMatch))
}

func (t *lossyTables) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	return t.s.lose("Transact", t.Tables.Transact(ctx, table, ops))
}

type lossyBlobs struct {
	storeadapter.Blobs
	s *lossyStore
}

func (b *lossyBlobs) Put(ctx context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	etag, err := b.Blobs.Put(ctx, name, data, o)
	return etag, b.s.lose("Put", err)
}

// TestIndexReconcileThatReadAnOldEntityLosesToALaterOne builds, on
// localstore, the interleaving of two reconciles of one entity that the
// Worker's doc comment rules out ("each reads the entity after reading
// the record"): reconcile 1 reads the entity at version 1, then its read of
// the membership record is held (a slow answer, an SDK retry) while the
// application writes version 2 and reconcile 2 registers and settles it;
// then reconcile 1's record read returns reconcile 2's record. Reconcile 1
// must not register version 1 over it: the entity's last write was
// reconciled, so the indexes must hold version 2.
func TestIndexReconcileThatReadAnOldEntityLosesToALaterOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base := localstore.New(localstore.Options{})
	names := indexNames{Source: "Employees", ByEmail: "EmployeesByEmail", ByLastName: "EmployeesByLastName",
		LastNameRows: "EmployeesLastNameRows", Container: "employee-index", Checkpoints: "IndexCheckpoints"}
	cfg := indexConfig(names)
	const pk, rk = "Sales", "E00001"
	// Only reconcile 1 goes through slow: its first read of the
	// membership record is held until release, and entityRead is closed
	// once it has read the entity.
	var (
		holdOnce, readOnce sync.Once
		entityRead         = make(chan struct{})
		recordHeld         = make(chan struct{})
		release            = make(chan struct{})
	)
	slow := instrument.Wrap(base, instrument.Options{
		Fault: func(ctx context.Context, c instrument.Call) error {
			if c.Op != instrument.OpGetEntity || c.RowKey != storeadapter.ReservedPrefix+"m."+rk {
				return nil
			}
			held := false
			holdOnce.Do(func() { held = true })
			if held {
				close(recordHeld)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
		Observers: []instrument.Observer{instrument.ObserverFunc(func(c instrument.Call, _ time.Duration, err error) {
			if c.Op == instrument.OpGetEntity && c.RowKey == rk && err == nil {
				readOnce.Do(func() { close(entityRead) })
			}
		})},
	})
	x1, err := indexes.Open(slow, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	x2, err := indexes.Open(base, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tables := base.Tables()
	if err := tables.CreateTable(ctx, names.Source); err != nil {
		t.Fatal(err)
	}
	write := func(last, email string) {
		t.Helper()
		e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"LastName": last, "Email": email}}
		if _, err := tables.UpsertEntity(ctx, names.Source, e, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
	}
	write("Jones", "jones@contoso.example")
	if _, err := x2.Reconcile(ctx, names.Source, pk, rk); err != nil {
		t.Fatal(err)
	}

	first := make(chan error, 1)
	go func() {
		_, err := x1.Reconcile(ctx, names.Source, pk, rk)
		first <- err
	}()
	select {
	case <-recordHeld:
	case <-ctx.Done():
		t.Fatal("reconcile 1 did not read the membership record")
	}
	// A reconcile that reads the entity after the record (as documented)
	// reads it only once released; one that reads both at once has read
	// version 1 by now, or within moments.
	select {
	case <-entityRead:
		t.Log("reconcile 1 read the entity while its read of the record was held")
	case <-time.After(200 * time.Millisecond):
	}
	write("Smith", "smith@contoso.example") // version 2, then its reconcile
	if _, err := x2.Reconcile(ctx, names.Source, pk, rk); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("reconcile 1: %v", err)
	}
	if !compareIndexes(ctx, t, tables, x2, names.Source) {
		t.Error("reconcile 1 wrote the version it read before reconcile 2's over it")
	}
}

// TestIndexEntityRewrittenWhileItsReconcileSettles rewrites one entity
// (a fresh Email each time) again and again, each write reconciled while
// the previous reconcile is still settling its table-store indexes: the
// previous one finishes only after the next one registered, so the values
// it settled are never cleared from the membership record by it, and the
// next registration carries them on. The record must stay within an
// entity's limits however long this goes on: every reconcile succeeds and
// the indexes end equal to the entity.
func TestIndexEntityRewrittenWhileItsReconcileSettles(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	base := localstore.New(localstore.Options{})
	names := indexNames{Source: "Employees", ByEmail: "EmployeesByEmail", ByLastName: "EmployeesByLastName",
		LastNameRows: "EmployeesLastNameRows", Container: "employee-index", Checkpoints: "IndexCheckpoints"}
	cfg := indexConfig(names)
	tables := base.Tables()
	if err := tables.CreateTable(ctx, names.Source); err != nil {
		t.Fatal(err)
	}
	const pk, rk, writes = "Sales", "E00001", 1500
	type running struct {
		release chan struct{}
		done    chan error
	}
	var prev *running
	for i := range writes {
		e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{
			"LastName": convLastNames[i%3], "Email": fmt.Sprintf("employee.%05d@contoso.example", i)}}
		if _, err := tables.UpsertEntity(ctx, names.Source, e, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
		// This reconcile is held at its first write to the table copy's
		// table, which it makes when it settles, after it registered (it
		// reads the copy rows before registering).
		r := &running{release: make(chan struct{}), done: make(chan error, 1)}
		held := make(chan struct{})
		var once sync.Once
		st := instrument.Wrap(base, instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
			first := false
			if c.Name == names.ByEmail && c.Op != instrument.OpQuery && c.Op != instrument.OpGetEntity {
				once.Do(func() { first = true })
			}
			if first {
				close(held)
				select {
				case <-r.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}})
		x, err := indexes.Open(st, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := x.Reconcile(ctx, names.Source, pk, rk)
			r.done <- err
		}()
		select {
		case <-held:
		case err := <-r.done:
			t.Fatalf("reconcile %d returned before it settled: %v", i, err)
		}
		if prev != nil {
			close(prev.release)
			if err := <-prev.done; err != nil {
				t.Fatalf("reconcile %d: %v", i-1, err)
			}
		}
		prev = r
	}
	close(prev.release)
	if err := <-prev.done; err != nil {
		t.Fatalf("reconcile %d: %v", writes-1, err)
	}
	x, err := indexes.Open(base, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !compareIndexes(ctx, t, tables, x, names.Source) {
		t.Error("the indexes differ from the entity")
	}
}

// checkPendingBound fails when a membership record of table holds more
// than two values to settle for one index (S_<index>, one line a value):
// between reconciles a record holds at most an index's old and new value
// (see Set.Reconcile, step 5); or more than 16 rows to make dead for a
// rows index (K_<index>, one line a row: a change that leaves more clears
// them). With deferred, some must hold values: the clears of the last
// changes were left to the next reconcile.
func checkPendingBound(ctx context.Context, t *testing.T, tables storeadapter.Tables, table string, deferred bool) {
	t.Helper()
	records, holding, most := 0, 0, 0
	q := storeadapter.Query{Filter: storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix),
		storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix[:len(storeadapter.ReservedPrefix)-1]+"/"))}
	for {
		page, err := tables.Query(ctx, table, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			records++
			for name, v := range e.Properties {
				s, _ := v.(string)
				if strings.HasPrefix(name, "K_") && strings.Count(s, "\n")+1 > 16 {
					t.Errorf("%s/%s holds %d rows to make dead for %s", e.PartitionKey, e.RowKey, strings.Count(s, "\n")+1, name[2:])
				}
				if !strings.HasPrefix(name, "S_") || s == "" {
					continue
				}
				n := strings.Count(s, "\n") + 1
				most, holding = max(most, n), holding+1
				if n > 2 {
					t.Errorf("%s/%s holds %d values to settle for %s: %q", e.PartitionKey, e.RowKey, n, name[2:], s)
				}
			}
		}
		if page.Next == "" {
			break
		}
		q.Continuation = page.Next
	}
	t.Logf("%d reserved rows; %d of their indexes hold values left to settle, at most %d for one index", records, holding, most)
	if deferred && holding == 0 {
		t.Error("no record holds values to settle: no clear was left to the next reconcile")
	}
}
