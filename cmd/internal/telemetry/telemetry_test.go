package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tablekeeper/tablekeeper/cmd/internal/telemetry"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// event is a runner event of a message of kind with delivery count dc.
func event(t runner.EventType, kind string, dc int64) runner.Event {
	return runner.Event{Type: t, Envelope: jobs.Envelope{Kind: kind}, Message: storeadapter.Message{DequeueCount: dc}}
}

// TestObserverCounts feeds the observer a known sequence of events and
// checks every counter exactly, with unknown and undecoded kinds under
// "unknown" and each poisoning under its reason class.
func TestObserverCounts(t *testing.T) {
	m := telemetry.New([]string{"archive", "export"}, 5)
	ctx := context.Background()
	obs := func(e runner.Event) { m.Observe(ctx, e) }
	finish := func(kind string, class runner.Class, d time.Duration, outcome runner.EventType, dc int64) {
		e := event(runner.Received, kind, dc)
		obs(e)
		e.Type, e.Ran, e.Class, e.Duration = runner.Started, true, class, d
		obs(e)
		e.Type = runner.Finished
		obs(e)
		e.Type = outcome
		obs(e)
	}
	for range 3 {
		finish("archive", runner.ClassSuccess, 20*time.Millisecond, runner.Succeeded, 1)
	}
	finish("archive", runner.ClassTransient, 2*time.Second, runner.Retried, 1)
	finish("export", runner.ClassContinue, 40*time.Second, runner.Continued, 1)
	finish("export", runner.ClassPermanent, time.Millisecond, runner.Poisoned, 1)
	finish("", runner.ClassPermanent, time.Millisecond, runner.Poisoned, 1)       // text did not decode
	finish("nosuch", runner.ClassPermanent, time.Millisecond, runner.Poisoned, 1) // a kind not run here
	finish("archive", runner.ClassRefused, time.Millisecond, runner.Poisoned, 1)
	finish("archive", runner.ClassTransient, time.Millisecond, runner.Poisoned, 5)
	finish("archive", runner.ClassTransient, time.Millisecond, runner.Poisoned, 6)
	obs(event(runner.Received, "archive", 1))
	obs(event(runner.LeaseRenewed, "archive", 1))
	obs(event(runner.LeaseRenewed, "archive", 1))
	obs(event(runner.LeaseLost, "archive", 1))
	obs(event(runner.Received, "archive", 1))
	obs(event(runner.Released, "archive", 1))
	obs(event(runner.Received, "export", 1))
	obs(event(runner.AckFailed, "export", 1))

	want := `
# HELP tablekeeper_jobs_finished_total Received messages by kind and outcome: succeeded, retried, poisoned, continued, lease_lost, released, ack_failed, abandoned.
# TYPE tablekeeper_jobs_finished_total counter
tablekeeper_jobs_finished_total{kind="archive",outcome="abandoned"} 0
tablekeeper_jobs_finished_total{kind="archive",outcome="ack_failed"} 0
tablekeeper_jobs_finished_total{kind="archive",outcome="continued"} 0
tablekeeper_jobs_finished_total{kind="archive",outcome="lease_lost"} 1
tablekeeper_jobs_finished_total{kind="archive",outcome="poisoned"} 3
tablekeeper_jobs_finished_total{kind="archive",outcome="released"} 1
tablekeeper_jobs_finished_total{kind="archive",outcome="retried"} 1
tablekeeper_jobs_finished_total{kind="archive",outcome="succeeded"} 3
tablekeeper_jobs_finished_total{kind="export",outcome="abandoned"} 0
tablekeeper_jobs_finished_total{kind="export",outcome="ack_failed"} 1
tablekeeper_jobs_finished_total{kind="export",outcome="continued"} 1
tablekeeper_jobs_finished_total{kind="export",outcome="lease_lost"} 0
tablekeeper_jobs_finished_total{kind="export",outcome="poisoned"} 1
tablekeeper_jobs_finished_total{kind="export",outcome="released"} 0
tablekeeper_jobs_finished_total{kind="export",outcome="retried"} 0
tablekeeper_jobs_finished_total{kind="export",outcome="succeeded"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="abandoned"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="ack_failed"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="continued"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="lease_lost"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="poisoned"} 2
tablekeeper_jobs_finished_total{kind="unknown",outcome="released"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="retried"} 0
tablekeeper_jobs_finished_total{kind="unknown",outcome="succeeded"} 0
# HELP tablekeeper_jobs_retried_total Deliveries that failed transiently and were scheduled to come back after a backoff, by kind.
# TYPE tablekeeper_jobs_retried_total counter
tablekeeper_jobs_retried_total{kind="archive"} 1
tablekeeper_jobs_retried_total{kind="export"} 0
tablekeeper_jobs_retried_total{kind="unknown"} 0
# HELP tablekeeper_lease_renewals_total Successful lease renewals (visibility updates) of running messages.
# TYPE tablekeeper_lease_renewals_total counter
tablekeeper_lease_renewals_total 2
# HELP tablekeeper_leases_lost_total Messages whose lease was lost (another worker may have them).
# TYPE tablekeeper_leases_lost_total counter
tablekeeper_leases_lost_total 1
# HELP tablekeeper_messages_received_total Messages received from the work queue (each delivery counts).
# TYPE tablekeeper_messages_received_total counter
tablekeeper_messages_received_total 14
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "tablekeeper_jobs_finished_total", "tablekeeper_jobs_retried_total",
		"tablekeeper_lease_renewals_total", "tablekeeper_leases_lost_total", "tablekeeper_messages_received_total"); err != nil {
		t.Error(err)
	}
	poisoned := map[[2]string]float64{
		{"archive", "refused"}: 1, {"archive", "dequeue_count"}: 1, {"archive", "over_delivered"}: 1, {"archive", "permanent"}: 0,
		{"export", "permanent"}: 1, {"unknown", "permanent"}: 2, {"unknown", "dequeue_count"}: 0,
	}
	for k, want := range poisoned {
		if got := mustCounter(t, m, "tablekeeper_messages_poisoned_total", "kind", k[0], "reason", k[1]); got != want {
			t.Errorf("poisoned{kind=%q,reason=%q} = %v, want %v", k[0], k[1], got, want)
		}
	}
	// The histogram has one observation per processed delivery (Finished),
	// the undecoded and unknown kinds' included.
	counts := map[string]uint64{"archive": 7, "export": 2, "unknown": 2}
	for kind, want := range counts {
		h := histogram(t, m, kind)
		if h.GetSampleCount() != want {
			t.Errorf("job_duration_seconds{kind=%q} count = %d, want %d", kind, h.GetSampleCount(), want)
		}
	}
	if h := histogram(t, m, "export"); h.GetSampleSum() != 40.001 {
		t.Errorf("export duration sum = %v, want 40.001", h.GetSampleSum())
	}
	tot, err := m.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if tot.Received != 14 || tot.Outcomes["poisoned"] != 6 || tot.Outcomes["succeeded"] != 3 || tot.Retried != 1 || tot.Renewals != 2 ||
		tot.LeasesLost != 1 || tot.Poisoned["permanent"] != 3 || tot.Poisoned["over_delivered"] != 1 {
		t.Errorf("totals %+v disagree with the counters", tot)
	}
	var outcomes int64
	for _, n := range tot.Outcomes {
		outcomes += n
	}
	if outcomes != tot.Received {
		t.Errorf("outcomes add up to %d, received %d: every received message has one outcome", outcomes, tot.Received)
	}
}

// TestOutboxDroppedCounts: a job dropped because its transaction never
// committed counts once, on the Finished event of the delivery that
// dropped it, whatever its outcome (a continuation that removes the fence
// later, or a success when there was no table to fence); the delivery
// that removes the fence, and a job that ran, count nothing. The exit
// summary carries the total.
func TestOutboxDroppedCounts(t *testing.T) {
	m := telemetry.New([]string{"archive", "index"}, 5)
	ctx := context.Background()
	deliver := func(kind string, outbox runner.OutboxOutcome, class runner.Class, outcome runner.EventType) {
		e := event(runner.Received, kind, 1)
		e.Envelope.Outbox = &jobs.OutboxRef{Table: "Employees", PK: "Sales", RK: "~tk.o.op-1"}
		m.Observe(ctx, e)
		e.Type, e.Ran, e.Class, e.Outbox = runner.Finished, true, class, outbox
		m.Observe(ctx, e)
		e.Type = outcome
		m.Observe(ctx, e)
	}
	deliver("index", runner.OutboxWaiting, runner.ClassContinue, runner.Continued)
	deliver("index", runner.OutboxDropped, runner.ClassContinue, runner.Continued)
	deliver("index", runner.OutboxFenceKept, runner.ClassContinue, runner.Continued)
	deliver("index", runner.OutboxFenceRemoved, runner.ClassSuccess, runner.Succeeded)
	deliver("archive", runner.OutboxDropped, runner.ClassSuccess, runner.Succeeded) // no table
	deliver("archive", runner.OutboxRan, runner.ClassSuccess, runner.Succeeded)
	deliver("nosuch", runner.OutboxDropped, runner.ClassContinue, runner.Continued)
	for kind, want := range map[string]float64{"index": 1, "archive": 1, "unknown": 1} {
		if got := mustCounter(t, m, "tablekeeper_outbox_dropped_total", "kind", kind); got != want {
			t.Errorf("outbox_dropped{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	tot, err := m.Totals()
	if err != nil {
		t.Fatal(err)
	}
	attrs := fmt.Sprint(tot.Attrs())
	if tot.OutboxDropped != 3 || !strings.Contains(attrs, "outbox_dropped 3") {
		t.Errorf("totals %+v, attrs %s: want 3 dropped", tot, attrs)
	}
	if got := mustCounter(t, telemetry.New([]string{"export"}, 5), "tablekeeper_outbox_dropped_total", "kind", "export"); got != 0 {
		t.Errorf("a new worker's outbox_dropped{kind=export} = %v, want a series at 0", got)
	}
}

// TestStorageCounts runs calls through an instrumented localstore with the
// metrics' observer beside instrument.Counts: per operation and in total
// the two agree, and each status is the error's class.
func TestStorageCounts(t *testing.T) {
	ctx := context.Background()
	m := telemetry.New(nil, 5)
	counts := &instrument.Counts{}
	// One call fails: the first Send, as a busy service would.
	var sends atomic.Int32
	fault := func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpSend && sends.Add(1) == 1 {
			return storeadapter.ErrUnavailable
		}
		return nil
	}
	store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: fault, Observers: []instrument.Observer{counts, m.Storage()}})
	tb := store.Tables()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tb.CreateTable(ctx, "Things"))
	if err := tb.CreateTable(ctx, "Things"); !errors.Is(err, storeadapter.ErrAlreadyExists) {
		t.Fatal(err)
	}
	_, err := tb.GetEntity(ctx, "Things", "p", "r")
	if !errors.Is(err, storeadapter.ErrNotFound) {
		t.Fatal(err)
	}
	_, err = tb.GetEntity(ctx, "Nope", "p", "r")
	if !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := tb.InsertEntity(ctx, "Things", storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprint(i)})
		must(err)
	}
	q := store.Queue("work")
	_, err = q.ApproximateCount(ctx)
	if !errors.Is(err, storeadapter.ErrQueueNotFound) {
		t.Fatal(err)
	}
	must(q.Create(ctx))
	if _, err := q.Send(ctx, "x", storeadapter.SendOptions{}); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Fatal(err)
	}
	_, err = q.Send(ctx, "x", storeadapter.SendOptions{})
	must(err)
	_, err = store.Container("ccc").Put(ctx, "b", []byte("x"), storeadapter.PutOptions{})
	if !errors.Is(err, storeadapter.ErrContainerNotFound) {
		t.Fatal(err)
	}

	want := map[[3]string]float64{
		{"table", "CreateTable", "ok"}: 1, {"table", "CreateTable", "already_exists"}: 1,
		{"table", "GetEntity", "not_found"}: 1, {"table", "GetEntity", "table_not_found"}: 1,
		{"table", "InsertEntity", "ok"}:                  3,
		{"queue", "ApproximateCount", "queue_not_found"}: 1, {"queue", "CreateQueue", "ok"}: 1, {"queue", "Send", "ok"}: 1,
		{"queue", "Send", "unavailable"}: 1, {"blob", "Put", "container_not_found"}: 1,
	}
	if n := testutil.CollectAndCount(m.Registry, "tablekeeper_storage_calls_total"); n != len(want) {
		t.Errorf("%d storage series, want %d", n, len(want))
	}
	for k, w := range want {
		if got := mustCounter(t, m, "tablekeeper_storage_calls_total", "service", k[0], "operation", k[1], "status", k[2]); got != w {
			t.Errorf("storage_calls_total%v = %v, want %v", k, got, w)
		}
	}
	tot, err := m.Totals()
	if err != nil {
		t.Fatal(err)
	}
	snap := counts.Snapshot()
	if tot.StorageCalls() != snap.Total().Calls || tot.StorageErrors != snap.Total().Errors-snap.Total().Expected || tot.StorageExpected != snap.Total().Expected {
		t.Errorf("metrics count %d calls (%d failures, %d expected answers), the instrument %d (%d errors, %d expected)",
			tot.StorageCalls(), tot.StorageErrors, tot.StorageExpected, snap.Total().Calls, snap.Total().Errors, snap.Total().Expected)
	}
	// The not-founds and the already-exists are the service's expected
	// answers; only the unavailable Send failed.
	if tot.StorageErrors != 1 || tot.StorageExpected != 5 {
		t.Errorf("totals: %d failures, %d expected answers; want 1 (the Send) and 5", tot.StorageErrors, tot.StorageExpected)
	}
	if n := testutil.CollectAndCount(m.Registry, "tablekeeper_storage_failures_total"); n != 1 {
		t.Errorf("%d failure series, want 1", n)
	}
	if got := mustCounter(t, m, "tablekeeper_storage_failures_total", "service", "queue", "operation", "Send", "status", "unavailable"); got != 1 {
		t.Errorf("storage_failures_total{Send,unavailable} = %v, want 1", got)
	}
	for op, s := range snap {
		if tot.Storage[string(op)] != s.Calls {
			t.Errorf("%s: metrics %d calls, instrument %d", op, tot.Storage[string(op)], s.Calls)
		}
	}
}

// TestStorageLatency: every storage call, whatever its status, is timed
// into the latency histogram of its service and operation, as long as its
// caller waited for it (an injected round trip included).
func TestStorageLatency(t *testing.T) {
	m := telemetry.New(nil, 5)
	obs := m.Storage()
	obs.Observe(instrument.Call{Op: instrument.OpGetEntity, Name: "T"}, 3*time.Millisecond, nil)
	obs.Observe(instrument.Call{Op: instrument.OpGetEntity, Name: "T"}, 2*time.Second, storeadapter.ErrUnavailable)
	obs.Observe(instrument.Call{Op: instrument.OpReceive, Name: "q"}, 40*time.Millisecond, nil)
	store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{m.Storage()},
		Latency: instrument.Fixed(30 * time.Millisecond)})
	if err := store.Container("ccc").Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	hist := func(service, op string) *dto.Histogram {
		t.Helper()
		return find(t, m, "tablekeeper_storage_call_duration_seconds", "service", service, "operation", op).GetHistogram()
	}
	// below returns the histogram's cumulative count at the bucket whose
	// upper bound is le.
	below := func(h *dto.Histogram, le float64) uint64 {
		t.Helper()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le {
				return b.GetCumulativeCount()
			}
		}
		t.Fatalf("no bucket le=%v", le)
		return 0
	}
	if h := hist("table", "GetEntity"); h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-2.003) > 1e-9 || below(h, 0.005) != 1 || below(h, 2.5) != 2 {
		t.Errorf("GetEntity: count %d, sum %v, buckets %v; want 2 calls of 3 ms and 2 s", h.GetSampleCount(), h.GetSampleSum(), h.GetBucket())
	}
	if h := hist("queue", "Receive"); h.GetSampleCount() != 1 || below(h, 0.025) != 0 || below(h, 0.05) != 1 {
		t.Errorf("Receive: count %d, buckets %v; want 1 call of 40 ms", h.GetSampleCount(), h.GetBucket())
	}
	if h := hist("blob", "CreateContainer"); h.GetSampleCount() != 1 || h.GetSampleSum() < 0.03 {
		t.Errorf("CreateContainer: count %d, sum %v; want 1 call of at least the injected 30 ms", h.GetSampleCount(), h.GetSampleSum())
	}
	if n := testutil.CollectAndCount(m.Registry, "tablekeeper_storage_call_duration_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (one per service and operation called; status is no label)", n)
	}
}

// TestStatus: each sentinel, wrapped, gets its class; a network error is
// unavailable.
func TestStatus(t *testing.T) {
	for err, want := range map[error]string{
		nil: "ok",
		fmt.Errorf("x: %w", storeadapter.ErrPreconditionFailed):                        "precondition_failed",
		&storeadapter.TransactionError{Index: 2, Err: storeadapter.ErrAlreadyExists}:   "already_exists",
		fmt.Errorf("x: %w", storeadapter.ErrPopReceiptMismatch):                        "pop_receipt_mismatch",
		fmt.Errorf("x: %w: %w", storeadapter.ErrUnavailable, context.DeadlineExceeded): "unavailable",
		context.Canceled:          "canceled",
		storeadapter.ErrForbidden: "forbidden",
		errors.New("odd"):         "other",
	} {
		if got := telemetry.Status(err); got != want {
			t.Errorf("Status(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestSampler: each sample is exactly three storage calls; it reads the
// depths and the oldest visible message's age, 0 for a missing poison
// queue, and takes one sample per interval, none in between.
func TestSampler(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	counts := &instrument.Counts{}
	store := instrument.Wrap(localstore.New(localstore.Options{Clock: clk}), instrument.Options{Observers: []instrument.Observer{counts}})
	work, pq := store.Queue("work"), store.Queue("work-poison")
	if err := work.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := work.Send(ctx, "first", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90 * time.Second)
	if _, err := work.Send(ctx, "second", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := work.Send(ctx, "hidden", storeadapter.SendOptions{VisibilityDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	before := counts.Snapshot().Total().Calls
	s, err := telemetry.SampleQueues(ctx, work, pq, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if want := (telemetry.QueueSample{Depth: 3, PoisonDepth: 0, Oldest: 120 * time.Second, Visible: true}); s != want {
		t.Errorf("sample %+v, want %+v", s, want)
	}
	if n := counts.Snapshot().Total().Calls - before; n != 3 {
		t.Errorf("a sample made %d storage calls, want 3", n)
	}

	m := telemetry.New(nil, 5)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	before = counts.Snapshot().Total().Calls
	go func() {
		defer close(done)
		(&telemetry.Sampler{Metrics: m, Work: work, Poison: pq, Interval: time.Minute, Clock: clk}).Run(sctx)
	}()
	// The first sample at once, then one per minute of the clock.
	for i := range 3 {
		if err := clk.BlockUntil(1, time.Now().Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if n := counts.Snapshot().Total().Calls - before; n != int64(3*(i+1)) {
			t.Fatalf("after %d intervals: %d storage calls, want %d", i, n, 3*(i+1))
		}
		if i < 2 {
			clk.Advance(time.Minute)
		}
	}
	cancel()
	<-done
	gauge := func(name, q string) float64 { return mustGauge(t, m, name, q) }
	if d, p, age := gauge("tablekeeper_queue_depth", "work"), gauge("tablekeeper_poison_queue_depth", "work-poison"), gauge("tablekeeper_queue_oldest_message_age_seconds", "work"); d != 3 || p != 0 || age != 240 {
		t.Errorf("gauges: depth %v, poison depth %v, oldest age %v; want 3, 0, 240", d, p, age)
	}
	if got := gauge("tablekeeper_queue_sampled_timestamp_seconds", "work"); got != float64(clk.Now().Unix()) {
		t.Errorf("sampled timestamp %v, want %v", got, clk.Now().Unix())
	}

	// A missing work queue fails the sample: counted, gauges kept.
	if err := work.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	(&telemetry.Sampler{Metrics: m, Work: work, Poison: pq, Interval: time.Minute, Clock: clk}).Sample(ctx)
	if got := mustCounter(t, m, "tablekeeper_queue_sample_failures_total", "queue", "work"); got != 1 {
		t.Errorf("sample failures = %v, want 1", got)
	}
	if d := gauge("tablekeeper_queue_depth", "work"); d != 3 {
		t.Errorf("depth after a failed sample = %v, want the last value 3", d)
	}
}

// TestServer: /healthz follows the loop's last sign of life, /readyz the
// cached readiness check (at most one check per ReadyCache), /metrics the
// registry.
func TestServer(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	m := telemetry.New([]string{"archive"}, 5)
	m.Observe(context.Background(), event(runner.Received, "archive", 1))
	srv, err := telemetry.Listen("127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	var last atomic.Int64 // 0: the loop has not run
	var checks atomic.Int64
	var readyErr atomic.Value
	readyErr.Store(errBox{})
	srv.Alive = func() time.Time {
		if n := last.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	srv.AliveWindow = time.Minute
	srv.Clock = clk
	srv.Ready = func(context.Context) error { checks.Add(1); return readyErr.Load().(errBox).err }
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	base := "http://" + srv.Addr()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expect := func(path string, code int, has string) {
		t.Helper()
		if got, body := get(path); got != code || !strings.Contains(body, has) {
			t.Errorf("GET %s = %d %q, want %d with %q", path, got, body, code, has)
		}
	}
	expect("/healthz", 200, "ok") // starting: counted from the server's start
	clk.Advance(2 * time.Minute)
	expect("/healthz", 503, "has not run yet")
	last.Store(clk.Now().UnixNano())
	clk.Advance(59 * time.Second)
	expect("/healthz", 200, "ok")
	clk.Advance(2 * time.Second)
	expect("/healthz", 503, "the receive loop last ran 1m1s ago")

	expect("/readyz", 200, "ok")
	expect("/readyz", 200, "ok")
	if n := checks.Load(); n != 1 {
		t.Errorf("%d readiness checks for two requests within ReadyCache, want 1", n)
	}
	readyErr.Store(errBox{errors.New("queue work does not exist")})
	expect("/readyz", 200, "ok") // cached
	clk.Advance(telemetry.ReadyCache)
	expect("/readyz", 503, "not ready: queue work does not exist")
	if n := checks.Load(); n != 2 {
		t.Errorf("%d readiness checks, want 2", n)
	}

	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, "tablekeeper_messages_received_total 1\n") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics = %d, body without the received counter or the Go collector:\n%s", code, body)
	}
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Shutdown = %v, want nil", err)
	}
}

type errBox struct{ err error }

// TestTotalsAttrs: the summary's attributes are one flat list with every
// counter, poison reasons and storage calls rendered "name=n".
func TestTotalsAttrs(t *testing.T) {
	tot := telemetry.Totals{Received: 4, Outcomes: map[string]int64{"succeeded": 3, "poisoned": 1}, Poisoned: map[string]int64{"permanent": 1, "refused": 0},
		Storage: map[string]int64{"Receive": 5, "GetEntity": 2}, StorageErrors: 1, StorageExpected: 2}
	attrs := tot.Attrs()
	got := map[string]any{}
	for i := 0; i < len(attrs); i += 2 {
		got[attrs[i].(string)] = attrs[i+1]
	}
	b, _ := json.Marshal(got)
	for _, want := range []string{`"messages_received":4`, `"finished_succeeded":3`, `"finished_poisoned":1`, `"finished_lease_lost":0`,
		`"poisoned_by_reason":"permanent=1"`, `"storage_calls":7`, `"storage_errors":1`, `"storage_expected":2`, `"storage_calls_by_op":"GetEntity=2 Receive=5"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("summary %s lacks %s", b, want)
		}
	}
}
