package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// contMaxPartBytes is the part cap of the continuation tests, the
// smallest allowed: four of the numbered entities' lines, so 800 rows make
// 200 parts.
const contMaxPartBytes = 1 << 10

// contBlobDelay slows every request to the continuation tests' container
// (a proxy in front of the emulator's blob endpoint): a part takes about
// five requests (at least two), so an export of 200 parts takes at least
// 2-5 s however fast the machine: three or more deliveries of a 1 s
// budget, where two are required.
const contBlobDelay = 5 * time.Millisecond

// checkContinues checks the "job continues" lines of the workers that ran
// one export: at least min of them, their markers counting up from 1 with
// no gap (a continuation re-sent twice may repeat one), each with the
// export's progress.
func checkContinues(t *testing.T, lines []map[string]any, minimum int) {
	t.Helper()
	if len(lines) < minimum {
		t.Fatalf("%d \"job continues\" lines, want at least %d: lower the time budget or raise the row count", len(lines), minimum)
	}
	highest := 0.0
	for i, l := range lines {
		n, _ := l["continued"].(float64)
		progress, _ := l["progress"].(string)
		if n < 1 || n > highest+1 || !strings.HasPrefix(progress, "exported ") || !strings.HasSuffix(progress, " parts so far") || l["after"] != "0s" {
			t.Errorf("continues line %d: %v; want continued %v or less, after 0s and the export's progress", i, l, highest+1)
		}
		highest = max(highest, n)
	}
}

// TestExportContinuesWithinBudget exports a table of several hundred
// parts with a time budget of 1 s and a maximum dequeue count of 1: the
// export continues in new messages several times, none counts as a
// delivery towards poisoning, and the manifest lists every entity once.
// Then a second export of the table is SIGKILLed twice, once just after a
// continuation (the next delivery mid-part, or the send and the delete of
// the continuation) and once after more parts; a draining worker finishes
// it, exactly.
func TestExportContinuesWithinBudget(t *testing.T) {
	e := setup(t, 240*time.Second)
	start := time.Now()
	tbl, c, ckpt := e.table("Cont"), e.container("cont"), e.table("ContCkpt")
	q := e.queue("cont")
	var seeded []storeadapter.Entity
	for p := range 2 {
		seeded = append(seeded, numbered(fmt.Sprintf("p%d", p), 400)...)
	}
	e.seed(tbl, seeded)
	want := e.entities(tbl, storeadapter.Filter{})
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	// The workers reach blobs through a proxy that slows the container's
	// requests, so the number of continuations does not depend on the
	// machine's speed.
	proxy := startBlobProxy(t, c, c, contBlobDelay)
	e.environ = childEnvironment(withEndpoint(emulatorConnectionString, "BlobEndpoint", proxy.url))
	cfg := writeWorkerConfig(t, map[string]any{"export": map[string]any{"checkpointTable": ckpt, "timeBudget": "1s"}})

	opID := "op-cont-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/one", "-max-part-bytes", fmt.Sprint(contMaxPartBytes), "-id", opID)
	p := e.drainProc(q, 120*time.Second, "-config", cfg, "-max-dequeue-count", "1")
	stats := p.stats()
	lines := p.logLines("job continues")
	t.Logf("exported in %v: %+v, %d continuations", time.Since(start).Round(time.Millisecond), stats, len(lines))
	checkContinues(t, lines, 2)
	if stats.Poisoned != 0 || stats.Succeeded != 1 || stats.Continued != int64(len(lines)) || stats.Received != stats.Continued+1 || stats.Retried != 0 {
		t.Errorf("worker's counters %+v with %d continues lines; want every delivery but the last continued, the last succeeded, none poisoned or retried", stats, len(lines))
	}
	checkNoPoison(t, e, q)
	m := checkExport(t, e, c+"/one", opID, tbl, false, want)
	if res := p.results(); len(res) != 1 || !strings.HasPrefix(res[0], fmt.Sprintf("exported %d entities in %d parts", len(want), len(m.Parts))) {
		t.Errorf("results %q; want the export's", res)
	}

	// The kills: a worker with a short lease (so a killed one's message
	// comes back soon) and many deliveries (each kill costs one).
	cfg = writeWorkerConfig(t, map[string]any{"runner": fastRunner(), "export": map[string]any{"checkpointTable": ckpt, "timeBudget": "1s"}})
	killedID := "op-cont-killed-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/two", "-max-part-bytes", fmt.Sprint(contMaxPartBytes), "-id", killedID)
	rng := rand.New(rand.NewPCG(indexSeed(t), 0))
	var killedLines []map[string]any
	for k := range 2 {
		w := e.startWorker(q, "-config", cfg)
		e.poll(60*time.Second, 5*time.Millisecond, fmt.Sprintf("a continuation before kill %d", k+1), func() bool {
			return len(w.logLines("job continues")) >= 1
		})
		time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		w.signal(syscall.SIGKILL)
		if code := w.wait(e.ctx, 10*time.Second); code != -1 {
			t.Fatalf("%s killed with SIGKILL exited with %d", w, code)
		}
		killedLines = append(killedLines, w.logLines("job continues")...)
	}
	if _, manifest := e.partCount(c, "two/"); manifest {
		t.Fatalf("the killed export wrote its manifest before the last kill: raise the row count")
	}
	p = e.drainProc(q, 120*time.Second, "-config", cfg)
	stats = p.stats()
	t.Logf("killed export finished after %v: %+v", time.Since(start).Round(time.Millisecond), stats)
	if stats.Poisoned != 0 || stats.Succeeded < 1 {
		t.Errorf("draining worker's counters %+v; want the export finished, nothing poisoned", stats)
	}
	checkContinues(t, append(killedLines, p.logLines("job continues")...), 2)
	checkNoPoison(t, e, q)
	checkExport(t, e, c+"/two", killedID, tbl, false, want)
	if n := e.count(q); n != 0 {
		t.Errorf("%d messages left on the queue; want none", n)
	}
}
