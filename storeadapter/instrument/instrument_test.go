package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/storeadapter/storetest"
)

// TestContract runs the shared contract suite through the wrapper over
// localstore, with every hook set but passing: the wrapper must change
// nothing a caller can see.
func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		clock := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 123456789, time.UTC))
		return storetest.Harness{
			Store: instrument.Wrap(localstore.New(localstore.Options{Clock: clock}), instrument.Options{
				Observers: []instrument.Observer{&instrument.Counts{}},
				Latency:   instrument.Fixed(0),
				Fault:     func(context.Context, instrument.Call) error { return nil },
			}),
			Advance: clock.Advance,
			Now:     clock.Now,
		}
	})
}

// nowhere is a store whose services are nil: calling any of their methods
// panics, so a test proves the wrapper did not call through.
type nowhere struct{}

func (nowhere) Tables() storeadapter.Tables         { return nil }
func (nowhere) Queue(string) storeadapter.Queue     { return nil }
func (nowhere) Container(string) storeadapter.Blobs { return nil }

// methodCase calls one interface method with the keys named in want.
type methodCase struct {
	method string // Interface.Method
	want   instrument.Call
	call   func(ctx context.Context, s storeadapter.Store) error
}

func methodCases() []methodCase {
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r"}
	tx := []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: e}}
	ent := instrument.Call{Name: "T1", PartitionKey: "p", RowKey: "r"}
	with := func(c instrument.Call, op instrument.Op) instrument.Call { c.Op = op; return c }
	q := instrument.Call{Name: "q1"}
	msg := instrument.Call{Name: "q1", MessageID: "m"}
	c := instrument.Call{Name: "c1"}
	blob := instrument.Call{Name: "c1", Blob: "b"}
	return []methodCase{
		{"Tables.CreateTable", instrument.Call{Op: instrument.OpCreateTable, Name: "T1"}, func(ctx context.Context, s storeadapter.Store) error { return s.Tables().CreateTable(ctx, "T1") }},
		{"Tables.DeleteTable", instrument.Call{Op: instrument.OpDeleteTable, Name: "T1"}, func(ctx context.Context, s storeadapter.Store) error { return s.Tables().DeleteTable(ctx, "T1") }},
		{"Tables.ListTables", instrument.Call{Op: instrument.OpListTables}, func(ctx context.Context, s storeadapter.Store) error {
			_, _, err := s.Tables().ListTables(ctx, "T", "")
			return err
		}},
		{"Tables.GetEntity", with(ent, instrument.OpGetEntity), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Tables().GetEntity(ctx, "T1", "p", "r")
			return err
		}},
		{"Tables.InsertEntity", with(ent, instrument.OpInsertEntity), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Tables().InsertEntity(ctx, "T1", e)
			return err
		}},
		{"Tables.UpsertEntity", with(ent, instrument.OpUpsertEntity), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Tables().UpsertEntity(ctx, "T1", e, storeadapter.Merge)
			return err
		}},
		{"Tables.UpdateEntity", with(ent, instrument.OpUpdateEntity), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Tables().UpdateEntity(ctx, "T1", e, storeadapter.Merge, storeadapter.ETagAny)
			return err
		}},
		{"Tables.DeleteEntity", with(ent, instrument.OpDeleteEntity), func(ctx context.Context, s storeadapter.Store) error {
			return s.Tables().DeleteEntity(ctx, "T1", "p", "r", storeadapter.ETagAny)
		}},
		{"Tables.Query", instrument.Call{Op: instrument.OpQuery, Name: "T1"}, func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Tables().Query(ctx, "T1", storeadapter.Query{})
			return err
		}},
		{"Tables.Transact", instrument.Call{Op: instrument.OpTransact, Name: "T1", PartitionKey: "p"}, func(ctx context.Context, s storeadapter.Store) error {
			return s.Tables().Transact(ctx, "T1", tx)
		}},
		{"Queue.Create", with(q, instrument.OpCreateQueue), func(ctx context.Context, s storeadapter.Store) error { return s.Queue("q1").Create(ctx) }},
		{"Queue.Delete", with(q, instrument.OpDeleteQueue), func(ctx context.Context, s storeadapter.Store) error { return s.Queue("q1").Delete(ctx) }},
		{"Queue.Send", with(q, instrument.OpSend), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Queue("q1").Send(ctx, "x", storeadapter.SendOptions{})
			return err
		}},
		{"Queue.Receive", with(q, instrument.OpReceive), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Queue("q1").Receive(ctx, 1, time.Second)
			return err
		}},
		{"Queue.Update", with(msg, instrument.OpUpdate), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Queue("q1").Update(ctx, "m", "pop", "x", time.Second)
			return err
		}},
		{"Queue.DeleteMessage", with(msg, instrument.OpDeleteMessage), func(ctx context.Context, s storeadapter.Store) error {
			return s.Queue("q1").DeleteMessage(ctx, "m", "pop")
		}},
		{"Queue.Peek", with(q, instrument.OpPeek), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Queue("q1").Peek(ctx, 1)
			return err
		}},
		{"Queue.Clear", with(q, instrument.OpClear), func(ctx context.Context, s storeadapter.Store) error { return s.Queue("q1").Clear(ctx) }},
		{"Queue.ApproximateCount", with(q, instrument.OpApproximateCount), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Queue("q1").ApproximateCount(ctx)
			return err
		}},
		{"Blobs.Create", with(c, instrument.OpCreateContainer), func(ctx context.Context, s storeadapter.Store) error { return s.Container("c1").Create(ctx) }},
		{"Blobs.Put", with(blob, instrument.OpPut), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Container("c1").Put(ctx, "b", []byte("x"), storeadapter.PutOptions{})
			return err
		}},
		{"Blobs.Get", with(blob, instrument.OpGet), func(ctx context.Context, s storeadapter.Store) error {
			_, _, err := s.Container("c1").Get(ctx, "b")
			return err
		}},
		{"Blobs.Properties", with(blob, instrument.OpProperties), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Container("c1").Properties(ctx, "b")
			return err
		}},
		{"Blobs.Delete", with(blob, instrument.OpDeleteBlob), func(ctx context.Context, s storeadapter.Store) error {
			return s.Container("c1").Delete(ctx, "b", "")
		}},
		{"Blobs.List", with(c, instrument.OpList), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Container("c1").List(ctx, "", "")
			return err
		}},
		{"Blobs.StageBlock", with(blob, instrument.OpStageBlock), func(ctx context.Context, s storeadapter.Store) error {
			return s.Container("c1").StageBlock(ctx, "b", storetest.BlockID(0), []byte("x"))
		}},
		{"Blobs.CommitBlocks", with(blob, instrument.OpCommitBlocks), func(ctx context.Context, s storeadapter.Store) error {
			_, err := s.Container("c1").CommitBlocks(ctx, "b", []string{storetest.BlockID(0)}, storeadapter.PutOptions{})
			return err
		}},
		{"Blobs.Open", with(blob, instrument.OpOpen), func(ctx context.Context, s storeadapter.Store) error {
			_, _, err := s.Container("c1").Open(ctx, "b")
			return err
		}},
	}
}

