package purge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// t0 is when the tests' old rows are written.
var t0 = time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)

// TestPurgeArgs: every bad argument is refused naming its field and rule.
func TestPurgeArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{}`, "args.table:"},
		{`{"table":"x"}`, "args.table:"},
		{`{"table":"Logs","rkFrom":"a"}`, "args.pk: is required with rkFrom or rkTo"},
		{`{"table":"Logs","rkTo":"a"}`, "args.pk: is required with rkFrom or rkTo"},
		{`{"table":"Logs","pk":"p","rkFrom":"b","rkTo":"a"}`, "args.rkTo: must be greater than rkFrom"},
		{`{"table":"Logs","pk":"a/b"}`, "args.pk:"},
		{`{"table":"Logs","olderThan":"0s"}`, `args.olderThan: must be a positive duration such as "720h", got 0s`},
		{`{"table":"Logs","olderThan":"-5m"}`, "args.olderThan: must be a positive duration"},
		{`{"table":"Logs","olderThan":"30 days"}`, "args.olderThan"},
		{`{"table":"Logs","olderThan":720}`, "args.olderThan"},
		{`{"table":"Logs","extra":1}`, "extra"},
	} {
		_, err := jobs.ParseArgs[purge.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%s) = %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, ok := range []string{
		`{"table":"Logs"}`,
		`{"table":"Logs","pk":"p"}`,
		`{"table":"Logs","pk":"p","rkFrom":"","rkTo":"z","olderThan":"720h"}`,
		`{"table":"Logs","olderThan":"1h30m"}`,
	} {
		if _, err := jobs.ParseArgs[purge.Args](json.RawMessage(ok)); err != nil {
			t.Errorf("ParseArgs(%s) = %v, want nil", ok, err)
		}
	}
}

// TestPurgeConfig fills the defaults and names the field of a bad setting.
func TestPurgeConfig(t *testing.T) {
	c := purge.Config{}
	if err := c.Validate(); err != nil || c.CheckpointTable != "TablekeeperCheckpoints" || c.PageSize != 1000 || c.Transactions != 8 ||
		time.Duration(c.TimeBudget) != 5*time.Minute || time.Duration(c.MaxRunTime) != 30*time.Minute {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, c := range []struct {
		cfg  purge.Config
		want string
	}{
		{purge.Config{CheckpointTable: "x"}, "purge.checkpointTable:"},
		{purge.Config{PageSize: 1001}, "purge.pageSize: must be 1-1000, got 1001"},
		{purge.Config{PageSize: -1}, "purge.pageSize: must be 1-1000"},
		{purge.Config{Transactions: 65}, "purge.transactions: must be 1-64, got 65"},
		{purge.Config{Transactions: -1}, "purge.transactions: must be 1-64, got -1"},
		{purge.Config{TimeBudget: jobs.Duration(500 * time.Millisecond)}, "purge.timeBudget: must be at least 1s and less than purge.maxRunTime (30m0s), got 500ms"},
		{purge.Config{TimeBudget: jobs.Duration(time.Hour)}, "purge.timeBudget: must be at least 1s and less than purge.maxRunTime (30m0s), got 1h0m0s"},
		{purge.Config{TimeBudget: jobs.Duration(time.Minute), MaxRunTime: jobs.Duration(time.Minute)}, "purge.timeBudget: must be at least 1s and less than purge.maxRunTime (1m0s)"},
		{purge.Config{MaxRunTime: jobs.Duration(48 * time.Hour)}, "purge.maxRunTime: must be 1s-24h"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// bundle is a localstore on a fake clock behind the instrument, which
// counts calls and lets a test fail or interleave any of them.
type bundle struct {
	clock  *clock.Fake
	raw    *localstore.Store
	store  *instrument.Store
	counts *instrument.Counts
	mu     sync.Mutex
	calls  int
	// fault, when set, sees every call (numbered from 1 since the last
	// reset of calls) and may fail it.
	fault func(n int, c instrument.Call) error
}

func newBundle(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{clock: clock.NewFake(t0), counts: &instrument.Counts{}}
	b.raw = localstore.New(localstore.Options{Clock: b.clock})
	b.store = instrument.Wrap(b.raw, instrument.Options{Observers: []instrument.Observer{b.counts},
		Fault: func(_ context.Context, c instrument.Call) error {
			b.mu.Lock()
			b.calls++
			n, f := b.calls, b.fault
			b.mu.Unlock()
			if f != nil {
				return f(n, c)
			}
			return nil
		}})
	if err := b.raw.Tables().CreateTable(context.Background(), "Logins"); err != nil {
		t.Fatal(err)
	}
	return b
}

// seed inserts n rows spread over users partitions (u00, u01, …) with
// time-ordered RowKeys, at the clock's current time.
func (b *bundle) seed(t *testing.T, n, users int, tag string) {
	t.Helper()
	for i := range n {
		e := storeadapter.Entity{PartitionKey: fmt.Sprintf("u%02d", i%users), RowKey: fmt.Sprintf("%s%05d", tag, i),
			Properties: map[string]any{"IP": "10.0.0.1", "N": int64(i)}}
		if _, err := b.raw.Tables().InsertEntity(context.Background(), "Logins", e); err != nil {
			t.Fatal(err)
		}
	}
}

// keys returns the table's keys, "pk/rk", in key order.
func (b *bundle) keys(t *testing.T) []string {
	t.Helper()
	var out []string
	q := storeadapter.Query{}
	for {
		page, err := b.raw.Tables().Query(context.Background(), "Logins", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			out = append(out, e.PartitionKey+"/"+e.RowKey)
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return out
		}
	}
}

func (b *bundle) worker(t *testing.T, cfg purge.Config) *purge.Worker {
	t.Helper()
	cfg.CheckpointTable = "Checkpoints"
	w, err := purge.New(kit.Deps{Store: b.store, Clock: b.clock}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func run(t *testing.T, w *purge.Worker, id, args string) (string, error) {
	t.Helper()
	parsed, err := jobs.ParseArgs[purge.Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = w.Work(ctx, &jobs.Job[purge.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: purge.Kind}, Args: parsed})
	return res.Text(), err
}

// without returns keys minus those for which drop is true.
func without(keys []string, drop func(pk, rk string) bool) []string {
	var out []string
	for _, k := range keys {
		pk, rk, _ := strings.Cut(k, "/")
		if !drop(pk, rk) {
			out = append(out, k)
		}
	}
	return out
}

// TestPurgeWork deletes exactly a partition's RowKey range, a partition
// and then the whole table, says so in its result, and reports "already
// done" on redelivery without deleting anything more; a missing table is
// permanent, naming the field, and leaves no checkpoint; the checkpoint
// table itself is refused.
func TestPurgeWork(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 500, 5, "r")
	all := b.keys(t)
	w := b.worker(t, purge.Config{PageSize: 30})

	res, err := run(t, w, "op-range", `{"table":"Logins","pk":"u01","rkFrom":"r00100","rkTo":"r00300"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := without(all, func(pk, rk string) bool { return pk == "u01" && rk >= "r00100" && rk < "r00300" })
	if got := b.keys(t); !slices.Equal(got, want) || len(all)-len(want) != 40 {
		t.Fatalf("after the range purge %d rows left, want %d (40 deleted)", len(got), len(want))
	}
	if res != "deleted 40 entities in 2 batches over 2 pages" {
		t.Errorf("result %q", res)
	}
	// A redelivery deletes nothing, not even a row written since in the
	// range: the purge is done.
	late := storeadapter.Entity{PartitionKey: "u01", RowKey: "r00150-late"}
	if _, err := b.raw.Tables().InsertEntity(context.Background(), "Logins", late); err != nil {
		t.Fatal(err)
	}
	again, err := run(t, w, "op-range", `{"table":"Logins","pk":"u01","rkFrom":"r00100","rkTo":"r00300"}`)
	if err != nil || again != "already done: "+res {
		t.Errorf("redelivery = %q, %v; want %q", again, err, "already done: "+res)
	}
	if _, err := b.raw.Tables().GetEntity(context.Background(), "Logins", "u01", "r00150-late"); err != nil {
		t.Errorf("the redelivery of a done purge deleted a row written after it: %v", err)
	}

	if _, err := run(t, w, "op-part", `{"table":"Logins","pk":"u02"}`); err != nil {
		t.Fatal(err)
	}
	for _, k := range b.keys(t) {
		if strings.HasPrefix(k, "u02/") {
			t.Fatalf("row %s left after the partition purge", k)
		}
	}
	if n := len(b.keys(t)); n != 500-40+1-100 {
		t.Fatalf("%d rows left after the partition purge, want %d", n, 500-40+1-100)
	}
	res, err = run(t, w, "op-all", `{"table":"Logins"}`)
	if err != nil || len(b.keys(t)) != 0 {
		t.Fatalf("whole-table purge = %v, %d rows left", err, len(b.keys(t)))
	}
	// 361 rows in pages of 30 (13 pages, the last one empty-ended) and
	// batches split by partition within each page.
	if !strings.HasPrefix(res, "deleted 361 entities in ") || !strings.HasSuffix(res, " over 13 pages") {
		t.Errorf("result %q", res)
	}

	for _, c := range []struct{ id, args, want string }{
		{"op-none", `{"table":"Nosuch"}`, "purge: args.table: table Nosuch does not exist"},
		{"op-self", `{"table":"checkpoints"}`, "purge: args.table: checkpoints is the purge's own checkpoint table (purge.checkpointTable)"},
	} {
		_, err := run(t, w, c.id, c.args)
		if !jobs.IsPermanent(err) || err.Error() != c.want {
			t.Errorf("purge %s = %v, want permanent %q", c.args, err, c.want)
		}
		if e, err := b.raw.Tables().GetEntity(context.Background(), "Checkpoints", c.id, "purge"); err == nil {
			t.Errorf("purge %s left a checkpoint %v", c.args, e.Properties)
		}
	}
}

