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

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestOverviewShowsQueuesAndCharts: the queue's counts, its oldest visible
// message, the poison count, and a chart per kind from two metric
// readings, with the window's totals.
func TestOverviewShowsQueuesAndCharts(t *testing.T) {
	reg := prometheus.NewRegistry()
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{Name: finishedMetric}, []string{"kind", "outcome"})
	reg.MustRegister(finished)
	f := newFixture(t, func(c *Config) { c.Metrics = []Source{{Name: "worker-a", Gatherer: reg}} })
	f.workload(t)
	for range 2 {
		if _, err := f.store.Queue(workQueue).Send(f.ctx, "waiting", storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(90 * time.Second)

	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	must(t, "overview", body, `<tr data-queue="work">\s*<td>work</td>\s*<td class="n">2</td>\s*<td>1m30s</td>`,
		`<td class="n">6</td>\s*<td>6m34s</td>`, `id="no-charts"`)

	finished.WithLabelValues("archive", "succeeded").Add(5)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now()) // the baseline
	f.clock.Advance(30 * time.Second)
	finished.WithLabelValues("archive", "succeeded").Add(12)
	finished.WithLabelValues("archive", "retried").Add(2)
	finished.WithLabelValues("archive", "poisoned").Add(1)
	finished.WithLabelValues("export", "continued").Add(3)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now())
	_, body = f.get(t, "/")
	must(t, "charts", body, `<figure class="chart" data-kind="archive">`, `<figure class="chart" data-kind="export">`,
		`data-series="succeeded">succeeded 12<`, `data-series="failed">failed 3<`, `data-series="continued">continued 3<`,
		`<li>worker-a</li>`)

	// A counter reset (a worker restarted) counts its new value, not a
	// negative gain; points older than an hour leave the chart.
	f.clock.Advance(30 * time.Second)
	reg.Unregister(finished)
	again := prometheus.NewCounterVec(prometheus.CounterOpts{Name: finishedMetric}, []string{"kind", "outcome"})
	reg.MustRegister(again)
	again.WithLabelValues("archive", "succeeded").Add(4)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now())
	_, body = f.get(t, "/")
	must(t, "after a reset", body, `>succeeded 16<`)
	f.clock.Advance(2 * time.Hour)
	f.con.sample(f.con.cfg.Metrics, f.clock.Now())
	_, body = f.get(t, "/")
	must(t, "an hour later", body, `id="no-charts"`)
}

// TestOverviewWithoutMetricsOrQueue: without metrics sources the page says
// how to give them; a work queue not created yet is counted as empty.
func TestOverviewWithoutMetricsOrQueue(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Queues = []string{workQueue, "later"} })
	_, body := f.get(t, "/")
	must(t, "overview", body, `id="no-metrics"`, `<tr data-queue="later">(?s:.)*does not exist yet`,
		`<tr data-queue="work">\s*<td>work</td>\s*<td class="n">0</td>\s*<td>-</td>`)
}

