package e2e

// Like workers_test.go, this test runs on its own (no t.Parallel): it kills
// workers.

import (
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestKilledRangeArchiveToBlobConverges archives a RowKey range of a few
// thousand rows to blobs (JSON-lines parts through the exporter) while the
// application rewrites some of the range's rows, and kills the worker with
// SIGKILL twice: once past some committed parts with rows still in the
// range, then after more progress. After a drain the range is empty in the
// source and every row around it untouched; the parts of the operation
// (and of its later generations, if any) hold every row of the range,
// each version at most once: a row the application did not touch exactly
// once as seeded, with the ETag it had; a rewritten row with the last
// version the application wrote in its last line. Every manifest verifies,
// and every part is listed in one.
func TestKilledRangeArchiveToBlobConverges(t *testing.T) {
	e := setup(t, 120*time.Second)
	start := time.Now()
	src, ckpt, c := e.table("ArcBlob"), e.table("ArcBlobCkpt"), e.container("arcblob")
	q := e.queue("arcblob")
	const pk, n, from, to = "arc", 2400, 100, 2300 // the range is [rowKey(from), rowKey(to))
	seeded := numbered(pk, n)
	for i := range seeded {
		seeded[i].Properties["Version"] = int64(1)
	}
	seeded = append(seeded, numbered("keep", 50)...)
	e.seed(src, seeded)
	before := map[string]storeadapter.Entity{}
	var inRange, outside, rewritten []storeadapter.Entity
	for _, en := range e.entities(src, storeadapter.Filter{}) {
		before[en.PartitionKey+"/"+en.RowKey] = en
		if en.PartitionKey == pk && en.RowKey >= rowKey(from) && en.RowKey < rowKey(to) {
			inRange = append(inRange, en)
			if len(inRange)%50 == 0 {
				rewritten = append(rewritten, en) // every 50th row of the range
			}
		} else {
			outside = append(outside, en)
		}
	}
	cfg := writeWorkerConfig(t, map[string]any{"runner": fastRunner(),
		"archive": map[string]any{"checkpointTable": ckpt, "maxPartBytes": 8 << 10}})
	rng := rand.New(rand.NewPCG(indexSeed(t), 0))

	opID := "op-arcblob-" + e.suffix
	e.enqueue("archive", "-queue", q, "-table", src, "-to-blob", c+"/arc", "-pk", pk,
		"-rk-from", rowKey(from), "-rk-to", rowKey(to), "-id", opID)
	prefix := "arc/" + src + "/"
	app := startApplication(e, src, rewritten)
	left := func() int {
		return len(e.entities(src, storeadapter.RowRange(pk, rowKey(from), rowKey(to))))
	}
	e.killWhile(q, cfg, rng, 2, 150*time.Millisecond, func(kill int) func() bool {
		atStart, _ := e.partCount(c, prefix)
		return func() bool {
			parts, _ := e.partCount(c, prefix)
			return parts >= max(atStart+1, 3)
		}
	})
	remaining := left()
	killedAt, _ := e.partCount(c, prefix)
	t.Logf("after the kills (%v): %d parts, %d rows left in the range", time.Since(start).Round(time.Millisecond), killedAt, remaining)
	if remaining == 0 {
		t.Fatalf("the archive moved the whole range before the last kill: raise the row count")
	}
	last := app.stop()

	stats := e.drain(q, 60*time.Second, "-config", cfg)
	t.Logf("drained in %v: %+v", time.Since(start).Round(time.Millisecond), stats)
	if stats.Poisoned != 0 {
		t.Errorf("draining worker's counters = %+v, want none poisoned", stats)
	}
	checkNoPoison(t, e, q)

	// The source: the range is empty, the rest as it was.
	if n := left(); n != 0 {
		t.Errorf("the range still holds %d rows", n)
	}
	checkLines(t, "the rows outside the range", outside, e.entities(src, storeadapter.Filter{}))

	// The parts: every blob under the prefix is a part of the operation
	// (or of a later generation of it) or a manifest; every manifest
	// verifies, and lists every part.
	ours := func(op string) bool { return op == opID || strings.HasPrefix(op, opID+"+g") }
	listed := map[string]bool{}
	var parts []string
	for _, b := range e.listBlobs(c, "") {
		if isManifest(b.Name) {
			m, err := tableexport.ReadManifest(e.ctx, store.Container(c), b.Name)
			if err != nil {
				t.Fatalf("read manifest %s: %v", b.Name, err)
			}
			if !ours(m.Op) {
				t.Errorf("manifest %s is of operation %s", b.Name, m.Op)
			}
			rep, err := tableexport.Verify(e.ctx, store.Container(c), b.Name)
			if err != nil {
				t.Fatalf("Verify %s: %v", b.Name, err)
			}
			if !rep.OK() {
				t.Errorf("Verify %s:\n%s", b.Name, strings.Join(rep.Problems, "\n"))
			}
			for _, p := range m.Parts {
				listed[p.Name] = true
			}
			continue
		}
		props, err := store.Container(c).Properties(e.ctx, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		if op := props.Metadata[tableexport.MetaOp]; !ours(op) {
			t.Errorf("blob %s is of operation %q", b.Name, op)
		}
		parts = append(parts, b.Name)
	}
	for _, p := range parts {
		if !listed[p] {
			t.Errorf("part %s is in no manifest", p)
		}
	}
	if len(parts) < 20 {
		t.Errorf("the archive wrote %d parts, want dozens: lower the part cap", len(parts))
	}

	// The lines, in the order written: names sort by minute folder, then
	// part number.
	lines := map[string][]storeadapter.Entity{}
	for _, p := range parts {
		err := tableexport.ReadPart(e.ctx, store.Container(c), p, func(en storeadapter.Entity) error {
			k := en.PartitionKey + "/" + en.RowKey
			lines[k] = append(lines[k], en)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadPart %s: %v", p, err)
		}
	}
	bad, multi := 0, 0
	for _, w := range inRange {
		k := w.PartitionKey + "/" + w.RowKey
		got := lines[k]
		delete(lines, k)
		var problem string
		switch wr, touched := last[k]; {
		case len(got) == 0:
			problem = "not archived"
		case !touched || (wr.version == 1 && !wr.unsure):
			if len(got) != 1 {
				problem = fmt.Sprintf("archived %d times, want once", len(got))
			} else if d := diffProperties(w.Properties, got[0].Properties); len(d) > 0 || got[0].ETag != w.ETag {
				problem = fmt.Sprintf("archived with ETag %s, want %s; %s", got[0].ETag, w.ETag, strings.Join(d, "; "))
			}
		default:
			// Each version at most once, in the order written, the last
			// one last.
			var versions []int64
			for _, en := range got {
				v, _ := en.Properties["Version"].(int64)
				versions = append(versions, v)
			}
			if !slices.IsSorted(versions) || len(slices.Compact(slices.Clone(versions))) != len(versions) {
				problem = fmt.Sprintf("archived versions %v, want each once in order", versions)
			} else if lastV := versions[len(versions)-1]; lastV != wr.version && !(wr.unsure && lastV == wr.version+1) {
				problem = fmt.Sprintf("last archived version %d (of %v), want %d, the last written", lastV, versions, wr.version)
			}
			if len(got) > 1 {
				multi++
			}
		}
		if problem != "" {
			if bad++; bad <= 5 {
				t.Errorf("row %s: %s", k, problem)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d rows of the range are wrong in all", bad)
	}
	for k, got := range lines {
		t.Errorf("row %s, outside the range, is archived %d times", k, len(got))
	}
	t.Logf("done in %v: %d parts, %d rows, %d of the %d rewritten ones archived in more than one version",
		time.Since(start).Round(time.Millisecond), len(parts), len(inRange), multi, len(rewritten))
}

// TestRangeArchivesShareAMinuteFolder enqueues six range archives of one
// partition to the same blob prefix at once and drains them with two
// workers, so that several exports claim part numbers in one minute folder
// at the same time. Every manifest must verify, every part must belong to
// the operation of the manifest listing it (none overwritten by another),
// and every row must be archived exactly once.
func TestRangeArchivesShareAMinuteFolder(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	src, ckpt, c := e.table("Shared"), e.table("SharedCkpt"), e.container("shared")
	q := e.queue("shared")
	const ranges, perRange = 6, 200
	e.seed(src, numbered("s", ranges*perRange))
	want := e.entities(src, storeadapter.Filter{})
	cfg := writeWorkerConfig(t, map[string]any{"runner": fastRunner(),
		"archive": map[string]any{"checkpointTable": ckpt, "maxPartBytes": 4 << 10}})
	for i := range ranges {
		e.enqueue("archive", "-queue", q, "-table", src, "-to-blob", c+"/arc", "-pk", "s",
			"-rk-from", rowKey(i*perRange), "-rk-to", rowKey((i+1)*perRange), "-id", fmt.Sprintf("op-shared%d-%s", i, e.suffix))
	}
	w1, w2 := e.startWorker(q, "-drain", "-config", cfg), e.startWorker(q, "-drain", "-config", cfg)
	for _, w := range []*proc{w1, w2} {
		if code := w.wait(e.ctx, 45*time.Second); code != 0 {
			t.Fatalf("%s exited with %d, want 0", w, code)
		}
	}
	if s1, s2 := w1.stats(), w2.stats(); s1.Succeeded+s2.Succeeded != ranges || s1.Poisoned+s2.Poisoned != 0 {
		t.Errorf("worker counters %+v and %+v, want %d succeeded together", s1, s2, ranges)
	}
	checkNoPoison(t, e, q)

	owner := map[string]string{} // part name → the op whose manifest lists it
	manifests := 0
	for _, b := range e.listBlobs(c, "") {
		if !isManifest(b.Name) {
			continue
		}
		manifests++
		rep, err := tableexport.Verify(e.ctx, store.Container(c), b.Name)
		if err != nil {
			t.Fatalf("Verify %s: %v", b.Name, err)
		}
		if !rep.OK() {
			t.Errorf("Verify %s:\n%s", b.Name, strings.Join(rep.Problems, "\n"))
		}
		for _, p := range rep.Manifest.Parts {
			if o, ok := owner[p.Name]; ok {
				t.Errorf("part %s is listed by the manifests of %s and %s", p.Name, o, rep.Manifest.Op)
			}
			owner[p.Name] = rep.Manifest.Op
		}
	}
	if manifests != ranges {
		t.Errorf("%d manifests, want %d", manifests, ranges)
	}
	var got []storeadapter.Entity
	folders := map[string]bool{}
	for _, b := range e.listBlobs(c, "") {
		if isManifest(b.Name) {
			continue
		}
		folders[path.Dir(b.Name)] = true
		if owner[b.Name] == "" {
			t.Errorf("part %s is in no manifest", b.Name)
		}
		err := tableexport.ReadPart(e.ctx, store.Container(c), b.Name, func(en storeadapter.Entity) error {
			got = append(got, en)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadPart %s: %v", b.Name, err)
		}
	}
	slices.SortFunc(got, func(a, b storeadapter.Entity) int { return strings.Compare(a.RowKey, b.RowKey) })
	checkLines(t, "the archived rows", want, got)
	if left := e.entities(src, storeadapter.Filter{}); len(left) != 0 {
		t.Errorf("the source still holds %d rows", len(left))
	}
	t.Logf("%d parts of %d exports in %d minute folder(s)", len(owner), ranges, len(folders))
}
