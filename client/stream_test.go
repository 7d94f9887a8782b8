package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestCheck: Check refuses what Enqueue refuses, with the same
// *InvalidError, without a client; a job it passes, Enqueue sends.
func TestCheck(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		args jobs.Args
		opts []client.Option
		want string // "" for a valid job
	}{
		{index.Reconcile("Employees", "Sales", "000123"), nil, ""},
		{index.Reconcile("Employees", "Sales", "000123"), []client.Option{client.ID("op-1")}, ""},
		{archive.Args{Table: "Employees", PK: ptr("Sales"), RK: ptr("1")}, nil, "client: args.to: is required"},
		{archive.Args{Table: "Employees", PK: ptr("Sales"), RK: ptr("1")}, []client.Option{client.ID("op-1")}, "client: op op-1: args.to: is required"},
		{index.Rebuild("Employees"), []client.Option{client.ID("no spaces")}, "client: ID: must be 1-128 characters"},
		{index.Rebuild("Employees"), []client.Option{client.Delay(-time.Second)}, "client: Delay: must be 0-"},
		{nil, nil, "client: args: is required"},
	} {
		err := client.Check(ctx, c.args, c.opts...)
		var ie *client.InvalidError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Check(%+v) = %v, want nil", c.args, err)
		case c.want != "" && (!errors.As(err, &ie) || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("Check(%+v) = %v, want an *InvalidError beginning %q", c.args, err, c.want)
		}
	}
	// The worker's own wording, as Enqueue gives it.
	b := newBundle(t, client.Config{})
	_, err := b.c.Enqueue(ctx, archive.Args{Table: "Employees", PK: ptr("Sales"), RK: ptr("1")}, client.ID("op-1"))
	var ie *client.InvalidError
	if !errors.As(err, &ie) || ie.OpID != "op-1" || ie.Err.Error() != "args.to: is required (or args.toBlob)" || !jobs.IsPermanent(err) {
		t.Errorf("Enqueue of invalid args = %#v (%v), want an *InvalidError of op-1 holding the worker's error", err, err)
	}
}

