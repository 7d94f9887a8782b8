package e2e

// The restore drill: a table written by the Azure SDK's own client (an
// application we did not write) is exported by the worker, deleted and
// restored by the worker, and compared value by value. The killed drill
// runs alone (no t.Parallel), like the other tests that kill workers.

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// restoreSeed returns the drill's table: the export tests' entities of
// every EDM type at extreme values (each with a 64 KiB binary), copied
// under more awkward keys (spaces, quotes, characters a URL or a filter
// must escape, combining marks, right-to-left text, keys of 512 UTF-16
// units, RowKeys next to the reserved prefix), each with a property set to
// null, which the service does not store; and n small numbered entities in
// three partitions.
func restoreSeed(n int) []storeadapter.Entity {
	edm := exportSeed(0)
	base := edm[0].Properties
	pks := []string{" lead and trail ", `O'Brien '' %25 + & = ; , : @ $ ! * ( ) [ ] { } " < > | ^ ~`,
		"e\u0301 日本語 עברית", strings.Repeat("k", storeadapter.MaxKeyChars)}
	rks := []string{"a", strings.Repeat("😀", storeadapter.MaxKeyChars/2), "~tk-not-reserved", "~tk0"}
	for _, pk := range pks {
		for _, rk := range rks {
			p := maps.Clone(base)
			p["Row"] = pk + "/" + rk
			edm = append(edm, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: p})
		}
	}
	for i := range edm {
		edm[i].Properties["Null"] = nil
	}
	for p := range 3 {
		edm = append(edm, numbered(fmt.Sprintf("bulk %d ü'", p), n/3)...)
	}
	return edm
}

// withoutNulls returns es with their null properties left out: what the
// service stores of them.
func withoutNulls(es []storeadapter.Entity) []storeadapter.Entity {
	out := slices.Clone(es)
	for i := range out {
		out[i].Properties = maps.Clone(out[i].Properties)
		maps.DeleteFunc(out[i].Properties, func(_ string, v any) bool { return v == nil })
	}
	return out
}

