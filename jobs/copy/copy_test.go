package copykind_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	copykind "github.com/tablekeeper/tablekeeper/jobs/copy"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// TestCopyArgs: every bad argument is refused naming its field and rule.
func TestCopyArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{}`, "args.table:"},
		{`{"table":"x","to":"dr"}`, "args.table:"},
		{`{"table":"Logs","rkFrom":"a","to":"dr"}`, "args.pk: is required with rkFrom or rkTo"},
		{`{"table":"Logs","pk":"p","rkFrom":"b","rkTo":"a","to":"dr"}`, "args.rkTo: must be greater than rkFrom"},
		{`{"table":"Logs","from":"DR"}`, `args.from: an account of the worker's config ("" for its own) must be 1-32 lower-case letters`},
		{`{"table":"Logs","to":"d r"}`, `args.to: an account of the worker's config`},
		{`{"table":"Logs","target":"x"}`, "args.target:"},
		{`{"table":"Logs","target":"Logs2","mode":"mirror"}`, `args.mode: must be "insert" or "replace", got "mirror"`},
		{`{"table":"Logs"}`, "args.target: the copy would write table Logs onto itself"},
		{`{"table":"Logs","target":"logs"}`, "args.target: the copy would write table Logs onto itself (table names ignore case)"},
		{`{"table":"Logs","from":"dr","to":"dr"}`, "args.target: the copy would write table Logs onto itself"},
		{`{"table":"Logs","to":"dr","extra":1}`, "extra"},
	} {
		_, err := jobs.ParseArgs[copykind.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%s) = %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"table":"Logs","to":"dr"}`,
		`{"table":"Logs","from":"dr"}`,
		`{"table":"Logs","from":"dr","to":"backup-2","target":"Logs2","pk":"p","rkFrom":"a","rkTo":"b","mode":"replace"}`,
		`{"table":"Logs","target":"Logs2","mode":"insert"}`,
	} {
		if _, err := jobs.ParseArgs[copykind.Args](json.RawMessage(ok)); err != nil {
			t.Errorf("ParseArgs(%s) = %v, want nil", ok, err)
		}
	}
}

// TestCopyConfig: defaults, and each bad setting named.
func TestCopyConfig(t *testing.T) {
	c := copykind.Config{}
	if err := c.Validate(); err != nil || c.CheckpointTable != "TablekeeperCheckpoints" || c.PageSize != 1000 || c.Partitions != 8 ||
		time.Duration(c.TimeBudget) != 5*time.Minute || time.Duration(c.MaxRunTime) != 30*time.Minute {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, c := range []struct {
		cfg  copykind.Config
		want string
	}{
		{copykind.Config{PageSize: 1001}, "copy.pageSize: must be 1-1000, got 1001"},
		{copykind.Config{Partitions: 65}, "copy.partitions: must be 1-64, got 65"},
		{copykind.Config{TimeBudget: jobs.Duration(time.Hour)}, "copy.timeBudget: must be at least 1s and less than copy.maxRunTime"},
		{copykind.Config{CheckpointTable: "x"}, "copy.checkpointTable:"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// bundle is two accounts: the worker's own ("") and "dr", each a
// localstore behind an instrument (faults, counts).
type bundle struct {
	home, dr  storeadapter.Store
	homeFault atomic.Pointer[func(instrument.Call) error]
	drFault   atomic.Pointer[func(instrument.Call) error]
	deps      kit.Deps
	// queries counts the queries of the worker's own account's Orders.
	queries atomic.Int64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{}
	wrap := func(f *atomic.Pointer[func(instrument.Call) error], obs ...instrument.Observer) storeadapter.Store {
		return instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: obs,
			Fault: func(_ context.Context, c instrument.Call) error {
				if h := f.Load(); h != nil {
					return (*h)(c)
				}
				return nil
			}})
	}
	b.home = wrap(&b.homeFault, instrument.ObserverFunc(func(c instrument.Call, _ time.Duration, _ error) {
		if c.Op == instrument.OpQuery && c.Name == "Orders" {
			b.queries.Add(1)
		}
	}))
	b.dr = wrap(&b.drFault)
	b.deps = kit.Deps{Store: b.home, Accounts: func(name string) (storeadapter.Store, error) {
		if name == "dr" {
			return b.dr, nil
		}
		return nil, fmt.Errorf("account %q: not in the config's \"accounts\" section (it declares dr)", name)
	}}
	return b
}

func (b *bundle) worker(t *testing.T, cfg copykind.Config) *copykind.Worker {
	t.Helper()
	cfg.CheckpointTable = "Checkpoints"
	w, err := copykind.New(b.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// seed writes parts partitions of rows rows each to table, every EDM type
// in each row, and a reserved row in each partition.
func seed(t *testing.T, s storeadapter.Store, table string, parts, rows int) {
	t.Helper()
	ctx := context.Background()
	if err := s.Tables().CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		var ops []storeadapter.TableOp
		for r := range rows {
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{
				PartitionKey: fmt.Sprintf("p%02d", p), RowKey: fmt.Sprintf("r%04d", r),
				Properties: map[string]any{"S": fmt.Sprint("row ", p, r), "I": int32(r), "L": int64(1)<<53 + int64(r), "D": 0.5,
					"B": []byte{byte(p), byte(r)}, "T": time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC), "F": r%2 == 0}}})
			if len(ops) == storeadapter.MaxBatchOps {
				transact(t, s, table, ops)
				ops = nil
			}
		}
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{
			PartitionKey: fmt.Sprintf("p%02d", p), RowKey: storeadapter.ReservedPrefix + "m.x", Properties: map[string]any{"S": "reserved"}}})
		transact(t, s, table, ops)
	}
}

func transact(t *testing.T, s storeadapter.Store, table string, ops []storeadapter.TableOp) {
	t.Helper()
	if len(ops) > 0 {
		if err := s.Tables().Transact(context.Background(), table, ops); err != nil {
			t.Fatal(err)
		}
	}
}

// rows reads every row of table (reserved ones too), keyed "pk/rk".
func rows(t *testing.T, s storeadapter.Store, table string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	q := storeadapter.Query{}
	for {
		page, err := s.Tables().Query(context.Background(), table, q)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		for _, e := range page.Entities {
			out[e.PartitionKey+"/"+e.RowKey] = e.Properties
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return out
		}
	}
}

// application keeps the application's rows of all whose keys pass keep.
func application(all map[string]map[string]any, keep func(key string) bool) map[string]map[string]any {
	out := map[string]map[string]any{}
	for k, v := range all {
		if !strings.Contains(k, "/"+storeadapter.ReservedPrefix) && keep(k) {
			out[k] = v
		}
	}
	return out
}

func every(string) bool { return true }

func run(t *testing.T, w *copykind.Worker, id, args string) (string, error) {
	t.Helper()
	parsed, err := jobs.ParseArgs[copykind.Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = w.Work(ctx, &jobs.Job[copykind.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: copykind.Kind}, Args: parsed})
	return res.Text(), err
}

func sameRows(t *testing.T, what string, got, want map[string]map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s: row %s = %v, want %v", what, k, got[k], v)
			return
		}
	}
}

// TestCopyToAnotherAccount copies a table, a partition and a range to the
// "dr" account and back to the worker's own under another name: every
// application row with every typed value, no reserved row, the counts in
// the result; a redelivery reports "already done" and writes nothing.
func TestCopyToAnotherAccount(t *testing.T) {
	b := setup(t)
	seed(t, b.home, "Orders", 3, 250)
	src := rows(t, b.home, "Orders")
	w := b.worker(t, copykind.Config{PageSize: 200})
	res, err := run(t, w, "op-1", `{"table":"Orders","to":"dr"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `copied 750 rows of Orders (the worker's own account) to Orders (account "dr"): 750 written, 0 skipped, in 9 transactions over 4 pages`; res != want {
		t.Errorf("result %q, want %q", res, want)
	}
	sameRows(t, "dr/Orders", rows(t, b.dr, "Orders"), application(src, every))
	again, err := run(t, w, "op-1", `{"table":"Orders","to":"dr"}`)
	if err != nil || again != "already done: "+res {
		t.Errorf("redelivery = %q, %v; want already done", again, err)
	}

	res, err = run(t, w, "op-2", `{"table":"Orders","from":"dr","target":"OrdersP1","pk":"p01"}`)
	if err != nil || !strings.HasPrefix(res, `copied 250 rows of Orders (account "dr") to OrdersP1 (the worker's own account): 250 written`) {
		t.Fatalf("partition copy: %q, %v", res, err)
	}
	sameRows(t, "OrdersP1", rows(t, b.home, "OrdersP1"), application(src, func(k string) bool { return strings.HasPrefix(k, "p01/") }))

	res, err = run(t, w, "op-3", `{"table":"Orders","to":"dr","target":"OrdersRange","pk":"p02","rkFrom":"r0010","rkTo":"r0020"}`)
	if err != nil || !strings.HasPrefix(res, "copied 10 rows") {
		t.Fatalf("range copy: %q, %v", res, err)
	}
	sameRows(t, "OrdersRange", rows(t, b.dr, "OrdersRange"), application(src, func(k string) bool { return k >= "p02/r0010" && k < "p02/r0020" }))
}

