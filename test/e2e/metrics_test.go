package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// blobProxy stands between the worker and the emulator's blob service:
// requests to the failing container get 503 while failing is set (a
// transient outage the worker retries), and requests to the slow container
// are held for slow first (so a job outlasts its time budget at a known
// point).
type blobProxy struct {
	url            string
	failing        atomic.Bool
	failingPrefix  string
	slowPrefix     string
	slow           time.Duration
	failed, slowed atomic.Int64
}

// startBlobProxy starts a proxy to the emulator's blob endpoint for the
// containers failing and slow, and returns it; it stops with the test.
func startBlobProxy(t *testing.T, failing, slow string, delay time.Duration) *blobProxy {
	t.Helper()
	target := endpoint(t, emulatorConnectionString, "BlobEndpoint")
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &blobProxy{failingPrefix: u.Path + "/" + failing, slowPrefix: u.Path + "/" + slow, slow: delay}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = u.Scheme, u.Host, u.Host
	}}
	l := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case p.failing.Load() && strings.HasPrefix(r.URL.Path, p.failingPrefix):
			p.failed.Add(1)
			w.Header().Set("x-ms-error-code", "ServerBusy")
			http.Error(w, "injected outage", http.StatusServiceUnavailable)
			return
		case strings.HasPrefix(r.URL.Path, p.slowPrefix):
			p.slowed.Add(1)
			time.Sleep(p.slow)
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + l.Addr().String() + u.Path
	return p
}

// endpoint returns the value of key in a connection string.
func endpoint(t *testing.T, cs, key string) string {
	t.Helper()
	for p := range strings.SplitSeq(cs, ";") {
		if v, ok := strings.CutPrefix(p, key+"="); ok {
			return v
		}
	}
	t.Fatalf("the connection string has no %s", key)
	return ""
}

// withEndpoint returns cs with key set to value.
func withEndpoint(cs, key, value string) string {
	parts := strings.Split(cs, ";")
	for i, p := range parts {
		if strings.HasPrefix(p, key+"=") {
			parts[i] = key + "=" + value
		}
	}
	return strings.Join(parts, ";")
}

// scrape is one /metrics answer: the value of each series, keyed by its
// name and its labels in name order (`name{a="x",b="y"}`).
type scrape map[string]float64

// get returns a series' value; a series not exposed fails the test.
func (s scrape) get(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	key := seriesKey(name, labels...)
	v, ok := s[key]
	if !ok {
		t.Fatalf("/metrics has no series %s", key)
	}
	return v
}

