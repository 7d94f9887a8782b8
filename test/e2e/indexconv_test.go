package e2e

// The shared part of the index convergence tests (index_test.go on Azurite
// with the real binaries, index_local_test.go on localstore in-process):
// the six declared indexes, the application that writes employees and
// sends reconcile messages, the driver that crashes workers while the
// queue is worked, the ground truth computed from the table and its
// comparison with every index, and the wipe before a rebuild from scratch.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// indexNames are the tables and the container of one test's indexes.
type indexNames struct {
	Source, ByEmail, ByLastName, LastNameRows, Container, Checkpoints string
}

// indexConfig declares the six indexes on the source table: a
// copy by Email in the entity's partition and in a table of its own, and
// the list of keys by LastName in the partition, in a table, in a blob
// container and as one row per entity.
func indexConfig(n indexNames) indexes.Config {
	cfg := indexes.Config{
		Tables: map[string][]indexes.Decl{n.Source: {
			{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
			{Name: "emailAll", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StoreTable, Table: n.ByEmail},
			{Name: "lastName", Property: "LastName", Kind: indexes.KindList, Store: indexes.StorePartition},
			{Name: "lastNameAll", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreTable, Table: n.ByLastName},
			{Name: "lastNameBlob", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreBlob, Container: n.Container},
		}},
		CheckpointTable: n.Checkpoints,
		// Twenty lists shared by three busy workers: let a compare-and-swap
		// lose more rounds before the job is retried.
		MaxConflicts: 30,
	}
	if n.LastNameRows != "" {
		cfg.Tables[n.Source] = append(cfg.Tables[n.Source], indexes.Decl{Name: "lastNameRows", Property: "LastName", Kind: indexes.KindRows, Table: n.LastNameRows})
	}
	return cfg
}

// The application's vocabulary. Twenty last names, so that lists are
// shared by many employees, some with characters that keys, filters and
// blob names must escape or order by UTF-16 units.
var (
	convLastNames = []string{"Jones", "Smith", "O'Brien", "García", "Müller", "Lee/Park", "van der Berg", "Nguyen", "Kowalski", "Ng😀",
		"Brown", "Dubois", "Rossi", "Tanaka", "Kim", "Olsen", "Fischer", "Silva", "Novak", "Hughes"}
	convFirstNames = []string{"Ana", "Ben", "Chloe", "Dev", "Eve", "Farid", "Gita", "Hugo", "Ines", "Jo"}
	// convPartitions are the source partitions, one application writer each.
	convPartitions = []string{"Sales", "Engineering", "R&D", "Support O'Neil"}
)

// indexWorkload is the application of a convergence test: one writer per
// partition inserts, renames, changes and deletes employees (each write
// followed by a reconcile message for the entity), and sends its messages
// out of order: in windows that are shuffled before they are sent, some
// twice (the copy goes out with a later window).
type indexWorkload struct {
	Table string
	// Employees is how many distinct employees are inserted in all.
	Employees int
	Seed      uint64
	// Window bounds the size of a shuffled window of messages.
	Window [2]int
	// DupRate is the share of messages sent twice.
	DupRate float64
	// MaxBacklog, if set, holds the writers while the queue holds more
	// messages, so that they write while the workers reconcile rather
	// than long before.
	MaxBacklog int
	// LastNames, if set, replace convLastNames: the first is given to
	// half of the employees, the others share the rest.
	LastNames []string
	// RowKeyLen, if set, pads every RowKey to that many characters.
	RowKeyLen int
	// Partitions, if set, limits the writers to the first so many of
	// convPartitions.
	Partitions int
	// Hot, if set, is how many employees one more writer keeps rewriting
	// (renames, deletes, re-inserts) while the others write, each write
	// followed at once by its message, so that reconciles of successive
	// versions of one entity run at the same time.
	Hot int
	// NoRows, if set, leaves the rows index out of the table's indexes
	// (localConvergence): the table copy's and the lists' changes then
	// leave their clears to the next reconcile (Set.Reconcile).
	NoRows bool
}

// indexWrite is one write of the application: an upsert (replace) of the
// entity's properties, or a delete when props is nil.
type indexWrite struct {
	pk, rk string
	props  map[string]any
}

// lastName draws a last name.
func (w indexWorkload) lastName(rng *rand.Rand) string {
	if len(w.LastNames) == 0 {
		return convLastNames[rng.IntN(len(convLastNames))]
	}
	if rng.IntN(2) == 0 {
		return w.LastNames[0]
	}
	return w.LastNames[rng.IntN(len(w.LastNames))]
}

// rowKey returns an employee's RowKey: prefix and number, padded to
// RowKeyLen.
func (w indexWorkload) rowKey(prefix string, n int) string {
	rk := fmt.Sprintf("%s%05d", prefix, n)
	if pad := w.RowKeyLen - len(rk); pad > 0 {
		rk += "-" + strings.Repeat("x", pad-1)
	}
	return rk
}

// plan returns each writer's writes, drawn from the seed: about 55% are
// new employees, 25% renames (a new LastName, or none, and always a fresh
// Email; sometimes no Email), 5% changes of other properties (which copies
// must follow), 12% deletes and the rest re-inserts of deleted keys.
func (w indexWorkload) plan() [][]indexWrite {
	partitions := convPartitions
	if w.Partitions > 0 {
		partitions = partitions[:w.Partitions]
	}
	out := make([][]indexWrite, len(partitions))
	for p, pk := range partitions {
		rng := rand.New(rand.NewPCG(w.Seed, uint64(p)))
		quota := w.Employees / len(partitions)
		if p < w.Employees%len(partitions) {
			quota++
		}
		var live, dead, recent []string
		current := map[string]map[string]any{}
		emails, next := 0, 0
		email := func(first string) string {
			emails++
			return fmt.Sprintf("%s.%d.%d@contoso.example", strings.ToLower(first), p, emails)
		}
		employee := func() map[string]any {
			first := convFirstNames[rng.IntN(len(convFirstNames))]
			props := map[string]any{
				"FirstName": first,
				"Email":     email(first),
				"Age":       int32(20 + rng.IntN(45)),
				"Salary":    int64(40_000+rng.IntN(80_000)) * 1_000_000,
				"Active":    rng.IntN(8) != 0,
				"HireDate":  time.Date(2000+rng.IntN(26), time.Month(1+rng.IntN(12)), 1+rng.IntN(28), 9, 0, 0, 0, time.UTC),
			}
			if rng.IntN(10) != 0 {
				props["LastName"] = w.lastName(rng)
			}
			return props
		}
		put := func(rk string, props map[string]any) {
			if recent = append(recent, rk); len(recent) > 8 {
				recent = recent[1:]
			}
			current[rk] = props
			out[p] = append(out[p], indexWrite{pk: pk, rk: rk, props: maps.Clone(props)})
		}
		// Half the time an employee written a moment ago is picked
		// again, so that reconciles of its versions run at once.
		pick := func(keys []string) (int, string) {
			if len(recent) > 0 && rng.IntN(2) == 0 {
				if i := slices.Index(keys, recent[rng.IntN(len(recent))]); i >= 0 {
					return i, keys[i]
				}
			}
			i := rng.IntN(len(keys))
			return i, keys[i]
		}
		for inserted := 0; inserted < quota; {
			r := rng.Float64()
			switch {
			case len(live) == 0 || r < 0.55 || r >= 0.97 && len(dead) == 0:
				rk := w.rowKey("E", next)
				next++
				inserted++
				live = append(live, rk)
				put(rk, employee())
			case r < 0.80: // rename
				_, rk := pick(live)
				props := maps.Clone(current[rk])
				if rng.IntN(8) == 0 {
					delete(props, "LastName")
				} else {
					props["LastName"] = w.lastName(rng)
				}
				if rng.IntN(20) == 0 {
					delete(props, "Email")
				} else {
					props["Email"] = email(props["FirstName"].(string))
				}
				put(rk, props)
			case r < 0.85: // another property: copies hold it too
				_, rk := pick(live)
				props := maps.Clone(current[rk])
				props["Age"] = props["Age"].(int32) + 1
				props["Active"] = !props["Active"].(bool)
				put(rk, props)
			case r < 0.97: // delete
				i, rk := pick(live)
				live = slices.Delete(live, i, i+1)
				dead = append(dead, rk)
				delete(current, rk)
				out[p] = append(out[p], indexWrite{pk: pk, rk: rk})
			default: // the same key again, as a new employee
				i, rk := pick(dead)
				dead = slices.Delete(dead, i, i+1)
				live = append(live, rk)
				put(rk, employee())
			}
		}
	}
	return out
}

// reconcileMessage is the text of an index reconcile message.
func reconcileMessage(table, pk, rk, id string) (string, error) {
	raw, err := json.Marshal(index.Args{Table: table, PK: &pk, RK: &rk})
	if err != nil {
		return "", err
	}
	return jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: index.Kind, Args: raw})
}