// TestPoisonPages: groups with counts, oldest and newest; a group's records
// paged; an unknown group lists the groups there are.
func TestPoisonPages(t *testing.T) {
	f := newFixture(t, nil)
	ids := f.workload(t)
	code, body := f.get(t, "/poison?queue=work")
	if code != http.StatusOK {
		t.Fatalf("GET /poison: %d\n%s", code, body)
	}
	must(t, "groups", body, `6 poisoned message\(s\) in 3 group\(s\)`,
		`<tr data-group="archive/not-found">(?s:.)*<td class="n">3</td>`,
		`<tr data-group="index/conflict">(?s:.)*<td class="n">2</td>`,
		`<tr data-group="validation">`)
	mustNot(t, "read-only groups", body, `actions/preview`)

	_, body = f.get(t, link(t, body, `<tr data-group="archive/not-found">\s*<td><a href="([^"]+)"`))
	must(t, "group", body, `3 record\(s\), page 1 of 1`, `data-id="`+ids["archive/not-found"][0]+`"`)
	mustNot(t, "group", body, `data-id="`+ids["index/conflict"][0]+`"`, `type="checkbox"`)

	_, body = f.get(t, "/poison/group?queue=work&group=index/conflcit")
	must(t, "unknown group", body, `No poisoned message of queue work is in group index/conflcit`, `>index/conflict</a>`)

	for i := range 52 {
		f.poisonText(t, envelope(t, fmt.Sprintf("op-many-%d", i), "purge", map[string]any{"table": "T"}), fmt.Sprintf("op-many-%d", i), "purge", "permanent: purge: table T: not found", "not found")
	}
	_, body = f.get(t, "/poison/group?queue=work&group=purge/not-found")
	must(t, "page 1", body, `52 record\(s\), page 1 of 2`, `rel="next"`)
	if n := strings.Count(body, "<tr data-id="); n != pageSize {
		t.Errorf("page 1 lists %d records, want %d", n, pageSize)
	}
	_, body = f.get(t, "/poison/group?queue=work&group=purge/not-found&page=2")
	if n := strings.Count(body, "<tr data-id="); n != 2 {
		t.Errorf("page 2 lists %d records, want 2", n)
	}
	must(t, "page 2", body, `rel="prev"`)

	code, body = f.get(t, "/poison?queue=nope")
	if code != http.StatusNotFound || !strings.Contains(body, `queue &#34;nope&#34; is not one this console shows`) {
		t.Errorf("unknown queue: %d\n%s", code, body)
	}
}

