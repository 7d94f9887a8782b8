package e2e

// Like workers_test.go, this test runs on its own (no t.Parallel): it loads
// the emulator and kills producers and workers.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// TestTxWithKilledProducersAndWorkers is issue 20's end-to-end proof of
// transactional enqueue: a producer process (test/e2e/producer) writes
// employees of three partitions and commits each write with the reconcile
// of its indexes in a client.Tx (a 3 s commit window), and is SIGKILLed
// at random moments — between a Tx's message sends and its transaction,
// during the transaction, before its messages are made visible — and
// started again, five to eight times, while the two workers (-outbox-hold
// 2s) are killed and replaced too. Then a draining worker runs what is
// left: the jobs of Txs that committed (those whose producer died before
// the "make visible" step appear at the window's end), the drops of those
// that did not (the worker fences their rows after the window) and the
// removal of those fences after the hold.
//
// Afterwards `enqueue index check` must be clean for every declared index
// (a partition list, a table list, a partition copy, a table copy and a
// rows index), the indexes must equal the table, no outbox row (nor fence)
// may be left in the table, and nothing may be poisoned.
//
// The random choices (how many rounds, when the kills come, which worker,
// the producers' seeds) come from the seed the test logs, which
// TABLEKEEPER_INDEX_SEED replays; the timing is the machine's.
func TestTxWithKilledProducersAndWorkers(t *testing.T) {
	e := setup(t, 120*time.Second)
	start := time.Now()
	src := e.table("TxStaff")
	q := e.queue("tx")
	cfg := indexes.Config{
		Tables: map[string][]indexes.Decl{src: {
			{Name: "lastName", Property: "LastName", Kind: indexes.KindList, Store: indexes.StorePartition},
			{Name: "lastNameAll", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreTable, Table: e.table("TxStaffByLastName")},
			{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
			{Name: "emailAll", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StoreTable, Table: e.table("TxStaffByEmail")},
			{Name: "lastNameRows", Property: "LastName", Kind: indexes.KindRows, Table: e.table("TxStaffLastNameRows")},
		}},
		CheckpointTable: e.table("TxCheckpoints"),
		MaxConflicts:    30,
	}
	cfgPath := writeWorkerConfig(t, map[string]any{
		// A short lease, so that a killed worker's messages come back
		// soon; quick retries; more deliveries than the default, since a
		// message may be held by several killed workers in a row.
		"runner": map[string]any{"visibility": "3s", "maxDequeueCount": 20, "retryBase": "200ms", "retryMax": "2s",
			"concurrency": 8, "batch": 16},
		"index": cfg,
	})
	workerFlags := []string{"-config", cfgPath, "-outbox-hold", "2s"}
	if err := store.Tables().CreateTable(e.ctx, src); err != nil {
		t.Fatal(err)
	}
	if err := store.Queue(q).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	x, err := indexes.Open(store, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(indexSeed(t), 20))
	var all []*proc // every worker started, killed ones too: their logs
	startWorker := func() *proc {
		p := e.startWorker(q, workerFlags...)
		all = append(all, p)
		return p
	}
	workers := []*proc{startWorker(), startWorker()}
	var producers []*proc
	startProducer := func() *proc {
		p := e.start(producerBin, "-queue", q, "-table", src, "-partitions", "Sales,R&D,Support O'Neil",
			"-employees", "6", "-window", "3s", "-seed", strconv.FormatUint(rng.Uint64(), 10))
		producers = append(producers, p)
		return p
	}
	// sleep waits d, failing the test when its time is up.
	sleep := func(d time.Duration) {
		t.Helper()
		select {
		case <-time.After(d):
		case <-e.ctx.Done():
			t.Fatalf("%v", e.ctx.Err())
		}
	}
	kill := func(p *proc) {
		t.Helper()
		p.signal(syscall.SIGKILL)
		p.wait(e.ctx, 10*time.Second)
	}

	// Each round starts a producer, lets it commit, and kills it at a
	// random moment; in most rounds a worker is killed and replaced at
	// another.
	rounds, workerKills := 5+rng.IntN(4), 0
	for round := range rounds {
		p := startProducer()
		e.poll(20*time.Second, 20*time.Millisecond, fmt.Sprintf("producer %d's first commit", round+1), func() bool {
			select {
			case <-p.done:
				t.Fatalf("%s exited before it was killed\nstdout:\n%s\nstderr:\n%s", p, p.stdout.String(), p.stderr.String())
			default:
			}
			return strings.Contains(p.stdout.String(), "commit ")
		})
		producerAt := time.Duration(200+rng.IntN(1500)) * time.Millisecond
		workerAt := time.Duration(-1)
		if rng.IntN(3) != 0 {
			workerAt = time.Duration(rng.IntN(1700)) * time.Millisecond
		}
		if workerAt >= 0 && workerAt < producerAt {
			sleep(workerAt)
			workerKills++
			i := rng.IntN(len(workers))
			kill(workers[i])
			workers[i] = startWorker()
			sleep(producerAt - workerAt)
			kill(p)
		} else {
			sleep(producerAt)
			kill(p)
			if workerAt >= 0 {
				sleep(workerAt - producerAt)
				workerKills++
				i := rng.IntN(len(workers))
				kill(workers[i])
				workers[i] = startWorker()
			}
		}
	}
	commits, failures := 0, 0
	for _, p := range producers {
		for line := range strings.Lines(p.stdout.String()) {
			switch {
			case strings.HasPrefix(line, "commit "):
				commits++
			case strings.HasPrefix(line, "fail "):
				failures++
			}
		}
	}
	t.Logf("%d producers killed, %d Txs committed, %d failed; %d workers killed; producing took %v",
		rounds, commits, failures, workerKills, time.Since(start).Round(time.Millisecond))

	// Stop the workers and drain with one: it waits out the windows of
	// the last Txs and the hold of the fences.
	e.stopWorkers(workers...)
	drained := time.Now()
	d := e.drainProc(q, 60*time.Second, append(workerFlags, "-drain-quiet", "10s")...)
	all = append(all, d)
	if s := d.stats(); s.Poisoned != 0 {
		t.Errorf("the drain poisoned %d messages", s.Poisoned)
	}
	dropped, done := 0, 0
	for _, p := range all {
		for _, l := range p.logLines("job dropped: its transaction never committed") {
			if l["outbox"] != nil {
				dropped++
			}
		}
		for _, l := range p.logLines("job done") {
			if l["outbox"] != nil {
				done++
			}
		}
	}
	t.Logf("drained in %v; %d jobs dropped (their Tx never committed), %d outbox deliveries done (jobs run and fences removed)",
		time.Since(drained).Round(time.Millisecond), dropped, done)
	checkNoPoison(t, e, q)

	// No outbox row is left: every committed job ran and deleted its row,
	// every fence was removed after the hold.
	for _, en := range e.entities(src, storeadapter.ReservedRows(strings.TrimPrefix(jobs.OutboxPrefix, storeadapter.ReservedPrefix))) {
		t.Errorf("outbox row %s/%s is left: %v", en.PartitionKey, en.RowKey, en.Properties)
	}
	employees := e.entities(src, storeadapter.ApplicationRows(storeadapter.Filter{}))
	if len(employees) == 0 {
		t.Errorf("the producers left no employee in %s", src)
	}
	if !compareIndexes(e.ctx, t, store.Tables(), x, src) {
		t.Error("the indexes differ from the table")
	}
	names := x.Names(src)
	if want := []string{"email", "emailAll", "lastName", "lastNameAll", "lastNameRows"}; !slices.Equal(slices.Sorted(slices.Values(names)), want) {
		t.Errorf("declared indexes %v, want %v", names, want)
	}
	for _, name := range names {
		e.checkIndex(cfgPath, src, name)
	}
	t.Logf("%d employees; checked in %v; done in %v", len(employees), time.Since(drained).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
