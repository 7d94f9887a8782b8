package e2e

// TestBlobsyncConvergesWithKilledWorkers runs on its own (no t.Parallel):
// it kills workers and waits out a grace period measured against the
// emulator's clock.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// bsGrace is the blobsync tests' maxRunTime and grace period: short, so
// that the orphans of a run can be collected a few seconds after it.
const bsGrace = 3 * time.Second

// blobsyncConfig returns the worker config of the blobsync tests: table
// tbl offloads Doc, and every String or Binary over 16 KiB, to container
// c under prefix "managed".
func blobsyncConfig(t *testing.T, tbl, c, ckpt string) string {
	t.Helper()
	return writeWorkerConfig(t, map[string]any{
		"runner": fastRunner(),
		// The kinds that write a managed blob before its entity run as
		// briefly as blobsync, so that the grace may be as short.
		"archive": map[string]any{"maxRunTime": bsGrace.String()},
		"copy":    map[string]any{"maxRunTime": bsGrace.String()},
		"restore": map[string]any{"maxRunTime": bsGrace.String()},
		"blobsync": map[string]any{
			"tables": []map[string]any{{"table": tbl, "container": c, "prefix": "managed", "properties": []string{"Doc"},
				"offloadOver": 16 << 10}},
			"grace": bsGrace.String(), "maxRunTime": bsGrace.String(), "checkpointTable": ckpt,
			// Small pages, so a reconcile checkpoints well within its
			// maxRunTime; many rounds, since the application keeps
			// writing the entities.
			"pageSize": 10, "maxConflicts": 20,
		},
	})
}

// bsEntity is what the test expects of one entity of the blobsync test.
type bsEntity struct {
	pk, rk      string
	doc         string // Doc's last content (declared: offloaded)
	data        []byte // Data (offloaded when over 16 KiB)
	photo       []byte // the attached Photo's last content; nil: none
	photoBlob   string // the name of the Photo blob in the container
	count       int64  // Count as the application last wrote it
	note        string // Note as the application last wrote it
	unsure      bool   // a write of Count/Note had an unknown outcome
	deleted     bool   // the application deleted the entity
	docRewrites int
}

func (x *bsEntity) key() string { return x.pk + "/" + x.rk }