// sdkJSON writes an entity as the Table service's JSON, with its own
// annotations (not storeadapter's encoder): Int32, String and Boolean
// plain, the others with "@odata.type", DateTime with 7 fractional digits,
// NaN and the infinities as the service spells them.
func sdkJSON(en storeadapter.Entity) []byte {
	m := map[string]any{"PartitionKey": en.PartitionKey, "RowKey": en.RowKey}
	for name, v := range en.Properties {
		var typ string
		switch v := v.(type) {
		case nil, string, bool, int32:
			m[name] = v
		case int64:
			m[name], typ = strconv.FormatInt(v, 10), "Edm.Int64"
		case float64:
			typ = "Edm.Double"
			switch {
			case math.IsNaN(v):
				m[name] = "NaN"
			case math.IsInf(v, 1):
				m[name] = "Infinity"
			case math.IsInf(v, -1):
				m[name] = "-Infinity"
			default:
				m[name] = json.Number(strconv.FormatFloat(v, 'g', -1, 64))
			}
		case time.Time:
			m[name], typ = v.UTC().Format("2006-01-02T15:04:05.0000000Z"), "Edm.DateTime"
		case storeadapter.GUID:
			m[name], typ = v.String(), "Edm.Guid"
		case []byte:
			m[name], typ = base64.StdEncoding.EncodeToString(v), "Edm.Binary"
		default:
			panic(fmt.Sprintf("sdkJSON: property %s of type %T", name, v))
		}
		if typ != "" {
			m[name+"@odata.type"] = typ
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

// sdkSeed creates table with the Azure SDK (deleted when the test ends)
// and adds es with it, in transactions of up to 100 entities of one
// partition. It returns the table's content as our client reads it, which
// must be es without their nulls, value for value.
func (e *env) sdkSeed(svc *aztables.ServiceClient, table string, es []storeadapter.Entity) []storeadapter.Entity {
	e.t.Helper()
	e.sdkCreate(svc, table)
	client := svc.NewClient(table)
	byPK := map[string][]aztables.TransactionAction{}
	var pks []string
	for _, en := range es {
		if _, ok := byPK[en.PartitionKey]; !ok {
			pks = append(pks, en.PartitionKey)
		}
		byPK[en.PartitionKey] = append(byPK[en.PartitionKey], aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: sdkJSON(en)})
	}
	for _, pk := range pks {
		for actions := range slices.Chunk(byPK[pk], storeadapter.MaxBatchOps) {
			if _, err := client.SubmitTransaction(e.ctx, actions, nil); err != nil {
				e.t.Fatalf("aztables: seed %s partition %q: %v", table, pk, err)
			}
		}
	}
	got := e.entities(table, storeadapter.Filter{})
	want := withoutNulls(es)
	slices.SortFunc(want, func(a, b storeadapter.Entity) int {
		return cmp.Or(storeadapter.CompareUTF16(a.PartitionKey, b.PartitionKey), storeadapter.CompareUTF16(a.RowKey, b.RowKey))
	})
	checkEntities(e.t, "the table as the SDK wrote it", want, got, false)
	if e.t.Failed() {
		e.t.FailNow()
	}
	return got
}

// manifestOf returns "container/name" of the manifest of export op under
// container c.
func (e *env) manifestOf(c, op string) string {
	e.t.Helper()
	var found []string
	for _, b := range e.listBlobs(c, "") {
		if isManifest(b.Name) && strings.HasSuffix(b.Name, "/manifest-"+op+".json") {
			found = append(found, c+"/"+b.Name)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("manifests of %s in %s: %q, want one", op, c, found)
	}
	return found[0]
}

// restoreCounts parses a restore's result, "restore: T: N rows written, S
// skipped (exist), D deleted", failing the test when it is not one of
// table's.
func restoreCounts(t *testing.T, table, result string) (written, skipped, deleted int64) {
	t.Helper()
	rest, ok := strings.CutPrefix(result, "restore: "+table+": ")
	if _, err := fmt.Sscanf(rest, "%d rows written, %d skipped (exist), %d deleted", &written, &skipped, &deleted); !ok || err != nil {
		t.Fatalf("result %q is not a restore of %s", result, table)
	}
	return written, skipped, deleted
}

// onlyResult returns the one result the exited worker logged.
func onlyResult(t *testing.T, p *proc) string {
	t.Helper()
	res := p.results()
	if len(res) != 1 {
		t.Fatalf("%s logged results %q, want one", p, res)
	}
	return res[0]
}

// TestRestoreDrill is the drill: a table the Azure SDK wrote
// (every EDM type at extreme values, nulls, awkward keys, a few hundred
// rows) is exported by the worker, deleted, and restored by the worker:
// every row comes back once, every typed value exact. Then the
// application changes the table (rows added, replaced, merged, deleted,
// and one of tablekeeper's reserved rows written); a dry run of a mirror
// counts the rows it would delete, and the mirror leaves the table equal to
// the export, the reserved row kept as it was.
func TestRestoreDrill(t *testing.T) {
	t.Parallel()
	e := setup(t, 90*time.Second)
	start := time.Now()
	svc := sdkTables(t)
	tbl, c, ckpt, q := e.table("Drill"), e.container("drill"), e.table("DrillCkpt"), e.queue("drill")
	want := e.sdkSeed(svc, tbl, restoreSeed(600))
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	cfg := writeWorkerConfig(t, map[string]any{"export": map[string]any{"checkpointTable": ckpt}, "restore": map[string]any{"checkpointTable": ckpt}})

	exportID := "op-drill-export-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/backup", "-id", exportID)
	if res := onlyResult(t, e.drainProc(q, 60*time.Second, "-config", cfg)); !strings.HasPrefix(res, fmt.Sprintf("exported %d entities", len(want))) {
		t.Fatalf("export result %q, want %d entities", res, len(want))
	}
	manifest := e.manifestOf(c, exportID)
	if _, err := svc.DeleteTable(e.ctx, tbl, nil); err != nil {
		t.Fatalf("aztables: delete %s: %v", tbl, err)
	}
	if got := e.entities(tbl, storeadapter.Filter{}); got != nil {
		t.Fatalf("the deleted table holds %d rows", len(got))
	}
	t.Logf("seeded and exported %d rows in %v", len(want), time.Since(start).Round(time.Millisecond))

	e.enqueue("restore", "-queue", q, "-manifest", manifest, "-id", "op-drill-restore-"+e.suffix)
	p := e.drainProc(q, 60*time.Second, "-config", cfg)
	if w, s, d := restoreCounts(t, tbl, onlyResult(t, p)); w != int64(len(want)) || s != 0 || d != 0 {
		t.Errorf("restore wrote %d, skipped %d, deleted %d; want %d written", w, s, d, len(want))
	}
	checkEntities(t, "the restored table", want, e.entities(tbl, storeadapter.Filter{}), false)
	t.Logf("restored in %v", time.Since(start).Round(time.Millisecond))

	// The application changes the table.
	client := svc.NewClient(tbl)
	bulk := "bulk 1 ü'"
	var extra []storeadapter.Entity
	for i := range 120 { // more than one transaction of deletes
		extra = append(extra, storeadapter.Entity{PartitionKey: bulk, RowKey: rowKey(i) + " extra", Properties: map[string]any{"N": int64(-i)}})
	}
	extra = append(extra,
		storeadapter.Entity{PartitionKey: " ", RowKey: "before everything", Properties: map[string]any{"N": int32(1)}},
		storeadapter.Entity{PartitionKey: want[0].PartitionKey, RowKey: want[0].RowKey + " extra"},
		storeadapter.Entity{PartitionKey: "￮ after everything", RowKey: "z", Properties: map[string]any{"N": int32(2)}})
	for _, en := range extra {
		if _, err := client.AddEntity(e.ctx, sdkJSON(en), nil); err != nil {
			t.Fatalf("aztables: add %s/%s: %v", en.PartitionKey, en.RowKey, err)
		}
	}
	reserved := storeadapter.Entity{PartitionKey: bulk, RowKey: storeadapter.ReservedPrefix + "ix.drill", Properties: map[string]any{"Of": "tablekeeper"}}
	changed := []storeadapter.Entity{
		{PartitionKey: want[1].PartitionKey, RowKey: want[1].RowKey, Properties: map[string]any{"Str": "replaced", "I64Big": int32(7)}},
		{PartitionKey: bulk, RowKey: rowKey(5), Properties: map[string]any{"N": "five"}},
		reserved,
	}
	for _, en := range changed {
		if _, err := client.UpsertEntity(e.ctx, sdkJSON(en), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatalf("aztables: replace %s/%s: %v", en.PartitionKey, en.RowKey, err)
		}
	}
	merged := storeadapter.Entity{PartitionKey: want[2].PartitionKey, RowKey: want[2].RowKey, Properties: map[string]any{"Added": true, "DblHalf": 0.25}}
	if _, err := client.UpsertEntity(e.ctx, sdkJSON(merged), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatalf("aztables: merge: %v", err)
	}
	for _, en := range []storeadapter.Entity{want[3], want[len(want)-1]} {
		if _, err := client.DeleteEntity(e.ctx, en.PartitionKey, en.RowKey, nil); err != nil {
			t.Fatalf("aztables: delete %s/%s: %v", en.PartitionKey, en.RowKey, err)
		}
	}

	var plan struct {
		Rows   int64 `json:"rows"`
		Delete int64 `json:"delete"`
	}
	e.enqueueJSON(&plan, "restore", "-queue", q, "-manifest", manifest, "-mode", "mirror", "-dry-run")
	if plan.Rows != int64(len(want)) || plan.Delete != int64(len(extra)) {
		t.Errorf("mirror dry run: %+v, want %d rows and %d to delete", plan, len(want), len(extra))
	}
	e.enqueue("restore", "-queue", q, "-manifest", manifest, "-mode", "mirror", "-id", "op-drill-mirror-"+e.suffix)
	p = e.drainProc(q, 60*time.Second, "-config", cfg)
	if w, s, d := restoreCounts(t, tbl, onlyResult(t, p)); w != int64(len(want)) || s != 0 || d != int64(len(extra)) {
		t.Errorf("mirror wrote %d, skipped %d, deleted %d; want %d written and %d deleted", w, s, d, len(want), len(extra))
	}
	got := e.entities(tbl, storeadapter.Filter{})
	i := slices.IndexFunc(got, func(en storeadapter.Entity) bool { return en.RowKey == reserved.RowKey })
	if i < 0 {
		t.Fatalf("the mirror deleted the reserved row %s/%s", reserved.PartitionKey, reserved.RowKey)
	}
	if d := diffProperties(reserved.Properties, got[i].Properties); len(d) > 0 {
		t.Errorf("the mirror changed the reserved row:\n%s", strings.Join(d, "\n"))
	}
	checkEntities(t, "the mirrored table (its reserved row aside)", want, slices.Delete(got, i, i+1), false)
	checkNoPoison(t, e, q)
	t.Logf("mirrored in %v", time.Since(start).Round(time.Millisecond))
}

// restoreMaxPartBytes and restoreCheckpointRows make the killed
// drill's restore save often and write between its saves: parts of about
// 550 numbered lines, a checkpoint every 200 lines, so a full transaction
// of 100 rows commits between two saves, and a kill there leaves rows in
// the table that the checkpoint does not cover.
const (
	restoreMaxPartBytes   = 128 << 10
	restoreCheckpointRows = 200
)

// TestKilledRestoreResumesExactly restores the drill's table from an
// export of dozens of parts with a worker killed with SIGKILL four times
// or more, each time at a random moment of up to 100 ms after the
// restarted worker saved progress and the table held rows past its
// checkpoint (written, not yet recorded), with a checkpoint every 200
// rows and a time budget of 1 s (so the restore also continues in new
// messages). At least one kill must land while such rows exist (more
// kills are made until one does). After a drain every row is there once,
// nothing more, every typed value exact, and every exported row was
// counted once: written, or skipped because a killed run had written it.
func TestKilledRestoreResumesExactly(t *testing.T) {
	e := setup(t, 120*time.Second)
	start := time.Now()
	svc := sdkTables(t)
	tbl, c, ckpt, q := e.table("KilledRestore"), e.container("killed-restore"), e.table("KilledRestoreCkpt"), e.queue("killed-restore")
	want := e.sdkSeed(svc, tbl, restoreSeed(3000))
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	cfg := writeWorkerConfig(t, map[string]any{"runner": fastRunner(), "export": map[string]any{"checkpointTable": ckpt},
		"restore": map[string]any{"checkpointTable": ckpt, "checkpointRows": restoreCheckpointRows, "timeBudget": "1s"}})
	exportID := "op-killed-export-" + e.suffix
	e.enqueue("export", "-queue", q, "-table", tbl, "-to", c+"/backup", "-max-part-bytes", fmt.Sprint(restoreMaxPartBytes), "-id", exportID)
	e.drain(q, 60*time.Second, "-config", cfg)
	manifest := e.manifestOf(c, exportID)
	_, name, _ := strings.Cut(manifest, "/")
	m, err := tableexport.ReadManifest(e.ctx, store.Container(c), name)
	if err != nil {
		t.Fatal(err)
	}
	// The keys of each part, in order: what the restore writes at each of
	// its positions.
	lines := make([][]storeadapter.Entity, len(m.Parts))
	for i, part := range m.Parts {
		err := tableexport.ReadPart(e.ctx, store.Container(c), part.Name, func(en storeadapter.Entity) error {
			lines[i] = append(lines[i], storeadapter.Entity{PartitionKey: en.PartitionKey, RowKey: en.RowKey})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Parts) < 15 || m.Entities != int64(len(want)) {
		t.Fatalf("the export holds %d entities in %d parts; want %d in 15 or more: lower the part cap", m.Entities, len(m.Parts), len(want))
	}
	if _, err := svc.DeleteTable(e.ctx, tbl, nil); err != nil {
		t.Fatalf("aztables: delete %s: %v", tbl, err)
	}
	t.Logf("seeded and exported %d rows in %d parts in %v", len(want), len(m.Parts), time.Since(start).Round(time.Millisecond))

	opID := "op-killed-restore-" + e.suffix
	checkpoints := idempotent.Checkpoints{Tables: store.Tables(), Table: ckpt}
	type position struct {
		Phase string `json:"phase"`
		P     int    `json:"p"`
		L     int    `json:"l"`
	}
	load := func() (string, position) {
		token, err := checkpoints.Load(e.ctx, opID, "restore")
		if err != nil {
			t.Fatalf("load the restore's checkpoint: %v", err)
		}
		var pos position
		if token != "" {
			if err := json.Unmarshal([]byte(token), &pos); err != nil {
				t.Fatalf("the restore's checkpoint %q: %v", token, err)
			}
		}
		if pos.Phase != "" {
			t.Fatalf("the restore reached phase %q before the last kill: raise the row count", pos.Phase)
		}
		return token, pos
	}
	// unsaved reports whether the table holds the row after the
	// checkpoint's position: one the checkpoint does not cover, so the
	// next delivery writes it again.
	unsaved := func() bool {
		_, pos := load()
		return pos.P < len(lines) && pos.L < len(lines[pos.P]) && e.exists(tbl, lines[pos.P][pos.L].PartitionKey, lines[pos.P][pos.L].RowKey)
	}
	e.enqueue("restore", "-queue", q, "-manifest", manifest, "-id", opID)
	rng := rand.New(rand.NewPCG(indexSeed(t), 0))
	landed := 0
	for k := 0; k < 4 || landed == 0; k++ {
		if k == 8 {
			t.Fatalf("none of 8 kills landed while the table held rows past the checkpoint")
		}
		e.killWhile(q, cfg, rng, 1, 100*time.Millisecond, func(int) func() bool {
			atStart, _ := load()
			return func() bool {
				token, _ := load()
				return token != atStart && unsaved()
			}
		})
		if unsaved() {
			landed++
		}
	}
	token, _ := load()
	t.Logf("after the kills (%d with rows past the checkpoint), at %s (%v)", landed, token, time.Since(start).Round(time.Millisecond))

	p := e.drainProc(q, 60*time.Second, "-config", cfg)
	if s := p.stats(); s.Poisoned != 0 || s.Succeeded != 1 {
		t.Errorf("draining worker's counters %+v, want 1 succeeded, none poisoned", s)
	}
	checkNoPoison(t, e, q)
	w, s, d := restoreCounts(t, tbl, onlyResult(t, p))
	if w+s != int64(len(want)) || s == 0 || d != 0 {
		t.Errorf("restore wrote %d and skipped %d (deleted %d): want %d in all, some skipped (a killed run wrote them), none deleted", w, s, d, len(want))
	}
	checkEntities(t, "the table restored by killed workers", want, e.entities(tbl, storeadapter.Filter{}), false)
	t.Logf("restored after %v: %d written, %d skipped (written by a killed run)", time.Since(start).Round(time.Millisecond), w, s)
}
