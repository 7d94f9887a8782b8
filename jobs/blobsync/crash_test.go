package blobsync_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// scenario is one job run against every crash position.
type scenario struct {
	cfg   blobsync.Config
	setup func(t *testing.T, b *bundle)
	args  string
	// app is what the application does just before the worker's call n:
	// crash says whether that call then fails.
	app func(t *testing.T, b *bundle, n int, c instrument.Call, crash bool)
	// check asserts the converged state; touched is the n the
	// application acted at.
	check func(t *testing.T, b *bundle, touched int)
}

// everyCall runs the scenario once cleanly to count its storage calls,
// then, for every call n, twice on a fresh store: (a) the application acts
// and call n fails (the worker crashes there); the job then runs again
// with the same op id and must succeed; (b) the application acts just
// before call n and the call goes through: the job must succeed at once.
// After each, check must hold.
func everyCall(t *testing.T, s scenario) {
	b := newBundle(t, s.cfg)
	s.setup(t, b)
	b.setFault(nil)
	if _, err := b.run(t, "op-count", s.args); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	calls := b.callsSince()
	if calls < 2 {
		t.Fatalf("clean run made %d calls", calls)
	}
	for n := 1; n <= calls; n++ {
		for _, crash := range []bool{true, false} {
			t.Run(fmt.Sprintf("call%d/crash=%v", n, crash), func(t *testing.T) {
				b := newBundle(t, s.cfg)
				s.setup(t, b)
				var hit instrument.Call
				b.setFault(func(i int, c instrument.Call) error {
					if i != n {
						return nil
					}
					hit = c
					s.app(t, b, n, c, crash)
					if crash {
						return errCrash
					}
					return nil
				})
				_, err := b.run(t, "op-1", s.args)
				b.setFault(nil)
				if crash {
					if err == nil || jobs.IsPermanent(err) {
						t.Fatalf("crash at %s = %v, want a transient error", hit.Op, err)
					}
					if _, err = b.run(t, "op-1", s.args); err != nil {
						t.Fatalf("rerun after a crash at %s: %v", hit.Op, err)
					}
				} else if err != nil {
					t.Fatalf("application acting before %s: %v", hit.Op, err)
				}
				s.check(t, b, n)
			})
		}
	}
}

