package tableexport_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// exportTime is the Now of every export in these tests: the folder is
// 2026/11/21/1030.
var exportTime = time.Date(2026, 11, 21, 10, 30, 42, 0, time.UTC)

// bundle is a store behind the instrument: a localstore with a clock that
// moves 1 ms per reading so entities get distinct, reproducible
// Timestamps (newBundle), or Azurite (newAzuriteBundle).
type bundle struct {
	raw   storeadapter.Store
	store *instrument.Store
	mu    sync.Mutex // guards calls while an export runs
	calls int
	// fault, when set, sees every call (numbered from 1 since the last
	// reset of calls) and may fail it.
	fault func(n int, c instrument.Call) error
	// after records the parts an AfterPart hook finished.
	after map[string]bool
}

func newBundle(t *testing.T) *bundle {
	t.Helper()
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	return wrapBundle(t, localstore.New(localstore.Options{Clock: clock.NewFake(now).AutoAdvance(time.Millisecond + 1234500*time.Nanosecond/10000)}))
}

// newAzuriteBundle is a bundle on an emulator of the test's own.
func newAzuriteBundle(t *testing.T) *bundle {
	t.Helper()
	s, err := azstore.NewFromConnectionString(azurite.ForTest(t).ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	return wrapBundle(t, s)
}

// wrapBundle puts raw behind the instrument and creates the table Logs
// and the container exports.
func wrapBundle(t *testing.T, raw storeadapter.Store) *bundle {
	t.Helper()
	b := &bundle{raw: raw}
	b.store = instrument.Wrap(b.raw, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		// The cursor reads a page ahead on a goroutine of its own.
		b.mu.Lock()
		b.calls++
		n, f := b.calls, b.fault
		b.mu.Unlock()
		if f != nil {
			return f(n, c)
		}
		return nil
	}})
	ctx := context.Background()
	if err := b.raw.Tables().CreateTable(ctx, "Logs"); err != nil {
		t.Fatal(err)
	}
	if err := b.raw.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// seed inserts n entities over partitions p0..p(parts-1), each with a
