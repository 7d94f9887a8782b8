package blobsync_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

const (
	table     = "Employees"
	container = "blobs"
	grace     = time.Hour
)

// bundle is a blobsync worker on localstore through the instrument, with
// a fake clock shared by the store (blob ages) and the worker.
type bundle struct {
	local *localstore.Store  // the store itself: what the application uses
	store storeadapter.Store // the store through the instrument: what the worker uses
	clock *clock.Fake
	calls *instrument.Counts
	w     *blobsync.Worker

	mu sync.Mutex
	// n counts the worker's storage calls since the last reset.
	n int
	// fault, when set, sees every call of the worker (with its number
	// from 1 since the last reset) first and may fail it.
	fault func(n int, c instrument.Call) error
}

func newBundle(t *testing.T, cfg blobsync.Config) *bundle {
	t.Helper()
	b := &bundle{clock: clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)), calls: &instrument.Counts{}}
	b.local = localstore.New(localstore.Options{Clock: b.clock})
	b.store = instrument.Wrap(b.local, instrument.Options{
		Observers: []instrument.Observer{b.calls},
		Fault: func(_ context.Context, c instrument.Call) error {
			b.mu.Lock()
			b.n++
			n, fault := b.n, b.fault
			b.mu.Unlock()
			if fault != nil {
				return fault(n, c)
			}
			return nil
		}})
	ctx := context.Background()
	if err := b.local.Tables().CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	if err := b.local.Container(container).Create(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.CheckpointTable = "Checkpoints"
	cfg.Grace = jobs.Duration(grace)
	w, err := blobsync.New(kit.Plain(b.store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	return b
}

// setFault installs a fault hook and resets the call count.
func (b *bundle) setFault(f func(n int, c instrument.Call) error) {
	b.mu.Lock()
	b.n, b.fault = 0, f
	b.mu.Unlock()
}

// callsSince returns the calls counted since the last setFault.
func (b *bundle) callsSince() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// run parses args as the worker's registry would and runs the job.
func (b *bundle) run(t *testing.T, id, args string) (blobsync.Result, error) {
	t.Helper()
	a, err := jobs.ParseArgs[blobsync.Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	return b.w.Run(context.Background(), id, a)
}

// mustRun runs a job that must succeed.
func (b *bundle) mustRun(t *testing.T, id, args string) blobsync.Result {
	t.Helper()
	res, err := b.run(t, id, args)
	if err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	return res
}

func (b *bundle) insert(t *testing.T, e storeadapter.Entity) {
	t.Helper()
	if _, err := b.local.Tables().InsertEntity(context.Background(), table, e); err != nil {
		t.Fatal(err)
	}
}

// merge writes props into an entity as the application would, whatever
// its ETag.
func (b *bundle) merge(t *testing.T, pk, rk string, props map[string]any) {
	t.Helper()
	e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}
	if _, err := b.local.Tables().UpdateEntity(context.Background(), table, e, storeadapter.Merge, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) entity(t *testing.T, pk, rk string) storeadapter.Entity {
	t.Helper()
	e, err := b.local.Tables().GetEntity(context.Background(), table, pk, rk)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// blobs lists every blob of the container.
func (b *bundle) blobs(t *testing.T) []storeadapter.BlobProps {
	t.Helper()
	var out []storeadapter.BlobProps
	marker := ""
	for {
		p, err := b.local.Container(container).List(context.Background(), "", marker)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Blobs...)
		if marker = p.Next; marker == "" {
			return out
		}
	}
}

// bio is a long string with non-ASCII and non-BMP characters, near the
// 32,768-character limit of an Edm.String.
func bio(tag string) string { return tag + strings.Repeat(" Bio é😀", 3900) }

// photo is a binary near the 64 KiB limit of an Edm.Binary.
func photo(seed byte) []byte {
	p := make([]byte, 60000)
	for i := range p {
		p[i] = byte(i*7) + seed
	}
	return p
}

// employee is an entity with a large string, a large binary and small
// properties of other types.
func employee(pk, rk string) storeadapter.Entity {
	return storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{
		"Name": "Jones, O'Brien", "Age": int32(40), "Salary": int64(1<<62 + 1),
		"Hired": time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC), "Bio": bio("v1"), "Photo": photo(1),
	}}
}

// assertProps checks that got holds exactly want's properties, every
// type and value intact.
func assertProps(t *testing.T, what string, want, got map[string]any) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok || !storeadapter.Equal(w, g) {
			t.Errorf("%s: property %s: got %.60s, want %.60s", what, name, storeadapter.Format(g), storeadapter.Format(w))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: unexpected property %s", what, name)
		}
	}
}

// assertGet checks that Get restores exactly want.
func (b *bundle) assertGet(t *testing.T, pk, rk string, want map[string]any) {
	t.Helper()
	got, err := largeentity.Get(context.Background(), b.local, table, pk, rk)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", pk, rk, err)
	}
	assertProps(t, "Get "+pk+"/"+rk, want, got.Properties)
}

// assertNoOrphans checks that every managed blob of the container is
// named by its entity's reference.
func (b *bundle) assertNoOrphans(t *testing.T) {
	t.Helper()
	for _, p := range b.blobs(t) {
		m, ok := largeentity.ParseBlobName("", p.Name)
		if !ok {
			continue // not managed (an attached blob of the application)
		}
		e, err := b.local.Tables().GetEntity(context.Background(), table, m.PK, m.RK)
		if errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("orphan %s: its entity is gone", p.Name)
			continue
		}
		ref, ok, err := largeentity.RefOf(e, m.Property)
		if err != nil || !ok || ref.Name != p.Name {
			t.Errorf("orphan %s: the entity's reference is %+v (ok %v, err %v)", p.Name, ref, ok, err)
		}
	}
}

// errCrash is the injected failure.
var errCrash = fmt.Errorf("injected crash: %w", storeadapter.ErrUnavailable)