// bsText returns about n characters of text with non-BMP characters, made
// from seed.
func bsText(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	alphabet := []rune("abc xyz ÄÖÜ 日本語 😀🎉𝄞\n\"\\")
	var b strings.Builder
	for range n {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// bsBytes returns n bytes made from seed.
func bsBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// sha returns the hex SHA-256 of data.
func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// TestBlobsyncConvergesWithKilledWorkers offloads and attaches the large
// properties of a table with two workers that are killed with SIGKILL at
// random moments and replaced, while the application merges other
// properties (ETag-conditional or not), writes Doc inline again and
// enqueues its offload, overwrites attached blobs and enqueues their attach
// again, and deletes entities. Offloads are enqueued for every entity, some
// twice, all shuffled; attaches for blobs the application uploaded itself
// (outside the managed layout, whose names attach refuses). After the drain every entity holds its
// references and largeentity.Get gives back exactly what the application
// last wrote, with every merge it made; once the grace period has passed a
// reconcile leaves no blob in the managed layout that its entity does not
// reference (so the deleted entities' blobs and the replaced Docs are
// gone), while the application's own blobs outside it stay.
func TestBlobsyncConvergesWithKilledWorkers(t *testing.T) {
	e := setup(t, 120*time.Second)
	start := time.Now()
	tbl, ckpt, c := e.table("Blobs"), e.table("BlobsCkpt"), e.container("blobsync")
	q := e.queue("blobsync")
	seed := indexSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	cfg := blobsyncConfig(t, tbl, c, ckpt)
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}

	// The entities, and the application's own blobs.
	var all []*bsEntity
	var seeded []storeadapter.Entity
	for p, pk := range []string{"p0", "p ✓ 1", "p.2."} {
		for r := range 24 {
			i := uint64(p*100 + r)
			x := &bsEntity{pk: pk, rk: fmt.Sprintf("r%02d", r), doc: bsText(seed+i, 6000), data: bsBytes(seed+i, 1000), note: "seeded"}
			if r%2 == 0 {
				x.data = bsBytes(seed+i, 20000+r*500)
			}
			seeded = append(seeded, storeadapter.Entity{PartitionKey: x.pk, RowKey: x.rk, Properties: map[string]any{
				"Doc": x.doc, "Data": x.data, "Small": "small " + x.rk, "Count": int64(0), "Note": x.note}})
			if r%4 == 2 {
				x.photo = bsBytes(seed+i+1e6, 3000+r*100)
				// Outside the managed layout: attach refuses its names.
				x.photoBlob = "uploads/" + storeadapter.BlobNameSegment(x.pk) + "/" + x.rk + "/photo.jpg"
				if _, err := store.Container(c).Put(e.ctx, x.photoBlob, x.photo, storeadapter.PutOptions{ContentType: "image/jpeg"}); err != nil {
					t.Fatal(err)
				}
			}
			all = append(all, x)
		}
	}
	e.seed(tbl, seeded)

	// The messages: an offload of each entity, a fifth of them twice, an
	// offload of Data alone for a third of the large ones, an attach of
	// each photo, some twice; shuffled.
	// A duplicate keeps its operation id, as a message sent twice does.
	type message struct {
		id   string
		args blobsync.Args
	}
	var msgs []message
	add := func(a blobsync.Args, times int) {
		id := fmt.Sprintf("op-bs-%s-%d", e.suffix, len(msgs))
		for range times {
			msgs = append(msgs, message{id, a})
		}
	}
	for i, x := range all {
		off := blobsync.Args{Mode: blobsync.ModeOffload, Table: tbl, PK: x.pk, RK: x.rk}
		if i%5 == 0 {
			add(off, 2)
		} else {
			add(off, 1)
		}
		if len(x.data) > 16<<10 && i%3 == 0 {
			off.Property = "Data"
			add(off, 1)
		}
		if x.photo != nil {
			add(blobsync.Args{Mode: blobsync.ModeAttach, Table: tbl, PK: x.pk, RK: x.rk, Property: "Photo", Container: c, Blob: x.photoBlob}, 1+(i/4)%2) // every other one twice
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	app := &bsApp{e: e, q: q, tbl: tbl, c: c, rng: rand.New(rand.NewPCG(seed, 3)), seed: seed, all: all}
	for _, m := range msgs {
		if err := app.sendAs(m.id, m.args); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seeded %d entities and sent %d messages in %v", len(all), len(msgs), time.Since(start).Round(time.Millisecond))

	// Two workers, killed five times at random moments while the
	// application works.
	workers := []*proc{e.startWorker(q, "-config", cfg), e.startWorker(q, "-config", cfg)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { app.run(stop) })
	for k := range 4 {
		time.Sleep(time.Duration(200+rng.IntN(700)) * time.Millisecond)
		i := rng.IntN(len(workers))
		workers[i].signal(syscall.SIGKILL)
		workers[i].wait(e.ctx, 10*time.Second)
		if k < 3 {
			workers[i] = e.startWorker(q, "-config", cfg)
		} else {
			workers = slices.Delete(workers, i, i+1)
		}
	}
	close(stop)
	wg.Wait()
	if app.failed != nil {
		t.Fatalf("the application failed: %v", app.failed)
	}
	// The last worker is killed too (one more crash); the drain finishes
	// what the killed ones held.
	workers[0].signal(syscall.SIGKILL)
	workers[0].wait(e.ctx, 10*time.Second)
	t.Logf("the application made %v (%v)", app.counts, time.Since(start).Round(time.Millisecond))
	stats := e.drain(q, 60*time.Second, "-config", cfg)
	drained := time.Now()
	t.Logf("drained in %v: %+v", time.Since(start).Round(time.Millisecond), stats)
	checkBlobsyncPoison(t, e, q, all)

	// Every offload and attach is done: the references resolve to what
	// the application last wrote, and its merges are there.
	for _, x := range all {
		checkBlobsyncEntity(t, e, tbl, c, x, false)
	}
	deletedWithBlobs := 0
	for _, x := range all {
		if x.deleted && len(e.listBlobs(c, "managed/"+tbl+"/"+storeadapter.BlobNameSegment(x.pk)+"/"+storeadapter.BlobNameSegment(x.rk)+"/")) > 0 {
			deletedWithBlobs++
		}
	}
	t.Logf("before the reconcile: %d blobs in the managed layout, %d deleted entities with blobs there",
		len(e.listBlobs(c, "managed/")), deletedWithBlobs)

	// Past the grace period, a reconcile (enqueued with the CLI).
	time.Sleep(time.Until(drained.Add(bsGrace + 1500*time.Millisecond)))
	reconciled := time.Now()
	e.enqueue("blobsync", "reconcile", "-queue", q, "-table", tbl, "-container", c, "-id", "op-reconcile-"+e.suffix)
	rp := e.drainProc(q, 60*time.Second, "-config", cfg)
	if rs := rp.stats(); rs.Succeeded != 1 || rs.Poisoned != 0 {
		t.Errorf("reconcile: worker's counters = %+v, want 1 succeeded", rs)
	}
	t.Logf("reconciled in %v: %s", time.Since(reconciled).Round(time.Millisecond), strings.Join(rp.results(), "; "))

	for _, x := range all {
		checkBlobsyncEntity(t, e, tbl, c, x, true)
	}
	// No blob in the managed layout that its entity does not reference
	// and that is older than the grace period at the reconcile.
	managed := 0
	for _, b := range e.listBlobs(c, "managed/") {
		managed++
		m, ok := largeentity.ParseBlobName("managed", b.Name)
		if !ok {
			t.Errorf("blob %s under the managed prefix does not parse", b.Name)
			continue
		}
		en, err := store.Tables().GetEntity(e.ctx, tbl, m.PK, m.RK)
		var ref largeentity.Ref
		if err == nil {
			ref, _, _ = largeentity.RefOf(en, m.Property)
		}
		if ref.Name != b.Name && b.LastModified.Before(reconciled.Add(-bsGrace)) {
			t.Errorf("blob %s (last modified %v) is an orphan older than the grace period: entity %s/%s (read: %v) references %q",
				b.Name, b.LastModified, m.PK, m.RK, err, ref.Name)
		}
	}
	// The application's own blobs outside the layout are never deleted,
	// not even those of deleted entities.
	for _, x := range all {
		if x.photo != nil {
			if _, err := store.Container(c).Properties(e.ctx, x.photoBlob); err != nil {
				t.Errorf("the application's blob %s: %v", x.photoBlob, err)
			}
		}
	}
	t.Logf("after the reconcile: %d blobs in the managed layout (%v)", managed, time.Since(start).Round(time.Millisecond))

	// `enqueue blobsync get` reads one entity back like Get.
	got := false
	for _, x := range all {
		if !x.deleted && x.photo != nil && len(x.data) > 16<<10 {
			checkBlobsyncGetCLI(t, e, tbl, x)
			got = true
			break
		}
	}
	if !got {
		t.Error("no entity left with Doc, Data and Photo in blobs to read with enqueue blobsync get")
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// checkBlobsyncEntity checks one entity of the blobsync test: deleted, it
// is gone; else it holds Small, a small Data, Count and Note inline (Count
// and Note as the application last wrote them), references for Doc, a
// large Data and the Photo (each to the blob's current content, and an
// attached one to its current ETag, as well as an offloaded one when
// reconciled: two offloads that put the same blob leave the ETag of the
// first in the reference, which Get ignores and reconcile refreshes), and
// Get gives back every property exactly. A Doc that Azurite stored with
// characters split across request-body chunks (see azuriteSplitChars)
// becomes x.doc: the rest is checked against what the store holds.
func checkBlobsyncEntity(t *testing.T, e *env, tbl, c string, x *bsEntity, reconciled bool) {
	t.Helper()
	raw, err := store.Tables().GetEntity(e.ctx, tbl, x.pk, x.rk)
	if x.deleted {
		if !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("%s was deleted by the application, but reading it gives %v", x.key(), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("read %s: %v", x.key(), err)
	}
	got, getErr := largeentity.Get(e.ctx, store, tbl, x.pk, x.rk)
	if doc, ok := got.Properties["Doc"].(string); getErr == nil && ok {
		if n := azuriteSplitChars(x.doc, doc); n > 0 {
			// Not blobsync's doing: Azurite stored a write of the inline
			// Doc (a worker's replace carries every property; one with a
			// large Data inline is over 32 KiB) with characters split
			// between two chunks of the request body. The workers must
			// still converge on what the store holds.
			t.Logf("%s: Azurite stored Doc with %d character(s) split across request-body chunks (docs/azure-behaviour.md, "+
				"\"Azurite deviations the contract skips\"); checking against what it stored", x.key(), n)
			x.doc = doc
		}
	}
	want := map[string]any{"Doc": x.doc, "Data": x.data, "Small": "small " + x.rk}
	refs := []string{"Doc"}
	if len(x.data) > 16<<10 {
		refs = append(refs, "Data")
	}
	if x.photo != nil {
		want["Photo"] = x.photo
		refs = append(refs, "Photo")
	}
	if !x.unsure {
		want["Count"], want["Note"] = x.count, x.note
	} else {
		want["Count"], want["Note"] = raw.Properties["Count"], raw.Properties["Note"]
	}
	for _, p := range refs {
		ref, ok, err := largeentity.RefOf(raw, p)
		_, inline := raw.Properties[p]
		switch {
		case err != nil || !ok || inline:
			t.Errorf("%s: %s is not offloaded or attached (reference %v, %v; inline %v)", x.key(), p, ok, err, inline)
			continue
		case ref.Container != c:
			t.Errorf("%s: %s references container %s, want %s", x.key(), p, ref.Container, c)
			continue
		}
		props, err := store.Container(c).Properties(e.ctx, ref.Name)
		if err != nil {
			t.Errorf("%s: %s references %s: %v", x.key(), p, ref.Name, err)
			continue
		}
		staleETag := strings.Trim(ref.ETag, `"`) != strings.Trim(props.ETag, `"`)
		if wantSum := sha(toBytes(want[p])); ref.SHA256 != wantSum || staleETag && (reconciled || ref.Mode == blobsync.ModeAttach) {
			t.Errorf("%s: %s references %s with sha256 %s and ETag %s; want %s (the last content written) and the blob's ETag %s",
				x.key(), p, ref.Name, ref.SHA256, ref.ETag, wantSum, props.ETag)
		}
		if p == "Photo" && ref.Name != x.photoBlob {
			t.Errorf("%s: Photo references %s, want the application's blob %s", x.key(), ref.Name, x.photoBlob)
		}
	}
	inline := []string{"Small", "Count", "Note"}
	if len(x.data) <= 16<<10 {
		inline = append(inline, "Data")
	}
	for _, p := range inline {
		if _, ok := raw.Properties[largeentity.RefPrefix+p]; ok {
			t.Errorf("%s: %s was offloaded", x.key(), p)
		}
	}
	if getErr != nil {
		t.Errorf("Get %s: %v", x.key(), getErr)
		return
	}
	if d := diffProperties(want, got.Properties); len(d) > 0 {
		t.Errorf("Get %s differs from what the application wrote:\n%s", x.key(), strings.Join(d, "\n"))
	}
}

// azuriteSplitChars returns how many of written's multi-byte characters
// stored replaced the way Azurite replaces a character whose bytes fall in
// two chunks of a request body, when that is the only way stored differs
// from written, and 0 otherwise. Azurite decodes each chunk as UTF-8 on
// its own (docs/azure-behaviour.md, "Azurite deviations the contract
// skips"): the bytes before the split become one U+FFFD and each byte after
// it another, so an n-byte character becomes a run of 2 to n U+FFFD.
// written must hold no U+FFFD of its own. Another version of the text, or
// a character lost, added or replaced otherwise, is not this defect: 0.
func azuriteSplitChars(written, stored string) int {
	if strings.ContainsRune(written, utf8.RuneError) {
		return 0
	}
	w, s := []rune(written), []rune(stored)
	i, j, splits := 0, 0, 0
	for i < len(w) {
		if j < len(s) && s[j] == w[i] {
			i, j = i+1, j+1
			continue
		}
		run := 0
		for j+run < len(s) && s[j+run] == utf8.RuneError {
			run++
		}
		if n := utf8.RuneLen(w[i]); n < 2 || run < 2 || run > n {
			return 0
		}
		i, j, splits = i+1, j+run, splits+1
	}
	if j != len(s) {
		return 0
	}
	return splits
}

// TestAzuriteSplitChars holds the recogniser of Azurite's split
// characters to the failure it was written for: seed 15761583253335191414
// left p ✓ 1/r06 with Doc offloaded as de5840f8…, its seeded text (68d9c919…)
// with the 日 at byte 1878 split after its first byte — the replace that
// carried it held the 23,000-byte Data inline, and the split fell at body
// byte 32,768. Other differences are not taken for the defect.
func TestAzuriteSplitChars(t *testing.T) {
	t.Parallel()
	// split returns text as Azurite decodes it when a chunk ends after
	// byte at, inside a multi-byte character: one U+FFFD for the bytes
	// before at, one for each byte after.
	split := func(text string, at int) string {
		start := at
		for !utf8.RuneStart(text[start]) {
			start--
		}
		_, n := utf8.DecodeRuneInString(text[start:])
		return text[:start] + strings.Repeat("\uFFFD", 1+start+n-at) + text[start+n:]
	}
	doc := bsText(15761583253335191414+106, 6000)
	if got := sha([]byte(doc)); !strings.HasPrefix(got, "68d9c919") {
		t.Fatalf("seeded Doc has sha256 %s, want 68d9c919…", got)
	}
	stored := split(doc, 1879)
	if got := sha([]byte(stored)); got != "de5840f856a7e9329433bfeb1d62784e314523cca46c902ac31c3ab2dc372efd" {
		t.Fatalf("Doc split at byte 1879 has sha256 %s, want de5840f8… (what the failing run offloaded)", got)
	}
	older := bsText(1, 6000)
	cases := []struct {
		name            string
		written, stored string
		want            int
	}{
		{"the failing run", doc, stored, 1},
		{"unchanged", doc, doc, 0},
		{"two characters split", "日本 😀 x", split(split("日本 😀 x", 9), 1), 2},
		{"a 4-byte character split after 3 bytes", "a😀b", split("a😀b", 4), 1},
		{"another version", doc, older, 0},
		{"another version with a split", doc, split(older, 1879), 0},
		{"a character lost", "ab日c", "abc", 0},
		{"one U+FFFD for a character", "ab日c", "ab\uFFFDc", 0},
		{"too many U+FFFD for a character", "aÄb", "a\uFFFD\uFFFD\uFFFDb", 0},
		{"an ASCII character replaced", "abc", "a\uFFFD\uFFFDc", 0},
		{"U+FFFD written", "a\uFFFD日", "a\uFFFD\uFFFD\uFFFD\uFFFD", 0},
		{"a character added", "ab", "ab\uFFFD\uFFFD", 0},
	}
	for _, c := range cases {
		if got := azuriteSplitChars(c.written, c.stored); got != c.want {
			t.Errorf("%s: azuriteSplitChars = %d, want %d", c.name, got, c.want)
		}
	}
}

// toBytes returns the bytes a String or Binary value is stored as.
func toBytes(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, _ := v.([]byte)
	return b
}

// checkBlobsyncPoison checks that nothing of the blobsync test was
// poisoned: an offload or attach of an entity the application deleted
// meanwhile is done, not refused (it was poisoned, 6 to 13 a run).
func checkBlobsyncPoison(t *testing.T, e *env, q string, all []*bsEntity) {
	t.Helper()
	deleted := 0
	for _, x := range all {
		if x.deleted {
			deleted++
		}
	}
	checkNoPoison(t, e, q)
	t.Logf("none of the messages of the %d deleted entities poisoned", deleted)
}

// checkBlobsyncGetCLI checks that `enqueue blobsync get -o json` prints
// the entity with its properties read back from their blobs.
func checkBlobsyncGetCLI(t *testing.T, e *env, tbl string, x *bsEntity) {
	t.Helper()
	var out struct {
		Entity json.RawMessage `json:"entity"`
		Blobs  []struct {
			Property string `json:"property"`
			SHA256   string `json:"sha256"`
		} `json:"blobs"`
	}
	e.enqueueJSON(&out, "blobsync", "get", "-table", tbl, "-pk", x.pk, "-rk", x.rk)
	en, err := storeadapter.UnmarshalEntityJSON(out.Entity, "")
	if err != nil {
		t.Fatalf("enqueue blobsync get: entity: %v", err)
	}
	for p, want := range map[string]any{"Doc": x.doc, "Data": x.data, "Photo": x.photo} {
		if got := en.Properties[p]; !storeadapter.Equal(got, want) {
			t.Errorf("enqueue blobsync get %s: %s differs (%d bytes, want %d)", x.key(), p, len(toBytes(got)), len(toBytes(want)))
		}
	}
	if len(out.Blobs) != 3 {
		t.Errorf("enqueue blobsync get %s lists blobs %+v, want Data, Doc and Photo", x.key(), out.Blobs)
	}
}

// bsApp is the application of the blobsync test: it works on the entities
// while the workers run, and records what it wrote in each bsEntity.
type bsApp struct {
	e         *env
	q, tbl, c string
	rng       *rand.Rand
	seed      uint64
	all       []*bsEntity
	counts    map[string]int
	failed    error
	sent      int
}

// send sends one blobsync message with an operation id of its own.
func (a *bsApp) send(args blobsync.Args) error {
	a.sent++
	return a.sendAs(fmt.Sprintf("op-bs-%s-app-%d", a.e.suffix, a.sent), args)
}

// sendAs sends one blobsync message with operation id id.
func (a *bsApp) sendAs(id string, args blobsync.Args) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: blobsync.Kind, Args: raw})
	if err != nil {
		return err
	}
	if err := store.Queue(a.q).Create(a.e.ctx); err != nil {
		return err
	}
	_, err = store.Queue(a.q).Send(a.e.ctx, text, storeadapter.SendOptions{})
	return err
}

// run does one thing after another until stop is closed: mostly merges of
// Count and Note (half of them If-Match the ETag read just before), now
// and then a new Doc written inline with its offload enqueued, a Photo
// overwritten with its attach enqueued, or an entity deleted (one in ten
// steps, at most 6: the first ones often before their offload ran, the
// later ones after).
func (a *bsApp) run(stop <-chan struct{}) {
	a.counts = map[string]int{}
	var photos []*bsEntity
	for _, x := range a.all {
		if x.photo != nil {
			photos = append(photos, x)
		}
	}
	for step := 0; ; step++ {
		select {
		case <-stop:
			return
		default:
		}
		r := a.rng.IntN(10)
		x := a.all[a.rng.IntN(len(a.all))]
		if r == 1 {
			x = photos[a.rng.IntN(len(photos))]
		}
		if x.deleted {
			continue
		}
		var err error
		switch {
		case step%10 == 0 && a.counts["delete"] < 6:
			err = a.delete(x)
		case r == 0:
			err = a.rewriteDoc(x)
		case r == 1:
			err = a.overwritePhoto(x)
		default:
			err = a.merge(x, r%2 == 0)
		}
		if err != nil {
			a.failed = err
			return
		}
	}
}

// merge writes Count+1 and a new Note, If-Match the ETag just read when
// conditional (again from a new read after a 412).
func (a *bsApp) merge(x *bsEntity, conditional bool) error {
	next := storeadapter.Entity{PartitionKey: x.pk, RowKey: x.rk,
		Properties: map[string]any{"Count": x.count + 1, "Note": fmt.Sprintf("note %d", x.count+1)}}
	for range 50 {
		etag := storeadapter.ETagAny
		if conditional {
			cur, err := store.Tables().GetEntity(a.e.ctx, a.tbl, x.pk, x.rk)
			if err != nil {
				return fmt.Errorf("read %s: %w", x.key(), err)
			}
			etag = cur.ETag
		}
		_, err := store.Tables().UpdateEntity(a.e.ctx, a.tbl, next, storeadapter.Merge, etag)
		switch {
		case err == nil:
			x.count, x.note, x.unsure = x.count+1, next.Properties["Note"].(string), false
			a.counts["merge"]++
			return nil
		case conditional && errors.Is(err, storeadapter.ErrPreconditionFailed):
			a.counts["merge lost (412)"]++
			continue
		case storeadapter.IsTransient(err):
			x.unsure = true // it may have landed
			return nil
		default:
			return fmt.Errorf("merge %s: %w", x.key(), err)
		}
	}
	return fmt.Errorf("merge %s: lost 50 times in a row", x.key())
}

// rewriteDoc writes a new Doc inline, unconditionally, and enqueues its
// offload (with the property named, or not).
func (a *bsApp) rewriteDoc(x *bsEntity) error {
	x.docRewrites++
	doc := bsText(a.seed+uint64(len(x.doc))+uint64(x.docRewrites)*7919, 5000+a.rng.IntN(2000))
	en := storeadapter.Entity{PartitionKey: x.pk, RowKey: x.rk, Properties: map[string]any{"Doc": doc}}
	if _, err := store.Tables().UpdateEntity(a.e.ctx, a.tbl, en, storeadapter.Merge, storeadapter.ETagAny); err != nil {
		return fmt.Errorf("rewrite Doc of %s: %w", x.key(), err)
	}
	x.doc = doc
	a.counts["doc rewrite"]++
	off := blobsync.Args{Mode: blobsync.ModeOffload, Table: a.tbl, PK: x.pk, RK: x.rk}
	if a.rng.IntN(2) == 0 {
		off.Property = "Doc"
	}
	return a.send(off)
}

// overwritePhoto uploads new content to the entity's Photo blob and
// enqueues its attach again.
func (a *bsApp) overwritePhoto(x *bsEntity) error {
	photo := bsBytes(a.seed+uint64(len(x.photo))*31+uint64(a.counts["photo overwrite"]), 2000+a.rng.IntN(3000))
	if bytes.Equal(photo, x.photo) {
		return nil
	}
	if _, err := store.Container(a.c).Put(a.e.ctx, x.photoBlob, photo, storeadapter.PutOptions{ContentType: "image/png"}); err != nil {
		return fmt.Errorf("overwrite %s: %w", x.photoBlob, err)
	}
	x.photo = photo
	a.counts["photo overwrite"]++
	return a.send(blobsync.Args{Mode: blobsync.ModeAttach, Table: a.tbl, PK: x.pk, RK: x.rk, Property: "Photo", Container: a.c, Blob: x.photoBlob})
}

// delete deletes the entity, unconditionally.
func (a *bsApp) delete(x *bsEntity) error {
	if err := store.Tables().DeleteEntity(a.e.ctx, a.tbl, x.pk, x.rk, storeadapter.ETagAny); err != nil {
		return fmt.Errorf("delete %s: %w", x.key(), err)
	}
	x.deleted = true
	a.counts["delete"]++
	return nil
}

// TestBadArgsPoisonedOnFirstDelivery sends export and blobsync jobs whose
// arguments pass validation but name what does not exist (a container,
// a table, a property, a blob) or break a bound that only the
// worker's config gives (a grace period below the blobsync maxRunTime),
// and checks that each is poisoned on its first delivery with a reason
// that names the field and the rule, and that none of them wrote
// anything.
func TestBadArgsPoisonedOnFirstDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	tbl, ckpt, c := e.table("BadArgs"), e.table("BadArgsCkpt"), e.container("badargs")
	missing := "e2e-missing-" + e.suffix
	q := e.queue("badargs")
	cfg := blobsyncConfig(t, tbl, c, ckpt)
	e.seed(tbl, []storeadapter.Entity{{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"Doc": "text"}}})
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	before := e.entities(tbl, storeadapter.Filter{})

	cases := []struct {
		id   string
		args interface{ Kind() string }
		cli  []string // sent with the CLI instead of args
		want []string // what the reason must say
	}{
		{id: "export-container", args: export.Args{Table: tbl, To: missing + "/x"},
			want: []string{"args.to", "container " + missing + " does not exist"}},
		{id: "export-table", args: export.Args{Table: "Missing" + e.suffix, To: c},
			want: []string{"args.table", "does not exist"}},
		{id: "offload-property", cli: []string{"blobsync", "offload", "-table", tbl, "-pk", "p", "-rk", "r", "-property", "Nope"},
			want: []string{"args.property", "property Nope does not exist"}},
		{id: "offload-container", args: blobsync.Args{Mode: blobsync.ModeOffload, Table: tbl, PK: "p", RK: "r", Property: "Doc", Container: missing},
			want: []string{"args.container", "container " + missing + " does not exist"}},
		{id: "attach-container", args: blobsync.Args{Mode: blobsync.ModeAttach, Table: tbl, PK: "p", RK: "r", Property: "Photo", Container: missing, Blob: "b"},
			want: []string{"args.container", "container " + missing + " does not exist"}},
		{id: "attach-blob", cli: []string{"blobsync", "attach", "-table", tbl, "-pk", "p", "-rk", "r", "-property", "Photo", "-container", c, "-blob", "no/such/blob"},
			want: []string{"args.blob", "blob no/such/blob does not exist"}},
		{id: "reconcile-grace", cli: []string{"blobsync", "reconcile", "-table", tbl, "-container", c, "-grace", "1s"},
			want: []string{"args.grace", "must be at least the longest maxRunTime of the kinds that write a managed blob before its entity (blobsync, archive, copy, restore), " + bsGrace.String()}},
	}
	for _, tc := range cases {
		id := "op-" + tc.id + "-" + e.suffix
		if tc.cli != nil {
			e.enqueue(append(tc.cli, "-queue", q, "-id", id)...)
		} else {
			e.sendJob(q, id, tc.args)
		}
	}

	stats := e.drain(q, 30*time.Second, "-config", cfg)
	if stats.Poisoned != int64(len(cases)) || stats.Received != int64(len(cases)) || stats.Retried != 0 {
		t.Errorf("worker counters = %+v, want %d received and poisoned, none retried", stats, len(cases))
	}
	mv := mover(q)
	for _, tc := range cases {
		rec, err := mv.Show(e.ctx, "op-"+tc.id+"-"+e.suffix)
		if err != nil {
			t.Errorf("%s: Show: %v", tc.id, err)
			continue
		}
		if rec.DequeueCount != 1 || !strings.HasPrefix(rec.Reason, "permanent") {
			t.Errorf("%s: poisoned on delivery %d with reason %q, want delivery 1 and a permanent failure", tc.id, rec.DequeueCount, rec.Reason)
		}
		for _, w := range tc.want {
			if !strings.Contains(rec.Reason, w) {
				t.Errorf("%s: reason %q does not say %q", tc.id, rec.Reason, w)
			}
		}
	}
	checkLines(t, "the table", before, e.entities(tbl, storeadapter.Filter{}))
	if blobs := e.listBlobs(c, ""); len(blobs) != 0 {
		t.Errorf("container %s holds %d blobs, want none", c, len(blobs))
	}
}