// rebuildMessage is the text of an index rebuild message of a whole table.
func rebuildMessage(table, id string) (string, error) {
	raw, err := json.Marshal(index.Args{Table: table, Rebuild: true})
	if err != nil {
		return "", err
	}
	return jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: index.Kind, Args: raw})
}

// indexAppStats count what the application did.
type indexAppStats struct {
	writes, deletes, sent, duplicates atomic.Int64
}

// run performs the plan, the writers in parallel, each write before its
// message is queued: so every entity's last write is followed by at least
// one reconcile message, however the windows reorder them.
func (w indexWorkload) run(ctx context.Context, st storeadapter.Store, queue string, plan [][]indexWrite, stats *indexAppStats) error {
	tables, q := st.Tables(), st.Queue(queue)
	var wg sync.WaitGroup
	errs := make([]error, len(plan)+1)
	for p, writes := range plan {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.Seed, 1000+uint64(p)))
			errs[p] = w.write(ctx, tables, q, rng, p, writes, stats)
		})
	}
	hotCtx, stopHot := context.WithCancel(ctx)
	hot := make(chan error, 1)
	go func() { hot <- w.hot(hotCtx, tables, q, stats) }()
	wg.Wait()
	stopHot()
	errs[len(plan)] = <-hot
	return errors.Join(errs...)
}

