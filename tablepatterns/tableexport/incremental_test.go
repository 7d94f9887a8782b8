package tableexport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// replay applies the chain's manifests in order, later rows replacing
// earlier ones, as a restore of the chain does, and returns the rows by
// key; seen counts in how many manifests each key appeared.
func replay(t *testing.T, b storeadapter.Blobs, chain ...tableexport.Manifest) (rows map[storeadapter.Key]storeadapter.Entity, seen map[storeadapter.Key][]int) {
	t.Helper()
	rows, seen = map[storeadapter.Key]storeadapter.Entity{}, map[storeadapter.Key][]int{}
	for i, m := range chain {
		for _, p := range m.Parts {
			err := tableexport.ReadPart(context.Background(), b, p.Name, func(e storeadapter.Entity) error {
				k := storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
				rows[k] = e
				seen[k] = append(seen[k], i)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return rows, seen
}

// table returns the source's rows by key.
func table(t *testing.T, b *bundle) map[storeadapter.Key]storeadapter.Entity {
	t.Helper()
	out := map[storeadapter.Key]storeadapter.Entity{}
	for _, e := range b.source(t) {
		out[storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}] = e
	}
	return out
}

func verified(t *testing.T, b storeadapter.Blobs, m tableexport.Manifest) {
	t.Helper()
	rep, err := tableexport.Verify(context.Background(), b, m.Name)
	if err != nil || !rep.OK() {
		t.Fatalf("Verify %s = %v, %v", m.Name, rep.Problems, err)
	}
}

// TestIncrementalNeverMissesAWrite is the property of the mark: rows
// inserted and updated while an export runs are in this export or the
// next increment, never in neither. Between parts (AfterPart) the test
// updates a row the scan has passed, inserts one behind it and one ahead
// of it — the ahead row is written later, so it is exported with a
// Timestamp after the behind rows' — and a goroutine keeps inserting and
// updating rows all over the table during the full export and the first
// increment. Replaying the full export and two increments (the last with
// no writer) gives exactly the table; and a mark taken as the largest
// Timestamp exported would have lost the rows written behind the scan.
//
// It runs on two stores. On localstore, with no margin: the store has one
// clock, read once per write as it commits, so the property holds exactly
// and each row written behind the scan is in the first increment only.
//
// On Azurite, as on Azure, the Timestamp comes from the service: Azurite
// stamps a write when its request arrives, before it commits, and its
// Timestamp is not monotonic within a millisecond (azure-behaviour.md). A
// write arriving just before the checkpoint's create can commit after the
// scan passed its key, stamped before the create: with no margin it would
// be in neither export, as on Azure. So the test runs with a margin, and a
// short one, azuriteMargin, because it must not pass by luck. A margin
// longer than the whole test (the default, 5 minutes) would make every
// increment a full export, and the chain would hold the table whatever the
// mark. Here the test waits, polling the emulator's clock, until every
// seeded row is older than the margin before the full export starts, and
// asserts that every row not written since is in the full export only: the
// increments filter. It asserts that the rows written behind the full
// export's scan are not in it, are in the first increment, and have
// Timestamps before the largest exported: only a mark from the scan's
// start keeps them. And the writer writes during every part of the full
// export and the first increment (AfterPart waits for its writes), so
// writes straddle the checkpoint's create and every scan position. With
// a margin shorter than Azurite's time from a request's arrival to its
// commit, a write can be lost and the test fail, as a margin shorter than
// the servers' skew and a write's time in flight can lose rows on Azure
// (with no margin it passed three runs of three here: the window is a
// write in flight across the create, rare; the test does not rely on it).
func TestIncrementalNeverMissesAWrite(t *testing.T) {
	for _, s := range []struct {
		name   string
		bundle func(*testing.T) *bundle
		margin time.Duration
	}{
		{"localstore", newBundle, -1},
		{"azurite", newAzuriteBundle, azuriteMargin},
	} {
		t.Run(s.name, func(t *testing.T) { neverMissesAWrite(t, s.bundle(t), s.margin) })
	}
}

// azuriteMargin is the mark margin of the tests on Azurite: far above its
// time from a request's arrival to its commit (milliseconds), far below
// the test's run.
const azuriteMargin = 500 * time.Millisecond

func neverMissesAWrite(t *testing.T, b *bundle, margin time.Duration) {
	b.seed(t, 60, 3, 50)
	ctx := context.Background()
	tables := b.raw.Tables()
	var seeded time.Time
	for _, e := range b.source(t) {
		seeded = later(seeded, e.Timestamp)
	}
	waitServiceClock(t, b.raw, seeded.Add(max(margin, 0)))
	var version atomic.Int64
	write := func(pk, rk string) {
		e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"V": version.Add(1)}}
		if _, err := tables.UpsertEntity(ctx, "Logs", e, storeadapter.Replace); err != nil {
			t.Error(err)
		}
	}
	var behind []storeadapter.Key
	var written atomic.Int64
	writing := true
	export := func(op string, after *tableexport.Manifest) tableexport.Manifest {
		t.Helper()
		o := b.options(op)
		// About ten parts of eight blocks: enough positions to write
		// behind, few enough calls to keep the run on Azurite short.
		o.MaxPartBytes, o.BlockSize, o.PageSize = 4096, 512, 20
		o.Mark, o.MarkMargin = true, margin
		if after != nil {
			o.After = &tableexport.ManifestRef{Blobs: b.store.Container("exports"), Name: after.Name}
		}
		part := 0
		o.AfterPart = func(_ context.Context, p tableexport.Part) error {
			// The writer writes during every part of both exports it
			// runs beside.
			if writing {
				waitWrites(t, &written, 3)
			}
			if op != "op-full" {
				return nil
			}
			part++
			write(p.Last.PK, p.Last.RK) // an update behind the scan
			k := storeadapter.Key{PK: "p0", RK: fmt.Sprintf("b%03d", part)}
			write(k.PK, k.RK) // an insert behind the scan (p0/b… sorts before p0/r…)
			behind = append(behind, k)
			write("p9", fmt.Sprintf("n%03d", part)) // an insert ahead, written later
			return nil
		}
		m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
		if err != nil {
			t.Fatal(err)
		}
		verified(t, b.store.Container("exports"), m)
		return m
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				write(fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%05d", (i*7)%60)) // an update
			} else {
				// An insert ahead of the scan or behind it, a bounded
				// number of keys (so the scan ends) updated again later.
				write(fmt.Sprintf("p%d", i%3), fmt.Sprintf("w%03d", i%100))
			}
			written.Add(1)
		}
	})
	full := export("op-full", nil)
	inc1 := export("op-inc1", &full)
	close(stop)
	wg.Wait()
	writing = false
	inc2 := export("op-inc2", &inc1)

	if full.Incremental() || full.Mark == "" || !inc1.Incremental() || inc1.Since != full.Mark || inc1.After != "exports/"+full.Name || inc2.Since != inc1.Mark {
		t.Fatalf("chain: full since %q mark %q; inc1 since %q after %q mark %q; inc2 since %q", full.Since, full.Mark, inc1.Since, inc1.After, inc1.Mark, inc2.Since)
	}
	if written.Load() < 20 || len(behind) < 3 {
		t.Fatalf("the writer wrote %d rows, AfterPart %d: the test needs writes during the exports", written.Load(), len(behind))
	}
	got, seen := replay(t, b.raw.Container("exports"), full, inc1, inc2)
	want := table(t, b)
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.Properties["V"] != w.Properties["V"] || !g.Timestamp.Equal(w.Timestamp) {
			t.Errorf("row %v: the chain holds %v (in %v), the table %v at %v", k, g.Properties, seen[k], w.Properties, w.Timestamp)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the chain holds %d rows, the table %d", len(got), len(want))
	}

	// The increments filter: a row last written before the full export's
	// mark is in the full export only.
	mark, err := full.MarkTime()
	if err != nil {
		t.Fatal(err)
	}
	old := 0
	for k, w := range want {
		if w.Timestamp.Before(mark) {
			old++
			if fmt.Sprint(seen[k]) != "[0]" {
				t.Errorf("row %v, last written at %v before the full export's mark %s: in %v; want it in the full export only", k, w.Timestamp, full.Mark, seen[k])
			}
		}
	}
	if old < 10 {
		t.Errorf("%d rows were last written before the full export's mark %s; the test needs rows the increments leave out", old, full.Mark)
	}

	// The hazard was there: the rows written behind the scan are not in
	// the full export, whose rows go past their Timestamps.
	var largest time.Time
	fullRows, _ := replay(t, b.raw.Container("exports"), full)
	for _, e := range fullRows {
		largest = later(largest, e.Timestamp)
	}
	hazards := 0
	for _, k := range behind {
		e, err := tables.GetEntity(ctx, "Logs", k.PK, k.RK)
		if err != nil {
			t.Fatal(err)
		}
		// With a margin, the second increment may hold it too.
		if _, in := fullRows[k]; in || len(seen[k]) == 0 || seen[k][0] != 1 || margin < 0 && len(seen[k]) != 1 {
			t.Errorf("row %v: in the full export %v, in %v; want it in the first increment (only, with no margin)", k, in, seen[k])
		}
		if e.Timestamp.Before(largest) {
			hazards++
		}
	}
	if hazards < len(behind)/2 {
		t.Errorf("%d of %d rows written behind the scan have a Timestamp before the largest exported, %v; the test needs that hazard", hazards, len(behind), largest)
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitServiceClock waits until the store stamps writes after ts: it
// writes a probe row to the table Clock and reads its Timestamp back,
// polled, with a deadline.
func waitServiceClock(t *testing.T, s storeadapter.Store, ts time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := s.Tables().CreateTable(ctx, "Clock"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := s.Tables().UpsertEntity(ctx, "Clock", storeadapter.Entity{PartitionKey: "probe", RowKey: "probe"}, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
		e, err := s.Tables().GetEntity(ctx, "Clock", "probe", "probe")
		if err != nil {
			t.Fatal(err)
		}
		if e.Timestamp.After(ts) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store still stamps writes at %v after 10 s, want after %v", e.Timestamp, ts)
		}
	}
}

// TestIncrementalMarkMargin: the mark lies the margin before the
// checkpoint's creation, a row written in the margin is exported twice
// (in the full export and in the increment) and a row written before it
// once; an increment from since exports the rows at or after it only.
func TestIncrementalMarkMargin(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC))
	store := localstore.New(localstore.Options{Clock: clk})
	if err := store.Tables().CreateTable(ctx, "Logs"); err != nil {
		t.Fatal(err)
	}
	if err := store.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	put := func(rk string) time.Time {
		if _, err := store.Tables().UpsertEntity(ctx, "Logs", storeadapter.Entity{PartitionKey: "p", RowKey: rk}, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
		e, err := store.Tables().GetEntity(ctx, "Logs", "p", rk)
		if err != nil {
			t.Fatal(err)
		}
		return e.Timestamp
	}
	old := put("old")
	clk.Advance(10 * time.Minute)
	put("recent")
	clk.Advance(2 * time.Minute)
	opts := func(op string) tableexport.Options {
		return tableexport.Options{Blobs: store.Container("exports"), OpID: op, Mark: true, Clock: clk,
			Checkpoints: idempotentCheckpoints(store)}
	}
	full, err := tableexport.Export(ctx, store.Tables(), storeadapter.Range{Table: "Logs"}, opts("op-full"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := store.Tables().GetEntity(ctx, "Checkpoints", "op-full", "export")
	if err != nil {
		t.Fatal(err)
	}
	// The done save changed the checkpoint's Timestamp; the create was at
	// the clock's time, which stood still since.
	if want := storeadapter.FormatDateTime(clk.Now().Add(-tableexport.DefaultMarkMargin)); full.Mark != want || full.Incremental() || cp.Timestamp.Before(clk.Now()) {
		t.Fatalf("mark %q, want %q (the create's Timestamp less 5 min)", full.Mark, want)
	}
	clk.Advance(time.Hour)
	o := opts("op-inc")
	o.After = &tableexport.ManifestRef{Blobs: store.Container("exports"), Name: full.Name}
	inc, err := tableexport.Export(ctx, store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	_, seen := replay(t, store.Container("exports"), full, inc)
	if fmt.Sprint(seen[storeadapter.Key{PK: "p", RK: "old"}]) != "[0]" || fmt.Sprint(seen[storeadapter.Key{PK: "p", RK: "recent"}]) != "[0 1]" {
		t.Errorf("exports of old and recent: %v; want old in the full export only, recent (in the margin) in both", seen)
	}

	o = opts("op-since")
	o.Since = old.Add(time.Microsecond)
	since, err := tableexport.Export(ctx, store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := replay(t, store.Container("exports"), since); len(rows) != 1 || since.Since != storeadapter.FormatDateTime(o.Since) || since.After != "" {
		t.Errorf("since %s: %d rows (%v), manifest since %q after %q; want recent only", o.Since, len(rows), rows, since.Since, since.After)
	}
}

// TestIncrementalAfterErrors: an after manifest that is missing, of
// another scope or without a mark is an *AfterError naming the manifest
// and what is wrong, and nothing is written; since with after is refused.
func TestIncrementalAfterErrors(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 5, 1, 10)
	ctx := context.Background()
	pk := "p0"
	exp := func(op string, src storeadapter.Range, mark bool, after string) (tableexport.Manifest, error) {
		o := b.options(op)
		o.Mark = mark
		if after != "" {
			o.After = &tableexport.ManifestRef{Blobs: b.store.Container("exports"), Name: after}
		}
		return tableexport.Export(ctx, b.store.Tables(), src, o)
	}
	whole, err := exp("op-whole", storeadapter.Range{Table: "Logs"}, true, "")
	if err != nil {
		t.Fatal(err)
	}
	nomark, err := exp("op-nomark", storeadapter.Range{Table: "Logs"}, false, "")
	if err != nil || nomark.Mark != "" {
		t.Fatalf("an export without Options.Mark: mark %q, %v", nomark.Mark, err)
	}
	for _, c := range []struct {
		after, want string
		src         storeadapter.Range
	}{
		{"logs/nosuch/manifest-x.json", "tableexport: after: manifest exports/logs/nosuch/manifest-x.json does not exist", storeadapter.Range{Table: "Logs"}},
		{whole.Name, "tableexport: after: manifest exports/" + whole.Name + ` is an export of table Logs, not of table Logs pk "p0"`, storeadapter.Range{Table: "Logs", PK: &pk}},
		{nomark.Name, "tableexport: after: manifest exports/" + nomark.Name + " records no mark", storeadapter.Range{Table: "Logs"}},
	} {
		before := len(b.blobs(t))
		_, err := exp("op-bad", c.src, true, c.after)
		var ae *tableexport.AfterError
		if !errors.As(err, &ae) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("after %s: %v; want an *AfterError %q", c.after, err, c.want)
		}
		if n := len(b.blobs(t)); n != before {
			t.Errorf("after %s: %d blobs written", c.after, n-before)
		}
		if _, err := b.raw.Tables().GetEntity(ctx, "Checkpoints", "op-bad", "export"); !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("after %s: a checkpoint was written (%v)", c.after, err)
		}
	}
	o := b.options("op-both")
	o.Since, o.After = time.Now(), &tableexport.ManifestRef{Blobs: b.store.Container("exports"), Name: whole.Name}
	if _, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("since and after: %v; want ErrInvalidInput", err)
	}
}