// string of size bytes.
func (b *bundle) seed(t *testing.T, n, parts, size int) {
	t.Helper()
	for i := range n {
		e := storeadapter.Entity{PartitionKey: fmt.Sprintf("p%d", i%parts), RowKey: fmt.Sprintf("r%05d", i),
			Properties: map[string]any{"N": int64(i), "Text": strings.Repeat("x", size)}}
		if _, err := b.raw.Tables().InsertEntity(context.Background(), "Logs", e); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bundle) options(op string) tableexport.Options {
	return tableexport.Options{
		Blobs:       b.store.Container("exports"),
		Prefix:      "logs",
		OpID:        op,
		Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"},
		Clock:       clock.NewFake(exportTime),
		PageSize:    7,
		BlockSize:   100,
	}
}

// blob is one stored blob, for comparisons.
type blob struct {
	data []byte
	ct   string
	md   map[string]string
}

// blobs returns every blob of the container.
func (b *bundle) blobs(t *testing.T) map[string]blob {
	t.Helper()
	ctx := context.Background()
	c := b.raw.Container("exports")
	out := map[string]blob{}
	page, err := c.List(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page.Blobs {
		data, props, err := c.Get(ctx, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Name] = blob{data, props.ContentType, props.Metadata}
	}
	return out
}

// source returns the table's rows in key order.
func (b *bundle) source(t *testing.T) []storeadapter.Entity {
	t.Helper()
	var out []storeadapter.Entity
	q := storeadapter.Query{}
	for {
		page, err := b.raw.Tables().Query(context.Background(), "Logs", q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Entities...)
		if q.Continuation = page.Next; q.Continuation == "" {
			return out
		}
	}
}

// exported reads back every entity of a manifest's parts, in order.
func exported(t *testing.T, blobs storeadapter.Blobs, m tableexport.Manifest) []storeadapter.Entity {
	t.Helper()
	var out []storeadapter.Entity
	for _, p := range m.Parts {
		if err := tableexport.ReadPart(context.Background(), blobs, p.Name, func(e storeadapter.Entity) error {
			out = append(out, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// sameEntities checks that got holds exactly want: keys, every property
// with its EDM type, Timestamp and ETag.
func sameEntities(t *testing.T, want, got []storeadapter.Entity) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("exported %d entities, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.PartitionKey != w.PartitionKey || g.RowKey != w.RowKey || g.ETag != w.ETag || !g.Timestamp.Equal(w.Timestamp) {
			t.Fatalf("entity %d: got %q/%q ETag %s at %v, want %q/%q ETag %s at %v", i, g.PartitionKey, g.RowKey, g.ETag, g.Timestamp,
				w.PartitionKey, w.RowKey, w.ETag, w.Timestamp)
		}
		if len(g.Properties) != len(w.Properties) {
			t.Fatalf("entity %d: %d properties, want %d", i, len(g.Properties), len(w.Properties))
		}
		for name, v := range w.Properties {
			if !storeadapter.Equal(v, g.Properties[name]) {
				t.Errorf("entity %d property %s: got %s, want %s", i, name, storeadapter.Format(g.Properties[name]), storeadapter.Format(v))
			}
		}
	}
}

func verifyOK(t *testing.T, blobs storeadapter.Blobs, m tableexport.Manifest) tableexport.Report {
	t.Helper()
	r, err := tableexport.Verify(context.Background(), blobs, m.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("Verify found problems: %q", r.Problems)
	}
	return r
}

// TestExportEveryEDMType: every EDM type at its extremes, non-BMP keys
// and values, empty strings, NaN and infinities round-trip exactly, with
// the Timestamp (seven fractional digits) and the ETag of each row.
func TestExportEveryEDMType(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	props := map[string]any{
		"I64Big": int64(1<<53 + 1), "I64Min": int64(math.MinInt64), "I64Max": int64(math.MaxInt64), "I64One": int64(1),
		"I32": int32(math.MinInt32), "Dbl": 0.1, "DblInt": 2.0, "NaN": math.NaN(), "Inf": math.Inf(1), "NegInf": math.Inf(-1),
		"Tiny": math.SmallestNonzeroFloat64, "When": time.Date(2026, 11, 21, 10, 0, 0, 123456700, time.UTC),
		"Min": time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC), "Guid": storeadapter.GUID{0xde, 0xad, 0xbe, 0xef, 15: 1},
		"Bin": []byte{0, 1, 0xfe, 0xff}, "BinEmpty": []byte{}, "Empty": "", "Astral": "😀 \U00010000 \uffff \u2028 \"q\" <&>",
		"True": true, "False": false,
	}
	for i, rk := range []string{" ", "a", "😀", "\ue000", "z"} {
		e := storeadapter.Entity{PartitionKey: "p" + string(rune('😀'+i)), RowKey: rk, Properties: props}
		if _, err := b.raw.Tables().InsertEntity(ctx, "Logs", e); err != nil {
			t.Fatal(err)
		}
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, b.options("op-edm"))
	if err != nil {
		t.Fatal(err)
	}
	want := b.source(t)
	sameEntities(t, want, exported(t, b.store.Container("exports"), m))
	if m.Entities != 5 || len(m.Parts) != 1 || m.Parts[0].Name != "logs/Logs/2026/11/21/1030/000001.jsonl" {
		t.Fatalf("manifest %+v, want 5 entities in logs/Logs/2026/11/21/1030/000001.jsonl", m)
	}
	got := b.blobs(t)
	part := got[m.Parts[0].Name]
	if part.ct != "application/x-ndjson" {
		t.Errorf("content type %q, want application/x-ndjson", part.ct)
	}
	md := part.md
	if md["op"] != "op-edm" || md["table"] != "Logs" || md["entitycount"] != "5" || md["part"] != "1" ||
		md["starttime"] != storeadapter.FormatDateTime(want[0].Timestamp) || md["endtime"] != storeadapter.FormatDateTime(want[4].Timestamp) ||
		len(md["sha256"]) != 64 {
		t.Errorf("part metadata %v", md)
	}
	if !strings.Contains(string(part.data), `"Timestamp@odata.type":"Edm.DateTime"`) {
		t.Errorf("a line lacks the Timestamp annotation: %.300s", part.data)
	}
	if _, ok := got["logs/Logs/2026/11/21/1030/manifest-op-edm.json"]; !ok {
		t.Errorf("no manifest in %v", slices.Sorted(maps.Keys(got)))
	}
	verifyOK(t, b.store.Container("exports"), m)
}

// TestExportCrashAtEveryCall fails a multi-part export at each of its
// storage calls in turn, then runs it again: every time the parts and the
// manifest are byte for byte those of an export that never failed (no
// duplicate or missing line), for a whole table of several partitions
// and for a RowKey range, plain and gzipped.
func TestExportCrashAtEveryCall(t *testing.T) {
	pk, from, to := "p1", "r00010", "r00090"
	cases := []struct {
		name string
		src  storeadapter.Range
		gzip bool
	}{
		{"table", storeadapter.Range{Table: "Logs"}, false},
		{"range", storeadapter.Range{Table: "Logs", PK: &pk, RKFrom: &from, RKTo: &to}, false},
		{"table gzip", storeadapter.Range{Table: "Logs"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			setup := func() (*bundle, tableexport.Options) {
				b := newBundle(t)
				b.seed(t, 60, 3, 150)
				o := b.options("op-crash")
				o.MaxPartBytes, o.Gzip = 1024, c.gzip
				b.after = map[string]bool{}
				o.AfterPart = func(ctx context.Context, p tableexport.Part) error {
					if _, err := b.store.Tables().GetEntity(ctx, "Logs", "none", "none"); !errors.Is(err, storeadapter.ErrNotFound) {
						return err
					}
					b.after[p.Name] = true
					return nil
				}
				return b, o
			}
			ref, o := setup()
			ref.calls = 0
			want, err := tableexport.Export(ctx, ref.store.Tables(), c.src, o)
			if err != nil {
				t.Fatal(err)
			}
			total := ref.calls
			if len(want.Parts) < 4 {
				t.Fatalf("the reference export wrote %d parts, want several", len(want.Parts))
			}
			wantBlobs := ref.blobs(t)
			verifyOK(t, ref.store.Container("exports"), want)
			for k := 1; k <= total; k++ {
				b, o := setup()
				b.calls = 0
				var failed instrument.Call
				b.fault = func(n int, c instrument.Call) error {
					if n == k {
						failed = c
						return fmt.Errorf("crash at call %d: %w", k, storeadapter.ErrUnavailable)
					}
					return nil
				}
				if _, err := tableexport.Export(ctx, b.store.Tables(), c.src, o); err == nil {
					t.Fatalf("call %d (%s) failed and Export returned nil", k, failed.Op)
				}
				b.fault = nil
				got, err := tableexport.Export(ctx, b.store.Tables(), c.src, o)
				if err != nil {
					t.Fatalf("re-run after a crash at call %d (%s): %v", k, failed.Op, err)
				}
				gotBlobs := b.blobs(t)
				if len(gotBlobs) != len(wantBlobs) {
					t.Fatalf("crash at call %d (%s): %d blobs %v, want %d", k, failed.Op, len(gotBlobs), slices.Sorted(maps.Keys(gotBlobs)), len(wantBlobs))
				}
				for name, w := range wantBlobs {
					g, ok := gotBlobs[name]
					if !ok || !bytes.Equal(g.data, w.data) || g.ct != w.ct || !maps.Equal(g.md, w.md) {
						t.Fatalf("crash at call %d (%s): blob %s differs from the export that never failed", k, failed.Op, name)
					}
				}
				// AfterPart (one storage call, which may be the one that
				// fails) has finished for every part in one run or the
				// other: the re-run calls it again for a part the crash
				// left without it.
				for _, p := range want.Parts {
					if !b.after[p.Name] {
						t.Fatalf("crash at call %d (%s): AfterPart finished for %v, not for %s", k, failed.Op, slices.Sorted(maps.Keys(b.after)), p.Name)
					}
				}
				if got.Entities != want.Entities || len(got.Parts) != len(want.Parts) {
					t.Fatalf("crash at call %d: manifest %d entities in %d parts, want %d in %d", k, got.Entities, len(got.Parts), want.Entities, len(want.Parts))
				}
			}
			// The reference export's rows, exactly once each.
			var src []storeadapter.Entity
			for _, e := range ref.source(t) {
				if c.src.PK == nil || e.PartitionKey == pk && e.RowKey >= from && e.RowKey < to {
					src = append(src, e)
				}
			}
			if c.src.PK == nil {
				slices.SortStableFunc(src, func(a, b storeadapter.Entity) int {
					return cmpKeys(a, b)
				})
			}
			sameEntities(t, src, exported(t, ref.store.Container("exports"), want))
		})
	}
}

func cmpKeys(a, b storeadapter.Entity) int {
	if c := storeadapter.CompareUTF16(a.PartitionKey, b.PartitionKey); c != 0 {
		return c
	}
	return storeadapter.CompareUTF16(a.RowKey, b.RowKey)
}

// TestExportRedeliveredAfterDone: a finished export run again returns the
// same manifest and writes nothing, however late it comes (a new minute).
func TestExportRedeliveredAfterDone(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 20, 2, 10)
	ctx := context.Background()
	o := b.options("op-done")
	first, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	before := b.blobs(t)
	var writes []instrument.Op
	b.fault = func(_ int, c instrument.Call) error {
		switch c.Op {
		case instrument.OpPut, instrument.OpStageBlock, instrument.OpCommitBlocks, instrument.OpUpsertEntity, instrument.OpTransact, instrument.OpDeleteBlob:
			writes = append(writes, c.Op)
		}
		return nil
	}
	o.Clock = clock.NewFake(exportTime.Add(time.Hour))
	again, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != 0 {
		t.Errorf("the redelivery wrote: %v", writes)
	}
	if again.Name != first.Name || again.Entities != 20 || len(again.Parts) != len(first.Parts) {
		t.Errorf("redelivery returned %+v, want the first manifest %+v", again, first)
	}
	if after := b.blobs(t); len(after) != len(before) {
		t.Errorf("%d blobs after the redelivery, want %d", len(after), len(before))
	}
}

// TestExportSharedMinute: two exports in one minute folder take part
// numbers in turn, neither adopts or overwrites the other's, and a commit
// that loses its number to the other re-reads its rows into the next.
func TestExportSharedMinute(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 40, 1, 100)
	ctx := context.Background()
	pk, mid := "p0", "r00020"
	srcA := storeadapter.Range{Table: "Logs", PK: &pk, RKTo: &mid}
	srcB := storeadapter.Range{Table: "Logs", PK: &pk, RKFrom: &mid}
	oA, oB := b.options("op-a"), b.options("op-b")
	oA.MaxPartBytes, oB.MaxPartBytes = 1024, 1024
	// B runs whole after A's first part; B's first commit finds its
	// number taken by a third writer's part that appears meanwhile.
	var mB tableexport.Manifest
	stolen := false
	oA.AfterPart = func(ctx context.Context, p tableexport.Part) error {
		if p.Number != 1 {
			return nil
		}
		b.fault = func(_ int, c instrument.Call) error {
			if c.Op == instrument.OpCommitBlocks && !stolen {
				stolen = true
				_, err := b.raw.Container("exports").Put(ctx, c.Blob, []byte("{}\n"), storeadapter.PutOptions{Metadata: map[string]string{"op": "op-other"}})
				return err
			}
			return nil
		}
		var err error
		mB, err = tableexport.Export(ctx, b.store.Tables(), srcB, oB)
		b.fault = nil
		return err
	}
	mA, err := tableexport.Export(ctx, b.store.Tables(), srcA, oA)
	if err != nil {
		t.Fatal(err)
	}
	if !stolen {
		t.Fatal("the race was not staged")
	}
	if mA.Folder != mB.Folder {
		t.Fatalf("folders %s and %s, want one", mA.Folder, mB.Folder)
	}
	owner := map[string]string{}
	for op, m := range map[string]tableexport.Manifest{"op-a": mA, "op-b": mB} {
		verifyOK(t, b.store.Container("exports"), m)
		for _, p := range m.Parts {
			if prev, dup := owner[p.Name]; dup {
				t.Fatalf("part %s listed by %s and %s", p.Name, prev, op)
			}
			owner[p.Name] = op
		}
	}
	if owner[mA.Folder+"/000001.jsonl"] != "op-a" || owner[mA.Folder+"/000002.jsonl"] != "" || owner[mA.Folder+"/000003.jsonl"] != "op-b" {
		t.Errorf("owners %v; want part 1 A's, 2 the third writer's, 3 B's", owner)
	}
	all := b.source(t)
	sameEntities(t, all[:20], exported(t, b.store.Container("exports"), mA))
	sameEntities(t, all[20:], exported(t, b.store.Container("exports"), mB))
}

// TestExportPartSizes: parts never pass the cap, except a line longer
// than the cap, which gets a part of its own; given the rows, the cut
// points are fixed.
func TestExportPartSizes(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	for i, size := range []int{100, 200, 3000, 100, 100, 900, 5000, 10} {
		e := storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%d", i), Properties: map[string]any{"S": strings.Repeat("y", size)}}
		if _, err := b.raw.Tables().InsertEntity(ctx, "Logs", e); err != nil {
			t.Fatal(err)
		}
	}
	o := b.options("op-size")
	o.MaxPartBytes = 1024
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, p := range m.Parts {
		counts = append(counts, p.Entities)
		if p.Bytes > o.MaxPartBytes && p.Entities != 1 {
			t.Errorf("part %s: %d bytes in %d lines, over the cap", p.Name, p.Bytes, p.Entities)
		}
	}
	if want := []int64{2, 1, 2, 1, 1, 1}; !slices.Equal(counts, want) {
		t.Errorf("lines per part %v, want %v", counts, want)
	}
	verifyOK(t, b.store.Container("exports"), m)
}

// TestExportGzip: gzipped parts are named .jsonl.gz, typed
// application/gzip, hold the same lines as a plain export, carry the
// hash of the compressed bytes, and ReadPart reads them.
func TestExportGzip(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 30, 2, 300)
	ctx := context.Background()
	plain := b.options("op-plain")
	plain.MaxPartBytes = 2048
	gz := plain
	gz.OpID, gz.Gzip = "op-gz", true
	mp, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, plain)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, gz)
	if err != nil {
		t.Fatal(err)
	}
	if !mg.Gzip || len(mg.Parts) != len(mp.Parts) {
		t.Fatalf("gzip manifest: gzip %v, %d parts; want true and %d", mg.Gzip, len(mg.Parts), len(mp.Parts))
	}
	blobs := b.blobs(t)
	for i, p := range mg.Parts {
		if !strings.HasSuffix(p.Name, ".jsonl.gz") || blobs[p.Name].ct != "application/gzip" {
			t.Fatalf("part %s of content type %q", p.Name, blobs[p.Name].ct)
		}
		r, err := gzip.NewReader(bytes.NewReader(blobs[p.Name].data))
		if err != nil {
			t.Fatal(err)
		}
		if r.Name != "" || !r.ModTime.IsZero() {
			t.Errorf("gzip header holds name %q, time %v", r.Name, r.ModTime)
		}
		lines, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lines, blobs[mp.Parts[i].Name].data) {
			t.Errorf("part %s does not hold the lines of %s", p.Name, mp.Parts[i].Name)
		}
		if p.Bytes >= mp.Parts[i].Bytes {
			t.Errorf("part %s: %d bytes compressed, %d plain", p.Name, p.Bytes, mp.Parts[i].Bytes)
		}
	}
	sameEntities(t, b.source(t), exported(t, b.store.Container("exports"), mg))
	verifyOK(t, b.store.Container("exports"), mg)
}

