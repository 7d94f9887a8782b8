package e2e

// Like workers_test.go, this test runs on its own (no t.Parallel): it loads
// the emulator and kills workers.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestKindsComposeWithKilledWorkers is the application of issue 17 with
// the real binaries on Azurite: a table with all six index kinds and an
// offloaded property, written by an application that also archives (one
// entity and a range to an indexed table, a range to blobs), purges and
// exports, then rebuilds its indexes from scratch, while worker processes
// are killed every one to three seconds and replaced. The runner keeps its
// default of five deliveries, so a job that spent them would be poisoned.
// Afterwards: nothing is poisoned, every lookup equals the table (source
// and archive), index check is clean for every index, every archived copy
// reads back whole (blobsync get on the archive table), no export or
// archive holds a reserved row, and the export's printed count is the
// application's entities.
func TestKindsComposeWithKilledWorkers(t *testing.T) {
	e := setup(t, 150*time.Second)
	start := time.Now()
	names := indexNames{
		Source:       e.table("Staff"),
		ByEmail:      e.table("StaffByEmail"),
		ByLastName:   e.table("StaffByLastName"),
		LastNameRows: e.table("StaffLastNameRows"),
		Container:    e.container("staff-index"),
		Checkpoints:  e.table("StaffCheckpoints"),
	}
	arch, archRows := e.table("StaffArchive"), e.table("StaffArchiveByLastName")
	blobs, exports := e.container("staff-blobs"), e.container("staff-exports")
	q := e.queue("compose")
	icfg := indexConfig(names)
	icfg.Tables[arch] = []indexes.Decl{
		{Name: "lastName", Property: "LastName", Kind: indexes.KindRows, Table: archRows},
		{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
	}
	cfgPath := writeWorkerConfig(t, map[string]any{
		// A short lease, so a killed worker's messages come back soon, and
		// quick retries; the default five deliveries.
		"runner":   map[string]any{"visibility": "3s", "retryBase": "200ms", "retryMax": "2s", "concurrency": 8, "batch": 16},
		"index":    icfg,
		"blobsync": map[string]any{"tables": []map[string]any{{"table": names.Source, "container": blobs, "properties": []string{"Bio"}}}, "checkpointTable": names.Checkpoints},
		"archive":  map[string]any{"checkpointTable": names.Checkpoints},
		"export":   map[string]any{"checkpointTable": names.Checkpoints},
		"purge":    map[string]any{"checkpointTable": names.Checkpoints},
	})
	if err := store.Tables().CreateTable(e.ctx, arch); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{blobs, exports} {
		if err := store.Container(c).Create(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	x, err := indexes.Open(store, nil, icfg)
	if err != nil {
		t.Fatal(err)
	}

	// The application writes its employees, each followed by a reconcile
	// of its indexes and the offload of its biography.
	partitions := []string{"Sales", "Ops", "Support", "Legal"}
	rng := rand.New(rand.NewPCG(indexSeed(t), 17))
	bio := func(pk, rk string) string { return strings.Repeat(fmt.Sprintf("%s/%s's biography. ", pk, rk), 100) }
	var seeded []storeadapter.Entity
	var texts []string
	for _, pk := range partitions {
		for i := range 25 {
			rk := fmt.Sprintf("%03d", i)
			seeded = append(seeded, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{
				"LastName": convLastNames[rng.IntN(len(convLastNames))], "FirstName": convFirstNames[i%len(convFirstNames)],
				"Email": fmt.Sprintf("%s.%s@contoso.example", strings.ToLower(pk), rk), "Bio": bio(pk, rk)}})
			texts = append(texts, e.envelope(t, "index", fmt.Sprintf("rc-%s-%s", pk, rk), map[string]any{"table": names.Source, "pk": pk, "rk": rk}),
				e.envelope(t, blobsync.Kind, fmt.Sprintf("off-%s-%s", pk, rk), blobsync.Args{Mode: blobsync.ModeOffload, Table: names.Source, PK: pk, RK: rk}))
		}
	}
	e.seed(names.Source, seeded)
	e.sendTexts(q, texts)

	// Workers, killed and replaced every one to three seconds until the
	// end.
	var mu sync.Mutex
	workers := make([]*proc, 3)
	var all []*proc // every worker started, killed ones too: their logs
	for i := range workers {
		workers[i] = e.startWorker(q, "-config", cfgPath)
		all = append(all, workers[i])
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	kills := 0
	go func() {
		defer close(stopped)
		krng := rand.New(rand.NewPCG(rng.Uint64(), 1))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second + time.Duration(krng.IntN(2000))*time.Millisecond):
			}
			mu.Lock()
			i := krng.IntN(len(workers))
			workers[i].cmd.Process.Signal(syscall.SIGKILL)
			<-workers[i].done
			workers[i] = e.startWorker(q, "-config", cfgPath)
			all = append(all, workers[i])
			kills++
			mu.Unlock()
		}
	}()
	idle := func(what string) {
		t.Helper()
		quiet := 0
		e.poll(60*time.Second, 250*time.Millisecond, what, func() bool {
			if e.count(q) == 0 {
				quiet++
			} else {
				quiet = 0
			}
			return quiet >= 4
		})
		t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	}
	idle("employees indexed and offloaded")

	// The application archives, purges and exports.
	e.enqueue("archive", "-queue", q, "-table", names.Source, "-to", arch, "-pk", "Support", "-rk", "000")
	e.enqueue("archive", "-queue", q, "-table", names.Source, "-to", arch, "-pk", "Ops", "-rk-from", "")
	e.enqueue("archive", "-queue", q, "-table", names.Source, "-to-blob", exports+"/archived", "-pk", "Support", "-rk-from", "010")
	e.enqueue("purge", "-queue", q, "-table", names.Source, "-pk", "Legal")
	e.enqueue("export", "-queue", q, "-table", names.Source, "-pk", "Sales", "-to", exports+"/backup", "-id", "op-export-"+e.suffix)
	idle("archives, purge and export done")

	// A rebuild from scratch: nothing of the source's indexes left but the
	// declarations.
	err = wipeIndexes(e.ctx, store, x, names.Source, func(ctx context.Context, container string) error {
		deleteContainer(ctx, t, container)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.enqueueRebuild(q, names.Source)
	idle("rebuilt")
	close(stop)
	<-stopped
	e.stopWorkers(workers...)
	t.Logf("%d workers killed", kills)
	checkNoPoison(t, e, q)

	// Every index equals its table, and index check agrees.
	for _, table := range []string{names.Source, arch} {
		if !compareIndexes(e.ctx, t, store.Tables(), x, table) {
			t.Errorf("the indexes of %s differ from the table", table)
		}
		for _, name := range x.Names(table) {
			e.checkIndex(cfgPath, table, name)
		}
	}

	// The archive table holds the archived employees whole, its own index
	// rows and nothing of the source's.
	want := map[string]storeadapter.Entity{}
	for _, en := range seeded {
		if en.PartitionKey == "Ops" || en.PartitionKey == "Support" && en.RowKey == "000" {
			want[en.PartitionKey+"/"+en.RowKey] = en
		}
	}
	for _, en := range e.entities(arch, storeadapter.ReservedRows("")) {
		if !strings.HasPrefix(en.RowKey, "~tk.m.") && !strings.HasPrefix(en.RowKey, "~tk.c.email_") {
			t.Errorf("the archive table holds reserved row %s/%s, which none of its indexes writes", en.PartitionKey, en.RowKey)
		}
	}
	got := e.entities(arch, storeadapter.ApplicationRows(storeadapter.Filter{}))
	if len(got) != len(want) {
		t.Errorf("the archive table holds %d entities, want %d", len(got), len(want))
	}
	for _, en := range got {
		w, ok := want[en.PartitionKey+"/"+en.RowKey]
		if !ok {
			t.Errorf("the archive table holds %s/%s, which was not archived", en.PartitionKey, en.RowKey)
			continue
		}
		whole, err := largeentity.Get(e.ctx, store, arch, en.PartitionKey, en.RowKey)
		if err != nil || whole.Properties["Bio"] != w.Properties["Bio"] {
			t.Errorf("archived %s/%s does not read back whole: %v", en.PartitionKey, en.RowKey, err)
		}
	}
	var shown blobsyncGetOutput
	e.enqueueJSON(&shown, "blobsync", "get", "-table", arch, "-pk", "Support", "-rk", "000")
	if len(shown.Blobs) != 1 || !strings.HasPrefix(shown.Blobs[0].Name, arch+"/Support/000/Bio/") {
		t.Errorf("blobsync get of the archived Support/000 read %+v, want Bio from a blob of its own", shown.Blobs)
	}

	// No export holds a reserved row; the blob archive holds the
	// biographies inline; the export printed the application's count.
	for _, b := range e.listBlobs(exports, "") {
		if !isManifest(b.Name) {
			continue
		}
		m, err := tableexport.ReadManifest(e.ctx, store.Container(exports), b.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Parts {
			err := tableexport.ReadPart(e.ctx, store.Container(exports), p.Name, func(en storeadapter.Entity) error {
				if storeadapter.IsReserved(en.RowKey) {
					t.Errorf("%s holds reserved row %s/%s", p.Name, en.PartitionKey, en.RowKey)
				}
				if strings.Contains(p.Name, "/archived/") && en.Properties["Bio"] != bio(en.PartitionKey, en.RowKey) {
					t.Errorf("the blob archive's %s/%s does not hold its biography inline", en.PartitionKey, en.RowKey)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	exported := false
	for _, p := range all {
		for _, line := range p.logLines("job done") {
			if line["op_id"] == "op-export-"+e.suffix {
				exported = true
				if r, _ := line["result"].(string); !strings.HasPrefix(r, "exported 25 entities ") {
					t.Errorf("the export printed %q, want the 25 employees of Sales", r)
				}
			}
		}
	}
	if !exported {
		t.Error("no worker logged the export as done")
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// blobsyncGetOutput is what `enqueue blobsync get -o json` prints.
type blobsyncGetOutput struct {
	Blobs []struct {
		Property string `json:"property"`
		Name     string `json:"name"`
	} `json:"blobs"`
}

// envelope returns the message text of a job, encoded as the CLI does.
func (e *env) envelope(t *testing.T, kind, id string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id + "-" + e.suffix, Kind: kind, Args: raw})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// sendTexts sends message texts straight to queue q, in order.
func (e *env) sendTexts(q string, texts []string) {
	e.t.Helper()
	if err := store.Queue(q).Create(e.ctx); err != nil {
		e.t.Fatalf("create queue %s: %v", q, err)
	}
	for _, text := range texts {
		if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
			e.t.Fatalf("send to %s: %v", q, err)
		}
	}
}