// oldAndNew seeds old rows (tag "o", at t0) and, an hour later, new rows
// (tag "n"), then moves the clock another hour on: a purge with olderThan
// 90m then has its cut-off at t0+30m, between the two.
func (b *bundle) oldAndNew(t *testing.T, old, young, users int) {
	t.Helper()
	b.seed(t, old, users, "o")
	b.clock.Advance(time.Hour)
	b.seed(t, young, users, "n")
	b.clock.Advance(time.Hour)
}

// isOld reports whether a row is one of oldAndNew's old rows.
func isOld(_, rk string) bool { return strings.HasPrefix(rk, "o") }

// TestPurgeCrashAtEveryCall fails a purge at each of its storage calls in
// turn, then runs it again: every time exactly the matching rows are gone
// and every other row stays, for olderThan over the whole table, for a
// RowKey range and for a partition.
func TestPurgeCrashAtEveryCall(t *testing.T) {
	for _, c := range []struct {
		name, args string
		match      func(pk, rk string) bool
	}{
		{"olderThan", `{"table":"Logins","olderThan":"90m"}`, isOld},
		{"range", `{"table":"Logins","pk":"u01","rkFrom":"o00040","rkTo":"o00200"}`,
			func(pk, rk string) bool { return pk == "u01" && rk >= "o00040" && rk < "o00200" }},
		{"partition olderThan", `{"table":"Logins","pk":"u02","olderThan":"90m"}`,
			func(pk, rk string) bool { return pk == "u02" && isOld(pk, rk) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			setup := func() (*bundle, *purge.Worker) {
				b := newBundle(t)
				b.oldAndNew(t, 240, 60, 3)
				return b, b.worker(t, purge.Config{PageSize: 25})
			}
			ref, w := setup()
			want := without(ref.keys(t), c.match)
			ref.calls = 0
			if _, err := run(t, w, "op-crash", c.args); err != nil {
				t.Fatal(err)
			}
			total := ref.calls
			if got := ref.keys(t); !slices.Equal(got, want) {
				t.Fatalf("the reference purge left %d rows, want %d", len(got), len(want))
			}
			if total < 10 {
				t.Fatalf("the reference purge made %d calls, want many pages", total)
			}
			for k := 1; k <= total; k++ {
				b, w := setup()
				b.calls = 0
				var failed instrument.Call
				b.fault = func(n int, c instrument.Call) error {
					if n == k {
						failed = c
						return fmt.Errorf("crash at call %d: %w", k, storeadapter.ErrUnavailable)
					}
					return nil
				}
				if _, err := run(t, w, "op-crash", c.args); err == nil {
					t.Fatalf("call %d (%s) failed and Work returned nil", k, failed.Op)
				} else if jobs.IsPermanent(err) {
					t.Fatalf("call %d (%s) failed transiently and Work returned a permanent error: %v", k, failed.Op, err)
				}
				b.fault = nil
				if _, err := run(t, w, "op-crash", c.args); err != nil {
					t.Fatalf("re-run after a crash at call %d (%s): %v", k, failed.Op, err)
				}
				if got := b.keys(t); !slices.Equal(got, want) {
					t.Fatalf("crash at call %d (%s): %d rows left, want %d", k, failed.Op, len(got), len(want))
				}
			}
		})
	}
}

