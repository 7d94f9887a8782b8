package restore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// env is a localstore behind the instrument, a table Src seeded with
// every EDM type and awkward keys, and its export.
type env struct {
	raw   *localstore.Store
	store *instrument.Store
	mu    sync.Mutex
	fault func(c instrument.Call) error
	// partBytes is the size of the export's parts (default 8 KiB).
	partBytes int64
}

func newEnv(t *testing.T) *env { return newEnvOf(t, seed()) }

// newEnvOf is newEnv with table Src seeded with rows.
func newEnvOf(t *testing.T, rows []storeadapter.Entity) *env {
	t.Helper()
	e := &env{partBytes: 8 << 10, raw: localstore.New(localstore.Options{Clock: clock.NewFake(t0).AutoAdvance(time.Millisecond)})}
	e.store = instrument.Wrap(e.raw, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.fault != nil {
			return e.fault(c)
		}
		return nil
	}})
	ctx := context.Background()
	if err := e.raw.Tables().CreateTable(ctx, "Src"); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range rows {
		if _, err := e.raw.Tables().InsertEntity(ctx, "Src", x); err != nil {
			t.Fatal(err)
		}
	}
	// A reserved row in the source is not exported.
	if _, err := e.raw.Tables().InsertEntity(ctx, "Src", storeadapter.Entity{PartitionKey: "a", RowKey: "~tk.m.src"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// seed is 3 partitions of 200 rows with every EDM type, nulls (absent
// properties), binary and Int64 at its limits.
func seed() []storeadapter.Entity {
	var out []storeadapter.Entity
	for _, pk := range []string{"a", "pé 'q'", "z~"} {
		for i := range 200 {
			props := map[string]any{
				"S": fmt.Sprintf("<&> \"%d\"\n", i), "B": i%2 == 0, "I32": int32(-i), "I64": int64(math.MaxInt64 - int64(i)),
				"F": float64(i) / 7, "T": time.Date(1601+i, 1, 2, 3, 4, 5, 1234500, time.UTC),
				"G": storeadapter.GUID{byte(i), 1, 2}, "Bin": []byte{0, byte(i), 0xff},
			}
			if i%10 == 0 {
				delete(props, "S") // a null
				props["Min"] = int64(math.MinInt64)
				props["NaN"] = math.Inf(-1)
			}
			out = append(out, storeadapter.Entity{PartitionKey: pk, RowKey: fmt.Sprintf("r %03d ✓", i), Properties: props})
		}
	}
	return out
}

// export writes an export of Src (or of pk) in parts of about
// e.partBytes and returns its manifest's reference.
func (e *env) export(t *testing.T, op string, pk *string) string {
	t.Helper()
	m, err := tableexport.Export(context.Background(), e.raw.Tables(), storeadapter.Range{Table: "Src", PK: pk}, tableexport.Options{
		Blobs: e.raw.Container("exports"), Prefix: "bk", MaxPartBytes: e.partBytes, OpID: op,
		Checkpoints: idempotent.Checkpoints{Tables: e.raw.Tables(), Table: "ExportCheckpoints"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) < 3 {
		t.Fatalf("export of %d parts; the tests want several", len(m.Parts))
	}
	return "exports/" + m.Name
}

func (e *env) worker(t *testing.T, cfg restore.Config, clk clock.Clock) *restore.Worker {
	t.Helper()
	d := kit.Plain(e.store)
	d.Clock = clk
	w, err := restore.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func run(t *testing.T, w *restore.Worker, id string, a restore.Args) (string, error) {
	t.Helper()
	raw, _ := json.Marshal(a)
	parsed, err := jobs.ParseArgs[restore.Args](raw)
	if err != nil {
		t.Fatalf("args %s: %v", raw, err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = w.Work(ctx, &jobs.Job[restore.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: restore.Kind}, Args: parsed})
	return res.Text(), err
}

func rows(t *testing.T, tables storeadapter.Tables, table string) []storeadapter.Entity {
	t.Helper()
	var out []storeadapter.Entity
	q := storeadapter.Query{}
	for {
		p, err := tables.Query(context.Background(), table, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Entities...)
		if q.Continuation = p.Next; q.Continuation == "" {
			return out
		}
	}
}

// same fails unless got and want hold the same keys with the same typed
// values.
func same(t *testing.T, got, want []storeadapter.Entity) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PartitionKey != w.PartitionKey || g.RowKey != w.RowKey || len(g.Properties) != len(w.Properties) {
			t.Fatalf("row %d: %s/%s %v, want %s/%s %v", i, g.PartitionKey, g.RowKey, g.Properties, w.PartitionKey, w.RowKey, w.Properties)
		}
		for k, v := range w.Properties {
			if !storeadapter.Equal(g.Properties[k], v) {
				t.Fatalf("row %s/%s property %s: %s, want %s", w.PartitionKey, w.RowKey, k, storeadapter.Format(g.Properties[k]), storeadapter.Format(v))
			}
		}
	}
}

func appRows(es []storeadapter.Entity) []storeadapter.Entity {
	var out []storeadapter.Entity
	for _, e := range es {
		if !storeadapter.IsReserved(e.RowKey) {
			out = append(out, e)
		}
	}
	return out
}

func TestRestoreArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{}`, "args.manifests: is required"},
		{`{"manifests":["exports"]}`, "args.manifests[0]: "},
		{`{"manifests":["exports/bk/x.json"]}`, "manifest-<op>.json"},
		{`{"manifests":["exports/m/manifest-a.json","exports/m/manifest-a.json"],"mode":"replace"}`, "args.manifests[1]: \"exports/m/manifest-a.json\" is listed twice"},
		{`{"manifests":["exports/m/manifest-a.json"],"table":"a-b"}`, "args.table:"},
		{`{"manifests":["exports/m/manifest-a.json"],"mode":"merge"}`, `args.mode: must be "insert", "replace" or "mirror", got "merge"`},
		{`{"manifests":["exports/m/manifest-a.json","exports/m/manifest-b.json"]}`, "args.mode: a chain of 2 manifests needs mode replace"},
		{`{"manifests":["exports/m/manifest-a.json","exports/m/manifest-b.json"],"mode":"mirror"}`, "args.mode: mirror needs exactly one manifest"},
		{`{"manifests":["exports/m/manifest-a.json"],"extra":1}`, "extra"},
	} {
		_, err := jobs.ParseArgs[restore.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%s) = %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"manifests":["exports/m/manifest-a.json"]}`,
		`{"manifests":["exports/m/manifest-a.json","exports/m/manifest-b.json"],"mode":"replace","table":"Tab2"}`,
		`{"manifests":["exports/manifest-a.json"],"mode":"mirror"}`,
	} {
		if _, err := jobs.ParseArgs[restore.Args](json.RawMessage(ok)); err != nil {
			t.Errorf("ParseArgs(%s) = %v", ok, err)
		}
	}
}

// TestRestoreInsertIntoMissingTable: the target is created, every row is
// exact, the reserved row of the source is not there; a redelivery writes
// nothing and reports the same.
func TestRestoreInsertIntoMissingTable(t *testing.T) {
	e := newEnv(t)
	ref := e.export(t, "op-x", nil)
	w := e.worker(t, restore.Config{CheckpointRows: 100}, nil)
	res, err := run(t, w, "r1", restore.Args{Manifests: []string{ref}, Table: "Dst"})
	if err != nil {
		t.Fatal(err)
	}
	if res != "restore: Dst: 600 rows written, 0 skipped (exist), 0 deleted" {
		t.Errorf("result %q", res)
	}
	same(t, rows(t, e.raw.Tables(), "Dst"), seed())
	e.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpTransact || c.Op == instrument.OpInsertEntity {
			return fmt.Errorf("a done restore wrote to %s", c.Name)
		}
		return nil
	}
	if again, err := run(t, w, "r1", restore.Args{Manifests: []string{ref}, Table: "Dst"}); err != nil || again != res {
		t.Errorf("redelivery = %q, %v; want %q", again, err, res)
	}
}

// TestRestoreInsertKeepsExistingRows and replace overwrites them.
func TestRestoreInsertAndReplace(t *testing.T) {
	e := newEnv(t)
	ref := e.export(t, "op-x", nil)
	ctx := context.Background()
	want := seed()
	if err := e.raw.Tables().CreateTable(ctx, "Dst"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(want); i += 9 {
		changed := storeadapter.Entity{PartitionKey: want[i].PartitionKey, RowKey: want[i].RowKey, Properties: map[string]any{"Changed": true}}
		if _, err := e.raw.Tables().InsertEntity(ctx, "Dst", changed); err != nil {
			t.Fatal(err)
		}
		want[i] = changed
	}
	w := e.worker(t, restore.Config{}, nil)
	res, err := run(t, w, "ins", restore.Args{Manifests: []string{ref}, Table: "Dst", Mode: restore.ModeInsert})
	if err != nil || res != "restore: Dst: 533 rows written, 67 skipped (exist), 0 deleted" {
		t.Fatalf("insert = %q, %v", res, err)
	}
	same(t, rows(t, e.raw.Tables(), "Dst"), want)
	res, err = run(t, w, "rep", restore.Args{Manifests: []string{ref}, Table: "Dst", Mode: restore.ModeReplace})
	if err != nil || res != "restore: Dst: 600 rows written, 0 skipped (exist), 0 deleted" {
		t.Fatalf("replace = %q, %v", res, err)
	}
	same(t, rows(t, e.raw.Tables(), "Dst"), seed())
}

// TestRestoreMirror: extra rows in the scope are deleted, changed rows
// replaced, reserved rows and rows outside the scope untouched.
func TestRestoreMirror(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, scope := range []*string{nil, ptr("pé 'q'")} {
		name := "whole"
		if scope != nil {
			name = "partition"
		}
		t.Run(name, func(t *testing.T) {
			ref := e.export(t, "op-"+name, scope)
			target := "Mirror" + map[bool]string{true: "P", false: "T"}[scope != nil]
			if err := e.raw.Tables().CreateTable(ctx, target); err != nil {
				t.Fatal(err)
			}
			put := func(pk, rk string, props map[string]any) {
				t.Helper()
				if _, err := e.raw.Tables().UpsertEntity(ctx, target, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}, storeadapter.Replace); err != nil {
					t.Fatal(err)
				}
			}
			extras := 0
			for i := range 250 { // extra rows between, before and after the exported ones
				put([]string{"a", "pé 'q'", "z~", "0", "zz"}[i%5], fmt.Sprintf("r %03d x", i), map[string]any{"Extra": true})
				extras++
			}
			put("pé 'q'", "r 005 ✓", map[string]any{"Changed": true})
			put("a", "~tk.m.keep", map[string]any{"Index": "entry"})
			put("pé 'q'", "~tk.c.keep", nil)
			w := e.worker(t, restore.Config{CheckpointRows: 100}, nil)
			res, err := run(t, w, "mirror-"+name, restore.Args{Manifests: []string{ref}, Table: target, Mode: restore.ModeMirror})
			if err != nil {
				t.Fatal(err)
			}
			got := rows(t, e.raw.Tables(), target)
			var inScope, outside, reserved []storeadapter.Entity
			for _, r := range got {
				switch {
				case storeadapter.IsReserved(r.RowKey):
					reserved = append(reserved, r)
				case scope == nil || r.PartitionKey == *scope:
					inScope = append(inScope, r)
				default:
					outside = append(outside, r)
				}
			}
			var want []storeadapter.Entity
			for _, r := range seed() {
				if scope == nil || r.PartitionKey == *scope {
					want = append(want, r)
				}
			}
			same(t, inScope, want)
			if len(reserved) != 2 {
				t.Errorf("reserved rows left: %d, want 2", len(reserved))
			}
			wantDeleted, wantOutside := extras, 0
			if scope != nil {
				wantDeleted, wantOutside = extras/5, extras-extras/5
			}
			if len(outside) != wantOutside {
				t.Errorf("%d rows outside the scope, want %d untouched", len(outside), wantOutside)
			}
			if wantRes := fmt.Sprintf("restore: %s: %d rows written, 0 skipped (exist), %d deleted", target, len(want), wantDeleted); res != wantRes {
				t.Errorf("result %q, want %q", res, wantRes)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestRestoreRefusesDamagedParts: a part with other bytes, or missing, is
// permanent, names the part, and nothing of it is written.
func TestRestoreRefusesDamagedParts(t *testing.T) {
	e := newEnv(t)
	ref := e.export(t, "op-x", nil)
	ctx := context.Background()
	b := e.raw.Container("exports")
	m, err := tableexport.ReadManifest(ctx, b, strings.TrimPrefix(ref, "exports/"))
	if err != nil {
		t.Fatal(err)
	}
	victim := m.Parts[2]
	var victimKeys []string
	if err := tableexport.ReadPart(ctx, b, victim.Name, func(x storeadapter.Entity) error {
		victimKeys = append(victimKeys, x.PartitionKey+"/"+x.RowKey)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	data, _, err := b.Get(ctx, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	w := e.worker(t, restore.Config{}, nil)
	for i, damage := range []func(){
		func() { // one byte changed: the same length, another hash
			bad := append([]byte(nil), data...)
			bad[len(bad)/2] ^= 1
			if _, err := b.Put(ctx, victim.Name, bad, storeadapter.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		func() { // cut short
			if _, err := b.Put(ctx, victim.Name, data[:len(data)-10], storeadapter.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			if err := b.Delete(ctx, victim.Name, ""); err != nil {
				t.Fatal(err)
			}
		},
	} {
		damage()
		table := fmt.Sprintf("Damaged%d", i)
		_, err := run(t, w, "dmg-"+table, restore.Args{Manifests: []string{ref}, Table: table})
		if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), "nothing of part "+victim.Name+" was written") {
			t.Fatalf("damage %d: %v, want permanent naming %s", i, err, victim.Name)
		}
		for _, k := range victimKeys {
			pk, rk, _ := strings.Cut(k, "/")
			if _, err := e.raw.Tables().GetEntity(ctx, table, pk, rk); !errors.Is(err, storeadapter.ErrNotFound) {
				t.Fatalf("damage %d: row %s of the damaged part: %v", i, k, err)
			}
		}
	}
}

// TestRestoreResumesAfterACrash: a restore that fails midway resumes at
// its checkpoint: it does not write again what it had saved, and the
// table ends exact.
func TestRestoreResumesAfterACrash(t *testing.T) {
	e := newEnv(t)
	ref := e.export(t, "op-x", nil)
	w := e.worker(t, restore.Config{CheckpointRows: 100}, nil)
	args := restore.Args{Manifests: []string{ref}, Table: "Dst", Mode: restore.ModeReplace}
	txs := 0
	e.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpTransact {
			if txs++; txs == 4 {
				return fmt.Errorf("crash: %w", storeadapter.ErrUnavailable)
			}
		}
		return nil
	}
	if _, err := run(t, w, "crash", args); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Fatalf("first run = %v, want the injected failure", err)
	}
	token, err := idempotent.Checkpoints{Tables: e.raw.Tables(), Table: jobs.DefaultCheckpointTable}.Load(context.Background(), "crash", "restore")
	if err != nil || token == "" {
		t.Fatalf("checkpoint %q, %v; want one saved before the crash", token, err)
	}
	var saved struct{ Written int64 }
	_ = json.Unmarshal([]byte(token), &saved)
	if saved.Written == 0 {
		t.Fatalf("checkpoint %s saved no progress", token)
	}
	txs = 0
	e.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpTransact {
			txs++
		}
		return nil
	}
	res, err := run(t, w, "crash", args)
	if err != nil {
		t.Fatal(err)
	}
	if res != "restore: Dst: 600 rows written, 0 skipped (exist), 0 deleted" {
		t.Errorf("result %q", res)
	}
	// 600 rows in batches of at most 100 of one partition, cut at every
	// part: the resumed run sends fewer transactions than a whole restore.
	whole := 0
	e.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpTransact {
			whole++
		}
		return nil
	}
	if _, err := run(t, w, "whole", restore.Args{Manifests: []string{ref}, Table: "Dst2", Mode: restore.ModeReplace}); err != nil {
		t.Fatal(err)
	}
	if txs >= whole {
		t.Errorf("the resumed run sent %d transactions, a whole restore %d: it rewrote saved parts", txs, whole)
	}
	same(t, rows(t, e.raw.Tables(), "Dst"), seed())
}

// TestRestoreContinuesLater: with the budget spent at every checkpoint,
// each delivery saves and asks to continue; together they restore every
// row once.
func TestRestoreContinuesLater(t *testing.T) {
	e := newEnv(t)
	ref := e.export(t, "op-x", nil)
	w := e.worker(t, restore.Config{CheckpointRows: 100, TimeBudget: jobs.Duration(time.Second)}, clock.NewFake(t0).AutoAdvance(2*time.Second))
	args := restore.Args{Manifests: []string{ref}, Table: "Dst", Mode: restore.ModeMirror}
	deliveries := 0
	for {
		deliveries++
		if deliveries > 200 {
			t.Fatal("the restore never finished")
		}
		res, err := run(t, w, "slow", args)
		var c *jobs.ContinueError
		if errors.As(err, &c) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res != "restore: Dst: 600 rows written, 0 skipped (exist), 0 deleted" {
			t.Errorf("result %q", res)
		}
		break
	}
	if deliveries < 5 {
		t.Errorf("%d deliveries; with the budget spent at every checkpoint there should be one per checkpoint", deliveries)
	}
	same(t, appRows(rows(t, e.raw.Tables(), "Dst")), seed())
}

// TestRestoreMirrorRefusesAnIncrement: an increment holds only the rows
// changed since its mark; mirroring it would delete every other row, so it
// is refused (permanent, naming the manifest) with nothing written.
func TestRestoreMirrorRefusesAnIncrement(t *testing.T) {
	e := newEnv(t)
	m, err := tableexport.Export(context.Background(), e.raw.Tables(), storeadapter.Range{Table: "Src"}, tableexport.Options{
		Blobs: e.raw.Container("exports"), Prefix: "bk", OpID: "op-inc", Since: t0.Add(-time.Hour),
		Checkpoints: idempotent.Checkpoints{Tables: e.raw.Tables(), Table: "ExportCheckpoints"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Incremental() {
		t.Fatal("the export is no increment")
	}
	w := e.worker(t, restore.Config{}, clock.NewFake(t0))
	_, err = run(t, w, "op-mirror-inc", restore.Args{Manifests: []string{"exports/" + m.Name}, Table: "Target", Mode: restore.ModeMirror})
	if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), "is an incremental export") {
		t.Fatalf("mirror of an increment: %v, want a permanent refusal", err)
	}
	if _, err := e.raw.Tables().Query(context.Background(), "Target", storeadapter.Query{}); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("the target was touched: %v", err)
	}
}

// swapDigit returns a copy of a part's bytes with another first digit in
// its first line's Int32: the same length and lines, each of which
// parses, in key order, and another SHA-256.
func swapDigit(data []byte) []byte {
	swapped := append([]byte(nil), data...)
	at := bytes.Index(swapped, []byte(`"I32":-`)) + len(`"I32":-`)
	swapped[at] = map[bool]byte{true: '8', false: '9'}[swapped[at] == '9']
	return swapped
}

// TestRestoreChecksTheSecondRead: a part whose bytes are swapped after its
// check, before the read that uses it (a digit of its first line changed:
// the same length and lines, in key order, each of which parses, another
// SHA-256), is found at that read's end: permanent, naming the part and what may have been
// done from it, and the checkpoint never passes the part. In the write
// phase the save inside the part (at CheckpointRows) stays, and nothing of
// the parts after it is written; in mirror's pass no part after it is
// reconciled.
func TestRestoreChecksTheSecondRead(t *testing.T) {
	for _, c := range []struct {
		mode   string
		swapAt int // the Open of the part that gets the swapped bytes
		want   string
	}{
		{restore.ModeReplace, 2, "its rows from line 1 on may have been written from the changed bytes"},
		// 1: the check, 2: the write phase's read, 3: mirror's read (the
		// delivery checked the part already).
		{restore.ModeMirror, 3, "target rows in the scope up to its last key read may have been deleted"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			b := e.raw.Container("exports")
			m, err := tableexport.Export(ctx, e.raw.Tables(), storeadapter.Range{Table: "Src"}, tableexport.Options{
				Blobs: b, Prefix: "bk", MaxPartBytes: 64 << 10, OpID: "op-big",
				Checkpoints: idempotent.Checkpoints{Tables: e.raw.Tables(), Table: "ExportCheckpoints"}, Clock: clock.NewFake(t0)})
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Parts) < 3 || m.Parts[1].Entities <= 100 {
				t.Fatalf("%d parts, the second of %d lines; the test wants a save inside it (over 100 lines) and parts after it", len(m.Parts), m.Parts[1].Entities)
			}
			victim := m.Parts[1]
			data, _, err := b.Get(ctx, victim.Name)
			if err != nil {
				t.Fatal(err)
			}
			var first storeadapter.Entity
			stop := errors.New("the first line")
			if err := tableexport.ReadPart(ctx, b, victim.Name, func(x storeadapter.Entity) error { first = x; return stop }); !errors.Is(err, stop) {
				t.Fatal(err)
			}
			swapped := swapDigit(data)
			opens := 0
			e.fault = func(ca instrument.Call) error {
				if ca.Op == instrument.OpOpen && ca.Blob == victim.Name {
					if opens++; opens == c.swapAt {
						if _, err := b.Put(ctx, victim.Name, swapped, storeadapter.PutOptions{}); err != nil {
							return err
						}
					}
				}
				return nil
			}
			w := e.worker(t, restore.Config{CheckpointRows: 100}, nil)
			_, err = run(t, w, "swap", restore.Args{Manifests: []string{"exports/" + m.Name}, Table: "Dst", Mode: c.mode})
			if opens != c.swapAt {
				t.Fatalf("the part was opened %d times, want %d", opens, c.swapAt)
			}
			if !jobs.IsPermanent(err) || !errors.Is(err, tableexport.ErrDamaged) ||
				!strings.Contains(err.Error(), "part "+victim.Name+" changed after its check: "+c.want) {
				t.Fatalf("%v; want permanent, naming part %s, %q", err, victim.Name, c.want)
			}
			token, err := idempotent.Checkpoints{Tables: e.raw.Tables(), Table: jobs.DefaultCheckpointTable}.Load(ctx, "swap", "restore")
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Phase string
				P     int
				L     int64
			}
			if err := json.Unmarshal([]byte(token), &st); err != nil {
				t.Fatal(err)
			}
			wantPhase, wantL := "", int64(100)
			if c.mode == restore.ModeMirror {
				wantPhase = "mirror"
			}
			if st.Phase != wantPhase || st.P != 1 || st.L != wantL {
				t.Errorf("checkpoint %s; want phase %q, part 1 at its save inside it (line %d)", token, wantPhase, wantL)
			}
			// A redelivery checks the part first and refuses it, saying
			// that the lines before the checkpoint were used (not that
			// nothing of the part was).
			e.fault = nil
			_, err = run(t, w, "swap", restore.Args{Manifests: []string{"exports/" + m.Name}, Table: "Dst", Mode: c.mode})
			if want := fmt.Sprintf("nothing more of part %s was used (its first %d lines were", victim.Name, wantL); !jobs.IsPermanent(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("redelivery: %v; want permanent, %q", err, want)
			}
			if c.mode == restore.ModeMirror {
				return
			}
			// The hazard was there: the changed line was written as it was
			// read, and only the error tells.
			if got, err := e.raw.Tables().GetEntity(ctx, "Dst", first.PartitionKey, first.RowKey); err != nil || got.Properties["I32"] == first.Properties["I32"] {
				t.Errorf("row %s/%s of the changed line: %v, %v; want it written with the changed Int32 (not %v)", first.PartitionKey, first.RowKey, got.Properties["I32"], err, first.Properties["I32"])
			}
			for _, mp := range m.Parts[2:] {
				if err := tableexport.ReadPart(ctx, b, mp.Name, func(x storeadapter.Entity) error {
					if _, err := e.raw.Tables().GetEntity(ctx, "Dst", x.PartitionKey, x.RowKey); !errors.Is(err, storeadapter.ErrNotFound) {
						return fmt.Errorf("row %s/%s of part %s after the changed one: %v, want not written", x.PartitionKey, x.RowKey, mp.Name, err)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
