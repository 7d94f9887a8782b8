package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestPoisonAtScale is the operator trial's workload, smaller: archive jobs
// of rows that do not exist, each poisoned on its first delivery by a real
// worker on Azurite, then requeued and purged. The worker's exit line
// counts no storage error (the not-founds of the handler's reads are
// expected answers, counted apart) and at most 7.5 storage calls per
// message (9.1 before the poison path was trimmed: BENCHMARKS.md); the
// requeue deletes every poison message by the receipt its record notes
// (Azurite honours it: no receive, no sweep) with two table writes per
// record; enqueue poison purge removes everything.
func TestPoisonAtScale(t *testing.T) {
	t.Parallel()
	const n = 200
	e := setup(t, 3*time.Minute)
	q := e.queue("poisonscale")
	src, dst := e.table("PoisonScale"), e.table("PoisonScaleTo")
	for _, tbl := range []string{src, dst} {
		if err := idempotent.EnsureTable(e.ctx, store.Tables(), tbl); err != nil {
			t.Fatal(err)
		}
	}
	send := func(round int) {
		texts := make([]string, n)
		for i := range n {
			rk := fmt.Sprintf("r%04d", i)
			texts[i] = e.envelope(t, "archive", fmt.Sprintf("op-scale-%d-%d", round, i), archive.Args{Table: src, To: dst, PK: &rk, RK: &rk})
		}
		e.sendTexts(q, texts)
	}
	send(1)
	w := e.drainProc(q, 2*time.Minute)
	if s := w.stats(); s.Poisoned != n {
		t.Fatalf("worker poisoned %d of %d (%+v)", s.Poisoned, n, s)
	}
	lines := w.logLines("worker stopped")
	if len(lines) != 1 {
		t.Fatalf("%d \"worker stopped\" lines, want 1", len(lines))
	}
	end := lines[0]
	calls, _ := end["storage_calls"].(float64)
	failures, _ := end["storage_errors"].(float64)
	expected, _ := end["storage_expected"].(float64)
	t.Logf("poisoning: %.2f calls per message (%v by operation), %v expected answers, %v failures", calls/n, end["storage_calls_by_op"], expected, failures)
	if failures != 0 || expected < 2*n {
		t.Errorf("exit line: storage_errors %v, storage_expected %v; want 0 failures and the handler's %d not-founds at least", failures, expected, 2*n)
	}
	if calls/n > 7.5 {
		t.Errorf("poisoning cost %.2f storage calls per message, want at most 7.5 (%v)", calls/n, end["storage_calls_by_op"])
	}

	counts := &instrument.Counts{}
	st := instrument.Wrap(store, instrument.Options{Observers: []instrument.Observer{counts}})
	in, err := poison.NewInspector(poison.Config{Tables: st.Tables(), Source: st.Queue(q), Poison: st.Queue(poison.QueueName(q)),
		Blobs: st.Container(poison.QueueName(q)), Host: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recs, err := in.Requeue(e.ctx, poison.RequeueOptions{All: true})
	took := time.Since(start)
	if err != nil || len(recs) != n {
		t.Fatalf("Requeue = %d records, %v; want %d", len(recs), err, n)
	}
	snap := counts.Snapshot()
	t.Logf("requeue of %d: %v (%.0f/s)\n%v", n, took.Round(time.Millisecond), n/took.Seconds(), snap)
	if snap[instrument.OpReceive].Calls != 0 || snap[instrument.OpDeleteMessage].Calls != n || snap[instrument.OpUpdateEntity].Calls != 2*n ||
		snap[instrument.OpSend].Calls != n || snap.Total().Errors != 0 {
		t.Errorf("requeue calls: want no Receive, %d DeleteMessage and Send, %d UpdateEntity, no error; got\n%v", n, 2*n, snap)
	}
	if c := e.count(poison.QueueName(q)); c != 0 {
		t.Errorf("poison queue holds %d after the requeue, want 0", c)
	}
	if c := e.count(q); c != n {
		t.Errorf("work queue holds %d after the requeue, want %d", c, n)
	}

	if s := e.drain(q, 2*time.Minute); s.Poisoned != n {
		t.Fatalf("second drain poisoned %d of %d (%+v)", s.Poisoned, n, s)
	}
	var purged struct {
		Purged  int            `json:"purged"`
		ByState map[string]int `json:"byState"`
	}
	e.enqueueJSON(&purged, "poison", "purge", "-queue", q, "-yes")
	if purged.Purged != 2*n || purged.ByState[poison.StatePoisoned] != n || purged.ByState[poison.StateRequeued] != n {
		t.Errorf("purge = %+v, want %d poisoned and %d requeued", purged, n, n)
	}
	if c := e.count(poison.QueueName(q)); c != 0 {
		t.Errorf("poison queue holds %d after the purge, want 0", c)
	}
}
