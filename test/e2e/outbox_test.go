package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestOutboxOperatorView runs the operators' side of transactional enqueue
// on Azurite with the real binaries: a worker drops a job whose
// transaction never committed; `enqueue stats` counts the drop while no
// poison command sees it; `enqueue outbox check` lists the fence during
// the hold beside a committed row, and the committed row alone once the
// worker has removed the fence; `poison purge` removes the drop record.
func TestOutboxOperatorView(t *testing.T) {
	t.Parallel()
	e := setup(t, 90*time.Second)
	q := e.queue("outbox")
	src := e.table("OutboxStaff")
	e.seed(src, numbered("Sales", 1))

	// A committed row whose job is not on the queue (as if it were lost),
	// and the message of a transaction that never committed (no row).
	ref := func(op string) jobs.Envelope {
		return jobs.Envelope{V: 1, ID: op, Kind: "archive",
			Args:   json.RawMessage(`{"table":"` + src + `","to":"` + src + `Archive","pk":"Sales","rk":"r00000"}`),
			Outbox: &jobs.OutboxRef{Table: src, PK: "Sales", RK: jobs.OutboxPrefix + op, Window: jobs.Duration(time.Second)}}
	}
	if _, err := store.Tables().InsertEntity(e.ctx, src, jobs.OutboxRow(ref("op-committed"), q, "m-1")); err != nil {
		t.Fatal(err)
	}
	text, err := jobs.Encode(ref("op-lost"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Queue(q).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}

	w := e.startWorker(q, "-drain", "-outbox-hold", "10s")
	e.poll(30*time.Second, 100*time.Millisecond, "the drop", func() bool {
		return len(w.logLines("job dropped: its transaction never committed")) > 0
	})
	var st struct {
		DroppedJobs int `json:"droppedJobs"`
	}
	e.enqueueJSON(&st, "stats", "-queue", q)
	if st.DroppedJobs != 1 {
		t.Errorf("stats counts %d dropped jobs, want 1", st.DroppedJobs)
	}
	if out := e.enqueue("poison", "list", "-queue", q); !strings.Contains(out, "no poisoned messages") {
		t.Errorf("poison list shows the drop:\n%s", out)
	}
	type checkOut struct {
		Rows []struct{ OpID, Status, Kind, Queue string }
	}
	statuses := func(c checkOut) []string {
		var s []string
		for _, r := range c.Rows {
			s = append(s, r.OpID+":"+r.Status)
		}
		return s
	}
	var during checkOut
	e.enqueueJSON(&during, "outbox", "check", "-table", src)
	if got := statuses(during); !slices.Equal(got, []string{"op-committed:waiting", "op-lost:fence"}) ||
		during.Rows[0].Kind != "archive" || during.Rows[0].Queue != q {
		t.Errorf("outbox check during the hold = %+v", during)
	}

	if code := w.wait(e.ctx, 60*time.Second); code != 0 {
		t.Fatalf("%s exited with %d\n%s", w, code, w.stderr.String())
	}
	var after checkOut
	e.enqueueJSON(&after, "outbox", "check", "-table", src, "-pk", "Sales")
	if got := statuses(after); !slices.Equal(got, []string{"op-committed:waiting"}) {
		t.Errorf("outbox check after the hold = %v, want the committed row alone", got)
	}
	var purged struct {
		Drops int `json:"drops"`
	}
	e.enqueueJSON(&purged, "poison", "purge", "-queue", q, "-yes")
	e.enqueueJSON(&st, "stats", "-queue", q)
	if purged.Drops != 1 || st.DroppedJobs != 0 {
		t.Errorf("poison purge removed %d drop records, stats then counts %d; want 1 and 0", purged.Drops, st.DroppedJobs)
	}
}