// TestEveryMethodFaulted: every method of the three interfaces reaches the
// fault hook with its Op and keys, returns the injected error itself, does
// not call the wrapped store, and is observed once as a failure.
func TestEveryMethodFaulted(t *testing.T) {
	cases := methodCases()
	covered := make(map[string]bool)
	for _, c := range cases {
		covered[c.method] = true
	}
	for _, it := range []reflect.Type{reflect.TypeFor[storeadapter.Tables](), reflect.TypeFor[storeadapter.Queue](), reflect.TypeFor[storeadapter.Blobs]()} {
		for m := range it.Methods() {
			if name := it.Name() + "." + m.Name; m.Name != "Name" && !covered[name] {
				t.Errorf("no case for %s: give it an Op and a case here", name)
			}
		}
	}

	injected := fmt.Errorf("injected: %w", storeadapter.ErrUnavailable)
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			var seen []instrument.Call
			counts := &instrument.Counts{}
			s := instrument.Wrap(nowhere{}, instrument.Options{Observers: []instrument.Observer{counts}, Fault: func(_ context.Context, call instrument.Call) error {
				seen = append(seen, call)
				return injected
			}})
			if err := c.call(t.Context(), s); err != injected {
				t.Errorf("error = %v, want the injected error itself", err)
			}
			if len(seen) != 1 || seen[0] != c.want {
				t.Errorf("fault hook saw %+v, want [%+v]", seen, c.want)
			}
			if got, want := counts.Snapshot(), (instrument.Snapshot{c.want.Op: {Calls: 1, Errors: 1}}); !sameCounts(got, want) {
				t.Errorf("counts:\n%vwant:\n%v", got, want)
			}
		})
	}
}

