package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// delivery is what a handler saw of one delivery.
type delivery struct {
	id           string
	continued    int
	dequeueCount int64
	text         string
}

// deliveries records the deliveries a handler saw, safely.
type deliveries struct {
	mu   sync.Mutex
	list []delivery
}

func (d *deliveries) add(job *jobs.Job[testArgs]) delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	x := delivery{job.ID, job.Continued, job.Message.DequeueCount, job.Message.Text}
	d.list = append(d.list, x)
	return x
}

func (d *deliveries) all() []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.list...)
}

// TestContinueFiveTimes: a handler that continues five times, with a
// MaxDequeueCount of 1, finishes in one drain (the drain keeps running
// while the continuations come) and is never poisoned: every delivery is
// a fresh message with dequeue count 1, its continuation marker 0 to 5.
// Each continuation is logged with its count, delay and progress.
func TestContinueFiveTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen deliveries
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			d := seen.add(job)
			if d.continued < 5 {
				return jobs.ContinueLater(0, fmt.Sprintf("step %d of 6 done", d.continued+1))
			}
			return nil
		})
		b.cfg.MaxDequeueCount = 1
		logs := b.logTo()
		b.send(t, "op-long")
		s := b.drain(t, time.Second)
		if s.Received != 6 || s.Continued != 5 || s.Succeeded != 1 || s.Poisoned+s.Retried+s.AckFailed != 0 || s.StopReason != "drained" {
			t.Errorf("stats %+v; want 6 received, 5 continued, 1 succeeded, nothing poisoned or retried, drained", s)
		}
		got := seen.all()
		if len(got) != 6 {
			t.Fatalf("%d deliveries, want 6: %+v", len(got), got)
		}
		for i, d := range got {
			if d.continued != i || d.dequeueCount != 1 || d.id != "op-long" {
				t.Errorf("delivery %d: %+v; want op-long, continued %d, dequeue count 1", i, d, i)
			}
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Errorf("%d messages left; want 0", n)
		}
		if len(b.poison.attempts) != 0 || len(b.poison.moved) != 0 {
			t.Errorf("attempts %v, poisoned %v; a continuation is no failure", b.poison.attempts, b.poison.moved)
		}
		lines := logs.lines("job continues")
		if len(lines) != 5 {
			t.Fatalf("%d \"job continues\" lines, want 5", len(lines))
		}
		for i, l := range lines {
			if l["continued"] != float64(i+1) || l["progress"] != fmt.Sprintf("step %d of 6 done", i+1) || l["after"] != 0.0 ||
				l["op_id"] != "op-long" || l["duration"] == nil || l["new_msg_id"] == "" {
				t.Errorf("line %d: %v; want continued %d, after 0, its progress, op_id, duration and new_msg_id", i, l, i+1)
			}
		}
	})
}

// TestContinueDelay: a continuation asked for after 10 minutes is not
// visible before; a delay longer than the time to live allows is capped.
func TestContinueDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen deliveries
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			d := seen.add(job)
			switch {
			case job.ID == "op-far" && d.continued == 0:
				return jobs.ContinueLater(30*24*time.Hour, "far")
			case d.continued == 0:
				return jobs.ContinueLater(10*time.Minute, "near")
			}
			return nil
		})
		b.cfg.MaxMessages = 3
		b.send(t, "op-near")
		b.send(t, "op-far")
		start := b.clock.Now()
		r, errc := b.run(t)
		b.advanceUntil(t, 10*time.Second, time.Hour, func() bool { return r.Stats().Succeeded == 1 })
		if took := b.clock.Now().Sub(start); took < 10*time.Minute || took > 11*time.Minute {
			t.Errorf("the continuation ran %v after the first delivery; want 10 min", took)
		}
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		msgs, err := b.queue.Peek(context.Background(), 1)
		if err != nil || len(msgs) != 0 {
			t.Fatalf("peek = %v, %v; the far continuation must be invisible", msgs, err)
		}
		b.clock.Advance(6*24*time.Hour + time.Second) // the cap: 7 days of TTL less a day
		msgs, err = b.queue.Peek(context.Background(), 1)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("peek after 6 days = %v, %v; want the far continuation, its delay capped", msgs, err)
		}
		if env, err := jobs.DecodeEnvelope(msgs[0].Text); err != nil || env.ID != "op-far" || env.Continued != 1 {
			t.Errorf("the continuation is %+v, %v; want op-far continued 1", env, err)
		}
		if !msgs[0].Expires.After(b.clock.Now()) {
			t.Errorf("the continuation expires %v, before now %v", msgs[0].Expires, b.clock.Now())
		}
	})
}

