package indexes

// Regression net for a change of the external indexes' write protocol
// (/work/index-fence-review.md, §3 item 1): the scenarios the review's
// problems P1–P4 are built on, run against today's protocol (register,
// settle, clear; an entry keeps the highest generation's write), where
// they must pass. Each ends with the package's own Check (clean) and
// Lookup (the entity listed under exactly its current value). This file
// holds the helpers and the reconcile scenarios; the rebuild and Sync ones
// are in protocol_regress_rebuild_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// externalNames are sixIndexes' indexes outside the source partition, one
// per external kind: rows, table copy, table list, blob list.
var externalNames = []string{"lastNameRows", "emailAll", "lastNameAll", "lastNameBlob"}

// only declares the indexes of sixIndexes with these names.
func only(names ...string) Config {
	cfg := sixIndexes()
	cfg.Tables[employees] = slices.DeleteFunc(cfg.Tables[employees], func(d Decl) bool { return !slices.Contains(names, d.Name) })
	return cfg
}

// The entity the scenarios change, and one of another partition that
// keeps value "a" throughout, so that the entries the subject leaves are
// not emptied (a lost entry would not go unseen) and a stray listing under
// "a" is told from the bystander's.
var (
	subject   = Key{PK: "Sales", RK: "k"}
	bystander = Key{PK: "Marketing", RK: "other"}
)

// valued is an entity whose property indexed by name is v, with Dept
// (copied by a copy index).
func (f *fixture) valued(name, v, dept string) map[string]any {
	f.t.Helper()
	return map[string]any{"Dept": dept, mustIndex(f.t, f.x, name).Property: v}
}

// begin indexes the subject and the bystander at value "a" of index name.
func (f *fixture) begin(name string) {
	f.t.Helper()
	for _, k := range []Key{bystander, subject} {
		f.put(k.PK, k.RK, f.valued(name, "a", "Sales"))
		f.reconcile(k.PK, k.RK)
	}
}

// reconcileOp is a reconcile of k as an operation the helpers below run.
func reconcileOp(k Key) func(context.Context, *fixture) error {
	return func(ctx context.Context, f *fixture) error {
		_, err := f.x.Reconcile(ctx, employees, k.PK, k.RK)
		return err
	}
}

// assertOnly fails unless Lookup in index name lists k under want and
// under none of the others, and every index equals the truth with Check
// clean (assertTruth).
func (f *fixture) assertOnly(name string, k Key, want string, others ...string) {
	f.t.Helper()
	for _, v := range append([]string{want}, others...) {
		if listed := slices.Contains(lookupKeys(f.t, f.x, name, v, nil), k); listed != (v == want) {
			f.t.Errorf("index %s: lookup %q lists %v: %v, want %v", name, v, k, listed, v == want)
		}
	}
	f.assertTruth()
}

// errKilled is what every storage call of a killed worker returns from
// its death on. It is not transient, so nothing in the package retries
// it: the operation ends there, as a killed process's would.
var errKilled = errors.New("worker killed")

// killedAt runs op with its n-th storage call, and every later one,
// failing with errKilled, and reports whether op got that far. Any other
// error fails the test, and so does an error when op did not get there.
func (f *fixture) killedAt(n int, op func(context.Context, *fixture) error) (hit bool) {
	f.t.Helper()
	var calls atomic.Int64
	f.fault = func(context.Context, instrument.Call) error {
		if calls.Add(1) >= int64(n) {
			return errKilled
		}
		return nil
	}
	err := op(f.ctx, f)
	f.fault = nil
	hit = calls.Load() >= int64(n)
	if err != nil && (!hit || !errors.Is(err, errKilled)) {
		f.t.Fatalf("killed at call %d: unexpected error %v", n, err)
	}
	return hit
}

// atEveryCall kills op at each of its storage calls in turn: for n = 1,
// 2, … it runs prepare (a fresh store), op killed at call n, op again
// without faults (the redelivery), then check — until op no longer
// reaches call n, so every crash position has been tried. It returns how
// many were.
func atEveryCall(t *testing.T, what string, prepare func() *fixture, op func(context.Context, *fixture) error, check func(*fixture)) int {
	t.Helper()
	for n := 1; ; n++ {
		f := prepare()
		if !f.killedAt(n, op) {
			return n - 1
		}
		if err := op(f.ctx, f); err != nil {
			t.Fatalf("%s: the redelivery after a crash at call %d: %v", what, n, err)
		}
		check(f)
		if t.Failed() {
			t.Fatalf("%s: killed at call %d", what, n)
		}
	}
}