// holdBacklog waits while the queue holds more than w.MaxBacklog messages
// (when set).
func (w indexWorkload) holdBacklog(ctx context.Context, q storeadapter.Queue) error {
	for w.MaxBacklog > 0 {
		n, err := q.ApproximateCount(ctx)
		if err != nil {
			return fmt.Errorf("count: %w", err)
		}
		if n <= w.MaxBacklog {
			return nil
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// hot rewrites w.Hot employees of the first partition until ctx ends,
// holding, as the other writers do, while the queue is over MaxBacklog: it
// never stops while they write, so unheld it could outrun the workers for
// good (its entities' reconciles contend for their records), and the
// others, held, would never finish.
func (w indexWorkload) hot(ctx context.Context, tables storeadapter.Tables, q storeadapter.Queue, stats *indexAppStats) error {
	if w.Hot == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(w.Seed, 2000))
	pk := convPartitions[0]
	// A write once begun is finished and its message sent, whenever the
	// other writers finish.
	stop := ctx.Done()
	ctx = context.WithoutCancel(ctx)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if i%10 == 0 {
			if err := w.holdBacklog(ctx, q); err != nil {
				return err
			}
		}
		rk := w.rowKey("H", rng.IntN(w.Hot))
		var err error
		if rng.IntN(6) == 0 {
			err = tables.DeleteEntity(ctx, w.Table, pk, rk, storeadapter.ETagAny)
			if errors.Is(err, storeadapter.ErrNotFound) {
				err = nil
			}
			stats.deletes.Add(1)
		} else {
			props := map[string]any{"FirstName": "Hot", "Email": fmt.Sprintf("hot.%d@contoso.example", i), "Age": int32(i % 100)}
			if rng.IntN(8) != 0 {
				props["LastName"] = w.lastName(rng)
			}
			_, err = tables.UpsertEntity(ctx, w.Table, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}, storeadapter.Replace)
		}
		if err != nil {
			return fmt.Errorf("hot write %d of %s/%s: %w", i, pk, rk, err)
		}
		stats.writes.Add(1)
		text, err := reconcileMessage(w.Table, pk, rk, fmt.Sprintf("hot-%05d", i))
		if err != nil {
			return err
		}
		for range 1 + rng.IntN(2) {
			if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			stats.sent.Add(1)
		}
		select {
		case <-time.After(time.Duration(rng.IntN(3000)) * time.Microsecond):
		case <-stop:
		}
	}
}