// TestVerifyFindsProblems: a tampered part, a missing part, a wrong count
// in the manifest and an extra part of the same op are each reported.
func TestVerifyFindsProblems(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 40, 1, 100)
	ctx := context.Background()
	o := b.options("op-v")
	o.MaxPartBytes = 1024
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) < 3 {
		t.Fatalf("%d parts, want at least 3", len(m.Parts))
	}
	c := b.raw.Container("exports")
	// Tamper with part 1, keeping its metadata and size.
	data, props, err := c.Get(ctx, m.Parts[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(data, []byte(`"N":"0"`), []byte(`"N":"9"`), 1)
	if _, err := c.Put(ctx, m.Parts[0].Name, tampered, storeadapter.PutOptions{ContentType: props.ContentType, Metadata: props.Metadata}); err != nil {
		t.Fatal(err)
	}
	// Remove part 2.
	part2, props2, err := c.Get(ctx, m.Parts[1].Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, m.Parts[1].Name, ""); err != nil {
		t.Fatal(err)
	}
	// An extra part of the op after the last.
	extra := fmt.Sprintf("%s/%06d.jsonl", m.Folder, len(m.Parts)+1)
	if _, err := c.Put(ctx, extra, data, storeadapter.PutOptions{Metadata: props.Metadata}); err != nil {
		t.Fatal(err)
	}
	// A wrong count in the manifest for part 3.
	raw, mprops, err := c.Get(ctx, m.Name)
	if err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf(`"name": %q,
      "entities": %%d,`, m.Parts[2].Name)
	wrong := bytes.Replace(raw, fmt.Appendf(nil, entry, m.Parts[2].Entities), fmt.Appendf(nil, entry, m.Parts[2].Entities+1), 1)
	if bytes.Equal(wrong, raw) {
		t.Fatalf("could not find part 3's count in the manifest:\n%s", raw)
	}
	if _, err := c.Put(ctx, m.Name, wrong, storeadapter.PutOptions{ContentType: mprops.ContentType}); err != nil {
		t.Fatal(err)
	}
	r, err := tableexport.Verify(ctx, b.store.Container("exports"), m.Name)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(r.Problems, "\n")
	for _, want := range []string{
		m.Parts[0].Name + ": SHA-256 is",
		m.Parts[1].Name + ": missing",
		fmt.Sprintf("%s: %d lines, the manifest says %d entities", m.Parts[2].Name, m.Parts[2].Entities, m.Parts[2].Entities+1),
		fmt.Sprintf("%s: metadata entitycount is %q", m.Parts[2].Name, fmt.Sprint(m.Parts[2].Entities)),
		"manifest totals",
		extra + ": of this export (op op-v) but not in the manifest",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Verify problems lack %q:\n%s", want, text)
		}
	}
	if r.OK() || r.Complete() {
		t.Error("Report.OK or Complete with problems")
	}
	if !slices.Equal(r.Strays, []string{extra}) {
		t.Errorf("Strays = %q, want [%s]", r.Strays, extra)
	}
	// A stray alone leaves the export complete: its rows are in the
	// listed parts.
	if _, err := c.Put(ctx, m.Name, raw, storeadapter.PutOptions{ContentType: mprops.ContentType}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, m.Parts[0].Name, data, storeadapter.PutOptions{ContentType: props.ContentType, Metadata: props.Metadata}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, m.Parts[1].Name, part2, storeadapter.PutOptions{ContentType: props2.ContentType, Metadata: props2.Metadata}); err != nil {
		t.Fatal(err)
	}
	if r, err := tableexport.Verify(ctx, b.store.Container("exports"), m.Name); err != nil || r.OK() || !r.Complete() || len(r.Problems) != 1 {
		t.Errorf("Verify with only a stray = %v, %q; want Complete and one problem", err, r.Problems)
	}
	// CleanStrays: a dry run names the stray and deletes nothing; then it
	// is deleted, and Verify finds nothing.
	cl, err := tableexport.CleanStrays(ctx, c, m.Name, true)
	if err != nil || !slices.Equal(cl.Strays, []string{extra}) || cl.Deleted != 0 {
		t.Errorf("CleanStrays dry run = %+v, %v; want the stray named, nothing deleted", cl, err)
	}
	if _, err := c.Properties(ctx, extra); err != nil {
		t.Errorf("the dry run deleted the stray: %v", err)
	}
	if cl, err = tableexport.CleanStrays(ctx, c, m.Name, false); err != nil || cl.Deleted != 1 {
		t.Errorf("CleanStrays = %+v, %v; want the stray deleted", cl, err)
	}
	if r, err := tableexport.Verify(ctx, c, m.Name); err != nil || !r.OK() {
		t.Errorf("Verify after CleanStrays = %v, %q; want OK", err, r.Problems)
	}
	if _, err := tableexport.Verify(ctx, b.store.Container("exports"), "no/such/manifest.json"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Verify of a missing manifest = %v, want ErrNotFound", err)
	}
}