// chainCrash starts from begin(name), writes the subject as v1 and kills
// its reconcile at call n, writes it as v2 and kills that reconcile at
// call m, then reconciles it once more and checks — for every n and m up
// to the calls each reconcile makes. It returns how many pairs it tried.
func chainCrash(t *testing.T, name string, v1, v2 func(*fixture) map[string]any, check func(*fixture)) int {
	t.Helper()
	tried := 0
	for n := 1; ; n++ {
		firstHit := false
		tried += atEveryCall(t, fmt.Sprintf("%s, after the first reconcile was killed at call %d", name, n), func() *fixture {
			f := newFixture(t, only(name))
			f.begin(name)
			f.put(subject.PK, subject.RK, v1(f))
			firstHit = f.killedAt(n, reconcileOp(subject))
			f.put(subject.PK, subject.RK, v2(f))
			return f
		}, reconcileOp(subject), check)
		if !firstHit {
			return tried
		}
	}
}

// valueOf is valued(name, v, "Sales") for chainCrash.
func valueOf(name, v string) func(*fixture) map[string]any {
	return func(f *fixture) map[string]any { return f.valued(name, v, "Sales") }
}

// TestProtocolChainCrash (review §3 item 1, "chain crash"; P1/P2b's
// premise): two changes a→b→c whose reconciles are each killed, at every
// pair of call positions, leave two registrations with overlapping pending
// values, some entries written at the first generation and some at the
// second; a plain reconcile must settle them all. It cannot pass by luck:
// every position pair is run (their number is checked), the bystander
// keeps "a" non-empty, and Lookup of a, b and c must each answer exactly.
func TestProtocolChainCrash(t *testing.T) {
	for _, name := range externalNames {
		t.Run(name, func(t *testing.T) {
			tried := chainCrash(t, name, valueOf(name, "b"), valueOf(name, "c"), func(f *fixture) {
				f.assertOnly(name, subject, "c", "a", "b")
			})
			if tried < 20 { // a change makes 5 or more calls; each pair is one run
				t.Errorf("tried %d crash pairs: the kills did not reach the reconciles' calls", tried)
			}
			t.Logf("%d crash pairs", tried)
		})
	}
}

// TestProtocolTableCopyContentEdit (P2a, "a table-copy content edit"): the
// subject's copied property changes while its indexed value stays "a", so
// the one value is both the one the record leaves (kill) and the one it
// takes (live). The reconcile is killed at each of its calls, then run
// again; then the same with two edits in a row, each killed at every
// position. The copy must hold the last content: Lookup returns it, and
// Check (which compares the copy's content with the entity's) is clean.
// The first reconcile's edit really reaches the copy (Dept differs from
// begin's), so a copy left as it was fails.
func TestProtocolTableCopyContentEdit(t *testing.T) {
	const name = "emailAll"
	copyHolds := func(dept string) func(*fixture) {
		return func(f *fixture) {
			f.t.Helper()
			ms, err := f.x.Lookup(f.ctx, employees, name, "a", LookupOptions{PK: ptr(subject.PK), Entities: true})
			if err != nil {
				f.t.Fatal(err)
			}
			if len(ms) != 1 || ms[0].Key != subject || ms[0].Entity.Properties["Dept"] != dept {
				f.t.Errorf("lookup %s a in %s = %+v, want the subject's copy with Dept %s", name, subject.PK, ms, dept)
			}
			f.assertOnly(name, subject, "a")
		}
	}
	single := atEveryCall(t, "one edit", func() *fixture {
		f := newFixture(t, only(name))
		f.begin(name)
		f.put(subject.PK, subject.RK, f.valued(name, "a", "Engineering"))
		return f
	}, reconcileOp(subject), copyHolds("Engineering"))
	chained := chainCrash(t, name, func(f *fixture) map[string]any { return f.valued(name, "a", "Engineering") },
		func(f *fixture) map[string]any { return f.valued(name, "a", "Ops") }, copyHolds("Ops"))
	if single < 4 || chained < 16 {
		t.Errorf("tried %d positions of one edit and %d pairs of two: the kills did not reach the reconciles", single, chained)
	}
	t.Logf("%d positions of one edit, %d pairs of two", single, chained)
}

// workerKey marks the context of an operation a crew runs: its *worker.
type workerKey struct{}

// crew runs operations as scripted workers. It counts each worker's
// storage calls from its first call outside the source table after it
// registered (wrote to the source table) on — its settle's reads and
// writes of the index, then its clear of the record — and can hold a
// worker at the first of them (holdCalls) until it is let go, or kill it
// at the j-th: that call and every later one of the worker fail with
// errKilled. Calls of other contexts pass. (A table copy reads its rows
// before it registers: those reads are not counted.)
type crew struct {
	f  *fixture
	mu sync.Mutex // guards the workers' counts
}

