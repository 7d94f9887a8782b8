package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestTokenlessConsoleAnswersLoopbackNamesOnly: a page elsewhere that
// rebinds its name to 127.0.0.1 sends its own name as Host, and a console
// without a token refuses it; loopback names pass. With a token, the token
// guards whatever the name.
func TestTokenlessConsoleAnswersLoopbackNamesOnly(t *testing.T) {
	f := newFixture(t, nil)
	for host, want := range map[string]int{"evil.example:8080": 403, "evil.example": 403, "10.0.0.7:8080": 403,
		"localhost:8080": 200, "LOCALHOST": 200, "127.0.0.1:1": 200, "127.9.9.9:80": 200, "[::1]:8080": 200} {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
		req.Host = host
		resp, err := f.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := readBody(t, resp); code != want {
			t.Errorf("Host %s: %d, want %d\n%s", host, code, want, body)
		}
	}
	tok := newFixture(t, func(c *Config) { c.Token = "a-long-enough-token" })
	req, _ := http.NewRequest(http.MethodGet, tok.srv.URL+"/", nil)
	req.Host = "console.example.com"
	req.Header.Set("Authorization", "Bearer a-long-enough-token")
	resp, err := tok.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := readBody(t, resp); code != http.StatusOK {
		t.Errorf("with a token, Host console.example.com: %d, want 200", code)
	}
}

// gate blocks every Send to the work queue until opened (or the call's
// context ends).
type gate struct{ open chan struct{} }

func (g gate) fault(ctx context.Context, c instrument.Call) error {
	if c.Op == instrument.OpSend && c.Name == workQueue {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestChangingActionsRunOneAtATime: while a requeue runs, a second action
// is refused (409) with a link to the running one; once it ended, the next
// runs. Close cancels a task that does not end within its grace.
func TestChangingActionsRunOneAtATime(t *testing.T) {
	g := gate{open: make(chan struct{})}
	f := newFixture(t, func(c *Config) {
		c.AllowActions = true
		c.Store = instrument.Wrap(c.Store, instrument.Options{Fault: g.fault})
	})
	ids := f.workload(t)
	first, _ := f.post(t, "/actions/run", url.Values{"csrf": {f.con.csrf}, "action": {"requeue"}, "queue": {workQueue}, "id": {ids["validation"][0]}})
	if first.StatusCode != http.StatusSeeOther {
		t.Fatalf("first: %d", first.StatusCode)
	}
	resp, body := f.post(t, "/actions/run", url.Values{"csrf": {f.con.csrf}, "action": {"purge"}, "queue": {workQueue}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `href="`+first.Header.Get("Location")+`"`) {
		t.Errorf("second while the first runs: %d\n%s", resp.StatusCode, body)
	}
	close(g.open)
	must(t, "first", f.waitTask(t, first.Header.Get("Location")), `requeued 1 record\(s\)`)
	resp, _ = f.post(t, "/actions/run", url.Values{"csrf": {f.con.csrf}, "action": {"purge"}, "queue": {workQueue}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after the first ended: %d", resp.StatusCode)
	}
	f.waitTask(t, resp.Header.Get("Location"))

	// A task still running when the console closes is cancelled after the
	// grace, and says so.
	g2 := gate{open: make(chan struct{})}
	f2 := newFixture(t, func(c *Config) {
		c.AllowActions = true
		c.Store = instrument.Wrap(c.Store, instrument.Options{Fault: g2.fault})
	})
	f2.workload(t)
	resp, _ = f2.post(t, "/actions/run", url.Values{"csrf": {f2.con.csrf}, "action": {"requeue"}, "queue": {workQueue}, "group": {"archive/not-found"}})
	if n := f2.con.Close(50 * time.Millisecond); n != 1 {
		t.Errorf("Close cancelled %d tasks, want 1", n)
	}
	must(t, "cancelled", f2.waitTask(t, resp.Header.Get("Location")), `id="task-state">failed<`, `context canceled`)
	must(t, "log", f2.logs.String(), `msg="console action failed"`, `console stopped: 1 task\(s\) cancelled`)
}

// TestEndedTasksAreForgottenFirst: past maxTasks ended tasks the oldest
// ended go; a running one stays, however old.
func TestEndedTasksAreForgottenFirst(t *testing.T) {
	f := newFixture(t, nil)
	ts := f.con.tasks
	block := make(chan struct{})
	defer close(block)
	old, _ := ts.start(changing, "old and running", "", "", func(context.Context, *task) ([]string, error) { <-block; return nil, nil })
	var ended []*task
	for i := range maxTasks + 5 {
		tk, busy := ts.start(reading, fmt.Sprint("check ", i), "", "", func(context.Context, *task) ([]string, error) { return nil, nil })
		if tk == nil {
			t.Fatalf("task %d refused: %s runs", i, busy.Title)
		}
		for deadline := time.Now().Add(5 * time.Second); tk.running(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a task that returns at once still runs after 5s")
			}
		}
		ended = append(ended, tk)
	}
	ts.start(reading, "one more", "", "", func(context.Context, *task) ([]string, error) { return nil, nil })
	if ts.get(old.ID) == nil {
		t.Error("the running task was forgotten")
	}
	if ts.get(ended[0].ID) != nil || ts.get(ended[len(ended)-1].ID) == nil {
		t.Error("not the oldest ended tasks were forgotten")
	}
}

// TestSamplingAcrossOutages: a source that misses readings has its gain
// spread over the time it took (no spike); a reading no source answered
// adds no point; the error is shown, redacted.
func TestSamplingAcrossOutages(t *testing.T) {
	var fail error
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: finishedMetric}, []string{"kind", "outcome"})
	reg.MustRegister(c)
	src := Source{Name: "w", Gatherer: prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if fail != nil {
			return nil, fail
		}
		return reg.Gather()
	})}
	f := newFixture(t, func(cfg *Config) {
		cfg.Metrics = []Source{src}
		cfg.Redact = func(s string) string { return strings.ReplaceAll(s, "sig=SECRET", "sig=REDACTED") }
	})
	sample := func() { f.con.sample(f.con.cfg.Metrics, f.clock.Now()); f.clock.Advance(30 * time.Second) }
	sample() // baseline
	c.WithLabelValues("export", "succeeded").Add(10)
	sample()
	fail = errors.New("GET http://w/metrics?sig=SECRET: connection refused")
	sample()
	sample()
	fail = nil
	c.WithLabelValues("export", "succeeded").Add(30) // over 90 s
	sample()
	h := f.con.charts
	if len(h.pts) != 3 {
		t.Fatalf("%d points, want 3: the baseline and two gains (the readings no source answered add none)", len(h.pts))
	}
	if r0, r1 := h.pts[1].rate["export"]["succeeded"], h.pts[2].rate["export"]["succeeded"]; r0 != 20 || r1 != 20 {
		t.Errorf("rates %v and %v per minute, want 20 and 20 (30 over 90 s is no spike)", r0, r1)
	}
	fail = errors.New("GET http://w/metrics?sig=SECRET: connection refused")
	sample()
	_, body := f.get(t, "/")
	must(t, "overview", body, `<li>w: <span class="error">GET http://w/metrics\?sig=REDACTED`, `data-series="succeeded">succeeded 40<`)
	mustNot(t, "overview", body, `SECRET`)
	if s := URLSource("http://user:pw@w:8080/metrics?token=abc", nil); s.Name != "http://user:xxxxx@w:8080/metrics" {
		t.Errorf("URLSource name %q: want no query and the password masked", s.Name)
	}
}

