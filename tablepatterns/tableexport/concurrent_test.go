package tableexport_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

type who struct{}

// TestExportTwoFirstDeliveriesShareOneFolder (regression): delivery A stalls in its first
// query (before its first checkpoint save) past its lease; delivery B
// starts fresh a minute later, so it picks another folder, and stalls in
// its own first query. A goes on: saves its checkpoint (minute 10:30),
// commits part 1 in folder 1030, and its AfterPart (the archive's delete,
// If-Match the line's ETag) removes those rows; then A's context ends (the
// lost lease is noticed). B goes on: its unconditional first save replaces
// A's checkpoint with minute 10:31, it exports the rows left into 1031,
// deletes them and writes the manifest. Rows A deleted were only in
// 1030/000001.jsonl, which no manifest listed. Now the first save is an
// insert: B's loses, B takes A's checkpoint (minute 10:30, part 1
// registered) and finishes in A's folder with a manifest listing part 1.
func TestExportTwoFirstDeliveriesShareOneFolder(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 20, 1, 100)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]bool{}
	first := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if seen[key] {
			return false
		}
		seen[key] = true
		return true
	}
	heldA, releaseA := make(chan struct{}), make(chan struct{})
	heldB, releaseB := make(chan struct{}), make(chan struct{})
	aStalled := make(chan struct{})
	store := instrument.Wrap(b.raw, instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
		switch d, _ := ctx.Value(who{}).(string); {
		case d == "A" && c.Op == instrument.OpQuery && c.Name == "Logs" && first("A-query"):
			close(heldA)
			<-releaseA
		case d == "B" && c.Op == instrument.OpQuery && c.Name == "Logs" && first("B-query"):
			close(heldB)
			<-releaseB
		case d == "A" && c.Op == instrument.OpProperties && strings.HasSuffix(c.Blob, "/000002.jsonl"):
			close(aStalled)
			<-ctx.Done() // A's lease is lost: its context ends
			return ctx.Err()
		}
		return nil
	}})
	blobs := store.Container("exports")
	options := func(now time.Time) tableexport.Options {
		o := b.options("op-m")
		o.Blobs = blobs
		o.Checkpoints.Tables = store.Tables()
		o.MaxPartBytes = 1024
		o.Clock = clock.NewFake(now)
		o.AfterPart = func(ctx context.Context, p tableexport.Part) error { // the archive's deletePart, in short
			return tableexport.ReadPart(ctx, blobs, p.Name, func(e storeadapter.Entity) error {
				err := store.Tables().DeleteEntity(ctx, "Logs", e.PartitionKey, e.RowKey, e.ETag)
				if errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPreconditionFailed) {
					return nil
				}
				return err
			})
		}
		return o
	}
	actx, cancelA := context.WithCancel(context.WithValue(ctx, who{}, "A"))
	aDone := make(chan error, 1)
	go func() {
		_, err := tableexport.Export(actx, store.Tables(), storeadapter.Range{Table: "Logs"}, options(time.Date(2026, 11, 21, 10, 30, 42, 0, time.UTC)))
		aDone <- err
	}()
	waitFor(t, heldA)
	type result struct {
		m   tableexport.Manifest
		err error
	}
	bDone := make(chan result, 1)
	go func() {
		m, err := tableexport.Export(context.WithValue(ctx, who{}, "B"), store.Tables(), storeadapter.Range{Table: "Logs"}, options(time.Date(2026, 11, 21, 10, 31, 15, 0, time.UTC)))
		bDone <- result{m, err}
	}()
	waitFor(t, heldB)
	close(releaseA)
	waitFor(t, aStalled)
	cancelA()
	select {
	case err := <-aDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("A: %v, want its context's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for delivery A")
	}
	close(releaseB)
	var r result
	select {
	case r = <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for delivery B")
	}
	if r.err != nil {
		t.Fatalf("B: %v", r.err)
	}
	listed := map[string]bool{}
	for _, mp := range r.m.Parts {
		if err := tableexport.ReadPart(ctx, b.raw.Container("exports"), mp.Name, func(e storeadapter.Entity) error {
			listed[e.RowKey] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	inSource := map[string]bool{}
	for _, e := range b.source(t) {
		inSource[e.RowKey] = true
	}
	var lost []string
	for i := range 20 {
		rk := "r" + strings.Repeat("0", 5-len(itoa(i))) + itoa(i)
		if !inSource[rk] && !listed[rk] {
			lost = append(lost, rk)
		}
	}
	for name := range b.blobs(t) {
		if !strings.HasPrefix(name, "logs/Logs/2026/11/21/1030/") {
			t.Errorf("blob %s: outside the folder of the first delivery's minute (1030)", name)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("rows %v were deleted from the source, but no part of manifest %s holds them", lost, r.m.Name)
	}
	if len(listed) != 20 || len(inSource) != 0 {
		t.Errorf("manifest lists %d rows and %d stay in the source, want 20 and 0", len(listed), len(inSource))
	}
	rep, err := tableexport.Verify(ctx, b.raw.Container("exports"), r.m.Name)
	if err != nil || !rep.OK() {
		t.Errorf("Verify(%s): %v %q", r.m.Name, err, rep.Problems)
	}
}

// waitFor waits for ch to close, at most 10 seconds.
func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a delivery to reach its stall point")
	}
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// TestExportTwoDeliveriesInterleaveOnOneChain: A registers part 1 and
// stalls; B resumes from A's checkpoint, registers part 2 and stalls; A
// goes on: its part 2 is B's (same prev and pass: adopted), its save loses
// to B's, it reloads and carries on from B's checkpoint to the end; then B
// goes on and finds the export done. One chain, one manifest listing every
// row once, every deleted row in it, no stray part.
func TestExportTwoDeliveriesInterleaveOnOneChain(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 20, 1, 100)
	ctx := context.Background()
	heldA, releaseA := make(chan struct{}), make(chan struct{})
	heldB, releaseB := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	store := instrument.Wrap(b.raw, instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
		d, _ := ctx.Value(who{}).(string)
		switch {
		case d == "A" && c.Op == instrument.OpProperties && strings.HasSuffix(c.Blob, "/000002.jsonl"):
			onceA.Do(func() { close(heldA); <-releaseA })
		case d == "B" && c.Op == instrument.OpProperties && strings.HasSuffix(c.Blob, "/000003.jsonl"):
			onceB.Do(func() { close(heldB); <-releaseB })
		}
		return nil
	}})
	blobs := store.Container("exports")
	o := b.options("op-i")
	o.Blobs = blobs
	o.Checkpoints.Tables = store.Tables()
	o.MaxPartBytes = 1024
	o.AfterPart = func(ctx context.Context, p tableexport.Part) error {
		return tableexport.ReadPart(ctx, blobs, p.Name, func(e storeadapter.Entity) error {
			err := store.Tables().DeleteEntity(ctx, "Logs", e.PartitionKey, e.RowKey, e.ETag)
			if errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrPreconditionFailed) {
				return nil
			}
			return err
		})
	}
	type result struct {
		m   tableexport.Manifest
		err error
	}
	run := func(d string, out chan<- result) {
		m, err := tableexport.Export(context.WithValue(ctx, who{}, d), store.Tables(), storeadapter.Range{Table: "Logs"}, o)
		out <- result{m, err}
	}
	aDone, bDone := make(chan result, 1), make(chan result, 1)
	go run("A", aDone)
	waitFor(t, heldA)
	go run("B", bDone)
	waitFor(t, heldB)
	close(releaseA)
	recv := func(ch <-chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for a delivery")
		}
		return result{}
	}
	ra := recv(aDone)
	close(releaseB)
	rb := recv(bDone)
	if ra.m.Name != rb.m.Name || len(ra.m.Parts) != len(rb.m.Parts) {
		t.Fatalf("A's manifest %s (%d parts), B's %s (%d parts): want the same", ra.m.Name, len(ra.m.Parts), rb.m.Name, len(rb.m.Parts))
	}
	seen := map[string]int{}
	for _, e := range exported(t, b.raw.Container("exports"), ra.m) {
		seen[e.RowKey]++
	}
	if len(seen) != 20 || ra.m.Entities != 20 {
		t.Errorf("manifest holds %d distinct rows in %d entities, want 20 once each", len(seen), ra.m.Entities)
	}
	if left := b.source(t); len(left) != 0 {
		t.Errorf("%d rows left in the source", len(left))
	}
	rep, err := tableexport.Verify(ctx, b.raw.Container("exports"), ra.m.Name)
	if err != nil || !rep.OK() {
		t.Errorf("Verify: %v %q", err, rep.Problems)
	}
}
