package console

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/test/syncbuf"
)

// t0 is the fixtures' start time.
var t0 = time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)

const workQueue = "work"

// fixture is a console over a localstore with a fake clock, served by an
// httptest server.
type fixture struct {
	ctx   context.Context
	clock *clock.Fake
	store storeadapter.Store
	rec   *poison.Recorder
	con   *Console
	srv   *httptest.Server
	hc    *http.Client
	logs  *syncbuf.Buffer
}

// newFixture builds the store and the console; edit adjusts the Config.
func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	f := &fixture{ctx: t.Context(), clock: clock.NewFake(t0), logs: &syncbuf.Buffer{}}
	f.store = localstore.New(localstore.Options{Clock: f.clock})
	if err := f.store.Queue(workQueue).Create(f.ctx); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.rec, err = poison.NewRecorder(poisonConfig(f.store, workQueue, f.clock, "worker-1")); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg = Config{Store: f.store, Queues: []string{workQueue}, Clock: f.clock, Operator: "ops@console-host",
		Log: slog.New(slog.NewTextHandler(f.logs, nil)),
		// On the store as edited: New calls it.
		Inspector: func(q string) (*poison.Inspector, error) {
			return poison.NewInspector(poisonConfig(cfg.Store, q, cfg.Clock, "console-host"))
		}}
	if edit != nil {
		edit(&cfg)
	}
	if f.con, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.con)
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.hc = &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func poisonConfig(s storeadapter.Store, q string, clk clock.Clock, host string) poison.Config {
	pq := poison.QueueName(q)
	return poison.Config{Tables: s.Tables(), Source: s.Queue(q), Poison: s.Queue(pq), Blobs: s.Container(pq), Clock: clk, Host: host}
}

// envelope is the text of a valid envelope of kind with args.
func envelope(t *testing.T, id, kind string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: kind, Args: raw})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// poisonText sends text to the work queue, receives it, records failed
// attempts with errs (the last one fails it) and moves it to the poison
// queue with reason. It returns the message id.
func (f *fixture) poisonText(t *testing.T, text, opID, kind, reason string, errs ...string) string {
	t.Helper()
	q := f.store.Queue(workQueue)
	if _, err := q.Send(f.ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(f.ctx, 1, time.Minute)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	m := msgs[0]
	fail := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: opID, Kind: kind}
	for i, e := range errs {
		fail.Attempt = poison.Attempt{DequeueCount: int64(i + 1), Time: f.clock.Now(), Duration: 250 * time.Millisecond, Host: "worker-1", Error: e}
		if i < len(errs)-1 {
			if err := f.rec.RecordAttempt(f.ctx, fail); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(2 * time.Second)
		}
	}
	if err := f.rec.Move(f.ctx, fail, m.PopReceipt, reason); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// get fetches path and returns the status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := f.hc.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return readBody(t, resp)
}

// post submits a form to path.
func (f *fixture) post(t *testing.T, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := f.hc.PostForm(f.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	_, body := readBody(t, resp)
	return resp, body
}

func readBody(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitTask follows a task page until the task ends (10 s deadline) and
// returns its last page.
func (f *fixture) waitTask(t *testing.T, location string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := f.get(t, location)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", location, code, body)
		}
		if !strings.Contains(body, `id="task-state">running<`) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still running after 10s:\n%s", location, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// must fails unless body matches every pattern.
func must(t *testing.T, what, body string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(body) {
			t.Errorf("%s: no match for %q in\n%s", what, p, body)
		}
	}
}

// mustNot fails when body matches any pattern.
func mustNot(t *testing.T, what, body string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if regexp.MustCompile(p).MatchString(body) {
			t.Errorf("%s: unexpected match for %q in\n%s", what, p, body)
		}
	}
}

// workload poisons: 3 archive/not-found, 2 index/conflict and one message
// that is no envelope (validation). It returns their message ids by group.
func (f *fixture) workload(t *testing.T) map[string][]string {
	t.Helper()
	ids := map[string][]string{}
	for i := range 3 {
		id := f.poisonText(t, envelope(t, fmt.Sprintf("op-arch-%d", i), "archive", map[string]any{"table": "Orders", "to": "OrdersArchive", "pk": "p1", "rk": fmt.Sprint(i)}),
			fmt.Sprintf("op-arch-%d", i), "archive", "permanent: archive: source entity Orders/p1/"+fmt.Sprint(i)+": not found", "source entity not found")
		ids["archive/not-found"] = append(ids["archive/not-found"], id)
		f.clock.Advance(time.Minute)
	}
	for i := range 2 {
		id := f.poisonText(t, envelope(t, fmt.Sprintf("op-idx-%d", i), "index", map[string]any{"table": "Orders", "pk": "p1", "rk": fmt.Sprint(i)}),
			fmt.Sprintf("op-idx-%d", i), "index", "dequeue count 6 > 5; last error: index: membership record: conflict: ETag mismatch",
			"index: membership record: conflict: ETag mismatch", "index: membership record: conflict: ETag mismatch")
		ids["index/conflict"] = append(ids["index/conflict"], id)
		f.clock.Advance(time.Minute)
	}
	id := f.poisonText(t, "bm90IGFuIGVudmVsb3Bl", "", "", "permanent: message is not a valid envelope: not JSON", "not JSON")
	ids["validation"] = append(ids["validation"], id)
	return ids
}

// link returns the href the first submatch of pattern finds in body, as a
// browser follows it (HTML entities decoded).
func link(t *testing.T, body, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no link %q in\n%s", pattern, body)
	}
	return html.UnescapeString(m[1])
}
