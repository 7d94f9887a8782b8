package blobsync_test

// Regression tests of a review of the blobsync kind: each names the bug it
// guards against.

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// wantPermanent fails unless err is permanent and names every want.
func wantPermanent(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !jobs.IsPermanent(err) {
		t.Fatalf("%s: %v, want a permanent error", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v, want it to name %q", what, err, w)
		}
	}
}

// An entity copied to a new key keeps the reference to the original's
// blob; offloading the copy's new inline value must not delete the blob
// the original still references: it is not the copy's managed blob.
func TestOffloadLeavesPreviousBlobOfAnotherEntity(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	b.insert(t, employee("Sales", "0001"))
	b.mustRun(t, "off1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Bio","container":"blobs"}`)
	e := b.entity(t, "Sales", "0001")
	e.RowKey = "0002" // the application copies the entity to a new key
	b.insert(t, e)
	b.merge(t, "Sales", "0002", map[string]any{"Bio": "new bio"})
	res := b.mustRun(t, "off2", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0002","property":"Bio","container":"blobs"}`)
	if res.PreviousDeleted != 0 || res.PreviousKept != 1 {
		t.Errorf("offload of the copy: %+v, want the original's blob kept, not deleted", res)
	}
	want := employee("Sales", "0001").Properties
	b.assertGet(t, "Sales", "0001", want)
	want["Bio"] = "new bio"
	b.assertGet(t, "Sales", "0002", want)

	// Its own previous blob is still deleted.
	b.merge(t, "Sales", "0002", map[string]any{"Bio": "newer bio"})
	res = b.mustRun(t, "off3", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0002","property":"Bio","container":"blobs"}`)
	if res.PreviousDeleted != 1 {
		t.Errorf("second offload of the copy: %+v, want its own previous blob deleted", res)
	}
	b.assertNoOrphans(t)
}

// The rule of docs/blobsync.md: a reference belongs to the entity its blob's name
// holds. A copy in another table does not own it (a reconcile of the
// source deletes it once the source entity is gone); restoring first and
// offloading again at the target does.
func TestCopiedReferenceBelongsToTheSourceEntity(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	tables := b.local.Tables()
	if err := tables.CreateTable(ctx, "Copies"); err != nil {
		t.Fatal(err)
	}
	b.insert(t, employee("Sales", "0001"))
	b.insert(t, employee("Sales", "0002"))
	for _, rk := range []string{"0001", "0002"} {
		b.mustRun(t, "off"+rk, `{"mode":"offload","table":"Employees","pk":"Sales","rk":"`+rk+`","property":"Bio","container":"blobs"}`)
	}
	// 0001 copied as it is (references and all); 0002 restored first,
	// then offloaded again at the target.
	if _, err := tables.InsertEntity(ctx, "Copies", b.entity(t, "Sales", "0001")); err != nil {
		t.Fatal(err)
	}
	restored, err := largeentity.Get(ctx, b.local, table, "Sales", "0002")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tables.InsertEntity(ctx, "Copies", restored); err != nil {
		t.Fatal(err)
	}
	b.mustRun(t, "offcopy", `{"mode":"offload","table":"Copies","pk":"Sales","rk":"0002","property":"Bio","container":"blobs"}`)
	for _, rk := range []string{"0001", "0002"} {
		if err := tables.DeleteEntity(ctx, table, "Sales", rk, storeadapter.ETagAny); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Advance(2 * grace)
	res := b.mustRun(t, "rec", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Orphans != 2 {
		t.Errorf("reconcile: %s, want both source blobs collected", res)
	}
	if _, err := largeentity.Get(ctx, b.local, "Copies", "Sales", "0001"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Get of the copy made with its references: %v, want the blob gone (ErrNotFound), as docs/blobsync.md says", err)
	}
	got, err := largeentity.Get(ctx, b.local, "Copies", "Sales", "0002")
	if err != nil || got.Properties["Bio"] != bio("v1") {
		t.Errorf("Get of the copy restored and offloaded again: %v, want its Bio", err)
	}
}

// Attach must not link a blob of the managed layout: blobsync deletes it
// when its own entity's property moves on.
func TestAttachRefusesManagedName(t *testing.T) {
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{{Table: table, Container: "main", Prefix: "px"}}})
	ctx := context.Background()
	if err := b.local.Container("main").Create(ctx); err != nil {
		t.Fatal(err)
	}
	b.insert(t, employee("Sales", "0001"))
	for _, c := range []string{container, "main"} {
		b.mustRun(t, "off-"+c, `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Bio","container":"`+c+`"}`)
		ref, _, _ := largeentity.RefOf(b.entity(t, "Sales", "0001"), "Bio")
		_, err := b.run(t, "att-"+c, `{"mode":"attach","table":"Employees","pk":"Sales","rk":"0001","property":"BioCopy","container":"`+c+`","blob":"`+ref.Name+`"}`)
		wantPermanent(t, "attach of "+ref.Name, err, "args.blob", ref.Name, "managed")
		if _, has, _ := largeentity.RefOf(b.entity(t, "Sales", "0001"), "BioCopy"); has {
			t.Errorf("the refused attach wrote a reference")
		}
		b.merge(t, "Sales", "0001", map[string]any{"Bio": bio("v1")})
	}
}

