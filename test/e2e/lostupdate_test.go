package e2e

// Like workers_test.go, this test runs on its own (no t.Parallel): it loads
// the emulator and kills workers.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestArchiveKeepsLastVersionUnderUpdatesAndKills races archive movers
// against an application that keeps updating the entities being moved:
// three workers, one of which reaches the table service through a proxy
// that holds each of its writes (not its reads) for a while, so it often
// writes a version it read long ago; every entity has two single-entity
// messages and its partition two overlapping range messages; two workers
// are killed with SIGKILL and restarted during the run. At the end every
// entity has left the source and its archived copy holds the last version
// the application wrote before the source was deleted.
func TestArchiveKeepsLastVersionUnderUpdatesAndKills(t *testing.T) {
	e := setup(t, 90*time.Second)
	src, arc := e.table("RaceSrc"), e.table("RaceArc")
	q := e.queue("race")
	const partitions, perPartition = 3, 60
	var seeded []storeadapter.Entity
	for p := range partitions {
		for i := range perPartition {
			seeded = append(seeded, storeadapter.Entity{PartitionKey: fmt.Sprintf("p%d", p), RowKey: rowKey(i),
				Properties: map[string]any{"Version": int64(1)}})
		}
	}
	e.seed(src, seeded)
	e.sendRaceMessages(q, src, arc, seeded, partitions)

	app := startApplication(e, src, seeded)
	slow := e.slowTableWrites(150 * time.Millisecond)
	args := []string{"-visibility", "2s", "-concurrency", "4", "-batch", "4", "-retry-base", "100ms", "-retry-max", "1s"}
	e.environ = slow
	workers := []*proc{e.startWorker(q, args...)}
	e.environ = nil
	workers = append(workers, e.startWorker(q, args...), e.startWorker(q, args...))

	// Kill a fast worker after a third and another after two thirds of the
	// entities have left the source, and start a new one in its place.
	for k, left := range []int{len(seeded) * 2 / 3, len(seeded) / 3} {
		e.poll(30*time.Second, 20*time.Millisecond, fmt.Sprintf("at most %d entities left in the source", left), func() bool {
			return len(e.entities(src, storeadapter.Filter{})) <= left
		})
		w := workers[1+k]
		w.signal(syscall.SIGKILL)
		w.wait(e.ctx, 10*time.Second)
		workers[1+k] = e.startWorker(q, args...)
	}
	e.poll(45*time.Second, 100*time.Millisecond, "the source and the work queue to empty", func() bool {
		return len(e.entities(src, storeadapter.Filter{})) == 0 && e.count(q) == 0
	})
	for _, w := range workers {
		w.signal(syscall.SIGTERM)
		if code := w.wait(e.ctx, 15*time.Second); code != 0 {
			t.Errorf("%s exited with %d after SIGTERM, want 0", w, code)
		}
	}
	last := app.stop()

	copies := map[string]storeadapter.Entity{}
	for _, c := range e.entities(arc, storeadapter.Filter{}) {
		copies[c.PartitionKey+"/"+c.RowKey] = c
	}
	if len(copies) != len(seeded) {
		t.Errorf("archive holds %d entities, want %d", len(copies), len(seeded))
	}
	stale, updates := 0, int64(0)
	for key, want := range last {
		updates += want.version - 1
		c, ok := copies[key]
		if !ok {
			t.Errorf("entity %s was lost: not in the archive, not in the source", key)
			continue
		}
		got, _ := c.Properties["Version"].(int64)
		if got != want.version && !(want.unsure && got == want.version+1) {
			stale++
			t.Errorf("archived %s holds Version %d, want %d, the last the application wrote", key, got, want.version)
		}
		if len(c.Properties) != 1 {
			t.Errorf("archived %s holds %d properties, want only the source's Version", key, len(c.Properties))
		}
	}
	t.Logf("%d entities, %d application updates while moving, %d stale copies", len(seeded), updates, stale)
	if updates == 0 {
		t.Errorf("the application updated nothing while the entities moved: the test raced nothing")
	}
	checkNoPoison(t, e, q)
}