// sum adds the series of family name whose labels include labels.
func (s scrape) sum(name string, labels ...string) float64 {
	var n float64
	for k, v := range s {
		fam, rest, _ := strings.Cut(k, "{")
		if fam != name {
			continue
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			match = match && strings.Contains("{"+rest, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		if match {
			n += v
		}
	}
	return n
}

func seriesKey(name string, labels ...string) string {
	var pairs []string
	for i := 0; i < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	slices.Sort(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// parseMetrics reads the Prometheus text format (the series of this
// worker: no label value holds a comma, a quote or a brace).
func parseMetrics(t *testing.T, body string) scrape {
	t.Helper()
	s := scrape{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("/metrics line %q", line)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		name, labels, has := strings.Cut(series, "{")
		var kv []string
		if has {
			for pair := range strings.SplitSeq(strings.TrimSuffix(labels, "}"), ",") {
				k, val, _ := strings.Cut(pair, "=")
				kv = append(kv, k, strings.Trim(val, `"`))
			}
		}
		s[seriesKey(name, kv...)] = v
	}
	return s
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// serverAddr waits for the worker's "serving health and metrics" line and
// returns the bound address.
func serverAddr(e *env, w *proc) string {
	e.t.Helper()
	var addr string
	e.poll(30*time.Second, 20*time.Millisecond, "the worker's health and metrics address", func() bool {
		if lines := w.logLines("serving health and metrics"); len(lines) > 0 {
			addr, _ = lines[0]["addr"].(string)
		}
		return addr != ""
	})
	return "http://" + addr
}

// TestMetricsOfKnownWorkload runs the real worker with -http on a workload
// whose every outcome is known: 3 archives that succeed, 2 messages
// poisoned on their first delivery (a text that is no envelope, and an
// archive with an unknown argument), 2 archives to a blob container that
// answers 503 until each has been retried once, and 1 export that outlasts
// its 1 s time budget on its first part (its container's requests are held
// 1.2 s) and so continues exactly once. It scrapes /metrics and asserts
// every counter exactly; /healthz and /readyz answer 200 while it runs; the
// queue gauges show the poison queue's 2 messages; `enqueue stats` agrees.
// Then SIGTERM: the exit line's storage total from the metrics equals the
// store instrument's, and every operation but the idle loop's polls
// (Receive) and the sampler's (ApproximateCount, Peek) has the count the
// scrape showed.
func TestMetricsOfKnownWorkload(t *testing.T) {
	t.Parallel()
	e := setup(t, 180*time.Second)
	q := e.queue("metrics")
	src, dst := e.table("MetSrc"), e.table("MetDst")
	failing, slow := e.container("met-fail"), e.container("met-slow")
	expTable := e.table("MetExp")
	ckpt := e.table("MetCkpt")
	proxy := startBlobProxy(t, failing, slow, 1200*time.Millisecond)
	proxy.failing.Store(true)

	const n, k = 3, 2
	es := numbered("p", n+k)
	e.seed(src, es)
	e.seed(expTable, numbered("x", 1))
	if err := store.Container(slow).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.sendArchives(q, src, dst, es[:n])
	for i, en := range es[n:] {
		e.sendJob(q, fmt.Sprintf("op-met-blob-%d-%s", i, e.suffix), archive.Args{Table: src, ToBlob: failing, PK: &en.PartitionKey, RK: &en.RowKey})
	}
	e.sendJob(q, "op-met-export-"+e.suffix, export.Args{Table: expTable, To: slow})
	for _, text := range []string{"not an envelope {", `{"v":1,"id":"op-met-bad","kind":"archive","args":{"table":"T1","to":"T2","pk":"p","rk":"r","colour":"red"}}`} {
		if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cfg := writeWorkerConfig(t, map[string]any{"export": map[string]any{"checkpointTable": ckpt, "timeBudget": "1s"}})
	e.environ = childEnvironment(withEndpoint(emulatorConnectionString, "BlobEndpoint", proxy.url))
	w := e.startWorker(q, "-http", "127.0.0.1:0", "-metrics-sample", "1s", "-config", cfg, "-storage-retries", "0",
		"-retry-base", "3s", "-retry-max", "6s")
	e.environ = nil
	base := serverAddr(e, w)
	metrics := func() scrape {
		code, body := httpGet(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("GET /metrics = %d\n%s", code, body)
		}
		return parseMetrics(t, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s while running = %d %q, want 200", path, code, body)
		}
	}

	// Each blob archive fails once; then the outage ends, before the
	// retries come back (at least 2.4 s after each failure).
	e.poll(60*time.Second, 20*time.Millisecond, "both blob archives retried once", func() bool {
		return metrics().get(t, "tablekeeper_jobs_retried_total", "kind", "archive") >= k
	})
	proxy.failing.Store(false)
	pq := poison.QueueName(q)
	var s scrape
	e.poll(90*time.Second, 100*time.Millisecond, "the workload done and sampled", func() bool {
		s = metrics()
		return s.sum("tablekeeper_jobs_finished_total", "outcome", "succeeded") == n+k+1 &&
			s.sum("tablekeeper_poison_queue_depth", "queue", pq) == 2 && s.sum("tablekeeper_queue_sampled_timestamp_seconds", "queue", q) > 0 && s.sum("tablekeeper_queue_depth", "queue", q) == 0
	})
	t.Logf("proxy: %d requests failed, %d held", proxy.failed.Load(), proxy.slowed.Load())

	want := map[string]float64{
		seriesKey("tablekeeper_messages_received_total"):                                           n + 2 + 2*k + 2,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "archive", "outcome", "succeeded"):    n + k,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "archive", "outcome", "retried"):      k,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "archive", "outcome", "poisoned"):     1,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "export", "outcome", "continued"):     1,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "export", "outcome", "succeeded"):     1,
		seriesKey("tablekeeper_jobs_finished_total", "kind", "unknown", "outcome", "poisoned"):     1,
		seriesKey("tablekeeper_jobs_retried_total", "kind", "archive"):                             k,
		seriesKey("tablekeeper_messages_poisoned_total", "kind", "archive", "reason", "permanent"): 1,
		seriesKey("tablekeeper_messages_poisoned_total", "kind", "unknown", "reason", "permanent"): 1,
		seriesKey("tablekeeper_job_duration_seconds_count", "kind", "archive"):                     n + 2*k + 1,
		seriesKey("tablekeeper_job_duration_seconds_count", "kind", "export"):                      2,
		seriesKey("tablekeeper_job_duration_seconds_count", "kind", "unknown"):                     1,
		seriesKey("tablekeeper_lease_renewals_total"):                                              0,
		seriesKey("tablekeeper_leases_lost_total"):                                                 0,
		seriesKey("tablekeeper_queue_oldest_message_age_seconds", "queue", q):                      0,
	}
	for _, fam := range []string{"tablekeeper_jobs_finished_total", "tablekeeper_jobs_retried_total", "tablekeeper_messages_poisoned_total", "tablekeeper_job_duration_seconds_count"} {
		for key, v := range s {
			if _, listed := want[key]; !listed && strings.HasPrefix(key, fam+"{") && v != 0 {
				t.Errorf("%s = %v, want 0", key, v)
			}
		}
	}
	for key, v := range want {
		if got, ok := s[key]; !ok || got != v {
			t.Errorf("%s = %v (exposed %v), want %v", key, got, ok, v)
		}
	}
	if f := s.sum("tablekeeper_storage_calls_total", "service", "blob", "status", "unavailable"); f != float64(proxy.failed.Load()) || f < k {
		t.Errorf("blob calls with status unavailable = %v, the proxy failed %d (at least %d)", f, proxy.failed.Load(), k)
	}
	if f := s.sum("tablekeeper_storage_failures_total", "service", "blob", "status", "unavailable"); f != float64(proxy.failed.Load()) {
		t.Errorf("blob failures with status unavailable = %v, the proxy failed %d", f, proxy.failed.Load())
	}

	var stats struct {
		Queue  struct{ Messages, OldestAgeSeconds float64 }
		Poison struct{ Messages float64 }
	}
	e.enqueueJSON(&stats, "stats", "-queue", q)
	if stats.Queue.Messages != 0 || stats.Poison.Messages != 2 || stats.Queue.OldestAgeSeconds != 0 {
		t.Errorf("enqueue stats = %+v, want 0 messages, 2 poisoned, no oldest age", stats)
	}

	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s after the workload = %d %q, want 200", path, code, body)
		}
	}
	w.signal(syscall.SIGTERM)
	if code := w.wait(e.ctx, 30*time.Second); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", w, code)
	}
	lines := w.logLines("worker stopped")
	if len(lines) != 1 {
		t.Fatalf("%d \"worker stopped\" lines, want 1", len(lines))
	}
	end := lines[0]
	num := func(key string) float64 {
		v, ok := end[key].(float64)
		if !ok {
			t.Fatalf("the exit line has no number %s: %v", key, end)
		}
		return v
	}
	if num("storage_calls") != num("instrument_calls") || num("storage_errors") != num("instrument_errors") || num("storage_expected") != num("instrument_expected") {
		t.Errorf("exit line: metrics count %v storage calls (%v failures, %v expected answers), the instrument %v (%v, %v)",
			num("storage_calls"), num("storage_errors"), num("storage_expected"), num("instrument_calls"), num("instrument_errors"), num("instrument_expected"))
	}
	for key, v := range map[string]float64{"messages_received": want[seriesKey("tablekeeper_messages_received_total")], "finished_succeeded": n + k + 1,
		"finished_poisoned": 2, "finished_retried": k, "finished_continued": 1, "jobs_retried": k, "received": n + 2 + 2*k + 2} {
		if got := num(key); got != v {
			t.Errorf("exit line %s = %v, want %v", key, got, v)
		}
	}
	byOp := map[string]float64{}
	for f := range strings.FieldsSeq(end["storage_calls_by_op"].(string)) {
		op, v, _ := strings.Cut(f, "=")
		byOp[op], _ = strconv.ParseFloat(v, 64)
	}
	var total float64
	for _, v := range byOp {
		total += v
	}
	if total != num("storage_calls") {
		t.Errorf("exit line: storage_calls_by_op adds up to %v, storage_calls %v", total, num("storage_calls"))
	}
	scraped := map[string]float64{}
	for key, v := range s {
		if strings.HasPrefix(key, "tablekeeper_storage_calls_total{") {
			_, rest, _ := strings.Cut(key, `operation="`)
			op, _, _ := strings.Cut(rest, `"`)
			scraped[op] += v
		}
	}
	for op, v := range byOp {
		switch op {
		case "Receive", "ApproximateCount", "Peek": // the idle loop and the sampler go on after the scrape
			if v < scraped[op] {
				t.Errorf("%s: %v calls at exit, fewer than the %v scraped before", op, v, scraped[op])
			}
		default:
			if v != scraped[op] {
				t.Errorf("%s: %v calls at exit, %v scraped when the workload was done", op, v, scraped[op])
			}
		}
	}
}

