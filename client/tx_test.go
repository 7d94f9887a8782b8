package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

func employee(rk, last string) storeadapter.Entity {
	return storeadapter.Entity{PartitionKey: "Sales", RowKey: rk, Properties: map[string]any{"LastName": last}}
}

// TestTxCommit: a commit writes the entity and one outbox row per job in
// one transaction, and its messages carry the outbox reference and are
// visible at once (after Delay, for a job that has one); it costs one send
// per job, one transaction and one update per job.
func TestTxCommit(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Window: 10 * time.Second})
	if err := b.raw.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	if err := b.raw.Queue("tablekeeper").Create(ctx); err != nil {
		t.Fatal(err)
	}
	tx := b.c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: employee("000123", "Jones")})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000123"), client.ID("op-a"))
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000123"), client.ID("op-b"), client.Delay(time.Minute))
	before := b.counts.Snapshot()
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 || res.Jobs[0].OpID != "op-a" || res.Jobs[0].MessageID == "" || res.Jobs[1].MessageID == "" {
		t.Errorf("results %+v", res.Jobs)
	}
	if _, err := b.raw.Tables().GetEntity(ctx, "Employees", "Sales", "000123"); err != nil {
		t.Errorf("the entity was not written: %v", err)
	}
	for _, id := range []string{"op-a", "op-b"} {
		row, err := b.raw.Tables().GetEntity(ctx, "Employees", "Sales", jobs.OutboxPrefix+id)
		if err != nil || row.Properties[jobs.OutboxKind] != index.Kind || row.Properties[jobs.OutboxQueue] != "tablekeeper" {
			t.Errorf("outbox row of %s: %+v, %v", id, row, err)
		}
	}
	envs := b.messages(t, "tablekeeper")
	if len(envs) != 1 || envs[0].ID != "op-a" {
		t.Fatalf("visible after the commit: %+v; want op-a only (op-b has a delay)", envs)
	}
	want := jobs.OutboxRef{Table: "Employees", PK: "Sales", RK: "~tk.o.op-a", Window: jobs.Duration(10 * time.Second)}
	if o := envs[0].Outbox; o == nil || *o != want {
		t.Errorf("op-a's outbox reference %+v, want %+v", o, want)
	}
	b.clock.Advance(time.Minute)
	if envs := b.messages(t, "tablekeeper"); len(envs) != 2 {
		t.Errorf("%d messages visible after op-b's delay, want 2", len(envs))
	}
	after := b.counts.Snapshot()
	for op, n := range map[instrument.Op]int64{instrument.OpSend: 2, instrument.OpTransact: 1, instrument.OpUpdate: 2} {
		if got := after[op].Calls - before[op].Calls; got != n {
			t.Errorf("%s: %d calls, want %d", op, got, n)
		}
	}
	if _, err := tx.Commit(ctx); err == nil || !strings.Contains(err.Error(), "committed already") {
		t.Errorf("a second Commit = %v", err)
	}
}