// TestPurgeInterleavedWrites: rows the application updates or deletes
// between the page read and the delete. With olderThan an updated row is
// newer than the cut-off now and stays with its new content; without it,
// it still matches and is deleted (with its new ETag). Either way every
// other matching row goes and the job succeeds.
func TestPurgeInterleavedWrites(t *testing.T) {
	for _, c := range []struct {
		name, args  string
		updatedKept bool
	}{
		{"olderThan", `{"table":"Logins","olderThan":"90m"}`, true},
		{"partition", `{"table":"Logins","pk":"u00"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBundle(t)
			b.oldAndNew(t, 300, 30, 3)
			w := b.worker(t, purge.Config{})
			ctx := context.Background()
			var done atomic.Bool // the fault runs on each partition's goroutine
			b.fault = func(_ int, call instrument.Call) error {
				if call.Op != instrument.OpTransact || call.PartitionKey != "u00" || !done.CompareAndSwap(false, true) {
					return nil
				}
				// The first batch of u00 (partitions are purged several at
				// once: another's may come first) is its oldest rows:
				// update one in the middle, delete another before it.
				upd := storeadapter.Entity{PartitionKey: "u00", RowKey: "o00150", Properties: map[string]any{"IP": "updated"}}
				if _, err := b.raw.Tables().UpdateEntity(ctx, "Logins", upd, storeadapter.Merge, storeadapter.ETagAny); err != nil {
					return err
				}
				return b.raw.Tables().DeleteEntity(ctx, "Logins", "u00", "o00090", storeadapter.ETagAny)
			}
			res, err := run(t, w, "op-interleave", c.args)
			if err != nil {
				t.Fatal(err)
			}
			e, err := b.raw.Tables().GetEntity(ctx, "Logins", "u00", "o00150")
			switch {
			case c.updatedKept && (err != nil || e.Properties["IP"] != "updated"):
				t.Errorf("the row updated after the cut-off: %v, %v; want it kept with its new content", e.Properties, err)
			case !c.updatedKept && !errors.Is(err, storeadapter.ErrNotFound):
				t.Errorf("the updated row, which still matches: %v; want it deleted", err)
			}
			for _, k := range b.keys(t) {
				pk, rk, _ := strings.Cut(k, "/")
				matches := isOld(pk, rk)
				if c.name == "partition" {
					matches = pk == "u00"
				}
				if matches && !(c.updatedKept && k == "u00/o00150") {
					t.Errorf("matching row %s left", k)
				}
			}
			wantDeleted := 300 - 2 // minus the row deleted by the application and the updated one
			if c.name == "partition" {
				wantDeleted = 100 + 10 - 1 // u00's old and new rows, minus the one the application deleted
			}
			if want := fmt.Sprintf("deleted %d entities in ", wantDeleted); !strings.HasPrefix(res, want) {
				t.Errorf("result %q, want it to start with %q", res, want)
			}
		})
	}
}

// TestPurgeTwoWorkers: two deliveries of one purge, one run to the end
// while the other is held at a transaction, and two at once: both succeed
// and exactly the matching rows are gone.
func TestPurgeTwoWorkers(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		b := newBundle(t)
		b.oldAndNew(t, 300, 60, 3)
		want := without(b.keys(t), isOld)
		a := b.worker(t, purge.Config{PageSize: 40})
		other := b.worker(t, purge.Config{PageSize: 40})
		const args = `{"table":"Logins","olderThan":"90m"}`
		transacts := 0
		b.fault = func(_ int, call instrument.Call) error {
			if call.Op != instrument.OpTransact {
				return nil
			}
			if transacts++; transacts == 3 {
				// Hold this transaction of the first run while a second
				// delivery runs the whole purge.
				b.mu.Lock()
				b.fault = nil
				b.mu.Unlock()
				if res, err := run(t, other, "op-two", args); err != nil || !strings.HasPrefix(res, "deleted ") {
					t.Errorf("the second delivery = %q, %v", res, err)
				}
			}
			return nil
		}
		res, err := run(t, a, "op-two", args)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.keys(t); !slices.Equal(got, want) {
			t.Fatalf("%d rows left, want %d", len(got), len(want))
		}
		if !strings.HasPrefix(res, "deleted ") {
			t.Errorf("the held delivery's result %q", res)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		b := newBundle(t)
		b.oldAndNew(t, 600, 60, 4)
		want := without(b.keys(t), isOld)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			w := b.worker(t, purge.Config{PageSize: 50})
			wg.Go(func() { _, errs[i] = run(t, w, "op-both", `{"table":"Logins","olderThan":"90m"}`) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
		}
		if got := b.keys(t); !slices.Equal(got, want) {
			t.Fatalf("%d rows left, want %d", len(got), len(want))
		}
	})
}

// TestPurgeContinues: with a time budget the purge saves its position and
// asks to continue later (jobs.ContinueLater, no delay) several times; each
// continuation resumes from the checkpoint with the first delivery's
// cut-off, even though the clock has moved far enough meanwhile for the
// newer rows to be older than olderThan, and the last one finishes.
func TestPurgeContinues(t *testing.T) {
	b := newBundle(t)
	b.oldAndNew(t, 400, 100, 4)
	want := without(b.keys(t), isOld)
	w := b.worker(t, purge.Config{PageSize: 20, TimeBudget: jobs.Duration(time.Second)})
	b.fault = func(_ int, c instrument.Call) error {
		b.clock.Advance(50 * time.Millisecond)
		return nil
	}
	const args = `{"table":"Logins","olderThan":"90m"}`
	continued, last := 0, int64(-1)
	for {
		res, err := run(t, w, "op-budget", args)
		if ce, ok := jobs.AsContinue(err); ok {
			continued++
			var n int64
			if _, serr := fmt.Sscanf(ce.Progress, "deleted %d entities so far", &n); serr != nil || ce.After != 0 || n <= last {
				t.Fatalf("continuation %d: %+v; want After 0 and progress \"deleted N entities so far\" beyond %d", continued, ce, last)
			}
			last = n
			if continued > 100 {
				t.Fatal("the purge keeps continuing")
			}
			b.clock.Advance(3 * time.Hour) // the new rows are older than 90m now
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res != "deleted 400 entities in 20 batches over 20 pages" {
			t.Errorf("result %q", res)
		}
		break
	}
	if continued < 2 {
		t.Errorf("the purge continued %d times, want several", continued)
	}
	if got := b.keys(t); !slices.Equal(got, want) {
		t.Fatalf("%d rows left, want %d (the rows newer than the first delivery's cut-off)", len(got), len(want))
	}
}

// TestPurgeCalls: the storage calls of a purge are one transaction per
// 100 rows of a partition plus a query and a checkpoint save per page, and
// a few for the checkpoint's start.
func TestPurgeCalls(t *testing.T) {
	for _, c := range []struct {
		args  string
		start int64 // calls to start: the checkpoint's load and create, the table's create; with olderThan the checkpoint's read and the first page again
	}{
		{`{"table":"Logins"}`, 4},
		{`{"table":"Logins","olderThan":"1m"}`, 6},
	} {
		t.Run(c.args, func(t *testing.T) {
			b := newBundle(t)
			b.seed(t, 4000, 4, "r") // 1000 rows per partition
			b.clock.Advance(time.Hour)
			w := b.worker(t, purge.Config{})
			res, err := run(t, w, "op-calls", c.args)
			if err != nil || len(b.keys(t)) != 0 {
				t.Fatalf("purge = %v, %d rows left", err, len(b.keys(t)))
			}
			s := b.counts.Snapshot()
			t.Logf("%s\n%s", res, s)
			// Pages of 1000 rows: one partition each; the last page ends the scan.
			extra := (c.start - 4) / 2
			for op, want := range map[instrument.Op]int64{
				instrument.OpTransact: 40, instrument.OpQuery: 4 + extra, instrument.OpUpdateEntity: 4,
				instrument.OpGetEntity: 1 + extra, instrument.OpInsertEntity: 2, instrument.OpCreateTable: 1,
			} {
				if got := s[op].Calls; got != want {
					t.Errorf("%s: %d calls, want %d", op, got, want)
				}
			}
			if total := s.Total().Calls; total != 4000/100+2*4+c.start {
				t.Errorf("%d calls in all, want N/100 + 2 per page + %d = %d", total, c.start, 4000/100+2*4+c.start)
			}
			if res != "deleted 4000 entities in 40 batches over 4 pages" {
				t.Errorf("result %q", res)
			}
		})
	}
}

// TestPurgeOverlapsRoundTrips: with a round trip on every call, a page's
// transactions run at once up to Config.Transactions (never more), the
// next page is read while they run, and the calls are those of TestPurgeCalls.
func TestPurgeOverlapsRoundTrips(t *testing.T) {
	b := &bundle{clock: clock.NewFake(t0), counts: &instrument.Counts{}}
	b.raw = localstore.New(localstore.Options{Clock: b.clock})
	var mu sync.Mutex
	var inTx, maxTx, queriesDuringTx int
	var inQuery, overlapped bool // one scan query at a time: the next page's
	b.store = instrument.Wrap(b.raw, instrument.Options{Observers: []instrument.Observer{b.counts},
		Latency: func(c instrument.Call) time.Duration { // at the call's start
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.Op == instrument.OpTransact:
				inTx++
				maxTx = max(maxTx, inTx)
				overlapped = overlapped || inQuery
			case c.Op == instrument.OpQuery && c.Name == "Logins":
				inQuery, overlapped = true, inTx > 0
				// A slow query: the page's transactions start within it
				// however loaded the machine is.
				return 30 * time.Millisecond
			}
			return 3 * time.Millisecond
		},
		After: func(_ context.Context, c instrument.Call, err error) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.Op == instrument.OpTransact:
				inTx--
			case c.Op == instrument.OpQuery && c.Name == "Logins":
				if overlapped {
					queriesDuringTx++
				}
				inQuery = false
			}
			return err
		}})
	if err := b.raw.Tables().CreateTable(context.Background(), "Logins"); err != nil {
		t.Fatal(err)
	}
	b.seed(t, 4000, 4, "r")
	w := b.worker(t, purge.Config{Transactions: 4})
	res, err := run(t, w, "op-overlap", `{"table":"Logins"}`)
	if err != nil || len(b.keys(t)) != 0 || res != "deleted 4000 entities in 40 batches over 4 pages" {
		t.Fatalf("purge = %q, %v, %d rows left", res, err, len(b.keys(t)))
	}
	if maxTx < 2 || maxTx > 4 {
		t.Errorf("%d transactions at once at most, want 2-4 (Transactions 4)", maxTx)
	}
	if queriesDuringTx != 3 {
		t.Errorf("%d of the 3 next pages were read while transactions ran, want all", queriesDuringTx)
	}
	if total := b.counts.Snapshot().Total().Calls; total != 4000/100+2*4+4 {
		t.Errorf("%d calls in all, want the same as one at a time: %d", total, 4000/100+2*4+4)
	}
}

// crashAfterCreate runs a delivery that fails at its first delete, after
// it created the checkpoint.
func (b *bundle) crashAfterCreate(t *testing.T, w *purge.Worker, id, args string) {
	t.Helper()
	created := false
	b.fault = func(_ int, c instrument.Call) error {
		switch {
		case c.Name == "Checkpoints" && (c.Op == instrument.OpInsertEntity || c.Op == instrument.OpUpsertEntity):
			created = true
		case created && c.Op == instrument.OpTransact:
			return fmt.Errorf("crash after the checkpoint's create: %w", storeadapter.ErrUnavailable)
		}
		return nil
	}
	if _, err := run(t, w, id, args); err == nil || !created {
		t.Fatalf("the first delivery: %v (checkpoint created %v); want it to crash at its first delete", err, created)
	}
	b.fault = nil
}

// TestPurgeCutoffIsTheServicesTime: the cut-off is the storage service's
// time, which the rows' Timestamps are read by, not the worker's: a
// worker whose clock runs 10 minutes ahead, purging olderThan 5m, keeps a
// row written just before the purge began (found by review: it deleted
// it). And it is fixed once: a delivery that crashed after the
// checkpoint's create, redelivered an hour later, deletes none of the
// rows written meanwhile.
func TestPurgeCutoffIsTheServicesTime(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 30, 3, "o")
	b.clock.Advance(time.Hour)
	b.seed(t, 30, 3, "n") // written just before the purge: not 5 minutes old
	ahead := clock.NewFake(b.clock.Now().Add(10 * time.Minute))
	w, err := purge.New(kit.Deps{Store: b.store, Clock: ahead}, purge.Config{CheckpointTable: "Checkpoints", PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := without(b.keys(t), isOld)
	b.crashAfterCreate(t, w, "op-skew", `{"table":"Logins","olderThan":"5m"}`)
	b.clock.Advance(time.Hour)
	ahead.Advance(time.Hour)
	b.seed(t, 30, 3, "m") // written after the purge began, an hour before the redelivery
	want = append(want, without(b.keys(t), func(_, rk string) bool { return !strings.HasPrefix(rk, "m") })...)
	slices.Sort(want)
	if _, err := run(t, w, "op-skew", `{"table":"Logins","olderThan":"5m"}`); err != nil {
		t.Fatal(err)
	}
	if got := b.keys(t); !slices.Equal(got, want) {
		t.Fatalf("after the purge: %d rows, want %d (every row but the old ones):\n%v", len(got), len(want), got)
	}
}

// TestPurgeCutoffTakenFromASave: a delivery that loaded the checkpoint
// before its first save, and reads its Timestamp for the cut-off after
// another delivery saved, takes that delivery's cut-off instead of
// deriving a later one from the save's time (which would delete the rows
// written after the purge began).
func TestPurgeCutoffTakenFromASave(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 30, 3, "o")
	b.clock.Advance(time.Hour)
	w := b.worker(t, purge.Config{PageSize: 10})
	const args = `{"table":"Logins","olderThan":"5m"}`
	b.crashAfterCreate(t, w, "op-late", args)
	b.clock.Advance(30 * time.Minute)
	b.seed(t, 30, 3, "m") // after the purge began
	b.clock.Advance(30 * time.Minute)
	want := without(b.keys(t), isOld)
	reads, held, release := 0, make(chan struct{}), make(chan struct{})
	b.fault = func(_ int, c instrument.Call) error {
		if c.Name == "Checkpoints" && c.Op == instrument.OpGetEntity {
			if reads++; reads == 2 { // the late delivery's read for the cut-off, after its load
				close(held)
				<-release
			}
		}
		return nil
	}
	late := make(chan error, 1)
	go func() {
		_, err := run(t, w, "op-late", args)
		late <- err
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the late delivery never read the checkpoint for its cut-off")
	}
	if _, err := run(t, w, "op-late", args); err != nil { // another delivery: derives, purges, saves
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	close(release)
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	if got := b.keys(t); !slices.Equal(got, want) {
		t.Fatalf("after both deliveries: %d rows, want %d (every row but the old ones)", len(got), len(want))
	}
}