// TestIncrementalMarkAfterACrash: a delivery that crashes after creating
// the checkpoint, before any save, leaves the mark to derive; the
// redelivery derives it from the checkpoint's unchanged creation
// Timestamp, so the mark is the export's start however often it resumes.
func TestIncrementalMarkAfterACrash(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 30, 1, 50)
	ctx := context.Background()
	crash := errors.New("crash")
	var created time.Time
	b.fault = func(_ int, c instrument.Call) error {
		if (c.Op == instrument.OpStageBlock || c.Op == instrument.OpPut) && strings.HasSuffix(c.Blob, ".jsonl") && created.IsZero() {
			e, err := b.raw.Tables().GetEntity(ctx, "Checkpoints", "op-c", "export")
			if err != nil {
				t.Fatal(err)
			}
			created = e.Timestamp
			return crash
		}
		return nil
	}
	o := b.options("op-c")
	o.MaxPartBytes, o.Mark, o.MarkMargin = 1024, true, time.Minute
	if _, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o); !errors.Is(err, crash) {
		t.Fatalf("first delivery: %v, want the crash", err)
	}
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := storeadapter.FormatDateTime(created.Add(-time.Minute)); m.Mark != want || m.Entities != 30 {
		t.Errorf("mark %q, %d entities; want %q (the create's Timestamp less the margin), 30", m.Mark, m.Entities, want)
	}
}