// collect runs reconciles: one now, which must keep every blob younger
// than the grace period, then one past it, which must leave no orphan.
func collect(t *testing.T, b *bundle) {
	t.Helper()
	before := len(b.blobs(t))
	res := b.mustRun(t, "op-young", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if res.Reconcile.Orphans != 0 || len(b.blobs(t)) != before {
		t.Errorf("a reconcile within the grace period deleted blobs: %s", res)
	}
	b.clock.Advance(grace + time.Minute)
	b.mustRun(t, "op-old", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	b.assertNoOrphans(t)
}

// TestOffloadEveryCrash: an offload that replaces an earlier offload,
// crashed at each of its storage calls (get, put, replace, delete of the
// previous blob) while the application rewrites the property and adds
// another, converges on a rerun: the reference resolves to the latest
// content, the application's update survives, and reconcile leaves no
// orphan.
func TestOffloadEveryCrash(t *testing.T) {
	everyCall(t, scenario{
		setup: func(t *testing.T, b *bundle) {
			b.insert(t, employee("Sales", "1"))
			b.mustRun(t, "op-0", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`)
			b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v2")})
		},
		args: `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`,
		app: func(t *testing.T, b *bundle, n int, _ instrument.Call, _ bool) {
			b.merge(t, "Sales", "1", map[string]any{"Bio": bio("app"), "Touched": int32(n)})
		},
		check: func(t *testing.T, b *bundle, n int) {
			want := employee("Sales", "1").Properties
			want["Bio"], want["Touched"] = bio("app"), int32(n)
			e := b.entity(t, "Sales", "1")
			if _, inline := e.Properties["Bio"]; inline {
				// The application wrote Bio after the offload's replace:
				// legitimate, and the next offload moves it.
				b.mustRun(t, "op-next", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`)
			}
			b.assertGet(t, "Sales", "1", want)
			collect(t, b)
			b.assertGet(t, "Sales", "1", want)
			if n := len(b.blobs(t)); n != 1 {
				t.Errorf("%d blobs after reconcile, want 1 (the current Bio)", n)
			}
		},
	})
}

// TestAttachEveryCrash: an attach replacing an offloaded property,
// crashed at each call (open, get, replace, properties, delete of the
// offloaded blob) while the application updates the entity and overwrites
// its blob, converges on a rerun to a reference that matches the blob's
// current content, with the application's update kept.
func TestAttachEveryCrash(t *testing.T) {
	ctx := context.Background()
	everyCall(t, scenario{
		setup: func(t *testing.T, b *bundle) {
			b.insert(t, employee("Sales", "1"))
			b.mustRun(t, "op-0", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Photo","container":"blobs"}`)
			if _, err := b.local.Container(container).Put(ctx, "app/sales-1.jpg", []byte("jpeg v0"), storeadapter.PutOptions{ContentType: "image/jpeg"}); err != nil {
				t.Fatal(err)
			}
		},
		args: `{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Photo","container":"blobs","blob":"app/sales-1.jpg"}`,
		app: func(t *testing.T, b *bundle, n int, _ instrument.Call, crash bool) {
			b.merge(t, "Sales", "1", map[string]any{"Touched": int32(n)})
			if crash { // the rerun is the attach the application enqueues after its overwrite
				if _, err := b.local.Container(container).Put(ctx, "app/sales-1.jpg", []byte(fmt.Sprintf("jpeg v%d", n)), storeadapter.PutOptions{ContentType: "image/jpeg"}); err != nil {
					t.Error(err)
				}
			}
		},
		check: func(t *testing.T, b *bundle, n int) {
			want := employee("Sales", "1").Properties
			data, _, err := b.local.Container(container).Get(ctx, "app/sales-1.jpg")
			if err != nil {
				t.Fatal(err)
			}
			want["Photo"], want["Touched"] = data, int32(n)
			b.assertGet(t, "Sales", "1", want)
			collect(t, b)
			b.assertGet(t, "Sales", "1", want)
			if names := blobNames(b.blobs(t)); len(names) != 1 || names[0] != "app/sales-1.jpg" {
				t.Errorf("blobs %v, want the application's only (the offloaded Photo collected)", names)
			}
		},
	})
}

// reconcileSetup makes a table and container with every kind of drift,
// over several pages (PageSize 2): a good reference (1), a reference to a
// missing blob (2), an attached blob the application overwrote (3), an
// orphan of an offload that crashed before its replace (4), the blobs of
// a deleted entity (5), an old blob that does not parse (readme), and,
// after the grace period has passed for the others, a young orphan (1).
func reconcileSetup(t *testing.T, b *bundle) {
	ctx := context.Background()
	blobs := b.local.Container(container)
	for _, rk := range []string{"1", "2", "3", "4", "5", "6", "7"} {
		b.insert(t, employee("Sales", rk))
	}
	for _, rk := range []string{"1", "2", "5"} {
		b.mustRun(t, "op-o"+rk, `{"mode":"offload","table":"Employees","pk":"Sales","rk":"`+rk+`","property":"Bio","container":"blobs"}`)
	}
	ref2, _, _ := largeentity.RefOf(b.entity(t, "Sales", "2"), "Bio")
	if err := blobs.Delete(ctx, ref2.Name, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Put(ctx, "app/3.bin", []byte("three"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.mustRun(t, "op-a3", `{"mode":"attach","table":"Employees","pk":"Sales","rk":"3","property":"Photo","container":"blobs","blob":"app/3.bin"}`)
	if _, err := blobs.Put(ctx, "app/3.bin", []byte("three, new"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Put(ctx, largeentity.BlobName("", table, "Sales", "4", "Bio", strings.Repeat("4", 64)), []byte("crashed offload"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.local.Tables().DeleteEntity(ctx, table, "Sales", "5", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Put(ctx, "Employees/readme.txt", []byte("not managed"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(grace + time.Minute)
	if _, err := blobs.Put(ctx, largeentity.BlobName("", table, "Sales", "1", "Bio", strings.Repeat("1", 64)), []byte("young"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// reconcileCheck asserts the repaired state of reconcileSetup.
func reconcileCheck(t *testing.T, b *bundle, touched map[string]int32) {
	t.Helper()
	ctx := context.Background()
	for _, rk := range []string{"1", "2", "3", "4", "6", "7"} {
		want := employee("Sales", rk).Properties
		switch rk {
		case "2":
			delete(want, "Bio") // its blob was gone: the reference is cleared
		case "3":
			want["Photo"] = []byte("three, new")
		}
		if n, ok := touched[rk]; ok {
			want["Touched"] = n
		}
		b.assertGet(t, "Sales", rk, want)
	}
	young := largeentity.BlobName("", table, "Sales", "1", "Bio", strings.Repeat("1", 64))
	ref1, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Bio")
	want := []string{"Employees/readme.txt", ref1.Name, young, "app/3.bin"}
	slices.Sort(want)
	if got := blobNames(b.blobs(t)); !slices.Equal(got, want) {
		t.Errorf("blobs after reconcile:\n got %v\nwant %v", got, want)
	}
	if _, err := b.local.Container(container).Properties(ctx, young); err != nil {
		t.Errorf("young orphan: %v, want it kept", err)
	}
}

func blobNames(ps []storeadapter.BlobProps) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

const reconcileArgs = `{"mode":"reconcile","table":"Employees","container":"blobs","onMissing":"clear"}`

// TestReconcile repairs every kind of drift and counts it.
func TestReconcile(t *testing.T) {
	b := newBundle(t, blobsync.Config{PageSize: 2})
	reconcileSetup(t, b)
	res := b.mustRun(t, "op-r", reconcileArgs)
	c := res.Reconcile
	if c.Entities != 6 || c.References != 3 || c.Missing != 1 || c.Cleared != 1 || c.Refreshed != 1 || c.Corrupt != 0 ||
		c.Orphans != 2 || c.Young != 1 || c.Unparsed != 1 || c.Kept != 1 {
		t.Errorf("counts %+v", c)
	}
	if !strings.Contains(res.String(), "1 missing (1 cleared), 1 refreshed") {
		t.Errorf("result %q", res)
	}
	reconcileCheck(t, b, nil)
	cp := idempotent.Checkpoints{Tables: b.local.Tables(), Table: "Checkpoints"}
	if tok, err := cp.Load(context.Background(), "op-r", blobsync.CheckpointStep); tok != "" || err != nil {
		t.Errorf("checkpoint %q (%v) left after the reconcile finished", tok, err)
	}
	b.clock.Advance(grace)
	b.mustRun(t, "op-r2", reconcileArgs)
	b.assertNoOrphans(t)
}

// TestReconcileReport leaves a reference to a missing blob and names it.
func TestReconcileReport(t *testing.T) {
	b := newBundle(t, blobsync.Config{PageSize: 2})
	reconcileSetup(t, b)
	res := b.mustRun(t, "op-r", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if c := res.Reconcile; c.Missing != 1 || c.Cleared != 0 || !strings.Contains(res.String(), "Sales/2 Bio: blob Employees/Sales/2/Bio/") {
		t.Errorf("result %q", res)
	}
	if _, ok, _ := largeentity.RefOf(b.entity(t, "Sales", "2"), "Bio"); !ok {
		t.Error("the reference to the missing blob was cleared with onMissing report")
	}
}

// TestReconcileCorrupt reports an offloaded blob whose content changed
// and leaves its reference as it is (Get keeps failing on it).
func TestReconcileCorrupt(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	b.insert(t, employee("Sales", "1"))
	b.mustRun(t, "op-o", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`)
	e := b.entity(t, "Sales", "1")
	ref, _, _ := largeentity.RefOf(e, "Bio")
	if _, err := b.local.Container(container).Put(context.Background(), ref.Name, []byte("tampered"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	res := b.mustRun(t, "op-r", reconcileArgs)
	if res.Reconcile.Corrupt != 1 || !strings.Contains(res.String(), "holds content of SHA-256") {
		t.Errorf("result %q", res)
	}
	if after := b.entity(t, "Sales", "1"); after.ETag != e.ETag {
		t.Error("reconcile rewrote the reference of a corrupt blob")
	}
}

// TestReconcileEveryCrash crashes the reconcile at each of its storage
// calls (queries, blob reads, the entity writes, checkpoints, listing,
// entity reads and deletes of phase 2) while the application updates the
// entity whose reference is being refreshed; the rerun with the same op
// id resumes and converges.
func TestReconcileEveryCrash(t *testing.T) {
	everyCall(t, scenario{
		cfg:   blobsync.Config{PageSize: 2},
		setup: reconcileSetup,
		args:  reconcileArgs,
		app: func(t *testing.T, b *bundle, n int, _ instrument.Call, _ bool) {
			b.merge(t, "Sales", "3", map[string]any{"Touched": int32(n)})
		},
		check: func(t *testing.T, b *bundle, n int) {
			reconcileCheck(t, b, map[string]int32{"3": int32(n)})
		},
	})
}

// TestReconcileResumes crashes a reconcile on its third page: the
// checkpoint holds phase 1 and the page's token, and the rerun reads only
// the pages left.
func TestReconcileResumes(t *testing.T) {
	b := newBundle(t, blobsync.Config{PageSize: 2})
	for i := range 7 {
		b.insert(t, employee("Sales", fmt.Sprint(i)))
		b.mustRun(t, fmt.Sprint("op-o", i), fmt.Sprintf(`{"mode":"offload","table":"Employees","pk":"Sales","rk":"%d","property":"Bio","container":"blobs"}`, i))
	}
	queries := 0
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpQuery {
			if queries++; queries == 3 {
				return errCrash
			}
		}
		return nil
	})
	if _, err := b.run(t, "op-r", reconcileArgs); err == nil {
		t.Fatal("the injected crash did not surface")
	}
	cp := idempotent.Checkpoints{Tables: b.local.Tables(), Table: "Checkpoints"}
	tok, err := cp.Load(context.Background(), "op-r", blobsync.CheckpointStep)
	var pos blobsync.Position
	if err != nil || json.Unmarshal([]byte(tok), &pos) != nil || pos.Phase != 1 || pos.Token == "" {
		t.Fatalf("checkpoint %q (%v), want phase 1 with a token", tok, err)
	}
	b.setFault(nil)
	res := b.mustRun(t, "op-r", reconcileArgs)
	if c := res.Reconcile; c.Entities != 3 || c.References != 3 || c.Blobs != 7 || c.Kept != 0 || c.Young != 7 {
		t.Errorf("resumed run counted %+v, want the last 3 entities and all 7 (young) blobs", c)
	}
	if q := b.calls.Snapshot()[instrument.OpQuery].Calls; q != 3+2 {
		t.Errorf("%d queries in all, want 5 (2 before the crash, the failed one, 2 after it)", q)
	}
}

// TestDeletesLoseToRewrites runs the two interleavings where a blob about
// to be deleted becomes needed again. (a) An offload of v2 is about to
// delete v1's blob when the application writes v1 back and another
// offload moves it (putting v1's blob again). (b) A reconcile is about to
// delete an old orphan of v1 when the same happens. Both deletes are
// If-Match the ETag they saw, so both fail and the reference resolves.
func TestDeletesLoseToRewrites(t *testing.T) {
	const args = `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`
	v1Name := largeentity.BlobName("", table, "Sales", "1", "Bio", digestOf(bio("v1")))
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, b *bundle)
		job   string
	}{
		{"offload", func(t *testing.T, b *bundle) {
			b.mustRun(t, "op-0", args) // v1 offloaded
			b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v2")})
		}, args},
		{"reconcile", func(t *testing.T, b *bundle) {
			b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v2")})
			b.mustRun(t, "op-0", args) // v2 offloaded
			if _, err := b.local.Container(container).Put(context.Background(), v1Name, []byte(bio("v1")), storeadapter.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(grace + time.Minute) // v1's blob is an old orphan
		}, reconcileArgs},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBundle(t, blobsync.Config{})
			b.insert(t, employee("Sales", "1"))
			c.setup(t, b)
			raced := false
			b.setFault(func(_ int, call instrument.Call) error {
				if call.Op == instrument.OpDeleteBlob && call.Blob == v1Name && !raced {
					raced = true
					b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v1")})
					b.mustRun(t, "op-B", args) // puts v1's blob again, references it, deletes v2's
				}
				return nil
			})
			b.mustRun(t, "op-A", c.job)
			if !raced {
				t.Fatal("the job never tried to delete v1's blob")
			}
			b.assertGet(t, "Sales", "1", employee("Sales", "1").Properties)
		})
	}
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