func (w indexWorkload) write(ctx context.Context, tables storeadapter.Tables, q storeadapter.Queue, rng *rand.Rand, p int, writes []indexWrite, stats *indexAppStats) error {
	var window, later []string
	size := func() int { return w.Window[0] + rng.IntN(w.Window[1]-w.Window[0]+1) }
	limit := size()
	flush := func() error {
		rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
		for _, text := range window {
			if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			stats.sent.Add(1)
		}
		window, later, limit = later, nil, size()
		return nil
	}
	for i, wr := range writes {
		if i%10 == 0 {
			if err := w.holdBacklog(ctx, q); err != nil {
				return err
			}
		}
		var err error
		if wr.props == nil {
			err = tables.DeleteEntity(ctx, w.Table, wr.pk, wr.rk, storeadapter.ETagAny)
			stats.deletes.Add(1)
		} else {
			_, err = tables.UpsertEntity(ctx, w.Table, storeadapter.Entity{PartitionKey: wr.pk, RowKey: wr.rk, Properties: wr.props}, storeadapter.Replace)
		}
		if err != nil {
			return fmt.Errorf("write %d of %s/%s: %w", i, wr.pk, wr.rk, err)
		}
		stats.writes.Add(1)
		text, err := reconcileMessage(w.Table, wr.pk, wr.rk, fmt.Sprintf("idx-%d-%05d", p, i))
		if err != nil {
			return err
		}
		window = append(window, text)
		if rng.Float64() < w.DupRate {
			later = append(later, text)
			stats.duplicates.Add(1)
		}
		if len(window) >= limit {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	for len(window) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// convergence drives one convergence run: the application runs while the
// workers work the queue, crash is called at random moments, and
// convergence returns once the application is done and the queue is
// empty. The moments are drawn as shares of the messages the run will
// send, and each crash comes once the workers have finished that many
// (sent less those in the queue), so the crashes fall while there is work
// whether the application or the workers are the slower. crash must stop
// one worker abruptly and start another in its place.
func convergence(ctx context.Context, t testing.TB, st storeadapter.Store, queue string, w indexWorkload, crashes int, timeout time.Duration, crash func(rng *rand.Rand)) {
	t.Helper()
	plan := w.plan()
	total := 0
	for _, writes := range plan {
		total += len(writes)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 7))
	var stats indexAppStats
	start := time.Now()
	deadline := start.Add(timeout)
	appDone := make(chan error, 1)
	go func() { appDone <- w.run(ctx, st, queue, plan, &stats) }()

	count := func() int {
		n, err := st.Queue(queue).ApproximateCount(ctx)
		if err != nil {
			t.Fatalf("count %s: %v", queue, err)
		}
		return n
	}
	finished := false
	appFinished := func() bool {
		if !finished {
			select {
			case err := <-appDone:
				if err != nil {
					t.Fatalf("application: %v", err)
				}
				finished = true
				t.Logf("application done in %v: %d writes (%d deletes) of %d employees, %d messages sent (%d duplicates); %d left in the queue",
					time.Since(start).Round(time.Millisecond), stats.writes.Load(), stats.deletes.Load(), w.Employees,
					stats.sent.Load(), stats.duplicates.Load(), count())
			default:
			}
		}
		return finished
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s (%d messages sent, %d in the queue)", timeout, what, stats.sent.Load(), count())
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
		}
	}

	expected := float64(total) * (1 + w.DupRate)
	moments := make([]int64, crashes)
	for i := range moments {
		moments[i] = int64(expected * (0.05 + 0.85*rng.Float64()))
	}
	slices.Sort(moments)
	for i, at := range moments {
		done := int64(0)
		wait(fmt.Sprintf("%d messages done", at), func() bool {
			over := appFinished()
			done = stats.sent.Load() - int64(count())
			return done >= at || over && done == stats.sent.Load()
		})
		t.Logf("crash %d of %d at %v: %d messages done, %d sent", i+1, crashes, time.Since(start).Round(time.Millisecond), done, stats.sent.Load())
		crash(rng)
	}
	wait("the application to finish and the queue to empty", func() bool { return appFinished() && count() == 0 })
	t.Logf("queue empty after %v", time.Since(start).Round(time.Millisecond))
}

// indexTruth is what an index must hold: encoded value -> the keys of the
// entities with that value.
type indexTruth map[string]map[indexes.Key]bool

// sourceEntities returns the application's entities of a table (not the
// index kind's reserved rows), by key.
func sourceEntities(ctx context.Context, tables storeadapter.Tables, table string) (map[indexes.Key]storeadapter.Entity, error) {
	out := map[indexes.Key]storeadapter.Entity{}
	q := storeadapter.Query{}
	for {
		page, err := tables.Query(ctx, table, q)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", table, err)
		}
		for _, e := range page.Entities {
			if !strings.HasPrefix(e.RowKey, storeadapter.ReservedPrefix) {
				out[indexes.Key{PK: e.PartitionKey, RK: e.RowKey}] = e
			}
		}
		if page.Next == "" {
			return out, nil
		}
		q.Continuation = page.Next
	}
}

