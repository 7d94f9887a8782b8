package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Harness is what the suite needs from one implementation: the store and a
// way to let time pass.
type Harness struct {
	// Store is the implementation under test. Every case makes its own
	// tables, queues and containers under fresh names, so one store may
	// serve every case.
	Store storeadapter.Store
	// Advance moves the store's clock forward by d. Leave it nil for a
	// real-time store (Azure, Azurite): time-dependent cases then sleep a
	// second or two, and check less finely than they do with a fake clock.
	Advance func(d time.Duration)
	// Now returns the store's current time. It must be set when Advance is;
	// nil means the wall clock (time.Now). Cases use it to check that
	// timestamps the store sets are recent.
	Now func() time.Time
	// Azurite is true when the store is the Azurite emulator, which accepts
	// some things Azure refuses (docs/azure-behaviour.md, "Where Azurite is
	// looser than Azure") and gets a few things wrong that nothing on our
	// side can hide ("Azurite deviations the contract skips"): the sign of
	// a -0.0 double, multi-byte characters that a large request body splits
	// across read chunks, a deleted table's name. On those points the suite
	// checks only what tablekeeper's validation and adapter can guarantee,
	// and skips the rest on Azurite, saying why.
	Azurite bool
}

// Exercise runs the contract suite against the stores newStore makes.
// newStore is called once per case, from that case's goroutine; it may
// return a fresh store each time (localstore with its own fake clock) or
// the same shared one (Azurite), since cases never share resource names.
// Cases run in parallel.
func Exercise(t *testing.T, newStore func(t *testing.T) Harness) {
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"Tables", tableCases()},
		{"Query", queryCases()},
		{"Order", orderCases()},
		{"Filter", filterCases()},
		{"Transactions", transactionCases()},
		{"EDM", edmCases()},
		{"Queue", queueCases()},
		{"Blobs", blobCases()},
		{"Context", contextCases()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newEnv(t, newStore(t)))
				})
			}
		})
	}
}

// testCase is one named case of a group.
type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// env is what one case works with: the harness, the case's context and
// helpers that fail the test on unexpected errors.
type env struct {
	h   Harness
	ctx context.Context
	tb  storeadapter.Tables
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	if h.Store == nil {
		t.Fatal("storetest: Harness.Store is nil")
	}
	if h.Advance != nil && h.Now == nil {
		t.Fatal("storetest: Harness.Now must be set when Harness.Advance is")
	}
	return &env{h: h, ctx: t.Context(), tb: h.Store.Tables()}
}

// fake reports whether the store runs on a clock the suite moves.
func (e *env) fake() bool { return e.h.Advance != nil }

// now returns the store's current time.
func (e *env) now() time.Time {
	if e.h.Now != nil {
		return e.h.Now()
	}
	return time.Now()
}

// realMargin is added to waits against a real-time service, whose queue
// times have whole-second granularity and whose clock is not ours.
const realMargin = time.Second

// outlast lets a period of d that starts now certainly end: it advances the
// fake clock by d, or sleeps d plus a margin against a real-time service.
func (e *env) outlast(d time.Duration) {
	if e.fake() {
		e.h.Advance(d)
		return
	}
	time.Sleep(d + realMargin)
}

// recentSlack is how far a store-set time may be from the test's clock
// readings around the call: clock skew against a real service, rounding
// to 100 ns (or whole seconds, for blobs) against a fake clock.
func (e *env) recentSlack() time.Duration {
	if e.fake() {
		return time.Second
	}
	return 5 * time.Minute
}

// checkRecent reports an error unless ts lies within [before, after],
// widened by the slack of recentSlack.
func (e *env) checkRecent(t *testing.T, what string, ts, before, after time.Time) {
	t.Helper()
	slack := e.recentSlack()
	if ts.IsZero() || ts.Before(before.Add(-slack)) || ts.After(after.Add(slack)) {
		t.Errorf("%s = %v, want between %v and %v (±%v)", what, ts, before.UTC(), after.UTC(), slack)
	}
}

// Names. runID makes names unique across runs against a persistent
// emulator; the counter makes them unique within a run. The counter is
// fixed-width, so no generated table name is a prefix of another.

var (
	runID   = randomID(6)
	counter atomic.Uint64
)

func randomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

func nextCounter() string {
	s := strconv.FormatUint(counter.Add(1), 36)
	return strings.Repeat("0", max(0, 5-len(s))) + s
}

// uniqueTableName returns a fresh alphanumeric table name, "t" plus the run
// id and a five-character counter.
func uniqueTableName() string { return "t" + runID + nextCounter() }

// uniqueName returns a fresh queue or container name such as
// "q-abc123-0001z".
func uniqueName(kind string) string { return kind + "-" + runID + "-" + nextCounter() }

