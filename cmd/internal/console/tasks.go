package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
)

// A task is work a page started that outlives its request: an action, an
// index check, an export verification. Its page shows the progress and
// reloads itself until the task ends.
type task struct {
	ID, Title, Who string
	// Back is the page to return to, relative to the console's base.
	Back    string
	Started time.Time

	mu    sync.Mutex
	phase string
	done  int
	total int
	ended time.Time
	lines []string
	err   string
}

// taskTimeout bounds one task's storage work.
const taskTimeout = 30 * time.Minute

// maxTasks is how many tasks the console remembers; the oldest ended ones
// are forgotten first.
const maxTasks = 100

type tasks struct {
	clk   clock.Clock
	mu    sync.Mutex
	byID  map[string]*task
	order []string
	// redact scrubs the errors tasks end with.
	redact func(string) string
}

func newTasks(clk clock.Clock, redact func(string) string) *tasks {
	return &tasks{clk: clk, byID: map[string]*task{}, redact: redact}
}

// start runs fn in the background as a new task.
func (ts *tasks) start(title, who, back string, fn func(ctx context.Context, t *task) ([]string, error)) *task {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	t := &task{ID: hex.EncodeToString(id), Title: title, Who: who, Back: back, Started: ts.clk.Now()}
	ts.mu.Lock()
	ts.byID[t.ID] = t
	ts.order = append(ts.order, t.ID)
	for len(ts.order) > maxTasks {
		delete(ts.byID, ts.order[0])
		ts.order = ts.order[1:]
	}
	ts.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), taskTimeout)
		defer cancel()
		lines, err := fn(ctx, t)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.lines, t.ended = lines, ts.clk.Now()
		if err != nil {
			t.err = ts.redact(err.Error())
		}
	}()
	return t
}

func (ts *tasks) get(id string) *task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.byID[id]
}

// progress returns a Progress callback that reports phase on t.
func (t *task) progress(phase string) func(done, total int) {
	return func(done, total int) {
		t.mu.Lock()
		t.phase, t.done, t.total = phase, done, total
		t.mu.Unlock()
	}
}

// taskView is a task as its page shows it.
type taskView struct {
	ID, Title, Who, Back string
	Started              time.Time
	Phase                string
	Done, Total          int
	Running              bool
	Took                 time.Duration
	Lines                []string
	Err                  string
}

func (t *task) view(now time.Time) taskView {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := taskView{ID: t.ID, Title: t.Title, Who: t.Who, Back: t.Back, Started: t.Started, Phase: t.phase,
		Done: t.done, Total: t.total, Running: t.ended.IsZero(), Lines: t.lines, Err: t.err}
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
		c.render(w, r, http.StatusNotFound, "error", page{Title: "Error", Data: "no such task (the console keeps the last 100, and forgets them when it restarts)"})
		return
	}
	v := t.view(c.cfg.Clock.Now())
	p := page{Title: v.Title, Nav: "", Data: v}
	if v.Running {
		p.Refresh = 1
	}
	c.render(w, r, http.StatusOK, "task", p)
}