// sendRaceMessages sends, in random order, two single-entity archive
// messages for each entity (a duplicate delivery) and, for each partition,
// a range message over the whole partition and one over its second half.
func (e *env) sendRaceMessages(q, src, arc string, es []storeadapter.Entity, partitions int) {
	e.t.Helper()
	var texts []string
	add := func(id string, a archive.Args) {
		raw, err := json.Marshal(a)
		if err != nil {
			e.t.Fatal(err)
		}
		text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: archive.Kind, Args: raw})
		if err != nil {
			e.t.Fatal(err)
		}
		texts = append(texts, text)
	}
	for _, en := range es {
		for dup := range 2 {
			add(fmt.Sprintf("op-%s-%s-%d", en.PartitionKey, en.RowKey, dup), archive.Args{Table: src, To: arc, PK: &en.PartitionKey, RK: &en.RowKey})
		}
	}
	for p := range partitions {
		pk, all, half := fmt.Sprintf("p%d", p), "", rowKey(30)
		add("op-range-all-"+pk, archive.Args{Table: src, To: arc, PK: &pk, RKFrom: &all})
		add("op-range-half-"+pk, archive.Args{Table: src, To: arc, PK: &pk, RKFrom: &half})
	}
	rand.Shuffle(len(texts), func(i, j int) { texts[i], texts[j] = texts[j], texts[i] })
	if err := store.Queue(q).Create(e.ctx); err != nil {
		e.t.Fatalf("create queue %s: %v", q, err)
	}
	for _, text := range texts {
		if _, err := store.Queue(q).Send(e.ctx, text, storeadapter.SendOptions{}); err != nil {
			e.t.Fatalf("send to %s: %v", q, err)
		}
	}
}

// slowTableWrites starts a proxy to the emulator's table service that
// holds every request but a GET for delay, and returns a child environment
// whose connection string sends table calls through it (the shared key
// signs the path, not the host, so requests stay valid).
func (e *env) slowTableWrites(delay time.Duration) []string {
	e.t.Helper()
	var endpoint string
	for _, part := range strings.Split(emulatorConnectionString, ";") {
		if v, ok := strings.CutPrefix(part, "TableEndpoint="); ok {
			endpoint = v
		}
	}
	u, err := url.Parse(endpoint)
	if err != nil || endpoint == "" {
		e.t.Fatal("the emulator's connection string has no usable TableEndpoint")
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	e.t.Cleanup(srv.Close)
	cs := strings.Replace(emulatorConnectionString, "TableEndpoint="+endpoint, "TableEndpoint="+srv.URL+u.Path, 1)
	return childEnvironment(cs)
}

// written is what the application knows of one entity: the last Version it
// wrote, and whether a later write of version+1 may have landed (its
// outcome was unknown).
type written struct {
	version int64
	unsure  bool
}

// application updates the source entities, each Version one up, with
// UpdateEntity requiring the entity to exist, until stopped or until every
// entity is gone.
type application struct {
	done chan struct{}
	wg   sync.WaitGroup
	last map[string]*written
}

// startApplication starts two updaters, each over half of the entities.
// They write back to back, without pause, so two writes of one entity often
// fall in one millisecond, where the emulator's Timestamps do not keep
// their order (the archive must not depend on it). Each entity is updated
// at most maxUpdates times: an entity rewritten without end could never be
// moved, since every If-Match delete of it would lose.
func startApplication(e *env, table string, es []storeadapter.Entity) *application {
	a := &application{done: make(chan struct{}), last: map[string]*written{}}
	for _, en := range es {
		a.last[en.PartitionKey+"/"+en.RowKey] = &written{version: 1}
	}
	for g := range 2 {
		var mine []storeadapter.Entity
		for i, en := range es {
			if i%2 == g {
				mine = append(mine, en)
			}
		}
		a.wg.Go(func() { a.update(e, table, mine) })
	}
	return a
}

func (a *application) update(e *env, table string, alive []storeadapter.Entity) {
	const maxUpdates = 20
	for len(alive) > 0 {
		select {
		case <-a.done:
			return
		case <-e.ctx.Done():
			return
		default:
		}
		i := rand.IntN(len(alive))
		en := alive[i]
		w := a.last[en.PartitionKey+"/"+en.RowKey]
		next := storeadapter.Entity{PartitionKey: en.PartitionKey, RowKey: en.RowKey, Properties: map[string]any{"Version": w.version + 1}}
		_, err := store.Tables().UpdateEntity(e.ctx, table, next, storeadapter.Replace, storeadapter.ETagAny)
		switch {
		case err == nil:
			w.version++
			w.unsure = false
			if w.version <= maxUpdates {
				continue
			}
		case errors.Is(err, storeadapter.ErrNotFound):
		default:
			w.unsure = true // it may have landed; stop writing this entity
		}
		alive[i] = alive[len(alive)-1]
		alive = alive[:len(alive)-1]
	}
}

// stop stops the updaters and returns what they wrote, by "pk/rk".
func (a *application) stop() map[string]written {
	close(a.done)
	a.wg.Wait()
	out := make(map[string]written, len(a.last))
	for k, w := range a.last {
		out[k] = *w
	}
	return out
}