// sameCounts compares calls and errors, not latency.
func sameCounts(a, b instrument.Snapshot) bool {
	if len(a) != len(b) {
		return false
	}
	for op, s := range a {
		if s.Calls != b[op].Calls || s.Errors != b[op].Errors || s.Expected != b[op].Expected {
			return false
		}
	}
	return true
}

// TestObservesResults: calls that reach the store are observed with the
// store's own result, its error contract untouched.
func TestObservesResults(t *testing.T) {
	ctx := t.Context()
	counts := &instrument.Counts{}
	var errs []error
	s := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{counts,
		instrument.ObserverFunc(func(_ instrument.Call, _ time.Duration, err error) { errs = append(errs, err) })}})
	tb := s.Tables()
	if err := tb.CreateTable(ctx, "Things"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.GetEntity(ctx, "Things", "p", "r"); !errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Errorf("GetEntity of a missing entity = %v, want plain ErrNotFound", err)
	}
	if _, err := tb.GetEntity(ctx, "Nope", "p", "r"); !errors.Is(err, storeadapter.ErrTableNotFound) {
		t.Errorf("GetEntity in a missing table = %v, want ErrTableNotFound", err)
	}
	if _, err := tb.InsertEntity(ctx, "Things", storeadapter.Entity{PartitionKey: "p", RowKey: "r"}); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], storeadapter.ErrNotFound) || !errors.Is(errs[2], storeadapter.ErrTableNotFound) || errs[3] != nil {
		t.Errorf("observed errors %v, want [nil, ErrNotFound, ErrTableNotFound, nil]", errs)
	}
	snap := counts.Snapshot()
	want := instrument.Snapshot{instrument.OpCreateTable: {Calls: 1}, instrument.OpGetEntity: {Calls: 2, Errors: 2, Expected: 2}, instrument.OpInsertEntity: {Calls: 1}}
	if !sameCounts(snap, want) {
		t.Errorf("counts:\n%vwant:\n%v", snap, want)
	}
	if tot := snap.Total(); tot.Calls != 4 || tot.Errors != 2 || tot.Expected != 2 {
		t.Errorf("total = %+v, want 4 calls, 2 errors, both expected answers", tot)
	}
	table := snap.String()
	for _, line := range []string{"op            calls  errors  expected  mean latency", "GetEntity     2      2       2", "total         4      2       2"} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, table)
		}
	}
	if got := s.Queue("work").Name() + " " + s.Container("box").Name(); got != "work box" {
		t.Errorf("names = %q", got)
	}
}