// TestManifestVersions: a version-1 manifest (before increments) reads as
// a full export without a mark; a version this build does not know is
// refused by its version.
func TestManifestVersions(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	c := b.raw.Container("exports")
	v1 := `{"version":1,"op":"op-old","table":"Logs","source":{},"gzip":false,"container":"exports","folder":"logs/Logs/2025/01/01/0000",` +
		`"started":"2025-01-01T00:00:00.0000000Z","finished":"2025-01-01T00:00:01.0000000Z","entities":0,"bytes":0,"parts":[]}`
	for name, data := range map[string]string{"v1.json": v1, "v3.json": strings.Replace(v1, `"version":1`, `"version":3`, 1)} {
		if _, err := c.Put(ctx, name, []byte(data), storeadapter.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := tableexport.ReadManifest(ctx, c, "v1.json")
	if err != nil || m.Incremental() || m.Mark != "" || m.Scope() != "table Logs" {
		t.Errorf("version 1: %+v, %v", m, err)
	}
	if rep, err := tableexport.Verify(ctx, c, "v1.json"); err != nil || !rep.OK() {
		t.Errorf("Verify version 1: %v, %v", rep.Problems, err)
	}
	if _, err := tableexport.ReadManifest(ctx, c, "v3.json"); err == nil || !strings.Contains(err.Error(), "version 3, this build reads versions 1-2") {
		t.Errorf("version 3: %v", err)
	}
}

func idempotentCheckpoints(s storeadapter.Store) idempotent.Checkpoints {
	return idempotent.Checkpoints{Tables: s.Tables(), Table: "Checkpoints"}
}

// waitWrites waits until n more writes than now are counted (polled, with
// a deadline).
func waitWrites(t *testing.T, written *atomic.Int64, n int64) {
	t.Helper()
	want := written.Load() + n
	for deadline := time.Now().Add(10 * time.Second); written.Load() < want; {
		if time.Now().After(deadline) {
			t.Fatalf("the writer wrote %d rows in 10 s, want %d", written.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestIncrementalRereadsTheFirstPage: the first page is read before the
// checkpoint's create (to find a missing table before any write) and so
// before the mark's instant; a row updated between that read and the
// create is stamped before the mark, so the scan reads the page again and
// exports the new version.
func TestIncrementalRereadsTheFirstPage(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 10, 1, 10)
	ctx := context.Background()
	b.fault = func(_ int, c instrument.Call) error {
		if c.Op == instrument.OpInsertEntity && c.Name == "Checkpoints" {
			e := storeadapter.Entity{PartitionKey: "p0", RowKey: "r00000", Properties: map[string]any{"N": int64(-1)}}
			if _, err := b.raw.Tables().UpsertEntity(ctx, "Logs", e, storeadapter.Replace); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	}
	o := b.options("op-first")
	o.Mark, o.MarkMargin = true, -1
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := replay(t, b.raw.Container("exports"), m)
	if got := rows[storeadapter.Key{PK: "p0", RK: "r00000"}].Properties["N"]; got != int64(-1) || len(rows) != 10 {
		t.Errorf("%d rows, p0/r00000 N = %v; want 10 rows and the version written before the create (-1)", len(rows), got)
	}
}

// TestIncrementalSinceWithinAMillisecond: Azurite compares a DateTime
// filter to the millisecond, so an increment whose lower bound falls
// within the millisecond of a row written before it is still handed that
// row. The increment leaves it out (the rows it holds are those at or
// after its since, as Verify checks, and as Azure selects them); a row
// written after the since is in it.
func TestIncrementalSinceWithinAMillisecond(t *testing.T) {
	b := newAzuriteBundle(t)
	ctx := context.Background()
	tables := b.raw.Tables()
	for i := 0; ; i++ {
		e := storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("old%03d", i), Properties: map[string]any{"N": int64(i)}}
		if _, err := tables.InsertEntity(ctx, "Logs", e); err != nil {
			t.Fatal(err)
		}
		got, err := tables.GetEntity(ctx, "Logs", "p", e.RowKey)
		if err != nil {
			t.Fatal(err)
		}
		// A since after the row, in its millisecond: Azurite's Timestamp
		// has seven digits, the last four not always 0.
		since := got.Timestamp.Truncate(time.Millisecond).Add(time.Millisecond - 100*time.Nanosecond)
		if !since.After(got.Timestamp) {
			if i == 20 {
				t.Fatalf("20 rows written at the end of their millisecond (%v): no since fits after one", got.Timestamp)
			}
			continue
		}
		waitServiceClock(t, b.raw, since.Add(time.Millisecond))
		later := storeadapter.Entity{PartitionKey: "p", RowKey: "new", Properties: map[string]any{"N": int64(-1)}}
		if _, err := tables.InsertEntity(ctx, "Logs", later); err != nil {
			t.Fatal(err)
		}
		o := b.options("op-within")
		o.Since = since
		m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
		if err != nil {
			t.Fatal(err)
		}
		verified(t, b.store.Container("exports"), m)
		if m.Entities != 1 {
			t.Fatalf("the increment since %v holds %d rows, want 1 (the row written after it, not %s of %v)", since, m.Entities, e.RowKey, got.Timestamp)
		}
		return
	}
}