// Table helpers.

// newTable creates a table under a fresh name and deletes it when the test
// ends.
func (e *env) newTable(t *testing.T) string {
	t.Helper()
	name := uniqueTableName()
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
	t.Cleanup(func() {
		if err := e.tb.DeleteTable(context.Background(), name); err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("cleanup: DeleteTable(%s): %v", name, err)
		}
	})
	return name
}

// insert inserts ent and fails the test on error.
func (e *env) insert(t *testing.T, table string, ent storeadapter.Entity) string {
	t.Helper()
	etag, err := e.tb.InsertEntity(e.ctx, table, ent)
	if err != nil {
		t.Fatalf("InsertEntity(%s, %s/%s): %v", table, ent.PartitionKey, ent.RowKey, err)
	}
	if etag == "" {
		t.Errorf("InsertEntity(%s, %s/%s) returned an empty ETag", table, ent.PartitionKey, ent.RowKey)
	}
	return etag
}

// get reads an entity and fails the test on error.
func (e *env) get(t *testing.T, table, pk, rk string) storeadapter.Entity {
	t.Helper()
	got, err := e.tb.GetEntity(e.ctx, table, pk, rk)
	if err != nil {
		t.Fatalf("GetEntity(%s, %s/%s): %v", table, pk, rk, err)
	}
	return got
}

// transact runs a transaction and fails the test on error.
func (e *env) transact(t *testing.T, table string, ops []storeadapter.TableOp) {
	t.Helper()
	if err := e.tb.Transact(e.ctx, table, ops); err != nil {
		t.Fatalf("Transact(%s, %d ops): %v", table, len(ops), err)
	}
}

// checkGone reports an error unless the entity does not exist.
func (e *env) checkGone(t *testing.T, table, pk, rk string) {
	t.Helper()
	got, err := e.tb.GetEntity(e.ctx, table, pk, rk)
	if !errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Errorf("GetEntity(%s/%s) = %v, %v; want ErrNotFound of the entity", pk, rk, keyOf(got), err)
	}
}

// queryAll runs q page by page until the continuation token is empty, as
// the Query contract requires (a page may be short, even empty, while a
// token is still returned), checking each page against q.Top. It returns
// every entity and the number of pages.
func (e *env) queryAll(t *testing.T, table string, q storeadapter.Query) ([]storeadapter.Entity, int) {
	t.Helper()
	top := q.Top
	if top == 0 {
		top = storeadapter.MaxPageSize
	}
	var all []storeadapter.Entity
	for pages := 1; ; pages++ {
		p, err := e.tb.Query(e.ctx, table, q)
		if err != nil {
			t.Fatalf("Query(%s, filter %q, page %d): %v", table, q.Filter, pages, err)
		}
		if len(p.Entities) > top {
			t.Errorf("Query(%s) page %d has %d entities, more than Top %d", table, pages, len(p.Entities), top)
		}
		all = append(all, p.Entities...)
		if p.Next == "" {
			return all, pages
		}
		if p.Next == q.Continuation {
			t.Fatalf("Query(%s) page %d returned the token it was given (%q): the query would never end", table, pages, p.Next)
		}
		if pages > 10000 {
			t.Fatalf("Query(%s) still returns a continuation token after %d pages", table, pages)
		}
		q.Continuation = p.Next
	}
}

// Queue and container helpers.

// newQueue creates a queue under a fresh name and deletes it when the test
// ends, so no messages pile up in a shared account.
func (e *env) newQueue(t *testing.T) storeadapter.Queue {
	t.Helper()
	q := e.h.Store.Queue(uniqueName("q"))
	if err := q.Create(e.ctx); err != nil {
		t.Fatalf("Create queue %s: %v", q.Name(), err)
	}
	t.Cleanup(func() {
		if err := q.Delete(context.Background()); err != nil {
			t.Errorf("cleanup: Delete queue %s: %v", q.Name(), err)
		}
	})
	return q
}

// newContainer creates a container under a fresh name. The Blobs port has
// no way to delete a container, so it stays.
func (e *env) newContainer(t *testing.T) storeadapter.Blobs {
	t.Helper()
	c := e.h.Store.Container(uniqueName("c"))
	if err := c.Create(e.ctx); err != nil {
		t.Fatalf("Create container %s: %v", c.Name(), err)
	}
	return c
}

// Assertions.

// checkErr reports an error unless err wraps target.
func checkErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// checkItemNotFound reports an error unless err says the entity, message
// or blob asked for is missing (ErrNotFound) and not the table, queue or
// container that holds it (ErrTableNotFound, ErrQueueNotFound,
// ErrContainerNotFound): callers create what is missing on the latter only.
func checkItemNotFound(t *testing.T, what string, err error) {
	t.Helper()
	checkErr(t, what, err, storeadapter.ErrNotFound)
	for _, holder := range []error{storeadapter.ErrTableNotFound, storeadapter.ErrQueueNotFound, storeadapter.ErrContainerNotFound} {
		if errors.Is(err, holder) {
			t.Errorf("%s: got error %v, want ErrNotFound of the item, not %v", what, err, holder)
		}
	}
}

