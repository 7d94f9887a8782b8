package blobsync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// TestOffload offloads a String and a Binary property: the entity holds
// references in the documented layout and its other properties intact,
// the blobs sit at their managed names, Get restores both exactly, one
// offload costs one read, one put and one replace, and a redelivery is a
// read.
func TestOffload(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	want := employee("Sales", "Jones, A. 1.")
	b.insert(t, want)
	b.setFault(nil)
	res := b.mustRun(t, "op-1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"Jones, A. 1.","property":"Bio","container":"blobs"}`)
	if got := res.String(); got != "offloaded Bio" {
		t.Errorf("result %q, want %q", got, "offloaded Bio")
	}
	calls := b.calls.Snapshot()
	if g, p, u, n := calls[instrument.OpGetEntity].Calls, calls[instrument.OpPut].Calls, calls[instrument.OpUpdateEntity].Calls, calls.Total().Calls; g != 1 || p != 1 || u != 1 || n != 3 {
		t.Errorf("calls of one offload: %d get, %d put, %d replace, %d in all; want 1, 1, 1, 3\n%s", g, p, u, n, calls)
	}
	b.mustRun(t, "op-2", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"Jones, A. 1.","property":"Photo","container":"blobs"}`)

	e := b.entity(t, "Sales", "Jones, A. 1.")
	for _, p := range []string{"Bio", "Photo"} {
		if _, ok := e.Properties[p]; ok {
			t.Errorf("%s still inline after its offload", p)
		}
	}
	ref, ok, err := largeentity.RefOf(e, "Bio")
	if err != nil || !ok {
		t.Fatalf("TkBlob_Bio: %v, %v", ok, err)
	}
	wantName := "Employees/Sales/Jones%2C%20A.%201%2E/Bio/" + ref.SHA256
	if ref.Name != wantName || ref.Container != "blobs" || ref.Type != "Edm.String" || ref.Mode != "offload" || ref.V != 1 ||
		ref.ContentType != largeentity.ContentTypeString || ref.Length != int64(len(want.Properties["Bio"].(string))) {
		t.Errorf("reference %+v, want name %s, Edm.String, offload, %d bytes", ref, wantName, len(want.Properties["Bio"].(string)))
	}
	raw := e.Properties["TkBlob_Bio"].(string)
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(raw)); err != nil || compact.String() != raw || !strings.HasPrefix(raw, `{"v":1,"container":"blobs","name":"Employees/Sales/`) {
		t.Errorf("TkBlob_Bio is not the compact layout: %.120s", raw)
	}
	data, props, err := b.local.Container(container).Get(context.Background(), wantName)
	if err != nil || string(data) != want.Properties["Bio"] || props.ContentType != largeentity.ContentTypeString {
		t.Errorf("blob %s: %d bytes, content type %q, %v", wantName, len(data), props.ContentType, err)
	}
	if r, _, _ := largeentity.RefOf(e, "Photo"); r.Type != "Edm.Binary" || r.ContentType != largeentity.ContentTypeBinary {
		t.Errorf("Photo reference %+v, want Edm.Binary, %s", r, largeentity.ContentTypeBinary)
	}
	kept := map[string]any{}
	for k, v := range e.Properties {
		if !strings.HasPrefix(k, largeentity.RefPrefix) {
			kept[k] = v
		}
	}
	others := want.Clone().Properties
	delete(others, "Bio")
	delete(others, "Photo")
	assertProps(t, "the entity's other properties", others, kept)
	b.assertGet(t, "Sales", "Jones, A. 1.", want.Properties)

	b.setFault(nil)
	res = b.mustRun(t, "op-1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"Jones, A. 1.","property":"Bio","container":"blobs"}`)
	if !res.Already || b.callsSince() != 1 {
		t.Errorf("redelivery: %+v after %d calls, want already done after one read", res, b.callsSince())
	}
}

// TestOffloadDeclared offloads without args.property: the table's declared
// properties and every String or Binary over offloadOver, to the
// container and prefix of its config entry.
func TestOffloadDeclared(t *testing.T) {
	b := newBundle(t, blobsync.Config{Tables: []largeentity.TableConfig{
		{Table: "Employees", Container: container, Prefix: "large/v1", Properties: []string{"Photo", "Resume"}, OffloadOver: 1000},
	}})
	want := employee("Sales", "1")
	want.Properties["Notes"] = strings.Repeat("n", 1001)
	want.Properties["Short"] = strings.Repeat("s", 1000)
	b.insert(t, want)
	res := b.mustRun(t, "op-1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1"}`)
	if got := strings.Join(res.Properties, ","); got != "Bio,Notes,Photo" {
		t.Errorf("offloaded %s, want Bio,Notes,Photo (Resume is absent, Short is not over 1000 bytes)", got)
	}
	e := b.entity(t, "Sales", "1")
	if _, ok := e.Properties["Short"]; !ok {
		t.Error("Short was offloaded")
	}
	if r, _, _ := largeentity.RefOf(e, "Notes"); !strings.HasPrefix(r.Name, "large/v1/Employees/Sales/1/Notes/") {
		t.Errorf("Notes went to %q, want under the config's prefix", r.Name)
	}
	b.assertGet(t, "Sales", "1", want.Properties)
	if res := b.mustRun(t, "op-1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1"}`); !res.Already {
		t.Errorf("second run %+v, want already done", res)
	}
}

// TestOffloadAgain: the application writes the property inline again
// (keeping the reference); the next offload moves the new content to its
// own name and deletes the previous blob last; content that comes back
// gets its old name again.
func TestOffloadAgain(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	b.insert(t, employee("Sales", "1"))
	args := `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`
	b.mustRun(t, "op-1", args)
	first, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Bio")
	b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v2")})
	b.assertGet(t, "Sales", "1", map[string]any{"Name": "Jones, O'Brien", "Age": int32(40), "Salary": int64(1<<62 + 1),
		"Hired": employee("", "").Properties["Hired"], "Bio": bio("v2"), "Photo": photo(1)}) // inline wins over the old reference
	res := b.mustRun(t, "op-2", args)
	if res.PreviousDeleted != 1 {
		t.Errorf("result %+v, want the previous blob deleted", res)
	}
	if _, err := b.local.Container(container).Properties(context.Background(), first.Name); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("previous blob %s: %v, want it deleted", first.Name, err)
	}
	if n := len(b.blobs(t)); n != 1 {
		t.Errorf("%d blobs, want 1", n)
	}
	b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v1")})
	b.mustRun(t, "op-3", args)
	if again, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Bio"); again.Name != first.Name {
		t.Errorf("content v1 went to %s, want its content address %s", again.Name, first.Name)
	}
	b.assertGet(t, "Sales", "1", employee("Sales", "1").Properties)
	b.assertNoOrphans(t)
}