// TestLatency: an injected delay is part of the call as its caller and the
// observers see it, and a context that ends during it ends the call
// without reaching the store.
func TestLatency(t *testing.T) {
	const d = 20 * time.Millisecond
	var took time.Duration
	s := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Latency: instrument.Fixed(d),
		Observers: []instrument.Observer{instrument.ObserverFunc(func(_ instrument.Call, t time.Duration, _ error) { took = t })}})
	start := time.Now()
	if err := s.Queue("work").Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < d || took < d {
		t.Errorf("call returned after %v, observed %v; want at least %v", waited, took, d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	slow := instrument.Wrap(nowhere{}, instrument.Options{Latency: func(c instrument.Call) time.Duration {
		if c.Op != instrument.OpReceive {
			t.Errorf("latency asked for %s", c.Op)
		}
		return time.Hour
	}})
	if _, err := slow.Queue("work").Receive(ctx, 1, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Receive with a cancelled context during its latency = %v, want context.Canceled", err)
	}
}

// TestFaultHoldsOneCall: a fault hook that blocks holds its own call only,
// so a test can run other calls in between and then let it go.
func TestFaultHoldsOneCall(t *testing.T) {
	ctx := t.Context()
	held, release := make(chan struct{}), make(chan struct{})
	s := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpGetEntity {
			close(held)
			<-release
		}
		return nil
	}})
	tb := s.Tables()
	if err := tb.CreateTable(ctx, "Things"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := tb.GetEntity(ctx, "Things", "p", "r")
		got <- err
	}()
	<-held
	// The read is held before it reaches the store: an insert now lands first.
	if _, err := tb.InsertEntity(ctx, "Things", storeadapter.Entity{PartitionKey: "p", RowKey: "r"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-got; err != nil {
		t.Errorf("held GetEntity = %v, want it to find the entity inserted meanwhile", err)
	}
}

// TestCountsConcurrent: observers run on many goroutines at once.
func TestCountsConcurrent(t *testing.T) {
	var c instrument.Counts
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				var err error
				if i%4 == 0 {
					err = storeadapter.ErrUnavailable
				}
				c.Observe(instrument.Call{Op: []instrument.Op{instrument.OpSend, instrument.OpReceive}[g%2]}, time.Millisecond, err)
			}
		})
	}
	wg.Wait()
	want := instrument.Stats{Calls: 4000, Errors: 1000, Latency: 4 * time.Second}
	snap := c.Snapshot()
	if snap[instrument.OpSend] != want || snap[instrument.OpReceive] != want || len(snap) != 2 {
		t.Errorf("snapshot = %v, want %+v for Send and Receive", snap, want)
	}
}

// TestOpService: every Op a method calls names its interface's service.
func TestOpService(t *testing.T) {
	want := map[string]string{"Tables": instrument.ServiceTable, "Queue": instrument.ServiceQueue, "Blobs": instrument.ServiceBlob}
	for _, c := range methodCases() {
		iface, _, _ := strings.Cut(c.method, ".")
		if got := c.want.Op.Service(); got != want[iface] {
			t.Errorf("%s: Op %s Service() = %q, want %q", c.method, c.want.Op, got, want[iface])
		}
	}
}

// TestAfterLosesTheReply: the After hook sees the wrapped store's answer
// and replaces it, while the call's work is done: an insert whose reply
// is lost has still inserted; the observers see what the caller got.
func TestAfterLosesTheReply(t *testing.T) {
	ctx := t.Context()
	var counts instrument.Counts
	lost := fmt.Errorf("reply lost: %w", storeadapter.ErrUnavailable)
	var seen []error
	s := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{&counts},
		After: func(_ context.Context, c instrument.Call, err error) error {
			seen = append(seen, err)
			if c.Op == instrument.OpInsertEntity {
				return lost
			}
			return err
		}})
	tb := s.Tables()
	if err := tb.CreateTable(ctx, "Things"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.InsertEntity(ctx, "Things", storeadapter.Entity{PartitionKey: "p", RowKey: "r"}); err != lost {
		t.Fatalf("InsertEntity = %v, want the lost reply", err)
	}
	if _, err := tb.GetEntity(ctx, "Things", "p", "r"); err != nil {
		t.Errorf("the insert whose reply was lost did not insert: %v", err)
	}
	if len(seen) != 3 || seen[1] != nil {
		t.Errorf("After saw %v, want the store's three answers, the insert's nil", seen)
	}
	if st := counts.Snapshot()[instrument.OpInsertEntity]; st.Errors != 1 {
		t.Errorf("observers counted %+v for the insert, want its error", st)
	}
}

// TestExpected: the service's answers idempotent code handles are expected,
// wrapped or not; failures and success are not.
func TestExpected(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{storeadapter.ErrNotFound, true},
		{fmt.Errorf("get: %w", storeadapter.ErrTableNotFound), true},
		{storeadapter.ErrQueueNotFound, true},
		{storeadapter.ErrAlreadyExists, true},
		{fmt.Errorf("update: %w", storeadapter.ErrPreconditionFailed), true},
		{storeadapter.ErrPopReceiptMismatch, true},
		{storeadapter.ErrUnavailable, false},
		{storeadapter.ErrForbidden, false},
		{storeadapter.ErrInvalidInput, false},
		{storeadapter.ErrTableBeingDeleted, false},
		{errors.New("connection reset"), false},
	} {
		if got := instrument.Expected(c.err); got != c.want {
			t.Errorf("Expected(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
