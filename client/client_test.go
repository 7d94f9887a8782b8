package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// bundle is a test's store (instrumented over localstore on a fake clock)
// and client.
type bundle struct {
	clock  *clock.Fake
	raw    *localstore.Store
	store  *instrument.Store
	counts *instrument.Counts
	c      *client.Client
	// fault, when set, fails the calls it returns an error for; ctx is
	// the call's.
	fault func(ctx context.Context, c instrument.Call) error
}

func newBundle(t *testing.T, cfg client.Config) *bundle {
	t.Helper()
	b := &bundle{clock: clock.NewFake(t0), counts: &instrument.Counts{}}
	b.raw = localstore.New(localstore.Options{Clock: b.clock})
	b.store = instrument.Wrap(b.raw, instrument.Options{Observers: []instrument.Observer{b.counts}, Fault: func(ctx context.Context, c instrument.Call) error {
		if b.fault != nil {
			return b.fault(ctx, c)
		}
		return nil
	}})
	cfg.Store, cfg.Clock = b.store, b.clock
	var err error
	if b.c, err = client.New(cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

// messages returns the envelopes of the visible messages of the queue, in
// order, without receiving them.
func (b *bundle) messages(t *testing.T, queue string) []jobs.Envelope {
	t.Helper()
	ms, err := b.raw.Queue(queue).Peek(t.Context(), 32)
	if errors.Is(err, storeadapter.ErrQueueNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []jobs.Envelope
	for _, m := range ms {
		task, err := catalog.ArgsRegistry(b.raw.Container).Decode(t.Context(), m)
		if err != nil {
			t.Fatalf("a message the worker cannot decode: %v", err)
		}
		out = append(out, task.Envelope)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// sendFaults returns a fault hook for sends, by their number: those in
// refused fail as a message the service refuses (ErrTooLarge), the
// stopAt-th as a forbidden queue, and every later one waits until its
// context ends (the run stops), so that however the goroutines are
// scheduled no send after the failing one lands.
func sendFaults(stopAt int64, refused ...int64) func(context.Context, instrument.Call) error {
	var sends atomic.Int64
	return func(ctx context.Context, c instrument.Call) error {
		if c.Op != instrument.OpSend {
			return nil
		}
		switch n := sends.Add(1); {
		case slices.Contains(refused, n):
			return storeadapter.ErrTooLarge
		case n == stopAt:
			return storeadapter.ErrForbidden
		case n > stopAt:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// TestEnqueue: the job arrives as the worker reads it, base64 by default
// (plain JSON on request), under a generated or the given operation id;
// the queue is created on the first not-found; Delay and TTL reach the
// message; invalid arguments and options are refused, naming the field,
// and nothing is sent.
func TestEnqueue(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{})
	res, err := b.c.Enqueue(ctx, archive.Args{Table: "Employees", To: "EmployeesArchive", PK: ptr("Sales"), RK: ptr("000123")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.OpID, "op-20261126T100000Z-") || res.MessageID == "" || res.ArgsRef != "" {
		t.Errorf("result %+v: want a generated op id of the clock's time and a message id", res)
	}
	ms, err := b.raw.Queue("tablekeeper").Peek(ctx, 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("queue holds %d messages (%v), want 1", len(ms), err)
	}
	if _, err := base64.StdEncoding.DecodeString(ms[0].Text); err != nil {
		t.Errorf("message text is not base64: %q", ms[0].Text)
	}
	envs := b.messages(t, "tablekeeper")
	if envs[0].ID != res.OpID || envs[0].Kind != archive.Kind || !strings.Contains(string(envs[0].Args), `"rk":"000123"`) {
		t.Errorf("envelope %+v does not carry the job", envs[0])
	}

	plain := newBundle(t, client.Config{Queue: "work", PlainJSON: true})
	res, err = plain.c.Enqueue(ctx, index.Reconcile("Employees", "Sales", "000123"), client.ID("op-given"), client.Delay(time.Minute), client.TTL(time.Hour))
	if err != nil || res.OpID != "op-given" {
		t.Fatalf("Enqueue with ID = %+v, %v", res, err)
	}
	if n := plain.counts.Snapshot()[instrument.OpCreateQueue].Calls; n != 1 {
		t.Errorf("%d CreateQueue calls, want 1 (on the first not-found)", n)
	}
	if envs := plain.messages(t, "work"); len(envs) != 0 {
		t.Errorf("a delayed message is visible at once")
	}
	plain.clock.Advance(time.Minute)
	ms, err = plain.raw.Queue("work").Peek(ctx, 32)
	if err != nil || len(ms) != 1 || !strings.HasPrefix(ms[0].Text, `{"v":1,"id":"op-given","kind":"index"`) {
		t.Fatalf("after the delay: %v, %v; want one plain-JSON message", ms, err)
	}
	if got := ms[0].Expires.Sub(ms[0].Inserted); got != time.Hour {
		t.Errorf("message lives %v, want the TTL of 1h", got)
	}

	sends := b.counts.Snapshot()[instrument.OpSend].Calls
	for _, c := range []struct {
		args jobs.Args
		opts []client.Option
		want string
	}{
		{archive.Args{Table: "Employees", PK: ptr("Sales"), RK: ptr("1")}, nil, "args.to: is required"},
		{index.Args{Table: "E"}, nil, "args.table:"},
		{index.Reconcile("Employees", "Sales", "~tk.x"), nil, "args.rk: must not start with"},
		{index.Rebuild("Employees"), []client.Option{client.ID("no spaces")}, "client: ID: must be 1-128 characters"},
		{index.Rebuild("Employees"), []client.Option{client.Delay(-time.Second)}, "client: Delay: must be 0-"},
		{index.Rebuild("Employees"), []client.Option{client.Delay(time.Hour), client.TTL(time.Minute)}, "client: TTL: must be at least 1s and longer than Delay"},
		{index.Rebuild("Employees"), []client.Option{client.TraceParent("nope")}, "traceparent: must be a W3C traceparent"},
		{nil, nil, "client: args: is required"},
	} {
		if _, err := b.c.Enqueue(ctx, c.args, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Enqueue(%+v) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if n := b.counts.Snapshot()[instrument.OpSend].Calls; n != sends {
		t.Errorf("invalid jobs made %d sends", n-sends)
	}
	for _, c := range []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{}, "client: Config.Store is required"},
		{client.Config{Store: b.raw, Queue: "Bad_Queue"}, "client: Config.Queue:"},
		{client.Config{Store: b.raw, ArgsContainer: "Bad_Container"}, "client: Config.ArgsContainer:"},
		{client.Config{Store: b.raw, Concurrency: 2000}, "client: Config.Concurrency: must be 1-1024"},
		{client.Config{Store: b.raw, Window: time.Second}, "client: Config.Window: must be 2s-1h0m0s"},
	} {
		if _, err := client.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
	// Every queue name the service takes gets a valid default
	// ArgsContainer (New checks it): the enqueue command builds its
	// client from -queue.
	for _, q := range []string{strings.Repeat("q", 63), strings.Repeat("q", 57) + "-" + strings.Repeat("q", 5)} {
		if _, err := client.New(client.Config{Store: b.raw, Queue: q}); err != nil {
			t.Errorf("New with queue %s: %v", q, err)
		}
	}
}

// TestEnqueueMany: every job is checked before any is sent; jobs go out
// with bounded concurrency, each with its own (or the given) id; a failed
// send stops the run, and the error names the jobs not sent while the
// results hold every id, so resending those under the same ids completes
// the batch with no job sent twice.
func TestEnqueueMany(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Concurrency: 4})
	var args []jobs.Args
	for i := range 40 {
		args = append(args, index.Reconcile("Employees", "Sales", strings.Repeat("0", 3)+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	bad := append(append([]jobs.Args{}, args[:5]...), index.Args{Table: "Employees"})
	if _, err := b.c.EnqueueMany(ctx, bad); err == nil || !strings.Contains(err.Error(), "client: job 5:") {
		t.Fatalf("EnqueueMany with an invalid job = %v, want job 5 named", err)
	}
	if n := b.counts.Snapshot()[instrument.OpSend].Calls; n != 0 {
		t.Fatalf("an invalid batch sent %d messages", n)
	}
	if _, err := b.c.EnqueueMany(ctx, args[:2], client.ID("x")); err == nil || !strings.Contains(err.Error(), "IDs") {
		t.Errorf("EnqueueMany with ID = %v, want it refused", err)
	}
	if _, err := b.c.EnqueueMany(ctx, args[:2], client.IDs("a")); err == nil || !strings.Contains(err.Error(), "1 ids for 2 jobs") {
		t.Errorf("EnqueueMany with too few IDs = %v", err)
	}

	// The 15th send fails: the run stops. The sends that start after it
	// wait for the run to stop (their context's end), so that however
	// the goroutines are scheduled, none of them lands.
	if err := b.raw.Queue("tablekeeper").Create(ctx); err != nil {
		t.Fatal(err)
	}
	b.fault = sendFaults(15)
	res, err := b.c.EnqueueMany(ctx, args)
	var me *client.ManyError
	if !errors.As(err, &me) || !errors.Is(err, storeadapter.ErrForbidden) || len(res) != len(args) {
		t.Fatalf("EnqueueMany with a failing send = %d results, %v; want a ManyError wrapping the failure", len(res), err)
	}
	ids := map[string]bool{}
	var unsentArgs []jobs.Args
	var unsentIDs []string
	for i, r := range res {
		if ids[r.OpID] || r.OpID == "" {
			t.Fatalf("result %d has op id %q, empty or repeated", i, r.OpID)
		}
		ids[r.OpID] = true
		_, failed := me.Errs[i]
		if failed == (r.MessageID != "") {
			t.Errorf("job %d: message id %q but failed=%v", i, r.MessageID, failed)
		}
		if failed {
			unsentArgs, unsentIDs = append(unsentArgs, args[i]), append(unsentIDs, r.OpID)
		}
	}
	// The 14 sends before the failing one passed the hook; those of the 3
	// other senders may have been cut short by the stop.
	if len(me.Unsent()) != len(unsentIDs) || len(unsentIDs) < 40-14 || len(unsentIDs) > 40-14+3 {
		t.Errorf("%d jobs not sent after the 15th send failed with concurrency 4: %v", len(unsentIDs), me.Errs)
	}
	b.fault = nil
	if _, err := b.c.EnqueueMany(ctx, unsentArgs, client.IDs(unsentIDs...)); err != nil {
		t.Fatal(err)
	}
	q := b.raw.Queue("tablekeeper")
	got := map[string]int{}
	for {
		ms, err := q.Receive(ctx, 32, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			env, err := jobs.DecodeEnvelope(m.Text)
			if err != nil {
				t.Fatal(err)
			}
			got[env.ID]++
		}
	}
	if len(got) != 40 {
		t.Errorf("the queue holds %d operations, want 40", len(got))
	}
	for id, n := range got {
		if n != 1 || !ids[id] {
			t.Errorf("op %s: %d messages", id, n)
		}
	}
}
