package purgeday

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// testNow is the worker's time in these tests: keepDays 3 cuts at
// 2026-11-18.
var testNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// bundle is one test's store (instrumented), clock and worker.
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
	// tick advances the clock before every call.
	tick time.Duration
	w    *Worker
	// rows are the seeded rows of each day table.
	rows map[string][]storeadapter.Entity
}

// The tables the tests create: ten days up to testNow's, and tables with
// the prefix that are not day tables, and another prefix's day.
var (
	dayTables   []string // LoginAttempts20261112 … LoginAttempts20261121
	otherTables = []string{"LoginAttemptsArchive", "LoginAttempts2026", "LoginAttempts20261341", "LoginAttempts20260230",
		"LoginAttempts202611010", "Other20200101", "LoginAttemptsX20200101"}
)

func init() {
	for d := 12; d <= 21; d++ {
		dayTables = append(dayTables, fmt.Sprintf("LoginAttempts202611%02d", d))
	}
}

// expired are the day tables keepDays 3 deletes at testNow.
func expired() []string { return slices.Clone(dayTables[:6]) }

// newBundle creates the tables at 09:00 (rows rowsPerDay in each day),
// the "exports" container, and a worker with cfg at testNow.
func newBundle(t *testing.T, cfg Config, rowsPerDay int) *bundle {
	t.Helper()
	b := &bundle{clock: clock.NewFake(testNow.Add(-time.Hour)), counts: &instrument.Counts{}, rows: map[string][]storeadapter.Entity{}}
	b.raw = localstore.New(localstore.Options{Clock: b.clock})
	b.store = instrument.Wrap(b.raw, instrument.Options{Observers: []instrument.Observer{b.counts}, Fault: func(_ context.Context, c instrument.Call) error {
		b.mu.Lock()
		b.calls++
		n, fault, tick := b.calls, b.fault, b.tick
		b.mu.Unlock()
		b.clock.Advance(tick)
		if fault != nil {
			return fault(n, c)
		}
		return nil
	}})
	ctx := context.Background()
	for _, name := range append(slices.Clone(dayTables), otherTables...) {
		if err := b.raw.Tables().CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range dayTables {
		for i := range rowsPerDay {
			e := storeadapter.Entity{PartitionKey: fmt.Sprintf("user%d", i%3), RowKey: fmt.Sprintf("%s-%03d", name, i),
				Properties: map[string]any{"N": int64(i), "Text": strings.Repeat("x", 100)}}
			etag, err := b.raw.Tables().InsertEntity(ctx, name, e)
			if err != nil {
				t.Fatal(err)
			}
			e.ETag = etag
			b.rows[name] = append(b.rows[name], e)
		}
	}
	if err := b.raw.Container("exports").Create(ctx); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	w, err := New(kit.Deps{Store: b.store, Clock: b.clock}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	return b
}

// setFault installs f (nil: none) and restarts the call count.
func (b *bundle) setFault(f func(n int, c instrument.Call) error) {
	b.mu.Lock()
	b.fault, b.calls = f, 0
	b.mu.Unlock()
}

// run runs one delivery of a purgeday job.
func (b *bundle) run(t *testing.T, id, args string) (string, error) {
	t.Helper()
	parsed, err := jobs.ParseArgs[Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = b.w.Work(ctx, &jobs.Job[Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: Kind}, Args: parsed})
	return res.Text(), err
}

// tables returns every table's name, sorted.
func (b *bundle) tables(t *testing.T) []string {
	t.Helper()
	names, next, err := b.raw.Tables().ListTables(context.Background(), "", "")
	if err != nil || next != "" {
		t.Fatal(err, next)
	}
	slices.Sort(names)
	return names
}

// wantTables fails unless exactly the test's tables but gone are left.
func (b *bundle) wantTables(t *testing.T, gone ...string) {
	t.Helper()
	var want []string
	for _, name := range append(slices.Clone(dayTables), otherTables...) {
		if !slices.Contains(gone, name) {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	got := slices.DeleteFunc(b.tables(t), func(n string) bool { return n == "Checkpoints" })
	if !slices.Equal(got, want) {
		t.Errorf("tables left:\n got %q\nwant %q", got, want)
	}
}

// manifest returns the complete, verified manifest of op's export of
// table, or false when there is none.
func (b *bundle) manifest(t *testing.T, op, table string) (tableexport.Manifest, bool) {
	t.Helper()
	ctx := context.Background()
	c := b.raw.Container("exports")
	page, err := c.List(ctx, "days/"+table+"/", "")
	if err != nil || page.Next != "" {
		t.Fatal(err)
	}
	for _, p := range page.Blobs {
		if path.Base(p.Name) != "manifest-"+op+".json" {
			continue
		}
		rep, err := tableexport.Verify(ctx, c, p.Name)
		if err != nil || !rep.Complete() {
			t.Fatalf("Verify(%s) = %v, %q", p.Name, err, rep.Problems)
		}
		return rep.Manifest, true
	}
	return tableexport.Manifest{}, false
}

// checkExported fails unless op's manifest of table holds exactly the
// table's seeded rows, property by property.
func (b *bundle) checkExported(t *testing.T, op, table string) {
	t.Helper()
	m, ok := b.manifest(t, op, table)
	if !ok {
		t.Errorf("%s: no manifest of op %s", table, op)
		return
	}
	var got []storeadapter.Entity
	for _, p := range m.Parts {
		if err := tableexport.ReadPart(context.Background(), b.raw.Container("exports"), p.Name, func(e storeadapter.Entity) error {
			got = append(got, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := b.rows[table]
	if len(got) != len(want) {
		t.Errorf("%s: exported %d rows, want %d", table, len(got), len(want))
		return
	}
	slices.SortFunc(got, func(x, y storeadapter.Entity) int {
		return strings.Compare(x.PartitionKey+"/"+x.RowKey, y.PartitionKey+"/"+y.RowKey)
	})
	want = slices.Clone(want)
	slices.SortFunc(want, func(x, y storeadapter.Entity) int {
		return strings.Compare(x.PartitionKey+"/"+x.RowKey, y.PartitionKey+"/"+y.RowKey)
	})
	for i := range want {
		g, w := got[i], want[i]
		if g.PartitionKey != w.PartitionKey || g.RowKey != w.RowKey || g.Properties["N"] != w.Properties["N"] || g.Properties["Text"] != w.Properties["Text"] {
			t.Errorf("%s: row %d exported as %+v, want %+v", table, i, g, w)
			return
		}
	}
}