// Attach onto an inline property that is neither String nor Binary would
// drop its value and restore it as Binary.
func TestAttachRefusesTypedProperty(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	if _, err := b.local.Container(container).Put(ctx, "photos/1.jpg", []byte("jpeg"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"Age": int32(40)}})
	_, err := b.run(t, "att", `{"mode":"attach","table":"Employees","pk":"p","rk":"r","property":"Age","container":"blobs","blob":"photos/1.jpg"}`)
	wantPermanent(t, "attach over an Int32", err, "args.property", "Age is Edm.Int32", "Edm.String or Edm.Binary")
	assertProps(t, "entity", map[string]any{"Age": int32(40)}, b.entity(t, "p", "r").Properties)
}

// Keys whose escaped form makes a managed name longer than Azure allows
// are refused when the args are validated (naming the key), and again by
// the worker with the config's prefix, permanently.
func TestOffloadKeysMustFitManagedName(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 UTF-8 bytes, 1,800 escaped characters
	for _, c := range []struct {
		a    blobsync.Args
		want string
	}{
		{blobsync.Args{Mode: "offload", Table: table, PK: long, RK: "r", Property: "Bio", Container: container}, "args.pk"},
		{blobsync.Args{Mode: "offload", Table: table, PK: "p", RK: long, Property: "Bio", Container: container}, "args.rk"},
		// Without args.property the longest property name counts.
		{blobsync.Args{Mode: "offload", Table: table, PK: strings.Repeat("é", 120), RK: "r"}, "args.pk"},
	} {
		err := c.a.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want+":") || !strings.Contains(err.Error(), "blob name") {
			t.Errorf("Validate(pk %d, rk %d chars) = %v, want an error naming %s and the blob-name rule", len(c.a.PK), len(c.a.RK), err, c.want)
		}
	}
	if err := (blobsync.Args{Mode: "offload", Table: table, PK: strings.Repeat("é", 120), RK: "r", Property: "Bio"}).Validate(); err != nil {
		t.Errorf("a key of 720 escaped characters with a short property fits 1,024: %v", err)
	}

	// Fits without a prefix, not under the config's 500-character one.
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{{Table: table, Container: container, Prefix: strings.Repeat("x", 500)}}})
	pk := strings.Repeat("a", 500)
	b.insert(t, storeadapter.Entity{PartitionKey: pk, RowKey: "r", Properties: map[string]any{"Bio": "x"}})
	a := blobsync.Args{Mode: "offload", Table: table, PK: pk, RK: "r", Property: "Bio"}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	b.setFault(nil)
	_, err := b.w.Run(context.Background(), "op", a)
	wantPermanent(t, "offload under a long prefix", err, "args.pk", "prefix")
	if n := b.callsSince(); n != 0 {
		t.Errorf("the refused offload made %d storage calls, want none", n)
	}
}

