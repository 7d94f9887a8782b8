package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/poison"
)

// A task is work a page started that outlives its request: an action, an
// index check, an export verification. Its page shows the progress and
// reloads itself until the task ends.
type task struct {
	ID, Title, Who string
	// Back is the page to return to, relative to the console's base.
	Back    string
	Started time.Time
	kind    taskKind

	mu     sync.Mutex
	phases []poison.Progress // each phase's last report, in order
	ended  time.Time
	lines  []string
	err    string
}

// taskKind says how many tasks of a kind may run at once.
type taskKind int

const (
	// changing tasks (requeue, delete, purge) run one at a time: the
	// poison operations are meant to run alone (see poison.Inspector).
	changing taskKind = iota
	// reading tasks (checks, verifications) run maxReading at a time:
	// each may read a whole table.
	reading
)

// maxReading bounds the reading tasks that run at once.
const maxReading = 2

// taskTimeout bounds one task's storage work.
const taskTimeout = 30 * time.Minute

// maxTasks is how many ended tasks the console remembers; the oldest ended
// ones are forgotten first, running ones never.
const maxTasks = 100

type tasks struct {
	clk clock.Clock
	// redact scrubs the errors tasks end with.
	redact func(string) string
	// ctx is what tasks run under; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	byID  map[string]*task
	order []*task
}

func newTasks(clk clock.Clock, redact func(string) string) *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{clk: clk, redact: redact, ctx: ctx, cancel: cancel, byID: map[string]*task{}}
}

// start runs fn in the background as a new task of kind, unless as many
// tasks of that kind run already: then it returns nil and one of them.
func (ts *tasks) start(kind taskKind, title, who, back string, fn func(ctx context.Context, t *task) ([]string, error)) (*task, *task) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var running []*task
	for _, t := range ts.order {
		if t.kind == kind && t.running() {
			running = append(running, t)
		}
	}
	if kind == changing && len(running) > 0 || kind == reading && len(running) >= maxReading {
		return nil, running[0]
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	t := &task{ID: hex.EncodeToString(id), Title: title, Who: who, Back: back, Started: ts.clk.Now(), kind: kind}
	ts.byID[t.ID] = t
	ts.order = append(ts.order, t)
	ts.forget()
	ts.wg.Go(func() {
		ctx, cancel := context.WithTimeout(ts.ctx, taskTimeout)
		defer cancel()
		lines, err := fn(ctx, t)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.lines, t.ended = lines, ts.clk.Now()
		if err != nil {
			t.err = ts.redact(err.Error())
		}
	})
	return t, nil
}

// forget drops the oldest ended tasks beyond maxTasks. ts.mu is held.
func (ts *tasks) forget() {
	ended := 0
	for _, t := range ts.order {
		if !t.running() {
			ended++
		}
	}
	for i := 0; i < len(ts.order) && ended > maxTasks; {
		if t := ts.order[i]; !t.running() {
			delete(ts.byID, t.ID)
			ts.order = append(ts.order[:i], ts.order[i+1:]...)
			ended--
			continue
		}
		i++
	}
}

func (ts *tasks) get(id string) *task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.byID[id]
}

// close waits up to grace for the running tasks, then cancels those still
// running and waits for them to return. It returns how many it cancelled.
func (ts *tasks) close(grace time.Duration) int {
	done := make(chan struct{})
	go func() {
		ts.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return 0
	case <-time.After(grace): // the wall clock: a shutdown waits in real time
	}
	ts.mu.Lock()
	n := 0
	for _, t := range ts.order {
		if t.running() {
			n++
		}
	}
	ts.mu.Unlock()
	ts.cancel()
	<-done
	return n
}

func (t *task) running() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended.IsZero()
}

// progress reports how far t's phase has got (a poison operation's
// Progress callback).
func (t *task) progress(p poison.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.phases); n > 0 && t.phases[n-1].Phase == p.Phase {
		t.phases[n-1] = p
		return
	}
	t.phases = append(t.phases, p)
}

// taskView is a task as its page shows it.
type taskView struct {
	ID, Title, Who, Back string
	Started              time.Time
	Phases               []poison.Progress
	Running              bool
	Took                 time.Duration
	Lines                []string
	Err                  string
}

func (t *task) view(now time.Time) taskView {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := taskView{ID: t.ID, Title: t.Title, Who: t.Who, Back: t.Back, Started: t.Started, Phases: slices.Clone(t.phases),
		Running: t.ended.IsZero(), Lines: t.lines, Err: t.err}
	if v.Running {
		v.Took = now.Sub(t.Started)
	} else {
		v.Took = t.ended.Sub(t.Started)
	}
	return v
}

// taskPage shows a task; while it runs the page reloads every second.
func (c *Console) taskPage(w http.ResponseWriter, r *http.Request) {
	t := c.tasks.get(r.PathValue("id"))
	if t == nil {
		c.render(w, r, http.StatusNotFound, "error", page{Title: "Error", Data: "no such task (the console keeps the last 100 that ended, and forgets them when it stops)"})
		return
	}
	v := t.view(c.cfg.Clock.Now())
	p := page{Title: v.Title, Data: v}
	if v.Running {
		p.Refresh = 1
	}
	c.render(w, r, http.StatusOK, "task", p)
}

// busy answers a task refused because others of its kind run: 409 with a
// link to one of them.
func (c *Console) busy(w http.ResponseWriter, r *http.Request, running *task) {
	c.render(w, r, http.StatusConflict, "busy", page{Title: "Busy", Data: running.view(c.cfg.Clock.Now())})
}

// Close waits up to grace for the running tasks (an action half done is
// better finished), then cancels the others and waits for them to return;
// their pages and log lines say they failed. It returns how many it
// cancelled. Call it after the server stopped taking requests.
func (c *Console) Close(grace time.Duration) int {
	n := c.tasks.close(grace)
	if n > 0 {
		c.cfg.Log.Warn(fmt.Sprintf("console stopped: %d task(s) cancelled", n))
	}
	return n
}