// TestCopyModes: insert leaves the rows the target holds (counted
// skipped) and adds the others; replace overwrites them, properties the
// source lacks included (a replace, not a merge).
func TestCopyModes(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	seed(t, b.home, "Orders", 1, 20)
	if err := b.dr.Tables().CreateTable(ctx, "Orders"); err != nil {
		t.Fatal(err)
	}
	changed := storeadapter.Entity{PartitionKey: "p00", RowKey: "r0005", Properties: map[string]any{"S": "changed", "Extra": "x"}}
	if _, err := b.dr.Tables().InsertEntity(ctx, "Orders", changed); err != nil {
		t.Fatal(err)
	}
	w := b.worker(t, copykind.Config{})
	res, err := run(t, w, "op-ins", `{"table":"Orders","to":"dr","mode":"insert"}`)
	if err != nil || !strings.Contains(res, ": 19 written, 1 skipped") {
		t.Fatalf("insert: %q, %v", res, err)
	}
	got := rows(t, b.dr, "Orders")
	if !reflect.DeepEqual(got["p00/r0005"], changed.Properties) {
		t.Errorf("insert changed an existing row: %v", got["p00/r0005"])
	}
	res, err = run(t, w, "op-rep", `{"table":"Orders","to":"dr","mode":"replace"}`)
	if err != nil || !strings.Contains(res, ": 20 written, 0 skipped") {
		t.Fatalf("replace: %q, %v", res, err)
	}
	sameRows(t, "after replace", rows(t, b.dr, "Orders"), application(rows(t, b.home, "Orders"), every))
}