// bigArgs are the args of the "big" kind: a string to fill the message.
type bigArgs struct {
	Pad string `json:"pad"`
}

func (bigArgs) Kind() string    { return "big" }
func (bigArgs) Validate() error { return nil }

// TestContinueKeepsForm: a continuation goes in the form its message came
// in (base64 or plain JSON), with the envelope unchanged but for its
// marker; a base64 message at the limit continues as plain JSON, and a
// plain one at the limit, which cannot grow, takes the retry path.
func TestContinueKeepsForm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen deliveries
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			if seen.add(job).continued == 0 {
				return jobs.ContinueLater(0, "half")
			}
			return nil
		})
		type bigSeen struct {
			id        string
			continued int
			dequeue   int64
			plain     bool
		}
		var mu sync.Mutex
		var big []bigSeen
		if err := jobs.Register(b.cfg.Registry, jobs.WorkFunc[bigArgs](func(ctx context.Context, job *jobs.Job[bigArgs]) error {
			mu.Lock()
			big = append(big, bigSeen{job.ID, job.Continued, job.Message.DequeueCount, strings.HasPrefix(job.Message.Text, "{")})
			mu.Unlock()
			if job.Continued == 0 && job.Message.DequeueCount == 1 {
				return jobs.ContinueLater(0, "half")
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		b.send(t, "op-base64")
		tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		plain := `{"v":1,"id":"op-plain","kind":"test","args":{},"traceparent":"` + tp + `"}`
		// A base64 message whose JSON is 49,150 bytes (65,536 as base64):
		// with "continued":1 its base64 passes the limit.
		bigEnv := func(id string, size int) jobs.Envelope {
			env := jobs.Envelope{V: 1, ID: id, Kind: "big", Args: json.RawMessage(`{"pad":""}`)}
			base, _ := json.Marshal(env)
			env.Args = json.RawMessage(`{"pad":"` + strings.Repeat("x", size-len(base)) + `"}`)
			return env
		}
		atLimit, err := jobs.Encode(bigEnv("op-big64", 49150))
		if err != nil || len(atLimit) != storeadapter.MaxMessageBytes {
			t.Fatalf("encoded %d bytes, %v; want exactly the limit", len(atLimit), err)
		}
		// A plain message of 65,530 bytes: it cannot grow by 14.
		full, _ := json.Marshal(bigEnv("op-full", 65530))
		for _, text := range []string{plain, atLimit, string(full)} {
			if _, err := b.queue.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		logs := b.logTo()
		s := b.drain(t, time.Second)
		if s.Continued != 3 || s.Succeeded != 4 || s.Retried != 1 || s.Poisoned != 0 {
			t.Errorf("stats %+v; want 3 continued, 4 succeeded, op-full retried once", s)
		}
		for _, d := range seen.all() {
			if d.continued != 1 {
				continue
			}
			env, err := jobs.DecodeEnvelope(d.text)
			if err != nil || env.Continued != 1 {
				t.Errorf("%s: continuation %q decodes to %+v, %v", d.id, d.text, env, err)
			}
			switch d.id {
			case "op-base64":
				if strings.HasPrefix(d.text, "{") {
					t.Errorf("op-base64 continued as %q; want base64", d.text)
				}
			case "op-plain":
				if d.text != `{"v":1,"id":"op-plain","kind":"test","args":{},"traceparent":"`+tp+`","continued":1}` {
					t.Errorf("op-plain continued as %q; want the same plain JSON with continued 1", d.text)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string][]bigSeen{
			"op-big64": {{"op-big64", 0, 1, false}, {"op-big64", 1, 1, true}},
			"op-full":  {{"op-full", 0, 1, true}, {"op-full", 0, 2, true}},
		}
		got := map[string][]bigSeen{}
		for _, x := range big {
			got[x.id] = append(got[x.id], x)
		}
		for id, w := range want {
			if fmt.Sprint(got[id]) != fmt.Sprint(w) {
				t.Errorf("%s deliveries %+v; want %+v", id, got[id], w)
			}
		}
		if l := logs.lines("could not re-send"); len(l) != 1 || l[0]["op_id"] != "op-full" || !strings.Contains(fmt.Sprint(l[0]["err"]), "over the 65536-byte message limit") {
			t.Errorf("re-send failure lines %v; want one for op-full naming the limit", l)
		}
		if len(b.poison.attempts) != 1 || b.poison.attempts[0].OpID != "op-full" {
			t.Errorf("attempts %+v; want op-full's failed continuation recorded", b.poison.attempts)
		}
	})
}

// sendFailQueue fails Send, and the deletes of chosen messages, with a
// transient error while told to.
type sendFailQueue struct {
	storeadapter.Queue
	mu         sync.Mutex
	sendFails  int            // this many sends fail
	deleteFail map[string]int // message id -> deletes that fail
	sends      []string       // texts sent
}

func (q *sendFailQueue) Send(ctx context.Context, text string, o storeadapter.SendOptions) (storeadapter.Sent, error) {
	q.mu.Lock()
	if q.sendFails > 0 {
		q.sendFails--
		q.mu.Unlock()
		return storeadapter.Sent{}, errInjected
	}
	q.sends = append(q.sends, text)
	q.mu.Unlock()
	return q.Queue.Send(ctx, text, o)
}

func (q *sendFailQueue) DeleteMessage(ctx context.Context, id, receipt string) error {
	q.mu.Lock()
	if q.deleteFail[id] > 0 {
		q.deleteFail[id]--
		q.mu.Unlock()
		return errInjected
	}
	q.mu.Unlock()
	return q.Queue.DeleteMessage(ctx, id, receipt)
}

// TestContinueSendFailureRetries: when the continuation cannot be sent
// (every try of the acknowledgement fails) nothing is sent and the
// delivered message takes the transient-failure path: an attempt
// recorded, a retry after the backoff, which resumes.
func TestContinueSendFailureRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen deliveries
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			if d := seen.add(job); d.dequeueCount == 1 {
				return jobs.ContinueLater(0, "half")
			}
			return nil
		})
		q := &sendFailQueue{Queue: b.queue, sendFails: 4} // ackAttempts
		b.cfg.Queue = q
		logs := b.logTo()
		b.send(t, "op-1")
		s := b.drain(t, time.Second)
		if s.Continued != 0 || s.Retried != 1 || s.Succeeded != 1 {
			t.Errorf("stats %+v; want retried once, then succeeded, nothing continued", s)
		}
		if got := seen.all(); len(got) != 2 || got[1].continued != 0 || got[1].dequeueCount != 2 {
			t.Errorf("deliveries %+v; want the same message again, continued 0, dequeue count 2", got)
		}
		if len(b.poison.attempts) != 1 || !strings.Contains(b.poison.attempts[0].Attempt.Error, "continue: re-send the message") {
			t.Errorf("attempts %+v; want one saying the re-send failed", b.poison.attempts)
		}
		if l := logs.lines("job failed; will retry"); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["err"]), "re-send") {
			t.Errorf("retry lines %v; want one naming the failed re-send", l)
		}
		if len(logs.lines("could not re-send")) != 1 {
			t.Errorf("want one line saying why the continuation was not sent")
		}
	})
}

