package e2e

// The tests in this file that kill workers run one at a time (no
// t.Parallel), like those of workers_test.go. They choose the moment of
// each SIGKILL from what storage shows (parts committed, rows gone) plus a
// random delay, so a slow machine moves the kills, never their meaning.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// fastRunner is the "runner" section of the worker config of the tests
// that kill workers: a short lease, so that a killed worker's message comes
// back soon; many deliveries, since every kill costs one; quick retries.
func fastRunner() map[string]any {
	return map[string]any{"visibility": "2s", "maxDequeueCount": 50, "retryBase": "200ms", "retryMax": "1s"}
}

// sendJob sends one job with operation id id straight to queue q, encoded
// as the CLI encodes it.
func (e *env) sendJob(q, id string, args interface{ Kind() string }) {
	e.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: args.Kind(), Args: raw})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := store.Queue(q).Create(e.ctx); err != nil {
		e.t.Fatalf("create queue %s: %v", q, err)
	}
	if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
		e.t.Fatalf("send to %s: %v", q, err)
	}
}

// listBlobs returns every blob of container c whose name starts with
// prefix, in name order; a missing container holds none.
func (e *env) listBlobs(c, prefix string) []storeadapter.BlobProps {
	e.t.Helper()
	var all []storeadapter.BlobProps
	marker := ""
	for {
		page, err := store.Container(c).List(e.ctx, prefix, marker)
		if errors.Is(err, storeadapter.ErrContainerNotFound) {
			return nil
		}
		if err != nil {
			e.t.Fatalf("list %s/%s: %v", c, prefix, err)
		}
		all = append(all, page.Blobs...)
		if page.Next == "" {
			return all
		}
		marker = page.Next
	}
}

// isManifest reports whether a blob name is an export's manifest.
func isManifest(name string) bool { return strings.HasPrefix(path.Base(name), "manifest-") }

// partCount counts the committed parts under prefix of container c and
// reports whether a manifest is there too.
func (e *env) partCount(c, prefix string) (parts int, manifest bool) {
	e.t.Helper()
	for _, b := range e.listBlobs(c, prefix) {
		if isManifest(b.Name) {
			manifest = true
		} else {
			parts++
		}
	}
	return parts, manifest
}

// killWhile starts a worker on q with the config file cfg and kills it
// with SIGKILL kills times, then starts the next; it returns once the last
// killed worker has exited. Before each start it calls moment(k) for kill
// k (from 0), which looks at storage and returns the condition of the
// kill: the worker is killed once it holds (polled every 10 ms) and a
// random delay of up to jitter has passed.
func (e *env) killWhile(q, cfg string, rng *rand.Rand, kills int, jitter time.Duration, moment func(kill int) func() bool) {
	e.t.Helper()
	for k := range kills {
		ready := moment(k)
		w := e.startWorker(q, "-config", cfg)
		e.poll(60*time.Second, 10*time.Millisecond, fmt.Sprintf("the moment of kill %d", k+1), ready)
		time.Sleep(time.Duration(rng.Int64N(int64(jitter) + 1)))
		w.signal(syscall.SIGKILL)
		if code := w.wait(e.ctx, 10*time.Second); code != -1 {
			e.t.Fatalf("%s killed with SIGKILL exited with %d", w, code)
		}
	}
}

// exportSeed returns the content of the export tests' table: entities of
// every EDM type at extreme values (each line over the tests' part cap,
// so each gets a part of its own), in partitions whose keys need escaping
// and sort differently in UTF-16 and in code points, and n small numbered
// entities in three partitions.
func exportSeed(n int) []storeadapter.Entity {
	var es []storeadapter.Entity
	for _, pk := range []string{"edm ✓ 'quoted'", "edm 😀", "edm ￮"} {
		for _, rk := range []string{"a", "b 𝄞"} {
			p := edmProperties(pk + "/" + rk)
			p["Empty"] = ""
			p["I64Past53"] = int64(1<<53 + 1)
			p["I64NegPast53"] = -int64(1<<53 + 1)
			p["I64Max"] = int64(math.MaxInt64)
			p["Dt7"] = time.Date(2024, 2, 29, 23, 59, 59, 123456700, time.UTC)
			p["DblNegInf"] = math.Inf(-1)
			p["DblTiny"] = 5e-324
			p["DblMax"] = math.MaxFloat64
			p["DblThird"] = 1.0 / 3
			p["StrNonBMP"] = "𝄞 𠜎 😀 \U0010FFFD"
			p["StrControl"] = "tab\tnewline\ncr\r\u0001 \u2028\u2029 \ufeff <&>"
			p["BinSmall"] = []byte{0, 0xff, 0x80, '\n'}
			es = append(es, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: p})
		}
	}
	for p := range 3 {
		es = append(es, numbered(fmt.Sprintf("bulk%d", p), n/3)...)
	}
	return es
}