// TestCopyResumesAfterCrash: a copy whose target writes fail after a few
// transactions (a crash) leaves its checkpoint at the last flushed page;
// each redelivery resumes from there, reads no earlier page again, and
// the copy ends with every row once; in insert mode the rows a failed
// delivery wrote after its last save are counted skipped.
func TestCopyResumesAfterCrash(t *testing.T) {
	for _, mode := range []string{"insert", "replace"} {
		t.Run(mode, func(t *testing.T) {
			// The pages of the copy without failures.
			b := setup(t)
			seed(t, b.home, "Orders", 4, 150)
			if _, err := run(t, b.worker(t, copykind.Config{PageSize: 100}), "op-baseline", `{"table":"Orders","to":"dr","target":"Baseline"}`); err != nil {
				t.Fatal(err)
			}
			pages := b.queries.Swap(0)
			var txs atomic.Int64
			fail := func(c instrument.Call) error {
				if c.Op == instrument.OpTransact && txs.Add(1)%5 == 0 {
					return fmt.Errorf("crash: %w", storeadapter.ErrUnavailable)
				}
				return nil
			}
			b.drFault.Store(&fail)
			w := b.worker(t, copykind.Config{PageSize: 100, Partitions: 2})
			args := `{"table":"Orders","to":"dr","mode":"` + mode + `"}`
			var res string
			var err error
			failures := 0
			for range 50 {
				if res, err = run(t, w, "op-crash", args); err == nil {
					break
				}
				if jobs.IsPermanent(err) || !errors.Is(err, storeadapter.ErrUnavailable) {
					t.Fatalf("delivery failed with %v; want the injected transient failure", err)
				}
				failures++
			}
			if err != nil || failures < 2 {
				t.Fatalf("after %d failed deliveries: %q, %v; want several failures, then success", failures, res, err)
			}
			sameRows(t, "dr/Orders", rows(t, b.dr, "Orders"), application(rows(t, b.home, "Orders"), every))
			var written, skipped int
			if _, err := fmt.Sscanf(res[strings.Index(res, "): ")+3:], "%d written, %d skipped", &written, &skipped); err != nil {
				t.Fatalf("result %q: %v", res, err)
			}
			// Each failure reads its page again, and may shift the page
			// boundaries by one page (a query started after a key).
			if q := b.queries.Load(); q > pages+2*int64(failures) {
				t.Errorf("%d source queries for %d pages and %d failed deliveries: a redelivery read earlier pages again", q, pages, failures)
			}
			if written+skipped < 600 || (mode == "replace" && skipped != 0) || written > 600+failures*100 {
				t.Errorf("%s: %d written, %d skipped after %d failures; want at least the 600 rows, none skipped by replace, at most a page rewritten per failure", mode, written, skipped, failures)
			}
		})
	}
}