// compareIndexes checks every index of table against the truth computed
// from the table: each must list exactly the entities that have its
// property, under their values, each once; each copy must hold the
// entity's properties (those the declaration names, or all). It reports
// every difference (the first few of each index in detail) and returns
// whether there was none.
func compareIndexes(ctx context.Context, t testing.TB, tables storeadapter.Tables, x *indexes.Set, table string) bool {
	t.Helper()
	entities, err := sourceEntities(ctx, tables, table)
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	for _, name := range x.Names(table) {
		d, err := x.Declaration(table, name)
		if err != nil {
			t.Fatal(err)
		}
		want := indexTruth{}
		for k, e := range entities {
			v, has := e.Properties[d.Property]
			if !has || v == nil {
				continue
			}
			enc, err := indexes.EncodeValue(v)
			if err != nil {
				t.Fatalf("encode %s of %s/%s: %v", d.Property, k.PK, k.RK, err)
			}
			if want[enc] == nil {
				want[enc] = map[indexes.Key]bool{}
			}
			want[enc][k] = true
		}
		got, dups := indexTruth{}, 0
		err = x.Entries(ctx, table, name, func(en indexes.Entry) error {
			if got[en.Encoded] == nil {
				got[en.Encoded] = map[indexes.Key]bool{}
			}
			if got[en.Encoded][en.Key] {
				dups++
				t.Errorf("index %s lists %s/%s twice under %s", name, en.PK, en.RK, en.Encoded)
			}
			got[en.Encoded][en.Key] = true
			if back, err := indexes.EncodeValue(en.Value); err != nil || back != en.Encoded {
				t.Errorf("index %s: entry %s/%s: Value %s does not encode to its Encoded %q", name, en.PK, en.RK, storeadapter.Format(en.Value), en.Encoded)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("index %s: Entries: %v", name, err)
		}
		missing, stale := diffTruth(want, got), diffTruth(got, want)
		entries := 0
		for _, keys := range got {
			entries += len(keys)
		}
		if len(missing)+len(stale)+dups > 0 {
			ok = false
			t.Errorf("index %s (%s/%s): %d entries, %d missing, %d stale, %d listed twice", name, d.Kind, d.Store, entries, len(missing), len(stale), dups)
			for _, m := range missing[:min(len(missing), 5)] {
				t.Errorf("  missing: %s", m)
			}
			for _, s := range stale[:min(len(stale), 5)] {
				t.Errorf("  stale: %s", s)
			}
		} else {
			t.Logf("index %s (%s/%s): %d entries under %d values, as in the table", name, d.Kind, d.Store, entries, len(got))
		}
		if d.Kind == indexes.KindCopy && !compareCopies(ctx, t, x, table, d, entities) {
			ok = false
		}
	}
	return ok
}

// diffTruth returns "value key" for each key a lists and b does not.
func diffTruth(a, b indexTruth) []string {
	var out []string
	for v, keys := range a {
		for k := range keys {
			if !b[v][k] {
				out = append(out, fmt.Sprintf("%s %s/%s", v, k.PK, k.RK))
			}
		}
	}
	slices.Sort(out)
	return out
}

// compareCopies looks up every indexed entity in a copy index and checks
// that the copy holds exactly the entity's properties.
func compareCopies(ctx context.Context, t testing.TB, x *indexes.Set, table string, d indexes.Decl, entities map[indexes.Key]storeadapter.Entity) bool {
	t.Helper()
	bad := 0
	for _, k := range slices.SortedFunc(maps.Keys(entities), func(a, b indexes.Key) int { return cmp.Or(cmp.Compare(a.PK, b.PK), cmp.Compare(a.RK, b.RK)) }) {
		e := entities[k]
		v, has := e.Properties[d.Property]
		if !has || v == nil {
			continue
		}
		ms, err := x.Lookup(ctx, table, d.Name, v, indexes.LookupOptions{PK: &k.PK, Entities: true})
		if err != nil {
			t.Fatalf("index %s: lookup %s: %v", d.Name, storeadapter.Format(v), err)
		}
		if len(ms) != 1 || ms[0].Key != k || ms[0].Entity == nil {
			if bad++; bad <= 5 {
				t.Errorf("index %s: lookup %s in %s gave %d matches, want the copy of %s", d.Name, storeadapter.Format(v), k.PK, len(ms), k.RK)
			}
			continue
		}
		want := e.Properties
		if len(d.Properties) > 0 {
			want = map[string]any{}
			for _, p := range d.Properties {
				if pv, ok := e.Properties[p]; ok && pv != nil {
					want[p] = pv
				}
			}
		}
		if diff := diffProperties(want, ms[0].Entity.Properties); len(diff) > 0 {
			if bad++; bad <= 5 {
				t.Errorf("index %s: the copy of %s/%s differs from the entity: %s", d.Name, k.PK, k.RK, strings.Join(diff, "; "))
			}
		}
	}
	if bad > 0 {
		t.Errorf("index %s: %d copies missing or out of date", d.Name, bad)
	}
	return bad == 0
}

// checkIndexes runs Check on every index of table and reports each
// finding; it returns whether there was none.
func checkIndexes(ctx context.Context, t testing.TB, x *indexes.Set, table string) bool {
	t.Helper()
	ok := true
	for _, name := range x.Names(table) {
		res, err := x.Check(ctx, table, name, func(f indexes.Finding) error {
			t.Errorf("check %s: %s %s %s/%s %s", name, f.Problem, f.Value, f.PK, f.RK, f.Detail)
			return nil
		})
		if err != nil {
			t.Fatalf("check %s: %v", name, err)
		}
		if res.Problems() > 0 {
			ok = false
		}
	}
	return ok
}

// wipeIndexes removes everything the index kind keeps for table: the
// index tables, the blob container (through drop, which the ports do not
// offer) and the reserved rows of the source table (membership records,
// partition indexes).
func wipeIndexes(ctx context.Context, st storeadapter.Store, x *indexes.Set, table string, drop func(ctx context.Context, container string) error) error {
	tables := st.Tables()
	for _, name := range x.Names(table) {
		d, err := x.Declaration(table, name)
		if err != nil {
			return err
		}
		if d.Table != "" && d.Table != table {
			if err := tables.DeleteTable(ctx, d.Table); err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
				return fmt.Errorf("delete table %s: %w", d.Table, err)
			}
		}
		if d.Container != "" {
			if err := drop(ctx, d.Container); err != nil {
				return fmt.Errorf("drop container %s: %w", d.Container, err)
			}
		}
	}
	reserved := storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, storeadapter.ReservedPrefix),
		storeadapter.Compare("RowKey", storeadapter.Lt, storeadapter.ReservedPrefix[:len(storeadapter.ReservedPrefix)-1]+"/"))
	byPK := map[string][]storeadapter.TableOp{}
	q := storeadapter.Query{Filter: reserved, Select: []string{"RowKey"}}
	for {
		page, err := tables.Query(ctx, table, q)
		if err != nil {
			return fmt.Errorf("query %s: %w", table, err)
		}
		for _, e := range page.Entities {
			byPK[e.PartitionKey] = append(byPK[e.PartitionKey], storeadapter.TableOp{Action: storeadapter.TxDelete,
				Entity: storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, IfMatch: storeadapter.ETagAny})
		}
		if page.Next == "" {
			break
		}
		q.Continuation = page.Next
	}
	for pk, ops := range byPK {
		for chunk := range slices.Chunk(ops, 100) {
			if err := tables.Transact(ctx, table, chunk); err != nil {
				return fmt.Errorf("delete reserved rows of %s: %w", pk, err)
			}
		}
	}
	return nil
}