// TestExportEmptyAndErrors: zero rows give a manifest with no parts (or
// none with SkipEmptyManifest); a missing container or table and bad
// options are refused before anything is written.
func TestExportEmptyAndErrors(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, b.options("op-empty"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name == "" || len(m.Parts) != 0 || m.Entities != 0 {
		t.Fatalf("empty export manifest %+v, want a manifest with no parts", m)
	}
	verifyOK(t, b.store.Container("exports"), m)
	o := b.options("op-skip")
	o.SkipEmptyManifest = true
	if m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o); err != nil || m.Name != "" {
		t.Fatalf("SkipEmptyManifest export = %+v, %v; want no manifest", m, err)
	}
	if n := len(b.blobs(t)); n != 1 {
		t.Errorf("%d blobs, want the one manifest", n)
	}

	o = b.options("op-nocontainer")
	o.Blobs = b.store.Container("nosuch")
	if _, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o); !errors.Is(err, storeadapter.ErrContainerNotFound) {
		t.Errorf("export to a missing container = %v, want ErrContainerNotFound", err)
	}
	o.CreateContainer = true
	if _, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o); err != nil {
		t.Errorf("export creating its container = %v", err)
	}
	if _, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Nosuch"}, b.options("op-notable")); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Errorf("export of a missing table = %v, want ErrTableNotFound", err)
	}
	if tok, err := (idempotent.Checkpoints{Tables: b.raw.Tables(), Table: "Checkpoints"}).Load(ctx, "op-notable", tableexport.DefaultStep); err != nil || tok != "" {
		t.Errorf("export of a missing table left a checkpoint %q (%v)", tok, err)
	}
	pk, a, z := "p", "b", "a"
	for _, c := range []struct {
		src  storeadapter.Range
		o    func(*tableexport.Options)
		want string
	}{
		{storeadapter.Range{Table: "x"}, nil, "table:"},
		{storeadapter.Range{Table: "Logs", RKFrom: &a}, nil, "pk: is required with rkFrom or rkTo"},
		{storeadapter.Range{Table: "Logs", PK: &pk, RKFrom: &a, RKTo: &z}, nil, "rkTo: must be greater than rkFrom"},
		{storeadapter.Range{Table: "Logs"}, func(o *tableexport.Options) { o.MaxPartBytes = 1000 }, "maxPartBytes: must be 1024-4294967296, got 1000"},
		{storeadapter.Range{Table: "Logs"}, func(o *tableexport.Options) { o.Prefix = "a/../b" }, `prefix: the prefix must not hold "." or ".."`},
	} {
		o := b.options("op-bad")
		if c.o != nil {
			c.o(&o)
		}
		if _, err := tableexport.Export(ctx, b.store.Tables(), c.src, o); !errors.Is(err, storeadapter.ErrInvalidInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Export(%+v) = %v, want ErrInvalidInput with %q", c.src, err, c.want)
		}
	}
}