// TestContinueDeleteFailureDuplicates: the continuation is sent but the
// delivered message cannot be deleted. The operation then has two
// messages; both resume from the same checkpoint, and both end as
// successes once it is done. Nothing is poisoned and the queue ends empty.
func TestContinueDeleteFailureDuplicates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		steps := 0 // the operation's checkpoint: 3 steps make it done
		var seen deliveries
		q := &sendFailQueue{deleteFail: map[string]int{}}
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			d := seen.add(job)
			if d.continued == 0 && d.dequeueCount == 1 {
				q.mu.Lock()
				q.deleteFail[job.Message.ID] = 4 // every try of this delivery's delete
				q.mu.Unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			if steps == 3 {
				return nil // done already
			}
			if steps++; steps == 3 {
				return nil
			}
			return jobs.ContinueLater(0, fmt.Sprintf("%d steps", steps))
		})
		q.Queue = b.queue
		b.cfg.Queue = q
		logs := b.logTo()
		b.send(t, "op-1")
		s := b.drain(t, time.Second)
		if s.Received != 4 || s.Continued != 1 || s.AckFailed != 1 || s.Succeeded != 2 || s.Poisoned+s.Retried != 0 {
			t.Errorf("stats %+v; want 4 received: 1 continued, 1 ack failed (its continuation sent), 2 succeeded", s)
		}
		if steps != 3 {
			t.Errorf("%d steps done, want 3", steps)
		}
		got := seen.all()
		last := got[len(got)-1]
		if last.continued != 0 || last.dequeueCount != 2 {
			t.Errorf("deliveries %+v; want the undeleted original delivered again last, after its lease", got)
		}
		if n, _ := b.queue.ApproximateCount(context.Background()); n != 0 {
			t.Errorf("%d messages left; want 0", n)
		}
		if l := logs.lines("job continues in a new message, but"); len(l) != 1 || l[0]["continued"] != 1.0 {
			t.Errorf("lines %v; want one saying the delivered message was not deleted", l)
		}
	})
}

