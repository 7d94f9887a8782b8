package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
	"github.com/tablekeeper/tablekeeper/test/browser"
)

// TestConsoleInABrowser drives the operators' console in a real headless
// browser against Azurite, with the real worker and enqueue binaries and a
// known workload: on queue A, 3 archives that succeed, 2 purges of a table
// that does not exist (poisoned at once: not-found) and a text that is no
// envelope (validation); on queue B, an archive to blob storage that is
// down (retried once, then poisoned: unavailable); the charts sum both
// workers' metrics; an export stopped
// after its first part (in progress) and a finished one. It reads every
// page, checks an index and verifies an export, requeues the not-found
// group once the table exists (the worker then runs both purges), and keeps
// a screenshot of each step (test/artifacts/TestConsoleInABrowser).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	e := setup(t, 4*time.Minute)
	tab := browser.Start(t)
	qa, qb := e.queue("cona"), e.queue("conb")
	src, arc, ckpt, missing := e.table("ConSrc"), e.table("ConArc"), e.table("ConCkpt"), e.table("ConGone")
	exports, down := e.container("con-exports"), e.container("con-down")

	es := make([]storeadapter.Entity, 24)
	for i := range es {
		es[i] = storeadapter.Entity{PartitionKey: "p1", RowKey: rowKey(i), Properties: map[string]any{"Status": []string{"open", "late"}[i%2], "Note": strings.Repeat("n", 200)}}
	}
	e.seed(src, es)
	cfg := fmt.Sprintf(`{"export": {"checkpointTable": %q}, "index": {"tables": {%q: [{"name": "byStatus", "property": "Status", "kind": "copy", "store": "partition"}]}}}`, ckpt, src)
	cfgPath := t.TempDir() + "/worker.json"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	retry := []string{"-max-dequeue-count", "2", "-retry-base", "1s", "-retry-max", "1s", "-visibility", "5s"}
	for _, q := range []string{qa, qb} {
		if err := store.Queue(q).Create(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	wa := e.startWorker(qa, append([]string{"-http", "127.0.0.1:0", "-config", cfgPath}, retry...)...)
	metricsURL := serverAddr(e, wa) + "/metrics"
	e.environ = childEnvironment(withDeadBlobEndpoint(t, emulatorConnectionString))
	wb := e.startWorker(qb, append([]string{"-http", "127.0.0.1:0"}, retry...)...)
	e.environ = nil
	metricsB := serverAddr(e, wb) + "/metrics"

	con := e.start(enqueueBin, "console", "-listen", "127.0.0.1:0", "-allow-actions", "-queues", qa+","+qb,
		"-metrics", metricsURL, "-metrics", metricsB, "-metrics-every", "1s", "-config", cfgPath, "-exports", exports+"/nightly")
	var base string
	started := regexp.MustCompile(`console on (http://127\.0\.0\.1:\d+/) \(actions enabled; no token \(loopback\); queues ` + qa + `, ` + qb + `\)`)
	e.poll(30*time.Second, 20*time.Millisecond, "the console's start line", func() bool {
		if m := started.FindStringSubmatch(con.stderr.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})

	// The exports, before any job moves a row of the table.
	ex := func(op string, stop func() bool) tableexport.Manifest {
		m, err := tableexport.Export(e.ctx, store.Tables(), storeadapter.Range{Table: src}, tableexport.Options{
			Blobs: store.Container(exports), Prefix: "nightly", OpID: op, MaxPartBytes: 2048, CreateContainer: true, Stop: stop,
			Checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: ckpt}})
		if err != nil && stop == nil {
			t.Fatalf("export %s: %v", op, err)
		}
		return m
	}
	done := ex("op-con-export-"+e.suffix, nil)
	ex("op-con-running-"+e.suffix, func() bool { return true })

	// The workload.
	for i := range 3 {
		e.sendJob(qa, fmt.Sprintf("op-con-ok-%d-%s", i, e.suffix), archive.Args{Table: src, To: arc, PK: &es[i].PartitionKey, RK: &es[i].RowKey})
	}
	for i := range 2 {
		e.sendJob(qa, fmt.Sprintf("op-con-gone-%d-%s", i, e.suffix), purge.Args{Table: missing})
	}
	if _, err := store.Queue(qa).Send(e.ctx, "not an envelope {", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sendJob(qb, "op-con-down-"+e.suffix, archive.Args{Table: src, ToBlob: down + "/x", PK: &es[5].PartitionKey, RK: &es[5].RowKey})
	e.poll(90*time.Second, 200*time.Millisecond, "3 archives done, 3 poisoned on A and 1 on B", func() bool {
		a, err1 := mover(qa).List(e.ctx, "")
		b, err2 := mover(qb).List(e.ctx, "")
		return err1 == nil && err2 == nil && len(a) == 3 && len(b) == 1 &&
			metricValue(t, metricsURL, `tablekeeper_jobs_finished_total{kind="archive",outcome="succeeded"}`) == 3
	})

	// Overview: the queues, and the charts once the console has read both
	// workers' counters after the jobs ended (it reads them every second).
	charts := map[string]string{
		`figure[data-kind="archive"] li[data-series="succeeded"]`: "succeeded 3",
		`figure[data-kind="archive"] li[data-series="failed"]`:    "failed 2", // B's: retried once, then poisoned
		`figure[data-kind="purge"] li[data-series="failed"]`:      "failed 2",
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		tab.Navigate(base)
		var wrong []string
		for sel, want := range charts {
			if got := strings.Join(tab.Texts(sel), ""); got != want {
				wrong = append(wrong, fmt.Sprintf("%s: %q, want %q", sel, got, want))
			}
		}
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			tab.Screenshot("overview-charts")
			t.Fatalf("the charts after 30s: %s", strings.Join(wrong, "; "))
		}
	}
	if got := tab.Text(`tr[data-queue="` + qa + `"] td:nth-child(5)`); got != "3" {
		t.Errorf("overview: queue A's poison count %q, want 3", got)
	}
	if got := tab.Text(`tr[data-queue="` + qb + `"] td:nth-child(5)`); got != "1" {
		t.Errorf("overview: queue B's poison count %q, want 1", got)
	}
	tab.Screenshot("overview")

	// Poison: the groups of both queues.
	tab.ClickAndLoad(`nav a[href^="/poison"]`)
	if got := tab.Text(`tr[data-group="purge/not-found"] td:nth-child(4)`); got != "2" {
		t.Errorf("purge/not-found count %q, want 2", got)
	}
	if got := tab.Text(`tr[data-group="validation"] td:nth-child(4)`); got != "1" {
		t.Errorf("validation count %q, want 1", got)
	}
	tab.Screenshot("poison")
	tab.Do("choose queue B", chromedp.SetValue(chromedp.CSS(`select[name="queue"]`), qb))
	tab.ClickAndLoad(`form.inline button[type="submit"]`)
	if got := tab.Text(`tr[data-group="archive/unavailable"] td:nth-child(4)`); got != "1" {
		t.Errorf("queue B: archive/unavailable count %q, want 1", got)
	}
	tab.Screenshot("poison-queue-b")

	// A group's records and one record.
	tab.Navigate(base + "poison?queue=" + qa)
	tab.ClickAndLoad(`tr[data-group="purge/not-found"] a`)
	if got := tab.Text("#summary"); !strings.HasPrefix(got, "2 record(s), page 1 of 1") {
		t.Errorf("group summary %q", got)
	}
	tab.Screenshot("group")
	tab.ClickAndLoad(`#records tbody tr:first-child td a`)
	if got := tab.Text("#state"); got != "poisoned" {
		t.Errorf("record state %q", got)
	}
	if got := tab.Text("#envelope"); !strings.Contains(got, `"kind": "purge"`) || !strings.Contains(tab.Text("#args"), missing) {
		t.Errorf("record envelope %q, args %q", got, tab.Text("#args"))
	}
	if n := len(tab.Texts("#attempts li")); n != 1 {
		t.Errorf("record shows %d attempts, want 1 (a permanent failure)", n)
	}
	tab.Screenshot("record")
	tab.Navigate(base + "poison?queue=" + qa)
	tab.ClickAndLoad(`tr[data-group="validation"] a`)
	tab.ClickAndLoad(`#records tbody tr:first-child td a`)
	if got := tab.Text("#envelope-error"); !strings.HasPrefix(got, "Not a valid envelope: ") {
		t.Errorf("invalid record: %q", got)
	}
	if got := tab.Text("#original"); got != "not an envelope {" {
		t.Errorf("invalid record's original %q", got)
	}
	tab.Screenshot("record-invalid")

	// Operations: the export in progress first, the finished one after.
	tab.ClickAndLoad(`nav a[href="/operations"]`)
	if got := tab.Text(`tr[data-op="op-con-running-` + e.suffix + `"] td:nth-child(3)`); got != "in progress" {
		t.Errorf("running export: %q", got)
	}
	if got := tab.Text(`tr[data-op="op-con-export-` + e.suffix + `"] td:nth-child(3)`); got != "done" {
		t.Errorf("finished export: %q", got)
	}
	tab.Screenshot("operations")

	// Indexes: a check, in the background, finds every entity left (3 were
	// archived) missing: no index job ran.
	tab.ClickAndLoad(`nav a[href="/indexes"]`)
	tab.ClickAndLoad(`tr[data-index="` + src + `/byStatus"] button`)
	waitTask(t, tab)
	if got := tab.Text("#result li:first-child"); !strings.HasPrefix(got, "21 entities read, 21 indexed, 0 entries read: 21 missing") {
		t.Errorf("index check: %q", got)
	}
	tab.Screenshot("index-check")

	// Exports: the finished export is listed and verifies.
	tab.Navigate(base + "exports")
	manifest := exports + "/" + done.Name
	if got := tab.Text(`tr[data-manifest="` + manifest + `"] td:nth-child(5)`); got != "24" {
		t.Errorf("export rows %q, want 24", got)
	}
	tab.Screenshot("exports")
	tab.ClickAndLoad(`tr[data-manifest="` + manifest + `"] button`)
	waitTask(t, tab)
	if got := tab.Text("#result li:first-child"); got != "verified: every part is what the manifest says" {
		t.Errorf("verify: %q", got)
	}
	tab.Screenshot("export-verify")

	// Requeue the not-found group once its table exists: a dry run first,
	// then the requeue; the worker runs both purges.
	if err := store.Tables().CreateTable(e.ctx, missing); err != nil {
		t.Fatal(err)
	}
	tab.Navigate(base + "poison?queue=" + qa)
	tab.ClickAndLoad(`tr[data-group="purge/not-found"] button[value="requeue"]`)
	if got := tab.Text("#dry-run"); !strings.HasPrefix(got, "Dry run: requeue group purge/not-found of queue "+qa+" would change 2 record(s).") {
		t.Errorf("dry run: %q", got)
	}
	if n := e.count(qa); n != 0 {
		t.Errorf("the dry run sent %d messages", n)
	}
	tab.Screenshot("requeue-preview")
	tab.ClickAndLoad("#confirm")
	waitTask(t, tab)
	if got := tab.Text("#result li:first-child"); got != "requeued 2 record(s)" {
		t.Errorf("requeue: %q", got)
	}
	tab.Screenshot("requeue-done")
	e.poll(60*time.Second, 200*time.Millisecond, "the worker to run the requeued purges", func() bool {
		a, err := mover(qa).List(e.ctx, "")
		return err == nil && len(a) == 1 && metricValue(t, metricsURL, `tablekeeper_jobs_finished_total{kind="purge",outcome="succeeded"}`) == 2
	})
	tab.Navigate(base + "poison?queue=" + qa)
	if got := tab.Text("#summary"); !strings.HasPrefix(got, "1 poisoned message(s) in 1 group(s)") {
		t.Errorf("after the requeue: %q", got)
	}
	tab.Screenshot("poison-after")
	log := con.stderr.String()
	if !strings.Contains(log, `INF console action action=requeue queue=`+qa+` group=purge/not-found ids=`) ||
		!strings.Contains(log, `INF console action done action=requeue queue=`+qa+` group=purge/not-found ids=`) || !strings.Contains(log, `who="127.0.0.1 via no token (loopback)`) {
		t.Errorf("the console's log lacks the action:\n%s", log)
	}
}

// waitTask waits (60 s) for the task page in tab to say its task ended:
// the page reloads itself every second while it runs.
func waitTask(t *testing.T, tab *browser.Tab) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		state := tab.Text("#task-state")
		if state == "done" {
			return
		}
		if state == "failed" || time.Now().After(deadline) {
			tab.Screenshot("task-" + state)
			t.Fatalf("task %s: %s", state, strings.Join(tab.Texts("#error, #result li"), "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metricValue scrapes url and returns the value of the sample series (its
// name and labels as the text format writes them), 0 when absent.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	_, body := httpGet(t, url)
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if json.Unmarshal([]byte(v), &f) == nil {
				return f
			}
		}
	}
	return 0
}