// TestExportPasses: with Passes, rows an AfterPart left behind (here: a
// row inserted behind the scan) are exported by a later pass into new
// parts whose numbers continue.
func TestExportPasses(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 10, 1, 100)
	ctx := context.Background()
	o := b.options("op-passes")
	o.MaxPartBytes, o.Passes = 1024, 3
	inserted := false
	o.AfterPart = func(ctx context.Context, p tableexport.Part) error {
		// Delete the part's rows, as the archive does.
		if err := tableexport.ReadPart(ctx, o.Blobs, p.Name, func(e storeadapter.Entity) error {
			return idempotent.DeleteIfMatch(ctx, b.raw.Tables(), "Logs", e.PartitionKey, e.RowKey, e.ETag)
		}); err != nil {
			return err
		}
		if !inserted {
			inserted = true
			_, err := b.raw.Tables().InsertEntity(ctx, "Logs", storeadapter.Entity{PartitionKey: "p0", RowKey: "a-behind"})
			return err
		}
		return nil
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if m.Entities != 11 {
		t.Errorf("exported %d entities, want 11 (10 and the row inserted behind the scan)", m.Entities)
	}
	if left := b.source(t); len(left) != 0 {
		t.Errorf("%d rows left in the source", len(left))
	}
	verifyOK(t, b.store.Container("exports"), m)
}