// TestCopyContinues: with its time budget spent after every page, each
// delivery copies one page and asks to continue, saying how far it got;
// together they copy the table once.
func TestCopyContinues(t *testing.T) {
	b := setup(t)
	seed(t, b.home, "Orders", 2, 100)
	// Every reading of the clock is 2 s after the one before: the budget
	// is spent at its first check, after the first page.
	b.deps.Clock = clock.NewFake(time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC)).AutoAdvance(2 * time.Second)
	w := b.worker(t, copykind.Config{PageSize: 50, TimeBudget: jobs.Duration(time.Second), MaxRunTime: jobs.Duration(time.Minute)})
	var progress []string
	var res string
	var err error
	for range 20 {
		res, err = run(t, w, "op-c", `{"table":"Orders","to":"dr"}`)
		ce, ok := jobs.AsContinue(err)
		if !ok {
			break
		}
		if ce.After != 0 {
			t.Errorf("continue after %v; want 0 (the back of the queue)", ce.After)
		}
		progress = append(progress, ce.Progress)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The fifth delivery reads the empty page after the last token.
	if len(progress) != 4 || progress[0] != "copied 50 rows so far: 50 written, 0 skipped" || progress[3] != "copied 200 rows so far: 200 written, 0 skipped" {
		t.Errorf("progress %q; want one page per delivery", progress)
	}
	if !strings.HasPrefix(res, `copied 200 rows of Orders (the worker's own account) to Orders (account "dr"): 200 written, 0 skipped`) {
		t.Errorf("result %q", res)
	}
	sameRows(t, "dr/Orders", rows(t, b.dr, "Orders"), application(rows(t, b.home, "Orders"), every))
}