// TestOffloadConcurrentUpdate: the application updates the entity between
// the offload's read and its replace. The replace fails (412), the
// offload reads again and offloads the new content; the update survives
// whole.
func TestOffloadConcurrentUpdate(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	b.insert(t, employee("Sales", "1"))
	updated := false
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpUpdateEntity && !updated {
			updated = true
			b.merge(t, "Sales", "1", map[string]any{"Bio": bio("v2"), "Age": int32(41), "Dept": "Ops"})
		}
		return nil
	})
	res := b.mustRun(t, "op-1", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`)
	if res.Rounds != 1 {
		t.Errorf("result %+v, want one round lost to the update", res)
	}
	want := employee("Sales", "1").Properties
	want["Bio"], want["Age"], want["Dept"] = bio("v2"), int32(41), "Ops"
	b.assertGet(t, "Sales", "1", want)
	if n := len(b.blobs(t)); n != 2 {
		t.Errorf("%d blobs, want 2 (the current one and the orphan of v1, left for reconcile)", n)
	}
	b.setFault(nil)
	b.clock.Advance(grace + time.Minute)
	rec := b.mustRun(t, "op-r", `{"mode":"reconcile","table":"Employees","container":"blobs"}`)
	if rec.Reconcile.Orphans != 1 {
		t.Errorf("reconcile %s, want the v1 orphan deleted", rec)
	}
	b.assertNoOrphans(t)
	b.assertGet(t, "Sales", "1", want)
}

// TestAttach links an application's blob to its entity; attaching again
// unchanged is one read of each; after the application overwrites the
// blob, attach refreshes the reference; a previous offloaded blob is
// deleted, the application's blob never.
func TestAttach(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	b.insert(t, employee("Sales", "1"))
	b.mustRun(t, "op-0", `{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Photo","container":"blobs"}`)
	offloaded, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Photo")
	photos := b.local.Container("photos")
	if err := photos.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := photos.Put(ctx, "sales/1.jpg", []byte("jpeg one"), storeadapter.PutOptions{ContentType: "image/jpeg"}); err != nil {
		t.Fatal(err)
	}
	args := `{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Photo","container":"photos","blob":"sales/1.jpg"}`
	res := b.mustRun(t, "op-1", args)
	if res.PreviousDeleted != 1 || res.String() != "attached Photo; deleted 1 previous blob(s)" {
		t.Errorf("result %q, want Photo attached and the offloaded blob deleted", res)
	}
	if _, err := b.local.Container(container).Properties(ctx, offloaded.Name); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("offloaded blob: %v, want deleted", err)
	}
	ref, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Photo")
	if ref.Mode != "attach" || ref.ContentType != "image/jpeg" || ref.Type != "Edm.Binary" || ref.Length != 8 {
		t.Errorf("reference %+v", ref)
	}
	want := employee("Sales", "1").Properties
	want["Photo"] = []byte("jpeg one")
	b.assertGet(t, "Sales", "1", want)

	b.setFault(nil)
	if res := b.mustRun(t, "op-2", args); !res.Already || b.callsSince() != 2 {
		t.Errorf("attach again: %+v after %d calls, want already done after opening the blob and reading the entity", res, b.callsSince())
	}
	if _, err := photos.Put(ctx, "sales/1.jpg", []byte("jpeg two, larger"), storeadapter.PutOptions{ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	if _, err := largeentity.Get(ctx, b.local, table, "Sales", "1"); !errors.Is(err, largeentity.ErrMismatch) {
		t.Errorf("Get after the application overwrote the blob: %v, want ErrMismatch until it is attached again", err)
	}
	b.mustRun(t, "op-3", args)
	want["Photo"] = []byte("jpeg two, larger")
	b.assertGet(t, "Sales", "1", want)
	if ref, _, _ := largeentity.RefOf(b.entity(t, "Sales", "1"), "Photo"); ref.ContentType != "image/png" {
		t.Errorf("refreshed content type %q, want image/png", ref.ContentType)
	}
	if _, err := photos.Properties(ctx, "sales/1.jpg"); err != nil {
		t.Errorf("the application's blob: %v", err)
	}
}

// TestAttachBlobChangesMidway: the application overwrites the blob after
// attach hashed it; attach's check after its write sees the new ETag and
// attaches the current content.
func TestAttachBlobChangesMidway(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	b.insert(t, storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{"Name": "A"}})
	if _, err := b.local.Container(container).Put(ctx, "app/1.txt", []byte("one"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	overwritten := false
	b.setFault(func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpUpdateEntity && !overwritten {
			overwritten = true
			if _, err := b.local.Container(container).Put(ctx, "app/1.txt", []byte("two"), storeadapter.PutOptions{}); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	res := b.mustRun(t, "op-1", `{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Doc","container":"blobs","blob":"app/1.txt"}`)
	if res.Rounds != 1 {
		t.Errorf("result %+v, want one more round", res)
	}
	b.assertGet(t, "Sales", "1", map[string]any{"Name": "A", "Doc": []byte("two")})
}

// TestGetDetectsTampering: a blob changed behind blobsync's back fails
// Get with a *MismatchError naming the property; String and Binary come
// back with their types, empty ones too.
func TestGetDetectsTampering(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	ctx := context.Background()
	b.insert(t, storeadapter.Entity{PartitionKey: "P", RowKey: "1", Properties: map[string]any{
		"Text": "😀 non-BMP and é", "Empty": "", "Bytes": []byte{0, 255, 0}, "NoBytes": []byte{}, "N": int32(1)}})
	for _, p := range []string{"Text", "Empty", "Bytes", "NoBytes"} {
		b.mustRun(t, "op-"+p, `{"mode":"offload","table":"Employees","pk":"P","rk":"1","property":"`+p+`","container":"blobs"}`)
	}
	got, err := largeentity.Get(ctx, b.local, table, "P", "1")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]any{"Text": "😀 non-BMP and é", "Empty": "", "Bytes": []byte{0, 255, 0}, "NoBytes": []byte{}, "N": int32(1)} {
		g := got.Properties[name]
		if wt, _ := storeadapter.TypeOf(want); !storeadapter.Equal(want, g) {
			t.Errorf("%s = %s, want %s %s", name, storeadapter.Format(g), wt, storeadapter.Format(want))
		}
	}
	if len(got.Properties) != 5 {
		t.Errorf("Get returned %d properties, want 5", len(got.Properties))
	}

	ref, _, _ := largeentity.RefOf(b.entity(t, "P", "1"), "Text")
	if _, err := b.local.Container(container).Put(ctx, ref.Name, []byte("😀 non-BMP and ê"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = largeentity.Get(ctx, b.local, table, "P", "1")
	var me *largeentity.MismatchError
	if !errors.As(err, &me) || me.Property != "Text" || me.What != "sha256" || !strings.Contains(err.Error(), "property Text") {
		t.Fatalf("Get of a tampered blob = %v, want a sha256 mismatch naming Text", err)
	}
	if err := b.local.Container(container).Delete(ctx, ref.Name, ""); err != nil {
		t.Fatal(err)
	}
	if _, err = largeentity.Get(ctx, b.local, table, "P", "1"); !errors.Is(err, storeadapter.ErrNotFound) || !strings.Contains(err.Error(), "property Text") {
		t.Fatalf("Get with a missing blob = %v, want ErrNotFound naming Text", err)
	}
}

// TestBadArgs: every rule names the field; the worker poisons
// (Permanent) what only storage can tell, on the first delivery.
func TestBadArgs(t *testing.T) {
	cases := []struct{ args, want string }{
		{`{"mode":"copy","table":"Employees"}`, `args.mode: must be offload, attach or reconcile, got "copy"`},
		{`{"table":"Employees"}`, "args.mode: is required"},
		{`{"mode":"offload","table":"Em_ployees","pk":"a","rk":"b"}`, "args.table:"},
		{`{"mode":"offload","table":"Employees","rk":"b"}`, "args.pk: is required with mode offload"},
		{`{"mode":"offload","table":"Employees","pk":"a"}`, "args.rk: is required with mode offload"},
		{`{"mode":"offload","table":"Employees","pk":"a/b","rk":"b"}`, "args.pk:"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"~tk.o.x"}`, `args.rk: must not start with "~tk.", which is reserved`},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","property":"9lives"}`, "args.property:"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","property":"` + strings.Repeat("p", 249) + `"}`, "args.property: must be at most 248 characters"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","property":"TkBlob_X"}`, "args.property: \"TkBlob_X\" must not start with TkBlob_"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","property":"RowKey"}`, "args.property:"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","container":"Bad_Name"}`, "args.container:"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","blob":"x"}`, "args.blob: is not taken by mode offload"},
		{`{"mode":"offload","table":"Employees","pk":"a","rk":"b","grace":"48h"}`, "args.grace: is not taken by mode offload"},
		{`{"mode":"attach","table":"Employees","pk":"a","rk":"b","property":"P","container":"photos"}`, "args.blob: is required with mode attach"},
		{`{"mode":"attach","table":"Employees","pk":"a","rk":"b","property":"P","blob":"x"}`, "args.container: is required with mode attach"},
		{`{"mode":"attach","table":"Employees","pk":"a","rk":"b","container":"photos","blob":"x"}`, "args.property: is required with mode attach"},
		{`{"mode":"attach","table":"Employees","pk":"a","rk":"b","property":"P","container":"photos","blob":"a\\b"}`, "args.blob:"},
		{`{"mode":"reconcile","table":"Employees"}`, "args.container: is required with mode reconcile"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","rk":"x"}`, "args.rk: is not taken by mode reconcile"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","onMissing":"delete"}`, `args.onMissing: must be "report" or "clear", got "delete"`},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","grace":"0s"}`, "args.grace: must be 1s-"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","grace":"soon"}`, "args.grace"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","prefix":"a/../b"}`, "args.prefix:"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","extra":1}`, "args.extra: unknown field"},
	}
	for _, c := range cases {
		_, err := jobs.ParseArgs[blobsync.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%.80s) = %v, want an error containing %q", c.args, err, c.want)
		}
	}

	b := newBundle(t, blobsync.Config{})
	b.insert(t, storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{"Age": int32(4), "Bio": "x"}})
	for i, c := range []struct{ args, want string }{
		{`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Nope","container":"blobs"}`, "args.property: property Nope does not exist"},
		{`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Age","container":"blobs"}`, "args.property: Age is Edm.Int32"},
		{`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio"}`, "args.container: is required"},
		{`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","container":"blobs"}`, "args.property: is required"},
		{`{"mode":"offload","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"nope"}`, "args.container: container nope does not exist"},
		{`{"mode":"offload","table":"Missing","pk":"Sales","rk":"1","property":"Bio","container":"blobs"}`, "args.table: table Missing does not exist"},
		{`{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"nope","blob":"x"}`, "args.container: container nope does not exist"},
		{`{"mode":"attach","table":"Employees","pk":"Sales","rk":"1","property":"Bio","container":"blobs","blob":"x"}`, "args.blob: blob x does not exist"},
		{`{"mode":"reconcile","table":"Employees","container":"blobs","grace":"29m"}`, "args.grace: must be at least the longest maxRunTime of the kinds that write a managed blob before its entity (blobsync, archive, copy, restore), 30m0s"},
		{`{"mode":"reconcile","table":"Employees","container":"nope"}`, "args.container: container nope does not exist"},
	} {
		_, err := b.run(t, "op-bad-"+strconv.Itoa(i), c.args)
		if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a permanent error containing %q", c.args, err, c.want)
		}
	}
	if n := len(b.blobs(t)); n != 0 {
		t.Errorf("bad jobs left %d blobs", n)
	}
}

// TestEntityGoneIsDone: an offload or attach of an entity the application
// deleted after sending the job is done, not poisoned, as an archive takes
// a source already moved (6 to 13 such jobs were poisoned per e2e run).
func TestEntityGoneIsDone(t *testing.T) {
	b := newBundle(t, blobsync.Config{})
	for _, args := range []string{
		`{"mode":"offload","table":"Employees","pk":"Sales","rk":"2","property":"Bio","container":"blobs"}`,
		`{"mode":"attach","table":"Employees","pk":"Sales","rk":"2","property":"Bio","container":"blobs","blob":"app/bio-2"}`,
	} {
		if err := b.local.Container(container).Create(context.Background()); err != nil && !errors.Is(err, storeadapter.ErrAlreadyExists) {
			t.Fatal(err)
		}
		if _, err := b.local.Container(container).Put(context.Background(), "app/bio-2", []byte("bio"), storeadapter.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := b.run(t, "op-gone", args)
		if err != nil || !res.Gone || !strings.Contains(res.String(), "the entity does not exist") {
			t.Errorf("%s: %v (%s), want done: the entity is gone", args, err, res)
		}
	}
}

// TestConfigValidate names the field and the rule of a bad setting.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  blobsync.Config
		want string
	}{
		{blobsync.Config{Grace: jobs.Duration(time.Minute)}, "blobsync.grace: must be at least the longest maxRunTime of the kinds that write a managed blob before its entity (blobsync, archive, copy, restore), 30m0s"},
		{blobsync.Config{OnMissing: "drop"}, "blobsync.onMissing:"},
		{blobsync.Config{PageSize: 1001}, "blobsync.pageSize: must be 1-1000"},
		{blobsync.Config{MaxConflicts: 101}, "blobsync.maxConflicts"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "T_1", Container: "c1c"}}}, "blobsync.tables[0].table"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "Tab", Container: "C"}}}, "blobsync.tables[0].container"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "Tab", Container: "ccc"}, {Table: "TAB", Container: "ccc"}}}, "blobsync.tables[1].table: TAB is declared twice"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "Tab", Container: "ccc", Prefix: "../x"}}}, "blobsync.tables[0].prefix"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "Tab", Container: "ccc", Properties: []string{"A", "TkBlob_A"}}}}, "blobsync.tables[0].properties[1]"},
		{blobsync.Config{Tables: []largeentity.TableConfig{{Table: "Tab", Container: "ccc", OffloadOver: -1}}}, "blobsync.tables[0].offloadOver"},
	}
	for _, c := range cases {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	ok := blobsync.Config{MaxRunTime: jobs.Duration(time.Minute), Grace: jobs.Duration(time.Minute)}
	if err := ok.Validate(); err != nil || ok.OnMissing != "report" || ok.PageSize != 1000 {
		t.Errorf("Validate(grace = maxRunTime) = %v, %+v", err, ok)
	}
}