// exportMaxPartBytes is the part cap of the export tests: about 70 lines of
// the numbered entities, so a few thousand make dozens of parts.
const exportMaxPartBytes = 16 << 10

// TestKilledExportResumesExactly exports a table holding every EDM type
// and a few thousand rows into dozens of parts, with the worker killed
// with SIGKILL three times: once after some parts were committed and
// before the manifest, then at random moments after it made progress
// again. After a drain the manifest must list parts that hold exactly the
// table's entities in key order, each once, every property, Timestamp and
// ETag exact; tableexport.Verify and `enqueue export verify` must find
// nothing; no blob of the operation may lie outside the manifest; and an
// independent JSON reader (node) must parse every line. A late
// redelivery of the finished export must then write nothing, and a
// gzipped export of the same table must round-trip too.
func TestKilledExportResumesExactly(t *testing.T) {
	e := setup(t, 120*time.Second)
	start := time.Now()
	tbl, c, ckpt := e.table("Export"), e.container("export"), e.table("ExportCkpt")
	q := e.queue("export")
	seeded := exportSeed(3000)
	e.seed(tbl, seeded)
	want := e.entities(tbl, storeadapter.Filter{}) // in key order, with ETags and Timestamps
	if len(want) != len(seeded) {
		t.Fatalf("the table holds %d entities after seeding %d", len(want), len(seeded))
	}
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	cfg := writeWorkerConfig(t, map[string]any{"runner": fastRunner(), "export": map[string]any{"checkpointTable": ckpt}})
	rng := rand.New(rand.NewPCG(indexSeed(t), 0))
	t.Logf("seeded %d entities in %v", len(seeded), time.Since(start).Round(time.Millisecond))

	opID := "op-export-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/logs", "-max-part-bytes", fmt.Sprint(exportMaxPartBytes), "-id", opID)
	prefix := "logs/" + tbl + "/"
	// The first kill comes once two parts are committed; the manifest must
	// not be there yet. The others come once the restarted worker has
	// committed a part more (or finished).
	e.killWhile(q, cfg, rng, 3, 150*time.Millisecond, func(kill int) func() bool {
		atStart, _ := e.partCount(c, prefix)
		return func() bool {
			n, manifest := e.partCount(c, prefix)
			if kill == 0 && manifest {
				t.Fatalf("the export wrote its manifest before the first kill: raise the row count")
			}
			return n >= max(atStart+1, 2) || manifest
		}
	})
	n, manifest := e.partCount(c, prefix)
	t.Logf("after the kills: %d parts, manifest %v (%v)", n, manifest, time.Since(start).Round(time.Millisecond))

	stats := e.drain(q, 60*time.Second, "-config", cfg)
	if stats.Poisoned != 0 || stats.Succeeded > 1 {
		t.Errorf("draining worker's counters = %+v, want at most 1 succeeded and none poisoned", stats)
	}
	checkNoPoison(t, e, q)
	m := checkExport(t, e, c+"/logs", opID, tbl, false, want)
	if len(m.Parts) < 20 {
		t.Errorf("the export wrote %d parts, want dozens: lower the part cap", len(m.Parts))
	}
	t.Logf("export checked after %v: %d parts", time.Since(start).Round(time.Millisecond), len(m.Parts))

	// A late redelivery of the finished export (the same operation sent
	// again) succeeds with the same result and writes nothing.
	snapshot := func() []string {
		var s []string
		for _, b := range e.listBlobs(c, "") {
			s = append(s, b.Name+" "+b.ETag)
		}
		return s
	}
	was := snapshot()
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/logs", "-max-part-bytes", fmt.Sprint(exportMaxPartBytes), "-id", opID)
	again := e.drainProc(q, 60*time.Second, "-config", cfg)
	if res := again.results(); len(res) != 1 || res[0] != export.Result(m) {
		t.Errorf("the redelivered export's results are %q, want %q", res, export.Result(m))
	}
	if now := snapshot(); !slices.Equal(now, was) {
		t.Errorf("the redelivered export changed the container:\nbefore %q\nafter  %q", was, now)
	}

	gzID := "op-export-gz-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/gz", "-gzip", "-max-part-bytes", "65536", "-id", gzID)
	if stats := e.drain(q, 60*time.Second, "-config", cfg); stats.Succeeded != 1 || stats.Poisoned != 0 {
		t.Errorf("gzip export: worker's counters = %+v, want 1 succeeded", stats)
	}
	checkExport(t, e, c+"/gz", gzID, tbl, true, want)
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// checkExport checks the export opID of table tbl to target to
// ("container/prefix"), whose parts must hold exactly want (in key order,
// each once, properties, Timestamps and ETags exact), and returns its
// manifest. It checks the manifest against the parts (tableexport.Verify
// and `enqueue export verify`), every blob of the container with metadata
// op opID against the manifest, each part's content type, and has node
// parse every line.
func checkExport(t *testing.T, e *env, to, opID, tbl string, gzip bool, want []storeadapter.Entity) tableexport.Manifest {
	t.Helper()
	c, _, _ := strings.Cut(to, "/")
	blobs := store.Container(c)
	var manifests []string
	for _, b := range e.listBlobs(c, "") {
		// One operation may export several tables (purgeday: one per day).
		if path.Base(b.Name) == "manifest-"+opID+".json" && strings.Contains("/"+b.Name, "/"+tbl+"/") {
			manifests = append(manifests, b.Name)
		}
	}
	if len(manifests) != 1 {
		t.Fatalf("found manifests %q of %s, want one", manifests, opID)
	}
	m, err := tableexport.ReadManifest(e.ctx, blobs, manifests[0])
	if err != nil {
		t.Fatalf("read manifest %s: %v", manifests[0], err)
	}
	if m.Op != opID || m.Table != tbl || m.Gzip != gzip || m.Entities != int64(len(want)) {
		t.Errorf("manifest %s says op %s, table %s, gzip %v, %d entities; want %s, %s, %v, %d",
			manifests[0], m.Op, m.Table, m.Gzip, m.Entities, opID, tbl, gzip, len(want))
	}
	rep, err := tableexport.Verify(e.ctx, blobs, manifests[0])
	if err != nil {
		t.Fatalf("Verify %s: %v", manifests[0], err)
	}
	if !rep.OK() || rep.Entities != int64(len(want)) || rep.Parts != len(m.Parts) {
		t.Errorf("Verify %s: %d parts, %d entities, problems:\n%s", manifests[0], rep.Parts, rep.Entities, strings.Join(rep.Problems, "\n"))
	}

	// The CLI agrees, given the manifest or the export's target and id.
	for _, args := range [][]string{{"-manifest", c + "/" + manifests[0]}, {"-to", to, "-table", tbl, "-id", opID}} {
		var out struct {
			Manifest string `json:"manifest"`
			OK       bool   `json:"ok"`
			Parts    int    `json:"parts"`
			Entities int64  `json:"entities"`
		}
		e.enqueueJSON(&out, append([]string{"export", "verify"}, args...)...)
		if !out.OK || out.Manifest != c+"/"+manifests[0] || out.Parts != len(m.Parts) || out.Entities != int64(len(want)) {
			t.Errorf("enqueue export verify %s -o json: %+v, want ok, %s, %d parts and %d entities",
				strings.Join(args, " "), out, c+"/"+manifests[0], len(m.Parts), len(want))
		}
	}

	// No blob of the operation outside the manifest, and each part with
	// its content type.
	listed := map[string]bool{manifests[0]: true}
	for _, p := range m.Parts {
		listed[p.Name] = true
	}
	wantType, wantExt := tableexport.ContentTypeLines, ".jsonl"
	if gzip {
		wantType, wantExt = tableexport.ContentTypeGzip, ".jsonl.gz"
	}
	for _, b := range e.listBlobs(c, "") {
		props, err := blobs.Properties(e.ctx, b.Name)
		if err != nil {
			t.Fatalf("properties of %s: %v", b.Name, err)
		}
		switch {
		case (props.Metadata[tableexport.MetaOp] != opID || props.Metadata[tableexport.MetaTable] != tbl) && !listed[b.Name]:
			// Another export's blob, or the operation's export of another table.
		case !listed[b.Name]:
			t.Errorf("blob %s of operation %s is not in its manifest", b.Name, opID)
		case b.Name != manifests[0] && (props.ContentType != wantType || !strings.HasSuffix(b.Name, wantExt)):
			t.Errorf("part %s has content type %q, want %q and a name ending in %s", b.Name, props.ContentType, wantType, wantExt)
		}
	}

	// The parts, read back in the manifest's order, hold the table.
	var got []storeadapter.Entity
	for _, p := range m.Parts {
		err := tableexport.ReadPart(e.ctx, blobs, p.Name, func(en storeadapter.Entity) error {
			got = append(got, en)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadPart %s: %v", p.Name, err)
		}
	}
	checkLines(t, "the parts read back", want, got)

	// An independent reader parses every line the same.
	dir := t.TempDir()
	for _, p := range m.Parts {
		data, _, err := blobs.Get(e.ctx, p.Name)
		if err != nil {
			t.Fatalf("download %s: %v", p.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(p.Name)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nr := readLinesWithNode(t, dir)
	for _, p := range m.Parts {
		if n := nr.Files[path.Base(p.Name)]; int64(n) != p.Entities {
			t.Errorf("node read %d lines of %s, the manifest says %d", n, p.Name, p.Entities)
		}
	}
	if wantTypes := annotatedTypes(want); !maps.Equal(nr.Types, wantTypes) {
		t.Errorf("node counted annotated values %v, want %v", nr.Types, wantTypes)
	}
	var reparsed []storeadapter.Entity
	for i, raw := range nr.Entities {
		en, err := storeadapter.UnmarshalEntityJSON(raw, "")
		if err != nil {
			t.Fatalf("line %d as node re-serialised it: %v\n%s", i+1, err, raw)
		}
		reparsed = append(reparsed, en)
	}
	checkLines(t, "the lines node parsed and wrote again", want, reparsed)
	return m
}

// checkLines checks that got holds exactly want, in the same order, each
// entity with the same keys, properties, Timestamp and ETag.
func checkLines(t *testing.T, what string, want, got []storeadapter.Entity) {
	t.Helper()
	checkEntities(t, what, want, got, true)
}

// checkEntities checks that got holds exactly want, in the same order,
// each entity with the same keys and properties (types and values exact)
// and, when system, the same Timestamp and ETag.
func checkEntities(t *testing.T, what string, want, got []storeadapter.Entity, system bool) {
	t.Helper()
	if len(got) != len(want) || !slices.Equal(keys(got), keys(want)) {
		t.Errorf("%s: %d entities, want %d in key order, each once; first difference: %s", what, len(got), len(want), firstKeyDiff(keys(want), keys(got)))
		return
	}
	bad := 0
	for i := range want {
		w, g := want[i], got[i]
		d := diffProperties(w.Properties, g.Properties)
		if system && !w.Timestamp.Equal(g.Timestamp) {
			d = append(d, fmt.Sprintf("Timestamp: got %s, want %s", storeadapter.FormatDateTime(g.Timestamp), storeadapter.FormatDateTime(w.Timestamp)))
		}
		if system && w.ETag != g.ETag {
			d = append(d, fmt.Sprintf("ETag: got %q, want %q", g.ETag, w.ETag))
		}
		if len(d) > 0 {
			if bad++; bad <= 3 {
				t.Errorf("%s: %s/%s differs:\n%s", what, w.PartitionKey, w.RowKey, strings.Join(d, "\n"))
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d entities differ in all", what, bad)
	}
}

// firstKeyDiff describes the first position where two key lists differ.
func firstKeyDiff(want, got []string) string {
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("at %d got %q, want %q", i, g, w)
		}
	}
	return "none"
}

// nodeLines is what testdata/readlines.js prints.
type nodeLines struct {
	Files    map[string]int    `json:"files"`
	Lines    int               `json:"lines"`
	Types    map[string]int    `json:"types"`
	Entities []json.RawMessage `json:"entities"`
}

// readLinesWithNode runs testdata/readlines.js on the files of dir.
func readLinesWithNode(t *testing.T, dir string) nodeLines {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (which Azurite needs too) is not on PATH: %v", err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "readlines.js"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node readlines.js: %v\n%s", err, stderr.String())
	}
	var nl nodeLines
	if err := json.Unmarshal(out, &nl); err != nil {
		t.Fatalf("decode the output of readlines.js: %v", err)
	}
	return nl
}

// annotatedTypes counts the values of entities whose JSON carries an
// "@odata.type" annotation, by type: Int64, Double, DateTime, Guid and
// Binary properties, and every Timestamp.
func annotatedTypes(es []storeadapter.Entity) map[string]int {
	n := map[string]int{}
	for _, en := range es {
		n[storeadapter.EdmDateTime.String()]++ // Timestamp
		for _, v := range en.Properties {
			switch typ, _ := storeadapter.TypeOf(v); typ {
			case storeadapter.EdmInt64, storeadapter.EdmDouble, storeadapter.EdmDateTime, storeadapter.EdmGUID, storeadapter.EdmBinary:
				n[typ.String()]++
			}
		}
	}
	return n
}