// worker is one scripted operation.
type worker struct {
	name   string
	killAt int        // the call from its settle on that it dies at (0: never)
	hold   *holdCalls // nil: never held
	calls  int        // calls made from its settle on
	// registered is set once the worker wrote to the source table.
	registered bool
	dead       bool
	done       chan error // the error of an operation run in the background
}

func newCrew(f *fixture) *crew {
	c := &crew{f: f}
	f.fault = c.fault
	return c
}

// settleCall reports whether a call is one of its worker's settle (see
// crew): made after the worker registered.
func settleCall(ctx context.Context, _ instrument.Call) bool {
	w, _ := ctx.Value(workerKey{}).(*worker)
	return w != nil && w.calls > 0 // counted by crew.fault, on this goroutine, before it asks
}

// registers reports whether a call writes to the source table.
func registers(c instrument.Call) bool {
	return c.Name == employees && slices.Contains([]instrument.Op{instrument.OpInsertEntity, instrument.OpUpdateEntity, instrument.OpTransact}, c.Op)
}

func (c *crew) fault(ctx context.Context, call instrument.Call) error {
	w, _ := ctx.Value(workerKey{}).(*worker)
	if w == nil {
		return nil
	}
	c.mu.Lock()
	if w.calls > 0 || w.registered && call.Name != employees {
		w.calls++
	}
	w.registered = w.registered || registers(call)
	w.dead = w.dead || w.killAt > 0 && w.calls >= w.killAt
	dead := w.dead
	c.mu.Unlock()
	switch {
	case dead:
		return errKilled
	case w.hold != nil:
		return w.hold.fault(ctx, call)
	}
	return nil
}

// dies is a worker killed at its at-th call from its settle on (1: right
// after it registered).
func (c *crew) dies(name string, at int) *worker { return &worker{name: name, killAt: at} }

// stalls is a worker held at its first settle call, after it registered,
// until finish.
func (c *crew) stalls(name string) *worker {
	return &worker{name: name, hold: &holdCalls{release: make(chan struct{}), held: make(chan struct{}), match: settleCall}}
}

func (c *crew) context(w *worker) context.Context {
	return context.WithValue(context.WithValue(c.f.ctx, lateKey{}, true), workerKey{}, w)
}

// killed reports whether w died.
func (c *crew) killed(w *worker) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.dead
}

// run runs op as w and returns its error.
func (c *crew) run(w *worker, op func(context.Context, *fixture) error) error {
	return op(c.context(w), c.f)
}

// start runs op as a stalling w in the background and returns once w is
// held.
func (c *crew) start(w *worker, op func(context.Context, *fixture) error) {
	c.f.t.Helper()
	w.done = make(chan error, 1)
	go func() { w.done <- op(c.context(w), c.f) }()
	select {
	case <-w.hold.held:
	case err := <-w.done:
		c.f.t.Fatalf("%s ended (%v) before it reached its settle", w.name, err)
	case <-time.After(10 * time.Second):
		c.f.t.Fatalf("%s never reached its settle", w.name)
	}
}

// finish lets a stalled w go and returns its operation's error.
func (c *crew) finish(w *worker) error {
	c.f.t.Helper()
	close(w.hold.release)
	select {
	case err := <-w.done:
		return err
	case <-time.After(10 * time.Second):
		c.f.t.Fatalf("%s did not end within 10 s of being let go", w.name)
		return nil
	}
}

// step is one write of the subject's value and what the worker that
// reconciles it does: "stall" (held at its first settle call, let go at
// the end, in order), "die" (killed at its first settle call, right after
// registering) or "kill" (killed at its j-th call from its settle on, the
// last being its clear of the record).
type step struct{ value, does string }