// A short declared property whose reference is larger than its value
// must not push an entity near 1 MiB over the limit: it is skipped and
// reported (unless another offloaded property makes room); named by
// args.property it is a permanent error naming it.
func TestOffloadSkipsReferenceThatWouldPassEntityLimit(t *testing.T) {
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{{Table: table, Container: container, Properties: []string{"Note", "Big"}}}})
	b.insert(t, nearMiB("r", false))
	b.insert(t, nearMiB("r2", true))

	_, err := b.run(t, "named", `{"mode":"offload","table":"Employees","pk":"p","rk":"r","property":"Note","container":"blobs"}`)
	wantPermanent(t, "offload of Note named", err, "args.property", "Note", "too large")
	if n := len(b.blobs(t)); n != 0 {
		t.Errorf("the refused offload left %d blobs", n)
	}

	res, err := b.run(t, "declared", `{"mode":"offload","table":"Employees","pk":"p","rk":"r"}`)
	if err != nil {
		t.Fatalf("offload of the declared properties: %v", err)
	}
	if len(res.Properties) != 0 || len(res.Skipped) != 1 || !strings.HasPrefix(res.Skipped[0], "Note (its reference") ||
		!strings.HasPrefix(res.String(), "nothing offloaded; skipped Note") {
		t.Errorf("offload: %+v (%s), want Note skipped and reported", res, res)
	}
	if got := b.entity(t, "p", "r"); got.Properties["Note"] != "x" {
		t.Errorf("Note = %v, want it left inline", got.Properties["Note"])
	}
	if n := len(b.blobs(t)); n != 0 {
		t.Errorf("%d blobs, want none put for the skipped Note", n)
	}

	// Big's offload makes room for Note's reference.
	res = b.mustRun(t, "declared2", `{"mode":"offload","table":"Employees","pk":"p","rk":"r2"}`)
	if !slices.Equal(res.Properties, []string{"Big", "Note"}) || len(res.Skipped) != 0 {
		t.Errorf("offload with Big: %+v, want Big and Note offloaded", res)
	}
}

// nearMiB is an entity 100 bytes under 1 MiB with a one-character
// String Note (and, withBig, a 60,000-byte Binary Big).
func nearMiB(rk string, withBig bool) storeadapter.Entity {
	props := map[string]any{"Note": "x"}
	for i := 0; i < 17; i++ {
		props["B"+strings.Repeat("b", i+1)] = make([]byte, 60000)
	}
	if withBig {
		props["Big"] = make([]byte, 60000)
		delete(props, "Bb")
	}
	e := storeadapter.Entity{PartitionKey: "p", RowKey: rk, Properties: props}
	lo, hi := 0, 65536 // the largest Pad that keeps the entity valid
	for lo < hi {
		mid := (lo + hi + 1) / 2
		e.Properties["Pad"] = make([]byte, mid)
		if storeadapter.ValidateEntity(e) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	e.Properties["Pad"] = make([]byte, lo-100) // 100 bytes under 1 MiB
	return e
}

// Get compares the blob's size with the reference before it reads: a
// 5-byte reference whose blob was overwritten with 64 MiB costs no more
// than 5 bytes of reading.
func TestGetStopsAtReferenceLength(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	c := b.local.Container(container)
	if _, err := c.Put(ctx, "photos/1.jpg", []byte("small"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"Name": "x"}})
	b.mustRun(t, "att", `{"mode":"attach","table":"Employees","pk":"p","rk":"r","property":"Photo","container":"blobs","blob":"photos/1.jpg"}`)
	if _, err := c.Put(ctx, "photos/1.jpg", make([]byte, 64<<20), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := largeentity.Get(ctx, b.local, table, "p", "r")
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("Get allocated %d KiB for a reference of 5 bytes", grew>>10)
	}
	var me *largeentity.MismatchError
	if !errors.As(err, &me) || me.What != "length" || me.Property != "Photo" || me.Got != "67108864" {
		t.Errorf("Get = %v, want a length mismatch naming Photo and the blob's size", err)
	}
}