// TestTxRefusesBeforeSending: what cannot commit is refused before any
// message is sent, naming the rule.
func TestTxRefusesBeforeSending(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{})
	reconcile := index.Reconcile("Employees", "Sales", "000123")
	many := func(n int) func(*client.Tx) {
		return func(tx *client.Tx) {
			for i := range n {
				tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: employee(fmt.Sprintf("%06d", i), "x")})
			}
			tx.Enqueue(reconcile)
		}
	}
	cases := []struct {
		name, table, pk string
		build           func(*client.Tx)
		want            string
	}{
		{"bad table", "E", "Sales", func(tx *client.Tx) { tx.Enqueue(reconcile) }, "client: Tx: table:"},
		{"bad partition", "Employees", "a/b", func(tx *client.Tx) { tx.Enqueue(reconcile) }, "pk: must not contain"},
		{"another partition", "Employees", "Sales", func(tx *client.Tx) {
			tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "HR", RowKey: "1"}})
		}, `write 0: PartitionKey "HR" is not the Tx's partition "Sales"`},
		{"a reserved row", "Employees", "Sales", func(tx *client.Tx) {
			tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: employee("~tk.o.op-x", "x")})
		}, `RowKey "~tk.o.op-x": RowKeys starting with "~tk." belong to tablekeeper`},
		{"nothing", "Employees", "Sales", func(*client.Tx) {}, "nothing to commit"},
		{"an invalid job", "Employees", "Sales", func(tx *client.Tx) { tx.Enqueue(index.Args{Table: "Employees"}) }, "job 0: client: op"},
		{"one id twice", "Employees", "Sales", func(tx *client.Tx) {
			tx.Enqueue(reconcile, client.ID("op-1"))
			tx.Enqueue(reconcile, client.ID("op-1"))
		}, "job 1: client: ID: op-1 is job 0's too"},
		{"a TTL inside the window", "Employees", "Sales", func(tx *client.Tx) { tx.Enqueue(reconcile, client.TTL(10*time.Second)) }, "TTL: must be longer than the commit window"},
		{"100 writes and a job", "Employees", "Sales", many(100), "at most 100 operations, got 101"},
		{"a write and its row once", "Employees", "Sales", func(tx *client.Tx) {
			tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: employee("1", "x")},
				storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: employee("1", "x"), IfMatch: storeadapter.ETagAny})
		}, `repeats RowKey "1"`},
	}
	for _, c := range cases {
		tx := b.c.Tx(c.table, c.pk)
		c.build(tx)
		if _, err := tx.Commit(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Commit = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if n := b.counts.Snapshot()[instrument.OpSend].Calls; n != 0 {
		t.Errorf("refused transactions sent %d messages", n)
	}
	if n := b.counts.Snapshot()[instrument.OpTransact].Calls; n != 0 {
		t.Errorf("refused transactions made %d transaction calls", n)
	}
}

// TestTxFailures: a transaction that fails for sure (an If-Match lost)
// returns the store's error as it came and deletes its messages; one
// whose outcome is unknown leaves them for the workers to decide; a
// commit held up for half the window is not submitted.
func TestTxFailures(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Window: 10 * time.Second})
	if err := b.raw.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	etag, err := b.raw.Tables().InsertEntity(ctx, "Employees", employee("000123", "Jones"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.raw.Tables().UpdateEntity(ctx, "Employees", employee("000123", "Smith"), storeadapter.Merge, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n, err := b.raw.Queue("tablekeeper").ApproximateCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tx := b.c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpdateMerge, Entity: employee("000123", "Brown"), IfMatch: etag})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000123"))
	_, err = tx.Commit(ctx)
	var te *storeadapter.TransactionError
	if !errors.Is(err, storeadapter.ErrPreconditionFailed) || !errors.As(err, &te) || te.Index != 0 {
		t.Errorf("a lost If-Match: Commit = %v, want the store's TransactionError at 0 wrapping ErrPreconditionFailed", err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d messages left after a failed transaction, want them deleted", n)
	}

	b.fault = func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpTransact {
			return fmt.Errorf("timeout: %w", storeadapter.ErrUnavailable)
		}
		return nil
	}
	tx = b.c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: employee("000124", "Lee")})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000124"))
	if _, err := tx.Commit(ctx); !errors.Is(err, storeadapter.ErrUnavailable) {
		t.Errorf("an unknown outcome: Commit = %v, want the transient error", err)
	}
	if n := count(); n != 1 {
		t.Errorf("%d messages after an unknown outcome, want its message kept (hidden for the window)", n)
	}

	b.fault = func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpSend {
			b.clock.Advance(5 * time.Second) // a slow send: half the window is gone
		}
		return nil
	}
	tx = b.c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: employee("000125", "Kim")})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000125"))
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrWindowSpent) {
		t.Errorf("a commit held up for half the window = %v, want ErrWindowSpent", err)
	}
	if n := b.counts.Snapshot()[instrument.OpTransact].Calls; n != 2 {
		t.Errorf("%d transaction calls, want 2 (none for the late commit)", n)
	}
	if n := count(); n != 1 {
		t.Errorf("%d messages, want the late commit's deleted", n)
	}
	if _, err := b.raw.Tables().GetEntity(ctx, "Employees", "Sales", "000125"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("the late commit's entity: %v, want it not written", err)
	}
}

// TestTxLostReply: a transaction that committed but whose reply was lost
// comes back, through the SDK's retry of the same request, as "already
// exists" on its own outbox row: Commit sees the row names its message,
// takes the commit as done and keeps the job.
func TestTxLostReply(t *testing.T) {
	ctx := t.Context()
	b := newBundle(t, client.Config{Window: 10 * time.Second})
	if err := b.raw.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	lost := instrument.Wrap(b.raw, instrument.Options{After: func(_ context.Context, c instrument.Call, err error) error {
		if c.Op == instrument.OpTransact && err == nil {
			return &storeadapter.TransactionError{Index: 1, Err: fmt.Errorf("the retry: %w", storeadapter.ErrAlreadyExists)}
		}
		return err
	}})
	c, err := client.New(client.Config{Store: lost, Window: 10 * time.Second, Clock: b.clock})
	if err != nil {
		t.Fatal(err)
	}
	tx := c.Tx("Employees", "Sales")
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: employee("000126", "Ng")})
	tx.Enqueue(index.Reconcile("Employees", "Sales", "000126"), client.ID("op-lost"))
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit of a transaction whose reply was lost = %v, want success", err)
	}
	if envs := b.messages(t, "tablekeeper"); len(envs) != 1 || envs[0].ID != "op-lost" {
		t.Errorf("visible messages %+v, want the job kept and made visible", envs)
	}
}