// TestCopyRefusals: what a retry cannot cure is permanent, names the field
// and writes nothing (no checkpoint, no target table): an account the
// config does not declare, a missing source table, the copy's own
// checkpoint table as target, an operation id reused with other
// arguments, and another account refusing its credential (which must not
// stop the worker: the job fails, permanently).
func TestCopyRefusals(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	seed(t, b.home, "Orders", 1, 10)
	w := b.worker(t, copykind.Config{})
	for _, c := range []struct{ id, args, want string }{
		{"op-a", `{"table":"Orders","to":"nope"}`, `copy: args.to: account "nope": not in the config's "accounts" section (it declares dr)`},
		{"op-b", `{"table":"Orders","from":"nope","to":"dr"}`, `copy: args.from: account "nope": not in the config's`},
		{"op-c", `{"table":"Missing","to":"dr"}`, `copy: args.table: table Missing does not exist in the worker's own account`},
		{"op-d", `{"table":"Missing","from":"dr"}`, `copy: args.table: table Missing does not exist in account "dr"`},
		{"op-e", `{"table":"Orders","target":"Checkpoints"}`, "copy: args.target: Checkpoints is the copy's own checkpoint table (copy.checkpointTable)"},
	} {
		_, err := run(t, w, c.id, c.args)
		if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("copy %s = %v, want permanent %q", c.args, err, c.want)
		}
		if e, err := b.home.Tables().GetEntity(ctx, "Checkpoints", c.id, "copy"); err == nil {
			t.Errorf("copy %s left a checkpoint %v", c.args, e.Properties)
		}
	}
	if _, err := b.dr.Tables().Query(ctx, "Missing", storeadapter.Query{}); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Errorf("a refused copy created its target: %v", err)
	}
	nodeps, err := copykind.New(kit.Plain(b.home), copykind.Config{CheckpointTable: "Checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, nodeps, "op-f", `{"table":"Orders","to":"dr"}`); !jobs.IsPermanent(err) || !errors.Is(err, kit.ErrNoAccounts) {
		t.Errorf("a worker with no accounts: %v, want permanent kit.ErrNoAccounts", err)
	}

	if _, err := run(t, w, "op-g", `{"table":"Orders","to":"dr"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, w, "op-g", `{"table":"Orders","to":"dr","mode":"replace"}`); !jobs.IsPermanent(err) ||
		!strings.Contains(err.Error(), "copy: envelope id: op-g was used by a copy of other arguments") {
		t.Errorf("reused op id: %v", err)
	}

	refuse := func(c instrument.Call) error {
		return fmt.Errorf("azstore: %s: %w", c.Op, storeadapter.ErrAuthentication)
	}
	b.drFault.Store(&refuse)
	for _, args := range []string{`{"table":"Orders","to":"dr","target":"Orders2"}`, `{"table":"Orders","from":"dr","target":"Orders2"}`} {
		_, err := run(t, w, "op-h"+fmt.Sprint(len(args)), args)
		if !jobs.IsPermanent(err) || !strings.Contains(err.Error(), `account "dr"`) || !strings.Contains(err.Error(), "check accounts.dr in the worker's config") {
			t.Errorf("copy %s with dr refusing its credential: %v; want permanent, naming accounts.dr", args, err)
		}
	}
	b.drFault.Store(nil)
	b.homeFault.Store(&refuse)
	if _, err := run(t, w, "op-i", `{"table":"Orders","to":"dr","target":"Orders3"}`); jobs.IsPermanent(err) || !errors.Is(err, storeadapter.ErrAuthentication) {
		t.Errorf("the worker's own credential refused: %v; want it unchanged (the runner stops the worker)", err)
	}
}

// TestCopyTwoDeliveries: two deliveries of one copy at once (a
// redelivery after a lost lease) end with every row once, whatever the
// order of their pages and saves.
func TestCopyTwoDeliveries(t *testing.T) {
	b := setup(t)
	seed(t, b.home, "Orders", 3, 300)
	w := b.worker(t, copykind.Config{PageSize: 100})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := run(t, w, "op-2x", `{"table":"Orders","to":"dr"}`)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	sameRows(t, "dr/Orders", rows(t, b.dr, "Orders"), application(rows(t, b.home, "Orders"), every))
	res, err := run(t, w, "op-2x", `{"table":"Orders","to":"dr"}`)
	if err != nil || !strings.HasPrefix(res, "already done: copied ") {
		t.Errorf("after both: %q, %v", res, err)
	}
}

// TestCopyCarriesOffloadedBlobs: a row whose property blobsync offloaded
// is copied to another account with a blob of its own there (the target
// account holds none of the source's blobs), and a reference whose blob
// is gone is copied as it is and counted.
func TestCopyCarriesOffloadedBlobs(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	bio := strings.Repeat("a long text ", 3000)
	sum := sha256.Sum256([]byte(bio))
	ref := largeentity.Ref{V: largeentity.RefVersion, Container: "big", Name: largeentity.BlobName("", "Orders", "p", "r1", "Bio", hex.EncodeToString(sum[:])),
		Length: int64(len(bio)), ContentType: largeentity.ContentTypeString, SHA256: hex.EncodeToString(sum[:]), Type: "Edm.String", Mode: largeentity.ModeOffload}
	if err := b.home.Container("big").Create(ctx); err != nil {
		t.Fatal(err)
	}
	etag, err := b.home.Container("big").Put(ctx, ref.Name, []byte(bio), storeadapter.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref.ETag = etag
	if err := b.home.Tables().CreateTable(ctx, "Orders"); err != nil {
		t.Fatal(err)
	}
	gone := ref
	gone.Name = largeentity.BlobName("", "Orders", "p", "r2", "Bio", hex.EncodeToString(sum[:]))
	transact(t, b.home, "Orders", []storeadapter.TableOp{
		{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "p", RowKey: "r1", Properties: map[string]any{largeentity.RefPrefix + "Bio": ref.String()}}},
		{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "p", RowKey: "r2", Properties: map[string]any{largeentity.RefPrefix + "Bio": gone.String()}}},
	})
	w := b.worker(t, copykind.Config{})
	res, err := run(t, w, "op-b", `{"table":"Orders","to":"dr","target":"OrdersDR"}`)
	if err != nil || !strings.HasSuffix(res, ", offloaded blobs: 1 put, 1 missing") {
		t.Fatalf("copy: %q, %v", res, err)
	}
	got, err := largeentity.Get(ctx, b.dr, "OrdersDR", "p", "r1")
	if err != nil || got.Properties["Bio"] != bio {
		t.Fatalf("the copied row in the other account: %v (Bio intact: %v)", err, got.Properties["Bio"] == bio)
	}
	raw, err := b.dr.Tables().GetEntity(ctx, "OrdersDR", "p", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := largeentity.RefOf(raw, "Bio"); !strings.HasPrefix(r.Name, "OrdersDR/p/r1/Bio/") {
		t.Errorf("the copy names blob %s, want one of its own key", r.Name)
	}
	raw, err = b.dr.Tables().GetEntity(ctx, "OrdersDR", "p", "r2")
	if err != nil || raw.Properties[largeentity.RefPrefix+"Bio"] != gone.String() {
		t.Errorf("the row whose blob is gone: %v, %v; want its reference copied as it is", raw.Properties, err)
	}
}
