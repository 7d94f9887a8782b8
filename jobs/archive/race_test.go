package archive_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

type deliveryKey struct{}

// TestRangeToBlobStaleDeliveryDeletesOnlyListedRows (regression): two deliveries of one
// archive range (A lost its lease while stalled; B took over). A is held
// at its first part Properties call, after saving the checkpoint. B runs
// the whole range: part 1, deletes, done, manifest. The application then
// inserts a row in the range. A resumes: adopts part 1, finds the new row,
// commits part 2, deletes the row from the source. The only copy of the
// row was in part 2, which the (immutable) manifest does not list. Now A's
// registration of its part (If-Match its checkpoint's ETag) loses, A
// reloads the checkpoint, finds it done and stops without deleting: the
// row stays in the source and A fails transient naming it (the next
// delivery exports it in a new generation).
func TestRangeToBlobStaleDeliveryDeletesOnlyListedRows(t *testing.T) {
	ctx := context.Background()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	clk := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))
	store := instrument.Wrap(localstore.New(localstore.Options{Clock: clk}), instrument.Options{
		Fault: func(ctx context.Context, c instrument.Call) error {
			if ctx.Value(deliveryKey{}) == "A" && c.Op == instrument.OpProperties && strings.HasSuffix(c.Blob, "/000001.jsonl") {
				once.Do(func() { close(held); <-release })
			}
			return nil
		}})
	if err := store.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := store.Tables().InsertEntity(ctx, "Employees", versioned("P", fmt.Sprintf("%05d", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := archive.New(kit.Plain(store), archive.Config{CheckpointTable: "Checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"table":"Employees","toBlob":"archive/2026","pk":"P","rkFrom":""}`
	parsed, err := jobs.ParseArgs[archive.Args]([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	job := func() *jobs.Job[archive.Args] {
		return &jobs.Job[archive.Args]{Envelope: jobs.Envelope{V: 1, ID: "op-race", Kind: archive.Kind}, Args: parsed}
	}
	aDone := make(chan error, 1)
	go func() { aDone <- w.Work(context.WithValue(ctx, deliveryKey{}, "A"), job()) }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for delivery A to reach its stall point")
	}

	bctx, res := jobs.WithResult(context.WithValue(ctx, deliveryKey{}, "B"))
	if err := w.Work(bctx, job()); err != nil {
		t.Fatalf("delivery B: %v", err)
	}
	t.Logf("B: %s", res.Text())
	// The application adds a row to the range while A is still running.
	if _, err := store.Tables().InsertEntity(ctx, "Employees", versioned("P", "00010", 1)); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-aDone:
		if err == nil || !strings.Contains(err.Error(), `"00010"`) {
			t.Errorf("delivery A: %v, want a transient failure naming the row it left, 00010", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for delivery A")
	}

	c := store.Container("archive")
	page, err := c.List(ctx, "2026/Employees/", "")
	if err != nil {
		t.Fatal(err)
	}
	var manifest string
	for _, p := range page.Blobs {
		if strings.Contains(p.Name, "/manifest-") {
			manifest = p.Name
		}
	}
	m, err := tableexport.ReadManifest(ctx, c, manifest)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, mp := range m.Parts {
		if err := tableexport.ReadPart(ctx, c, mp.Name, func(e storeadapter.Entity) error {
			listed[e.RowKey] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, gerr := store.Tables().GetEntity(ctx, "Employees", "P", "00010")
	inSource := gerr == nil
	if !inSource {
		t.Errorf("row 00010, inserted after the range was done, was deleted by the stale delivery (%v)", gerr)
	}
	if !inSource && !listed["00010"] {
		rep, _ := tableexport.Verify(ctx, c, manifest)
		t.Fatalf("row 00010 was deleted from the source but no part listed in manifest %s holds it (%d parts listed); Verify: %q",
			manifest, len(m.Parts), rep.Problems)
	}
}