// TestShutdownContinues: a job cancelled by the end of the shutdown grace
// period that saves its progress and continues is re-sent, not released:
// the queue holds its continuation and nothing else.
func TestShutdownContinues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{}, 1)
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- struct{}{}
			<-ctx.Done()
			return jobs.ContinueLater(0, "saved at shutdown")
		})
		b.send(t, "op-1")
		r, stop := b.start(t)
		<-started
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		if err := b.drive(t, errc, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		s := r.Stats()
		checkAddsUp(t, s)
		if s.Continued != 1 || s.Released != 0 || s.StopReason != "shutdown" {
			t.Errorf("stats %+v; want the job continued, not released", s)
		}
		msgs, err := b.queue.Receive(context.Background(), 32, time.Second)
		if err != nil || len(msgs) != 1 || msgs[0].DequeueCount != 1 {
			t.Fatalf("receive after the shutdown = %+v, %v; want the one continuation, first delivery", msgs, err)
		}
		if env, err := jobs.DecodeEnvelope(msgs[0].Text); err != nil || env.Continued != 1 {
			t.Errorf("the message left is %+v, %v; want continued 1", env, err)
		}
	})
}

// TestContinueAfterLeaseLost: a job whose lease was lost while it ran is
// lease lost even if it asks to continue: the message reappears (or
// another worker has it) and nothing is sent.
func TestContinueAfterLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan *jobs.Job[testArgs], 1)
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			started <- job
			<-ctx.Done()
			return jobs.ContinueLater(0, "saved")
		})
		q := &sendFailQueue{Queue: b.queue}
		b.cfg.Queue, b.cfg.MaxMessages = q, 1
		b.send(t, "op-1")
		r, errc := b.run(t)
		job := <-started
		if err := b.queue.DeleteMessage(context.Background(), job.Message.ID, job.Message.PopReceipt); err != nil {
			t.Fatal(err)
		}
		if err := b.drive(t, errc, time.Second); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.LeaseLost != 1 || s.Continued != 0 || len(q.sends) != 0 {
			t.Errorf("stats %+v, %d sends; want lease lost and nothing sent", s, len(q.sends))
		}
	})
}

// TestContinueNegativeAfter: a ContinueError built by hand with a negative
// After continues at once (as ContinueLater's clamp would), instead of
// having its send refused and its saved progress retried or poisoned.
func TestContinueNegativeAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls == 1 {
				return &jobs.ContinueError{After: -time.Second, Progress: "half"}
			}
			return nil
		})
		b.cfg.MaxDequeueCount = 1
		b.send(t, "op-neg")
		s := b.drain(t, time.Second)
		if s.Continued != 1 || s.Succeeded != 1 || s.Poisoned != 0 {
			t.Errorf("stats %+v, poison reasons %q; want continued once, then succeeded", s, b.poison.reasons())
		}
	})
}

// TestDrainWaitsForDelayedContinuation: a continuation delayed less than
// DrainQuiet (60 s here) runs in the same drain.
func TestDrainWaitsForDelayedContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		b := setup(t, func(ctx context.Context, job *jobs.Job[testArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls == 1 {
				return jobs.ContinueLater(59*time.Second, "half")
			}
			return nil
		})
		b.send(t, "op-d")
		s := b.drain(t, time.Second)
		if s.Continued != 1 || s.Succeeded != 1 || s.StopReason != "drained" {
			t.Errorf("stats %+v; want the delayed continuation run by the same drain", s)
		}
	})
}