// TestReadyzMissingQueue: a worker idling on an empty queue answers
// /readyz 200; once its queue is deleted, /readyz answers 503 naming it
// (within the readiness cache) while /healthz stays 200; then its next
// receive finds the queue gone and the worker exits 1, as it always does
// on a missing queue. The queue is deleted right after a receive, found by
// watching the Receive counter, when the idle wait before the next one is
// long (-idle-max 30s, the backoff past 6 s).
func TestReadyzMissingQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, 120*time.Second)
	q := e.queue("metready")
	w := e.start(workerBin, "-queue", q, "-log-format", "json", "-idle-max", "30s", "-http", "127.0.0.1:0", "-metrics-sample", "1m")
	base := serverAddr(e, w)
	e.poll(30*time.Second, 50*time.Millisecond, "/readyz 200", func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == http.StatusOK
	})
	receives := func() float64 {
		_, body := httpGet(t, base+"/metrics")
		return parseMetrics(t, body).sum("tablekeeper_storage_calls_total", "operation", "Receive", "status", "ok") // absent before the first
	}
	// Backoff waits 0.1, 0.2, … 6.4 s (±20 %): after the 7th receive the
	// next wait is at least 0.8 × 6.4 s.
	e.poll(60*time.Second, 20*time.Millisecond, "seven idle receives", func() bool { return receives() >= 7 })
	if err := store.Queue(q).Delete(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.poll(4*time.Second, 50*time.Millisecond, "/readyz 503 naming the missing queue", func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "queue "+q+" does not exist")
	})
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz with the queue missing = %d %q, want 200 (the loop is alive)", code, body)
	}
	if code := w.wait(e.ctx, 60*time.Second); code != 1 {
		t.Errorf("%s exited with %d once its queue was gone, want 1", w, code)
	}
}

// listen returns a loopback listener on a free port, closed with the test.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