// The table config's prefix applies to the table config's container only:
// an offload into another container writes unprefixed names there, which a
// reconcile of that container lists and collects.
func TestPrefixAppliesToConfigContainerOnly(t *testing.T) {
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{{Table: table, Container: "main", Prefix: "px"}}})
	ctx := context.Background()
	if err := b.local.Container("main").Create(ctx); err != nil {
		t.Fatal(err)
	}
	b.insert(t, employee("Sales", "0001"))
	b.mustRun(t, "off1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Bio","container":"blobs"}`)
	b.mustRun(t, "off2", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Photo"}`)
	e := b.entity(t, "Sales", "0001")
	bioRef, _, _ := largeentity.RefOf(e, "Bio")
	photoRef, _, _ := largeentity.RefOf(e, "Photo")
	if !strings.HasPrefix(bioRef.Name, "Employees/") || photoRef.Container != "main" || !strings.HasPrefix(photoRef.Name, "px/Employees/") {
		t.Fatalf("names %s/%s and %s/%s, want blobs/Employees/… and main/px/Employees/…", bioRef.Container, bioRef.Name, photoRef.Container, photoRef.Name)
	}
	if err := b.local.Tables().DeleteEntity(ctx, table, "Sales", "0001", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * grace)
	for _, c := range []string{container, "main"} {
		res := b.mustRun(t, "rec-"+c, `{"mode":"reconcile","table":"Employees","container":"`+c+`"}`)
		if res.Reconcile.Orphans != 1 {
			t.Errorf("reconcile of %s: %s, want its orphan collected", c, res)
		}
	}
}

// A property over offloadOver whose name is too long for a TkBlob_
// reference is skipped and reported; the entity's other large properties
// still move.
func TestOffloadOverSkipsLongPropertyName(t *testing.T) {
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{{Table: table, Container: container, OffloadOver: 1000}}})
	long := "L" + strings.Repeat("x", 251)
	b.insert(t, storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{long: strings.Repeat("a", 5000), "Bio": strings.Repeat("b", 5000)}})
	res, err := b.run(t, "op", `{"mode":"offload","table":"Employees","pk":"p","rk":"r"}`)
	if err != nil {
		t.Fatalf("offload: %v", err)
	}
	if !slices.Equal(res.Properties, []string{"Bio"}) || len(res.Skipped) != 1 || !strings.HasPrefix(res.Skipped[0], long+" (") ||
		!strings.Contains(res.Skipped[0], "at most 248 characters") {
		t.Errorf("offload: %+v, want Bio offloaded and the long name skipped with the rule", res)
	}
	if _, ok := b.entity(t, "p", "r").Properties[long]; !ok {
		t.Errorf("the long-named property is gone")
	}
}

// A missing container is found with one call before the table is read.
func TestReconcileMissingContainerBeforeScan(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	b.insert(t, employee("Sales", "0001"))
	var ops []instrument.Op
	b.setFault(func(_ int, c instrument.Call) error { ops = append(ops, c.Op); return nil })
	_, err := b.run(t, "rec", `{"mode":"reconcile","table":"Employees","container":"nope"}`)
	wantPermanent(t, "reconcile of a missing container", err, "args.container", "nope")
	if len(ops) != 1 || ops[0] != instrument.OpProperties {
		t.Errorf("calls %v, want one Properties call", ops)
	}
}

// zeroAges is a store whose blob listings carry no Last-Modified.
type zeroAges struct{ storeadapter.Store }

func (z zeroAges) Container(name string) storeadapter.Blobs {
	return zeroAgeBlobs{z.Store.Container(name)}
}

type zeroAgeBlobs struct{ storeadapter.Blobs }

func (z zeroAgeBlobs) List(ctx context.Context, prefix, marker string) (storeadapter.BlobPage, error) {
	p, err := z.Blobs.List(ctx, prefix, marker)
	for i := range p.Blobs {
		p.Blobs[i].LastModified = time.Time{}
	}
	return p, err
}

