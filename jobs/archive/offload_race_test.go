package archive_test

import (
	"context"
	"encoding/json"
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

// TestArchiveRacesOffload: found by review. The archive reads the source
// (Bio offloaded to blob B1); before it carries B1, the application writes
// Bio inline and the offload it enqueued moves it to B2 and deletes B1.
// The archive, which ran after the application's last write, must move
// the new version (it failed permanently: B1 gone), a single entity's
// move and a range's alike.
func TestArchiveRacesOffload(t *testing.T) {
	for _, args := range []string{
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"1"}`,
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`,
	} {
		t.Run(args, func(t *testing.T) { archiveRacesOffload(t, args) })
	}
}

func archiveRacesOffload(t *testing.T, args string) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))
	local := localstore.New(localstore.Options{Clock: clk})
	layout := largeentity.Layout{{Table: "Employees", Container: "blobs"}, {Table: "EmployeesArchive", Container: "blobs"}}
	var hook func(c instrument.Call)
	store := instrument.Wrap(local, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if h := hook; h != nil {
			hook = nil
			h(c)
		}
		return nil
	}})
	for _, n := range []string{"Employees", "EmployeesArchive", "Checkpoints"} {
		if err := local.Tables().CreateTable(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := local.Container("blobs").Create(ctx); err != nil {
		t.Fatal(err)
	}
	bs, err := blobsync.New(kit.Deps{Store: local, Layout: layout}, blobsync.Config{CheckpointTable: "Checkpoints", Tables: layout})
	if err != nil {
		t.Fatal(err)
	}
	offload := func() {
		a, err := jobs.ParseArgs[blobsync.Args](json.RawMessage(`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Run(ctx, "off", a); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := strings.Repeat("one ", 1000), strings.Repeat("two ", 1000)
	if _, err := local.Tables().InsertEntity(ctx, "Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "1",
		Properties: map[string]any{"Name": "Brown", "Bio": v1}}); err != nil {
		t.Fatal(err)
	}
	offload()
	arch, err := archive.New(kit.Deps{Store: store, Layout: layout}, archive.Config{CheckpointTable: "Checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	// Armed until the archive's first blob read, after it read the source:
	// then the application writes Bio inline (keeping its reference, as a
	// merge does) and its offload runs.
	var armed func(c instrument.Call)
	armed = func(c instrument.Call) {
		if c.Op != instrument.OpOpen {
			hook = armed
			return
		}
		if _, err := local.Tables().UpdateEntity(ctx, "Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "1",
			Properties: map[string]any{"Bio": v2}}, storeadapter.Merge, storeadapter.ETagAny); err != nil {
			t.Fatal(err)
		}
		offload()
	}
	hook = armed
	parsed, err := jobs.ParseArgs[archive.Args](json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	err = arch.Work(ctx, &jobs.Job[archive.Args]{Envelope: jobs.Envelope{V: 1, ID: "arch", Kind: archive.Kind}, Args: parsed})
	if err != nil {
		t.Errorf("archive after the application's last write: %v (permanent %v); want the move of the new version", err, jobs.IsPermanent(err))
	}
	got, gerr := largeentity.Get(ctx, local, "EmployeesArchive", "Sales", "1")
	if gerr != nil || got.Properties["Bio"] != v2 {
		t.Errorf("archived copy: err %v, Bio %.10q; want v2", gerr, got.Properties["Bio"])
	}
}