// TestRecordPage: the envelope and args decoded, the attempts as a
// timeline, an original that is no envelope with its reason and its base64
// decoding, and the requeue history of an operation poisoned twice.
func TestRecordPage(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllowActions = true })
	ids := f.workload(t)
	_, body := f.get(t, "/poison/group?queue=work&group=index/conflict")
	_, body = f.get(t, link(t, body, `<tr data-id="`+ids["index/conflict"][0]+`">(?s:.*?)<a href="([^"]+)"`))
	must(t, "record", body, `id="state">poisoned<`, `&#34;kind&#34;: &#34;index&#34;`, `id="args"`,
		`#1 · 2026-11-26 09:03:00Z \(\+0s\)`, `#2 · 2026-11-26 09:03:02Z \(\+2s\)`, `id="no-history"`)

	_, body = f.get(t, "/poison/record?queue=work&id="+ids["validation"][0])
	must(t, "not an envelope", body, `id="envelope-error">Not a valid envelope: `, `<pre id="decoded">not an envelope</pre>`,
		`<pre id="original">bm90IGFuIGVudmVsb3Bl</pre>`)

	// Requeue the first archive record and poison its new message again.
	first := ids["archive/not-found"][0]
	resp, _ := f.post(t, "/actions/run", url.Values{"csrf": {f.con.csrf}, "action": {"requeue"}, "queue": {workQueue}, "id": {first}})
	f.waitTask(t, resp.Header.Get("Location"))
	msgs, err := f.store.Queue(workQueue).Receive(f.ctx, 1, time.Minute)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the requeued message: %v, %d", err, len(msgs))
	}
	f.clock.Advance(time.Minute)
	if _, err := f.store.Queue(workQueue).Send(f.ctx, msgs[0].Text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Queue(workQueue).DeleteMessage(f.ctx, msgs[0].ID, msgs[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	second := f.poisonText(t, msgs[0].Text, "op-arch-0", "archive", "permanent: archive: again", "again")
	_, body = f.get(t, "/poison/record?queue=work&id="+second)
	must(t, "history", body, `<table id="history">(?s:.)*>`+first+`</a></td><td>requeued</td>`)

	code, body := f.get(t, "/poison/record?queue=work&id=missing")
	if code != http.StatusNotFound || !strings.Contains(body, "no poison record") {
		t.Errorf("missing record: %d\n%s", code, body)
	}
}

// TestReadOnlyConsoleChangesNothing: without AllowActions no page offers an
// action and a posted one is refused, token or not.
func TestReadOnlyConsoleChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	ids := f.workload(t)
	for _, p := range []string{"/poison?queue=work", "/poison/group?queue=work&group=validation", "/poison/record?queue=work&id=" + ids["validation"][0]} {
		_, body := f.get(t, p)
		mustNot(t, p, body, `actions/preview`, `Requeue`)
	}
	for _, path := range []string{"/actions/preview", "/actions/run"} {
		resp, body := f.post(t, path, url.Values{"csrf": {f.con.csrf}, "action": {"requeue"}, "queue": {workQueue}, "group": {"validation"}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s: %d\n%s", path, resp.StatusCode, body)
		}
	}
	if n, _ := f.store.Queue(workQueue).ApproximateCount(f.ctx); n != 0 {
		t.Errorf("work queue has %d messages after refused actions", n)
	}
}

// TestActionsPreviewThenRun: each action needs the CSRF token; the preview
// is a dry run that changes nothing and shows the counts; confirming runs
// it as a task, logged with who asked.
func TestActionsPreviewThenRun(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllowActions = true })
	ids := f.workload(t)
	form := url.Values{"action": {"requeue"}, "queue": {workQueue}, "group": {"archive/not-found"}}

	resp, body := f.post(t, "/actions/preview", form)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("preview without CSRF: %d %s", resp.StatusCode, body)
	}
	form.Set("csrf", "wrong")
	if resp, _ = f.post(t, "/actions/run", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("run with a wrong CSRF token: %d", resp.StatusCode)
	}

	form.Set("csrf", f.con.csrf)
	resp, body = f.post(t, "/actions/preview", form)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: %d\n%s", resp.StatusCode, body)
	}
	must(t, "preview", body, `Dry run: requeue group archive/not-found of queue work would change <strong>3</strong>`,
		`name="group" value="archive/not-found"`, `id="confirm"`)
	if n, _ := f.store.Queue(workQueue).ApproximateCount(f.ctx); n != 0 {
		t.Fatalf("the preview sent %d messages", n)
	}

	resp, _ = f.post(t, "/actions/run", form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("run: %d", resp.StatusCode)
	}
	body = f.waitTask(t, resp.Header.Get("Location"))
	must(t, "task", body, `id="task-state">done<`, `requeued 3 record\(s\)`, `<li>claim/send: 3 of 3`)
	if n, _ := f.store.Queue(workQueue).ApproximateCount(f.ctx); n != 3 {
		t.Errorf("work queue has %d messages, want the 3 requeued", n)
	}
	must(t, "log", f.logs.String(), `msg="console action" action=requeue queue=work group=archive/not-found ids="" older="" who="127.0.0.1 via no token \(loopback\), console of ops@console-host"`,
		`msg="console action done" action=requeue .*result="requeued 3 record\(s\)"`)

	// Delete a selection, then purge what is left.
	sel := url.Values{"csrf": {f.con.csrf}, "action": {"delete"}, "queue": {workQueue}, "id": ids["index/conflict"]}
	_, body = f.post(t, "/actions/preview", sel)
	must(t, "delete preview", body, `would change <strong>2</strong>`)
	resp, _ = f.post(t, "/actions/run", sel)
	must(t, "delete", f.waitTask(t, resp.Header.Get("Location")), `deleted 2 of 2 record\(s\)`)

	purge := url.Values{"csrf": {f.con.csrf}, "action": {"purge"}, "queue": {workQueue}, "older": {"0"}}
	_, body = f.post(t, "/actions/preview", purge)
	must(t, "purge preview", body, `would change <strong>4</strong>`) // the validation record and the 3 requeued
	resp, _ = f.post(t, "/actions/run", purge)
	must(t, "purge", f.waitTask(t, resp.Header.Get("Location")), `purged 4 record\(s\)`)
	_, body = f.get(t, "/poison?queue=work")
	must(t, "after", body, `0 poisoned message\(s\) in 0 group\(s\)`)

	for _, bad := range []url.Values{
		{"action": {"explode"}},
		{"action": {"requeue"}},
		{"action": {"purge"}, "id": {"x"}},
		{"action": {"purge"}, "older": {"3y"}},
	} {
		bad.Set("csrf", f.con.csrf)
		bad.Set("queue", workQueue)
		if resp, body := f.post(t, "/actions/preview", bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("preview %v: %d %s", bad, resp.StatusCode, body)
		}
	}
	cross := url.Values{"csrf": {f.con.csrf}, "action": {"purge"}, "queue": {workQueue}}
	for name, h := range map[string][2]string{"an Origin elsewhere": {"Origin", "https://evil.example"}, "a cross-site fetch": {"Sec-Fetch-Site", "cross-site"}} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/actions/preview", strings.NewReader(cross.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(h[0], h[1])
		if resp, err := f.hc.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("post with %s: %v %v", name, resp.StatusCode, err)
		}
	}
}