// TestReadCheckedPart: the read hands every entity over and passes on the
// part as exported; on a part with other bytes it hands them over too and
// says so at the end (ErrDamaged, naming the part); an error of fn stops
// it and is returned as fn's, never as ErrDamaged.
func TestReadCheckedPart(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 20, 1, 10)
	ctx := context.Background()
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, b.options("op-r"))
	if err != nil {
		t.Fatal(err)
	}
	c, mp := b.raw.Container("exports"), m.Parts[0]
	count := func() (int, error) {
		n := 0
		err := tableexport.ReadCheckedPart(ctx, c, mp, func(storeadapter.Entity) error { n++; return nil })
		return n, err
	}
	if n, err := count(); err != nil || int64(n) != mp.Entities {
		t.Fatalf("as exported: %d entities, %v; want %d, nil", n, err, mp.Entities)
	}
	stop := errors.New("stop")
	if err := tableexport.ReadCheckedPart(ctx, c, mp, func(storeadapter.Entity) error { return stop }); !errors.Is(err, stop) || errors.Is(err, tableexport.ErrDamaged) {
		t.Errorf("fn's error: %v; want it, not ErrDamaged", err)
	}
	data, _, err := c.Get(ctx, mp.Name)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"N":"0"`), []byte(`"N":"9"`), 1) // the first line's Int64, as a string
	if !strings.Contains(string(data), `"N":"9"`) {
		t.Fatalf("no Int64 0 in %s", data)
	}
	if _, err := c.Put(ctx, mp.Name, data, storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); !errors.Is(err, tableexport.ErrDamaged) || !strings.Contains(err.Error(), mp.Name+": SHA-256") || int64(n) != mp.Entities {
		t.Errorf("other bytes: %d entities handed over, %v; want all %d, then ErrDamaged naming the part's SHA-256", n, err, mp.Entities)
	}
	// A line more than the manifest lists is never handed over.
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	data = append(data, append(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")), '\n')...)
	if _, err := c.Put(ctx, mp.Name, data, storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); !errors.Is(err, tableexport.ErrDamaged) || !strings.Contains(err.Error(), "more lines than the") || int64(n) != mp.Entities {
		t.Errorf("a line more: %d entities handed over, %v; want %d, then ErrDamaged saying there are more lines", n, err, mp.Entities)
	}
}