// checkNoErr reports err if it is not nil.
func checkNoErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// checkTxErr reports an error unless err is a *TransactionError naming
// operation index and wrapping target.
func checkTxErr(t *testing.T, what string, err error, index int, target error) {
	t.Helper()
	var te *storeadapter.TransactionError
	switch {
	case !errors.As(err, &te):
		t.Errorf("%s: got error %v, want a *TransactionError (index %d, %v)", what, err, index, target)
	case te.Index != index:
		t.Errorf("%s: TransactionError.Index = %d, want %d (error: %v)", what, te.Index, index, err)
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// keyOf renders an entity's keys as "pk/rk".
func keyOf(e storeadapter.Entity) string { return e.PartitionKey + "/" + e.RowKey }

// keysOf returns the "pk/rk" of each entity.
func keysOf(ents []storeadapter.Entity) []string {
	keys := make([]string, len(ents))
	for i, e := range ents {
		keys[i] = keyOf(e)
	}
	return keys
}

// diffProps compares property maps with storeadapter.Equal and returns a
// (-want +got) listing of the differences, one property per line, naming
// each value with storeadapter.Format; "" when they are equal.
func diffProps(want, got map[string]any) string {
	names := make([]string, 0, len(want)+len(got))
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		w, wok := want[n]
		g, gok := got[n]
		switch {
		case !gok:
			fmt.Fprintf(&b, "-%s: %s\n+%s: (missing)\n", n, storeadapter.Format(w), n)
		case !wok:
			fmt.Fprintf(&b, "-%s: (absent)\n+%s: %s\n", n, n, storeadapter.Format(g))
		case !storeadapter.Equal(w, g):
			fmt.Fprintf(&b, "-%s: %s\n+%s: %s\n", n, storeadapter.Format(w), n, storeadapter.Format(g))
		}
	}
	return b.String()
}

// checkEntity reports differences between the keys and properties of want
// and got, and any DateTime property that does not come back in UTC.
func checkEntity(t *testing.T, what string, want, got storeadapter.Entity) {
	t.Helper()
	if got.PartitionKey != want.PartitionKey || got.RowKey != want.RowKey {
		t.Errorf("%s: keys = %q/%q, want %q/%q", what, got.PartitionKey, got.RowKey, want.PartitionKey, want.RowKey)
	}
	if d := diffProps(want.Properties, got.Properties); d != "" {
		t.Errorf("%s %s: properties differ (-want +got):\n%s", what, keyOf(want), d)
	}
	for n, v := range got.Properties {
		if tm, ok := v.(time.Time); ok && tm.Location() != time.UTC {
			t.Errorf("%s %s: DateTime property %s is in %v, want UTC", what, keyOf(want), n, tm.Location())
		}
	}
}

// diffLines returns a (-want +got) listing of two string lists: lines only
// in want start with "-", lines only in got with "+" (common lines are
// left out); "" when the lists are equal. Long lists get a summary.
func diffLines(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	if len(want)*len(got) > 1_000_000 {
		return summariseDiff(want, got)
	}
	// Longest common subsequence, then walk it.
	n, m := len(want), len(got)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if want[i] == got[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && want[i] == got[j]:
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&b, "+%s\n", got[j])
			j++
		default:
			fmt.Fprintf(&b, "-%s\n", want[i])
			i++
		}
	}
	return b.String()
}

// summariseDiff describes how two long lists differ without listing them.
func summariseDiff(want, got []string) string {
	inWant := make(map[string]int, len(want))
	for _, s := range want {
		inWant[s]++
	}
	seen := make(map[string]int, len(got))
	var extra, dup []string
	for _, s := range got {
		seen[s]++
		switch {
		case inWant[s] == 0:
			extra = append(extra, s)
		case seen[s] > inWant[s]:
			dup = append(dup, s)
		}
	}
	var missing []string
	for _, s := range want {
		if seen[s] == 0 {
			missing = append(missing, s)
		}
	}
	first := 0
	for first < min(len(want), len(got)) && want[first] == got[first] {
		first++
	}
	short := func(l []string) []string { return l[:min(len(l), 5)] }
	return fmt.Sprintf("want %d lines, got %d; first difference at line %d; missing %d %q…; unexpected %d %q…; repeated %d %q…\n",
		len(want), len(got), first, len(missing), short(missing), len(extra), short(extra), len(dup), short(dup))
}
