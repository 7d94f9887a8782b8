package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// raceFixture is Employees with row 1 (Bio offloaded by blobsync) and
// row 2 (no blob), an archive worker whose calls a hook may interleave,
// and the application's writes the tests race it with.
type raceFixture struct {
	t     *testing.T
	ctx   context.Context
	local *localstore.Store
	arch  *archive.Worker
	bs    *blobsync.Worker
	hook  func(c instrument.Call)
	v1    string
}

func newRaceFixture(t *testing.T) *raceFixture {
	f := &raceFixture{t: t, ctx: context.Background(), v1: strings.Repeat("one ", 1000)}
	f.local = localstore.New(localstore.Options{Clock: clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))})
	layout := largeentity.Layout{{Table: "Employees", Container: "blobs"}, {Table: "EmployeesArchive", Container: "blobs"}}
	store := instrument.Wrap(f.local, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if h := f.hook; h != nil {
			f.hook = nil
			h(c)
		}
		return nil
	}})
	for _, n := range []string{"Employees", "EmployeesArchive", "Checkpoints"} {
		if err := f.local.Tables().CreateTable(f.ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.local.Container("blobs").Create(f.ctx); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.bs, err = blobsync.New(kit.Deps{Store: f.local, Layout: layout}, blobsync.Config{CheckpointTable: "Checkpoints", Tables: layout}); err != nil {
		t.Fatal(err)
	}
	if f.arch, err = archive.New(kit.Deps{Store: store, Layout: layout}, archive.Config{CheckpointTable: "Checkpoints"}); err != nil {
		t.Fatal(err)
	}
	for rk, props := range map[string]map[string]any{"1": {"Name": "Brown", "Bio": f.v1}, "2": {"Name": "Lee"}} {
		if _, err := f.local.Tables().InsertEntity(f.ctx, "Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: rk, Properties: props}); err != nil {
			t.Fatal(err)
		}
	}
	f.offload()
	return f
}

// offload runs blobsync's offload of row 1's Bio.
func (f *raceFixture) offload() {
	a, err := jobs.ParseArgs[blobsync.Args](json.RawMessage(`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio"}`))
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.bs.Run(f.ctx, "off", a); err != nil {
		f.t.Fatal(err)
	}
}

// deleteBlob deletes row 1's blob; with row, the row too.
func (f *raceFixture) deleteBlob(row bool) {
	e, err := f.local.Tables().GetEntity(f.ctx, "Employees", "Sales", "1")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range largeentity.Refs(e) {
		s, _ := e.Properties[largeentity.RefPrefix+p].(string)
		ref, err := largeentity.ParseRef(s)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := f.local.Container(ref.Container).Delete(f.ctx, ref.Name, storeadapter.ETagAny); err != nil {
			f.t.Fatal(err)
		}
	}
	if row {
		if err := f.local.Tables().DeleteEntity(f.ctx, "Employees", "Sales", "1", storeadapter.ETagAny); err != nil {
			f.t.Fatal(err)
		}
	}
}

// atFirstBlobRead runs do at the archive's first blob read, after it read
// the source.
func (f *raceFixture) atFirstBlobRead(do func()) {
	var armed func(c instrument.Call)
	armed = func(c instrument.Call) {
		if c.Op != instrument.OpOpen {
			f.hook = armed
			return
		}
		do()
	}
	f.hook = armed
}

// work runs one delivery of an archive job.
func (f *raceFixture) work(args string) error {
	parsed, err := jobs.ParseArgs[archive.Args](json.RawMessage(args))
	if err != nil {
		f.t.Fatal(err)
	}
	return f.arch.Work(f.ctx, &jobs.Job[archive.Args]{Envelope: jobs.Envelope{V: 1, ID: "arch", Kind: archive.Kind}, Args: parsed})
}

// row reads a row of the archive table with its blobs restored (nil:
// none).
func (f *raceFixture) row(rk string) *storeadapter.Entity {
	e, err := largeentity.Get(f.ctx, f.local, "EmployeesArchive", "Sales", rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("archived %s: %v", rk, err)
	}
	return &e
}

const (
	moveOne    = `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"1"}`
	moveRange  = `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`
	blobsRange = `{"table":"Employees","toBlob":"arch/x","pk":"Sales","rkFrom":""}`
)

// TestArchiveRacesOffload: found by review. The archive reads the source
// (Bio offloaded to blob B1); before it carries B1, the application writes
// Bio inline and the offload it enqueued moves it to B2 and deletes B1.
// The archive, which ran after the application's last write, must move
// the new version (it failed permanently: B1 gone), a single entity's
// move and a range's alike; a range to blobs fails the delivery
// transiently, and the redelivery moves it.
func TestArchiveRacesOffload(t *testing.T) {
	for _, args := range []string{moveOne, moveRange, blobsRange} {
		t.Run(args, func(t *testing.T) {
			f := newRaceFixture(t)
			v2 := strings.Repeat("two ", 1000)
			f.atFirstBlobRead(func() {
				// A merge keeps the reference beside the inline value.
				if _, err := f.local.Tables().UpdateEntity(f.ctx, "Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "1",
					Properties: map[string]any{"Bio": v2}}, storeadapter.Merge, storeadapter.ETagAny); err != nil {
					t.Fatal(err)
				}
				f.offload()
			})
			err := f.work(args)
			if args == blobsRange {
				if err == nil || jobs.IsPermanent(err) {
					t.Fatalf("first delivery: %v; want a transient error (the row changed while its page was exported)", err)
				}
				err = f.work(args)
			}
			if err != nil {
				t.Fatalf("archive after the application's last write: %v (permanent %v); want the move of the new version", err, jobs.IsPermanent(err))
			}
			if args != blobsRange {
				if got := f.row("1"); got == nil || got.Properties["Bio"] != v2 {
					t.Errorf("archived copy: %v; want Bio v2", got)
				}
			}
			if _, err := f.local.Tables().GetEntity(f.ctx, "Employees", "Sales", "1"); !errors.Is(err, storeadapter.ErrNotFound) {
				t.Errorf("the source is still there: %v", err)
			}
		})
	}
}

// TestArchiveRangeRowDeletedWithItsBlob: found by review. The application
// deletes a row with an offloaded blob, and the blob, while a range
// moves it: the row is gone, and the range moves the others.
func TestArchiveRangeRowDeletedWithItsBlob(t *testing.T) {
	f := newRaceFixture(t)
	f.atFirstBlobRead(func() { f.deleteBlob(true) })
	if err := f.work(moveRange); err != nil {
		t.Fatalf("range: %v (permanent %v); want row 2 moved, row 1 gone", err, jobs.IsPermanent(err))
	}
	if f.row("1") != nil || f.row("2") == nil {
		t.Errorf("archived: row 1 %v, row 2 %v; want only row 2", f.row("1"), f.row("2"))
	}
}

// TestArchiveLostBlobPermanent: a blob lost from a row nobody changed
// stays a permanent error whatever the target (the move would lose the
// property).
func TestArchiveLostBlobPermanent(t *testing.T) {
	for _, args := range []string{moveOne, moveRange, blobsRange, `{"table":"Employees","toBlob":"arch/x","pk":"Sales","rk":"1"}`} {
		t.Run(args, func(t *testing.T) {
			f := newRaceFixture(t)
			f.deleteBlob(false)
			if err := f.work(args); !jobs.IsPermanent(err) || !strings.Contains(err.Error(), "cannot be moved") {
				t.Errorf("archive of a row whose blob is lost: %v; want a permanent error saying it cannot be moved", err)
			}
		})
	}
}