// A blob listed without a Last-Modified has no known age: young, kept.
func TestReconcileKeepsBlobWithoutLastModified(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	b.insert(t, employee("Sales", "0001"))
	b.mustRun(t, "off", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Bio","container":"blobs"}`)
	if err := b.local.Tables().DeleteEntity(ctx, table, "Sales", "0001", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * grace)
	w, err := blobsync.New(kit.Plain(zeroAges{b.local}), blobsync.Config{CheckpointTable: "Checkpoints", Grace: jobs.Duration(grace)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Run(ctx, "rec", blobsync.Args{Mode: "reconcile", Table: table, Container: container})
	if err != nil || res.Reconcile.Young != 1 || res.Reconcile.Orphans != 0 || len(b.blobs(t)) != 1 {
		t.Errorf("reconcile: %s, %v; want the blob kept as young", res, err)
	}
}

// When entities keep changing, the checkpoint goes back to the page of
// the first of them: the retry re-checks from there, not from the start,
// and not from after it.
func TestReconcileUnsettledResumesAtItsPage(t *testing.T) {
	b := newBundle(t, blobsync.Config{PageSize: 1, OnMissing: blobsync.OnMissingClear})
	ctx := context.Background()
	for _, rk := range []string{"1", "2", "3"} {
		b.insert(t, storeadapter.Entity{PartitionKey: "p", RowKey: rk, Properties: map[string]any{"Bio": "bio " + rk}})
		b.mustRun(t, "off"+rk, `{"mode":"offload","table":"Employees","pk":"p","rk":"`+rk+`","property":"Bio","container":"blobs"}`)
	}
	for _, bl := range b.blobs(t) {
		if err := b.local.Container(container).Delete(ctx, bl.Name, ""); err != nil {
			t.Fatal(err)
		}
	}
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpUpdateEntity && c.RowKey == "2" {
			return storeadapter.ErrPreconditionFailed // someone else always wins
		}
		return nil
	})
	res, err := b.run(t, "rec", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if err == nil || jobs.IsPermanent(err) || res.Reconcile.Unsettled != 1 || res.Reconcile.Cleared != 2 {
		t.Fatalf("reconcile: %s, %v; want 1 unsettled, 2 cleared, a transient error", res, err)
	}
	b.setFault(nil)
	res = b.mustRun(t, "rec", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Entities != 2 || res.Reconcile.Cleared != 1 {
		t.Errorf("retry: %s; want it to resume at entity 2's page (2 entities, 1 cleared)", res)
	}
	res = b.mustRun(t, "rec", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Entities != 3 {
		t.Errorf("after success the checkpoint is cleared: %s, want all 3 entities", res)
	}
}

// A reconcile of a table that does not exist (any more) collects its
// managed blobs older than grace: every entity is gone.
func TestReconcileOfMissingTableCollectsItsBlobs(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	b.insert(t, employee("Sales", "0001"))
	b.mustRun(t, "off", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"0001","property":"Bio","container":"blobs"}`)
	if err := b.local.Tables().DeleteTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	res := b.mustRun(t, "rec1", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if !res.Reconcile.NoTable || res.Reconcile.Young != 1 || len(b.blobs(t)) != 1 || !strings.HasPrefix(res.String(), "table does not exist") {
		t.Errorf("reconcile within grace: %s, want the table reported missing and the young blob kept", res)
	}
	b.clock.Advance(2 * grace)
	res = b.mustRun(t, "rec2", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Orphans != 1 || len(b.blobs(t)) != 0 {
		t.Errorf("reconcile after grace: %s, want the blob collected", res)
	}
}

// TestGraceByServiceClock: a blob's age is told by the storage service's
// clock alone. The store's clock here runs days behind the worker's
// machine (as a service's may run behind a worker's clock that is ahead):
// an orphan written just now is young, and kept, until the service's own
// time passes the grace period (the worker's clock said it was days old).
func TestGraceByServiceClock(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	if lag := time.Since(b.clock.Now()); lag < grace {
		t.Fatalf("the store's clock is only %v behind the machine's; the test needs more than the grace", lag)
	}
	b.insert(t, storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{"Bio": "text"}})
	b.mustRun(t, "op-off", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`)
	if err := b.local.Tables().DeleteEntity(context.Background(), table, "Sales", "1", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	res := b.mustRun(t, "op-rec-1", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Orphans != 0 || res.Reconcile.Young != 1 {
		t.Fatalf("reconcile right after the orphan was left: %+v; want it young and kept", res.Reconcile)
	}
	b.clock.Advance(grace + time.Second)
	res = b.mustRun(t, "op-rec-2", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Orphans != 1 {
		t.Fatalf("reconcile once the service's clock passed the grace: %+v; want the orphan collected", res.Reconcile)
	}
}