// TestTokenGuardsEveryPage: with a token, pages redirect to the login form;
// a bearer header or the cookie of a successful login lets requests in;
// the token never appears on a page or in the log.
func TestTokenGuardsEveryPage(t *testing.T) {
	const token = "s3cret-console-token"
	if _, err := New(Config{Store: localstore.New(localstore.Options{}), Queues: []string{"q"}, Token: "short",
		Inspector: func(string) (*poison.Inspector, error) { return nil, nil }}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a 5-character token: %v, want refused", err)
	}
	f := newFixture(t, func(c *Config) { c.Token = token })
	code, _ := f.get(t, "/poison")
	if code != http.StatusSeeOther {
		t.Errorf("GET /poison without the token: %d", code)
	}
	resp, _ := f.post(t, "/indexes/check", url.Values{"csrf": {f.con.csrf}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without the token: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := f.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := readBody(t, r); code != http.StatusOK || strings.Contains(body, token) {
		t.Errorf("bearer: %d", code)
	}
	resp, body := f.post(t, "/login", url.Values{"token": {"guess"}, "next": {"/poison"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not the console") {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	for _, next := range []string{"//evil.example/", "/\t/evil.example", "/\n/evil.example", "/\\evil.example", "https://evil.example/", "javascript:alert(1)"} {
		resp, _ = f.post(t, "/login", url.Values{"token": {token}, "next": {next}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Errorf("login with next %q: %d to %q, want 303 to / (an outside next is not followed)", next, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	resp, _ = f.post(t, "/login", url.Values{"token": {token}, "next": {"/poison?queue=work"}})
	if loc := resp.Header.Get("Location"); loc != "/poison?queue=work" {
		t.Errorf("login with a next inside the console: to %q", loc)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge != int(sessionAge/time.Second) || strings.Contains(ck.Value, token) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path /, 12h, not the token", ck)
	}
	code, body = f.get(t, "/poison")
	if code != http.StatusOK || strings.Contains(body, token) {
		t.Errorf("GET /poison after login: %d", code)
	}
	if strings.Contains(f.logs.String(), token) {
		t.Error("the log shows the token")
	}
}

// TestErrorsAreRedacted: a storage error quoting a credential is shown
// scrubbed.
func TestErrorsAreRedacted(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Redact = func(s string) string { return strings.ReplaceAll(s, "sig=SECRET", "sig=REDACTED") }
		c.Store = failingStore{c.Store}
	})
	_, body := f.get(t, "/")
	must(t, "overview", body, `sig=REDACTED`)
	mustNot(t, "overview", body, `SECRET`)
	_, body = f.get(t, "/poison")
	must(t, "poison", body, `sig=REDACTED`)
	mustNot(t, "poison", body, `SECRET`)
}

// failingStore fails every queue and table call with an error quoting a
// SAS signature.
type failingStore struct{ storeadapter.Store }

func (s failingStore) Queue(name string) storeadapter.Queue { return failingQueue{s.Store.Queue(name)} }
func (s failingStore) Tables() storeadapter.Tables          { return failingTables{s.Store.Tables()} }

var errSecret = errors.New("GET https://acct.queue.core.windows.net/work?sv=2024&sig=SECRET: 500 Internal Server Error")

type failingQueue struct{ storeadapter.Queue }

func (failingQueue) ApproximateCount(ctx context.Context) (int, error) { return 0, errSecret }

type failingTables struct{ storeadapter.Tables }

func (failingTables) Query(context.Context, string, storeadapter.Query) (storeadapter.Page, error) {
	return storeadapter.Page{}, errSecret
}