// TestPrepareEnvelope: an envelope made elsewhere is sent exactly as it
// is, once the worker's checks pass (an argsRef's blob read); nothing is
// sent for one they refuse, nor for one too large for a message.
func TestPrepareEnvelope(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{})
	env, err := jobs.DecodeEnvelope(`{"v":1,"id":"op-raw-1","kind":"index","args":{"table":"Employees","pk":"Sales","rk":"1"},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.c.PrepareEnvelope(ctx, env, client.Delay(time.Minute))
	if err != nil || m.OpID != "op-raw-1" {
		t.Fatalf("PrepareEnvelope = %+v, %v", m, err)
	}
	res, err := b.c.Send(ctx, m)
	if err != nil || res.OpID != "op-raw-1" || res.MessageID == "" {
		t.Fatalf("Send = %+v, %v", res, err)
	}
	if envs := b.messages(t, "tablekeeper"); len(envs) != 0 {
		t.Error("Delay did not hide the message")
	}
	b.clock.Advance(time.Minute)
	ms, err := b.raw.Queue("tablekeeper").Peek(ctx, 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("queue: %v, %v", ms, err)
	}
	got, err := base64.StdEncoding.DecodeString(ms[0].Text)
	if want := `{"v":1,"id":"op-raw-1","kind":"index","args":{"table":"Employees","pk":"Sales","rk":"1"},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`; err != nil || string(got) != want {
		t.Errorf("sent %s (%v), want %s", got, err, want)
	}

	// An argsRef is checked as the worker checks it: its blob is read.
	if err := b.raw.Container("args").Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.raw.Container("args").Put(ctx, "op-ref/a.json", []byte(`{"table":"Employees","rebuild":true}`), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := jobs.Envelope{V: 1, ID: "op-ref", Kind: index.Kind, ArgsRef: "args/op-ref/a.json"}
	if m, err := b.c.PrepareEnvelope(ctx, ref); err != nil || m.ArgsRef != ref.ArgsRef {
		t.Errorf("PrepareEnvelope of an argsRef = %+v, %v", m, err)
	}

	sends := b.counts.Snapshot()[instrument.OpSend].Calls
	for _, c := range []struct {
		env  jobs.Envelope
		opts []client.Option
		want string
	}{
		{jobs.Envelope{V: 1, ID: "op-x", Kind: "nope", Args: []byte(`{}`)}, nil, `client: op op-x: envelope: kind: "nope" is not one of`},
		{jobs.Envelope{V: 1, ID: "op-x", Kind: index.Kind, Args: []byte(`{"table":"E"}`)}, nil, "client: op op-x: args.table:"},
		{jobs.Envelope{V: 2, ID: "op-x", Kind: index.Kind, Args: []byte(`{"table":"Employees"}`)}, nil, "client: op op-x: envelope: v: must be 1"},
		{jobs.Envelope{V: 1, ID: "op-x", Kind: index.Kind, ArgsRef: "args/missing.json"}, nil, "client: op op-x: envelope: argsRef: blob args/missing.json does not exist"},
		{env, []client.Option{client.ID("op-other")}, "client: ID, IDs and TraceParent: an envelope carries its own"},
		{jobs.Envelope{V: 1, ID: "op-big", Kind: index.Kind, Args: []byte(`{"table":"Employees","rk":"` + strings.Repeat("x", 60<<10) + `"}`)}, nil, "client: op op-big: "},
	} {
		_, err := b.c.PrepareEnvelope(ctx, c.env, c.opts...)
		var ie *client.InvalidError
		if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("PrepareEnvelope(%s) = %v, want an *InvalidError beginning %q", c.env.ID, err, c.want)
		}
	}
	if n := b.counts.Snapshot()[instrument.OpSend].Calls; n != sends {
		t.Errorf("refused envelopes made %d sends", n-sends)
	}
	if _, err := b.c.Send(ctx, client.Message{OpID: "op-zero"}); err == nil {
		t.Error("Send of a zero Message succeeded")
	}
}

// TestStream: a refused message fails alone; another failure stops the
// stream, reported once, as what Close returns; the jobs after it are
// not sent (ErrStopped), and Send refuses more.
func TestStream(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Concurrency: 4})
	if err := b.raw.Queue("tablekeeper").Create(ctx); err != nil {
		t.Fatal(err)
	}
	// Sends 3 and 5 are refused, the 20th fails; those after it wait for
	// the stream to stop.
	b.fault = sendFaults(20, 3, 5)
	var mu sync.Mutex
	var sent, refused, stopper, stopped int
	s := b.c.Stream(ctx)
	accepted := 0
	for i := range 100 {
		m, err := b.c.Prepare(ctx, index.Reconcile("Employees", "Sales", "000123"))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(m, func(res client.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.MessageID != "":
				sent++
			case client.Refused(err):
				refused++
			case errors.Is(err, client.ErrStopped):
				stopped++
			case errors.Is(err, storeadapter.ErrForbidden) && strings.Contains(err.Error(), "send to queue tablekeeper"):
				stopper++
			default:
				t.Errorf("job %d: result %+v, error %v", i, res, err)
			}
		})
		if err != nil {
			if !errors.Is(err, client.ErrStopped) || !errors.Is(err, storeadapter.ErrForbidden) {
				t.Errorf("Send after the stop = %v, want ErrStopped wrapping the stream's error", err)
			}
			break
		}
		accepted++
	}
	err := s.Close()
	if !errors.Is(err, storeadapter.ErrForbidden) {
		t.Errorf("Close = %v, want the failure that stopped the stream", err)
	}
	// 17 sends passed the hook before the failing one; the stop may have
	// cut short those of the 3 other senders.
	if refused != 2 || stopper != 1 || sent > 17 || sent < 17-3 || sent+refused+stopper+stopped != accepted || accepted > 20+8 {
		t.Errorf("%d accepted: %d sent, %d refused, %d stopped the stream, %d not sent", accepted, sent, refused, stopper, stopped)
	}
	if err := s.Send(client.Message{}, nil); err == nil {
		t.Error("Send after Close succeeded")
	}

	// The end of the context stops a stream too; Close says why.
	cctx, cancel := context.WithCancel(ctx)
	s = b.c.Stream(cctx)
	cancel()
	m, _ := b.c.Prepare(ctx, index.Rebuild("Employees"))
	if err := s.Send(m, func(client.Result, error) {}); !errors.Is(err, client.ErrStopped) {
		t.Errorf("Send on a cancelled context = %v", err)
	}
	if err := s.Close(); !errors.Is(err, context.Canceled) {
		t.Errorf("Close after the cancel = %v", err)
	}
}

// TestStreamBounded: Send waits while every sender is busy, so a
// producer never holds more than about twice Config.Concurrency jobs.
func TestStreamBounded(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Concurrency: 2})
	release := make(chan struct{})
	var inFlight, peak atomic.Int64
	b.fault = func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpSend {
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			inFlight.Add(-1)
		}
		return nil
	}
	s := b.c.Stream(ctx)
	handed := make(chan int, 10)
	go func() {
		for i := range 10 {
			m, _ := b.c.Prepare(ctx, index.Rebuild("Employees"))
			if err := s.Send(m, func(client.Result, error) {}); err != nil {
				t.Error(err)
			}
			handed <- i
		}
		close(handed)
	}()
	time.Sleep(100 * time.Millisecond)
	if n := len(handed); n > 4 {
		t.Errorf("%d jobs handed over while 2 senders were blocked, want at most 4 (2 sending, 2 waiting)", n)
	}
	close(release)
	for range handed {
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("%d sends at once, want at most 2", p)
	}
}