// TestNames: managed names round-trip through ParseBlobName, other names
// do not parse; references parse back and refuse what is not one.
func TestNames(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, k := range [][2]string{{"Sales", "1"}, {"..", "a."}, {"é😀 %", "x y"}} {
		name := largeentity.BlobName("pre/fix", "Employees", k[0], k[1], "Bio", sum)
		m, ok := largeentity.ParseBlobName("pre/fix", name)
		if !ok || m != (largeentity.ManagedName{Table: "Employees", PK: k[0], RK: k[1], Property: "Bio", SHA256: sum}) {
			t.Errorf("ParseBlobName(%s) = %+v, %v", name, m, ok)
		}
	}
	for _, name := range []string{
		"Employees/Sales/1/Bio/" + sum[:63], "Employees/Sales/1/Bio/" + strings.ToUpper(sum), "Employees/Sales/1/" + sum,
		"Employees/Sales/1/Bio/x/" + sum, "Employees/Sa%6Ces/1/Bio/" + sum, "Employees/Sales/1/9Bio/" + sum, "other/Employees/Sales/1/Bio/" + sum,
	} {
		if m, ok := largeentity.ParseBlobName("", name); ok {
			t.Errorf("ParseBlobName(%s) = %+v, want not managed", name, m)
		}
	}
	ref := largeentity.Ref{V: 1, Container: "blobs", Name: "a/b", Length: 3, ContentType: "text/plain", SHA256: sum, ETag: `"0x1"`, Type: "Edm.String", Mode: "offload"}
	if got, err := largeentity.ParseRef(ref.String()); err != nil || got != ref {
		t.Errorf("ParseRef(%s) = %+v, %v", ref, got, err)
	}
	for _, bad := range []string{`{}`, `{"v":2}`, strings.Replace(ref.String(), `"offload"`, `"copy"`, 1), strings.Replace(ref.String(), `"Edm.String"`, `"Edm.Int32"`, 1),
		strings.Replace(ref.String(), `"v":1`, `"v":1,"x":1`, 1), ref.String() + "{}", "not json"} {
		if _, err := largeentity.ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%s) accepted", bad)
		}
	}
}