// TestHostileLabelsAreEscaped: a kind label from a worker's metrics is
// text in the chart, never markup.
func TestHostileLabelsAreEscaped(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: finishedMetric}, []string{"kind", "outcome"})
	reg.MustRegister(c)
	f := newFixture(t, func(cfg *Config) { cfg.Metrics = []Source{{Name: "w", Gatherer: reg}} })
	const evil = `<script>alert(1)</script>"`
	c.WithLabelValues(evil, "succeeded").Add(1)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now())
	f.clock.Advance(30 * time.Second)
	c.WithLabelValues(evil, "succeeded").Add(1)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now())
	_, body := f.get(t, "/")
	mustNot(t, "overview", body, `<script>`)
	must(t, "overview", body, `&lt;script&gt;alert\(1\)&lt;/script&gt;`)
}

// TestRecordFieldsAreRedacted: what a record holds (reason, attempts'
// errors, the original) is shown through Redact, on every page.
func TestRecordFieldsAreRedacted(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Redact = func(s string) string { return strings.ReplaceAll(s, "sig=SECRET", "sig=REDACTED") }
	})
	id := f.poisonText(t, "call https://x/?sig=SECRET", "", "", "permanent: GET https://x/?sig=SECRET: 403", "GET https://x/?sig=SECRET: 403")
	rec, err := f.con.ins[workQueue].Show(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/poison", "/poison/group?group=" + url.QueryEscape(poison.GroupName(rec)), "/poison/record?id=" + id} {
		_, body := f.get(t, p)
		mustNot(t, p, body, `SECRET`)
		must(t, p, body, `sig=REDACTED`)
	}
}

// TestGroupDeleteAtScale: a group's delete is its purge, concurrent in the
// library, and removes every record of the group.
func TestGroupDeleteAtScale(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllowActions = true })
	for i := range 300 {
		f.poisonText(t, envelope(t, fmt.Sprintf("op-%d", i), "purge", map[string]any{"table": "T"}), fmt.Sprintf("op-%d", i), "purge", "permanent: table T does not exist", "x")
	}
	form := url.Values{"csrf": {f.con.csrf}, "action": {"delete"}, "queue": {workQueue}, "group": {"purge/not-found"}}
	_, body := f.post(t, "/actions/preview", form)
	must(t, "preview", body, `would change <strong>300</strong>`)
	resp, _ := f.post(t, "/actions/run", form)
	must(t, "delete", f.waitTask(t, resp.Header.Get("Location")), `deleted 300 record\(s\)`)
	if n, err := f.store.Queue(poison.QueueName(workQueue)).ApproximateCount(f.ctx); err != nil || n != 0 {
		t.Errorf("poison queue holds %d messages (%v), want 0", n, err)
	}
}