// runTrace plays steps from begin(name): each writes the subject's value,
// then its worker reconciles it as scripted. Then the stalled workers are
// let go in order and must succeed, each killed worker is redelivered (a
// plain reconcile), and the subject must be listed under the last value
// only. It reports whether the "kill" worker was killed (false: it made
// fewer than j calls from its settle on). While the stalled workers are held and
// the others dead, nobody has cleared anything: the record must then hold
// every value of the trace as pending — the stage the review's trace
// needs, checked so that the test cannot pass because it never got there.
func runTrace(t *testing.T, name string, steps []step, j int) (killed bool) {
	t.Helper()
	f := newFixture(t, only(name))
	f.begin(name)
	c := newCrew(f)
	op := reconcileOp(subject)
	values, redeliveries := []string{"a"}, 0
	var stalled []*worker
	for i, s := range steps {
		f.put(subject.PK, subject.RK, f.valued(name, s.value, "Sales"))
		values = append(values, s.value)
		id := fmt.Sprintf("W%d (%s)", i+1, s.value)
		if s.does == "stall" {
			w := c.stalls(id)
			c.start(w, op)
			stalled = append(stalled, w)
			continue
		}
		w := c.dies(id, 1)
		if s.does == "kill" {
			w.killAt = j
		}
		err := c.run(w, op)
		switch {
		case c.killed(w) && !errors.Is(err, errKilled), !c.killed(w) && err != nil:
			t.Fatalf("%s: %v", id, err)
		case c.killed(w):
			redeliveries++
		}
		killed = killed || s.does == "kill" && c.killed(w)
	}
	if m := f.record(subject.PK, subject.RK); killed && slices.Contains(rowsKeyedIndexes, name) {
		// Rows and a table list's markers: one kill per live row before
		// the last (see rowsState).
		if k := m.rows[name].kills; len(k) != len(values)-1 {
			t.Fatalf("the stage is not set: kills %v, want one per value before the last of %v", k, values)
		}
	} else if p := m.pending[name]; killed && len(p) != len(slices.Compact(slices.Sorted(slices.Values(values)))) {
		t.Fatalf("the stage is not set: pending %v, want every value of %v", p, values)
	}
	for _, w := range stalled {
		if err := c.finish(w); err != nil {
			t.Fatalf("%s, let go: %v", w.name, err)
		}
	}
	for range redeliveries {
		f.reconcile(subject.PK, subject.RK)
	}
	f.assertOnly(name, subject, values[len(values)-1], values[:len(values)-1]...)
	return killed
}

// everyKill runs the trace on each external kind with the "kill" worker
// killed at each of its calls from its settle on, and unkilled.
func everyKill(t *testing.T, steps []step) {
	for _, name := range externalNames {
		t.Run(name, func(t *testing.T) {
			for j := 1; ; j++ {
				killed := runTrace(t, name, steps, j)
				if t.Failed() {
					t.Fatalf("the last worker killed at call %d of its settle (killed: %v)", j, killed)
				}
				if !killed {
					t.Logf("the last worker killed at each of its %d calls from its settle on", j-1)
					// A table copy's settle is one transaction (its clear
					// is left to the next reconcile: see lazy); the others
					// read, write and clear.
					if least := map[bool]int{true: 1, false: 2}[name == "emailAll"]; j-1 < least {
						t.Errorf("the last worker made %d calls from its settle on: it never settled before dying", j-1)
					}
					return
				}
			}
		})
	}
}

// TestProtocolThreeWorkers is P1's trace (review §1): a→b→c→d set
// quickly. W1 registers a→b and dies; W2 registers b→c and stalls before
// settling; W3 registers c→d and dies at each of its calls from its settle
// on in turn (in the trace, after it made (b, g1) dead); W2 resumes; W3 is
// redelivered; then W1's redelivery. Today every settler writes all
// pending values, so (a, g0) is killed whatever the order; a protocol that
// skips values on evidence left by W3's partial settle would leave a
// listed.
func TestProtocolThreeWorkers(t *testing.T) {
	everyKill(t, []step{{"b", "die"}, {"c", "stall"}, {"d", "kill"}})
}

// TestProtocolReentry is the re-entry a→b→a of P2a: W1 registers a→b and
// stalls before writing; W2 registers b→a and is killed at each of its
// calls from its settle on; W1 resumes (its tombstone of a is older than
// W2's live a); W2 is redelivered. The subject must be in list a, and not
// in b. The table and blob lists are the point (one line per key and
// value); rows and the table copy run too.
func TestProtocolReentry(t *testing.T) {
	everyKill(t, []step{{"b", "stall"}, {"a", "kill"}})
}

// TestProtocolReentryLaggingSettles is P2b's trace: a→b→a→c→d at g1…g4.
// S_g1 stalls; S_g2 dies right after registering; S_g3 stalls; S_g4 is
// killed at each of its calls from its settle on (in the trace, after
// writing list a dead at g4); S_g1 and S_g3 resume in that order; S_g4 is
// redelivered, then S_g2. Left wrong by a protocol that counts a dead line
// at ≥ T as evidence: the subject live in list b for ever.
func TestProtocolReentryLaggingSettles(t *testing.T) {
	everyKill(t, []step{{"b", "stall"}, {"a", "die"}, {"c", "stall"}, {"d", "kill"}})
}
