package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// commitTx commits a transactional enqueue of an index reconcile with
// operation id op on partition pk of Employees, as an application would,
// and returns its message id.
func (b *bundle) commitTx(op, pk string) string {
	b.t.Helper()
	c, err := client.New(client.Config{Store: b.store, Queue: queueName, Clock: b.clock})
	if err != nil {
		b.t.Fatal(err)
	}
	tx := c.Tx("Employees", pk)
	tx.Write(storeadapter.TableOp{Action: storeadapter.TxUpsertMerge, Entity: storeadapter.Entity{PartitionKey: pk, RowKey: "emp-" + op,
		Properties: map[string]any{"LastName": "Jones"}}})
	tx.Enqueue(index.Reconcile("Employees", pk, "emp-"+op), client.ID(op))
	res, err := tx.Commit(b.t.Context())
	if err != nil {
		b.t.Fatal(err)
	}
	return res.Jobs[0].MessageID
}

// poisonJob moves the message of id to the poison queue, as the worker
// does with a job that fails for good.
func (b *bundle) poisonJob(id, op string) {
	b.t.Helper()
	for _, m := range b.receiveAll(b.queue) {
		if m.ID != id {
			continue
		}
		f := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: op, Kind: "index",
			Attempt: poison.Attempt{DequeueCount: m.DequeueCount, Time: b.clock.Now(), Host: "worker-7", Error: "boom"}}
		if err := recorder(b.t, b.store, b.clock).Move(b.t.Context(), f, m.PopReceipt, "permanent: boom"); err != nil {
			b.t.Fatal(err)
		}
		return
	}
	b.t.Fatalf("message %s is not on the queue", id)
}

// fence writes the fence of a dropped job of operation op on partition
// Sales of Employees, as the worker does.
func (b *bundle) fence(op string) {
	b.t.Helper()
	o := &jobs.OutboxRef{Table: "Employees", PK: "Sales", RK: jobs.OutboxPrefix + op}
	if e, err := jobs.FenceOutbox(b.t.Context(), b.store.Tables(), o); err != nil || e.State != jobs.OutboxFence {
		b.t.Fatalf("fence %s: %v, %v", op, e.State, err)
	}
}

// seedOutbox writes, over two hours of clock time, an outbox row of each
// status in partition Sales of Employees (and a waiting one in Eng), with
// an application entity and an index entry beside them that no outbox
// command may list:
//
//	op-stale     committed 2 h ago, its job unfinished
//	op-poisoned  committed 2 h ago, its job poisoned
//	op-old       a fence written 2 h ago
//	op-fence     a fence written 10 min ago
//	op-fresh     committed now
//	op-eng       committed now, in partition Eng
func (b *bundle) seedOutbox() {
	b.t.Helper()
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "~tk.l.lastName", Properties: map[string]any{"N": int32(1)}})
	b.commitTx("op-stale", "Sales")
	b.poisonJob(b.commitTx("op-poisoned", "Sales"), "op-poisoned")
	b.fence("op-old")
	b.clock.Advance(110 * time.Minute)
	b.fence("op-fence")
	b.clock.Advance(10 * time.Minute)
	b.commitTx("op-fresh", "Sales")
	b.commitTx("op-eng", "Eng")
}

// outboxCheckJSON is what outbox check -o json prints.
type outboxCheckJSON struct {
	Table, PK string
	OlderThan string
	Rows      []outboxRow
	Summary   outboxSummary
	Error     string
}

// statuses returns "op:status" of each row, in order.
func (o outboxCheckJSON) statuses() []string {
	var out []string
	for _, r := range o.Rows {
		out = append(out, r.OpID+":"+r.Status)
	}
	return out
}

// runCounted runs enqueue on the store through an instrument that counts
// the calls.
func (b *bundle) runCounted(args ...string) (result, *instrument.Counts) {
	b.t.Helper()
	counts := &instrument.Counts{}
	var out, errOut strings.Builder
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Clock: b.clock,
		Connect: func() (storeadapter.Store, error) {
			return instrument.Wrap(b.store, instrument.Options{Observers: []instrument.Observer{counts}}), nil
		}}
	code := m.Run(b.t.Context(), args)
	return result{code, out.String(), errOut.String()}, counts
}

// TestOutboxCheck: check lists each outbox row with its status, and only
// outbox rows; it fails when some are stale, poisoned or old fences, and
// says how many; -pk narrows it to a partition, -older-than moves the
// line between waiting and stale. It reads one page of rows and one of
// poisoned records.
func TestOutboxCheck(t *testing.T) {
	b := setup(t)
	b.seedOutbox()
	r, counts := b.runCounted("outbox", "check", "-table", "Employees")
	if r.code != 1 || !strings.Contains(r.stderr, "enqueue outbox check: outbox of Employees: 3 rows need attention (1 stale, 1 poisoned, 1 old fences)") {
		t.Errorf("check: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	want := []string{"STATUS", "waiting", "fence", "waiting", "old-fence", "poisoned", "stale", "outbox of Employees: 6 rows: 2 waiting, 1 stale, 1 poisoned, 1 fences, 1 old fences"}
	if len(lines) != len(want) {
		t.Fatalf("check printed %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want it to start with %q", i, lines[i], w)
		}
	}
	for _, w := range []string{"2h0m0s", "op-stale", "index", queueName, "its job has not finished in 2h0m0s: lost",
		"outbox=Employees/Sales/~tk.o.op-stale", "enqueue poison show op-poisoned -queue " + queueName, "the workers did not remove"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("check's table lacks %q:\n%s", w, r.stdout)
		}
	}
	if q := counts.Snapshot()[instrument.OpQuery].Calls; q != 2 {
		t.Errorf("check made %d queries, want 2 (the rows, the poisoned records):\n%s", q, counts.Snapshot())
	}

	r = b.run("", "outbox", "check", "-table", "Employees", "-o", "json")
	var out outboxCheckJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("check -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	if want := []string{"op-eng:waiting", "op-fence:fence", "op-fresh:waiting", "op-old:old-fence", "op-poisoned:poisoned", "op-stale:stale"}; !slices.Equal(out.statuses(), want) ||
		out.Summary != (outboxSummary{Rows: 6, Waiting: 2, Stale: 1, Poisoned: 1, Fences: 1, OldFence: 1, Problems: 3}) || out.Table != "Employees" || out.OlderThan != "1h0m0s" {
		t.Errorf("check -o json = %+v", out)
	}
	stale := out.Rows[5]
	if stale.PK != "Sales" || stale.RK != "~tk.o.op-stale" || stale.Kind != "index" || stale.Queue != queueName || stale.MessageID == "" ||
		stale.WindowSeconds != 30 || stale.AgeSeconds != 7200 || !stale.Written.Equal(t0) {
		t.Errorf("stale row %+v", stale)
	}
	if fence := out.Rows[1]; fence.Kind != "" || fence.Queue != "" || fence.AgeSeconds != 600 {
		t.Errorf("fence row %+v, want no job fields, 10 min old", fence)
	}

	r = b.run("", "outbox", "check", "-table", "Employees", "-pk", "Eng", "-o", "json")
	out = outboxCheckJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || !slices.Equal(out.statuses(), []string{"op-eng:waiting"}) || out.PK != "Eng" {
		t.Errorf("check -pk Eng: exit %d, %v, %+v\n%s", r.code, err, out, r.stderr)
	}
	r = b.run("", "outbox", "check", "-table", "Employees", "-older-than", "3h")
	if r.code != 1 || !strings.Contains(r.stdout, "6 rows: 3 waiting, 0 stale, 1 poisoned, 2 fences, 0 old fences") {
		t.Errorf("check -older-than 3h: exit %d\n%s", r.code, r.stdout)
	}
	b.put("Empty", storeadapter.Entity{PartitionKey: "p", RowKey: "r"})
	if r := b.mustRun("", "outbox", "check", "-table", "Empty"); strings.TrimSpace(r.stdout) != "outbox of Empty: 0 rows: 0 waiting, 0 stale, 0 poisoned, 0 fences, 0 old fences" {
		t.Errorf("check of a table without outbox rows:\n%s", r.stdout)
	}
	if r := b.run("", "outbox", "check", "-table", "Nope"); r.code != 1 || !strings.Contains(r.stderr, "table Nope does not exist (check -table)") {
		t.Errorf("check of a missing table: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestOutboxCheckFailsPartWay: a scan that fails after its first page ends
// the JSON document with "error", so what was printed stays valid JSON.
func TestOutboxCheckFailsPartWay(t *testing.T) {
	b := setup(t)
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "x"})
	for i := range 1001 {
		b.fence(fmt.Sprintf("op-%04d", i))
	}
	queries := 0
	var out, errOut strings.Builder
	m := &Main{Stdout: &out, Stderr: &errOut, Clock: b.clock, Connect: func() (storeadapter.Store, error) {
		return instrument.Wrap(b.store, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
			if c.Op == instrument.OpQuery {
				if queries++; queries == 2 {
					return fmt.Errorf("page 2: %w", storeadapter.ErrUnavailable)
				}
			}
			return nil
		}}), nil
	}}
	code := m.Run(t.Context(), []string{"outbox", "check", "-table", "Employees", "-o", "json"})
	var got outboxCheckJSON
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || code != 1 || len(got.Rows) != 1000 || !strings.Contains(got.Error, "page 2") ||
		!strings.Contains(errOut.String(), "page 2") {
		t.Errorf("exit %d, %d rows, error %q, %v; stderr:\n%s", code, len(got.Rows), got.Error, err, errOut.String())
	}
}

// TestOutboxPurge: purge is a dry run unless -yes; it deletes the stale
// rows and old fences and keeps the poisoned rows, saying so; a row
// changed or gone between the read and the delete is left and counted.
func TestOutboxPurge(t *testing.T) {
	b := setup(t)
	b.seedOutbox()
	r := b.mustRun("", "outbox", "purge", "-table", "Employees")
	for _, w := range []string{"ACTION", "would delete  old-fence", "kept          poisoned", "would delete  stale",
		"dry run: 2 of 6 outbox rows of Employees would be deleted (run again with -yes); 1 poisoned rows kept (requeue or delete their poison records first)"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("purge's dry run lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "op-fresh") || strings.Contains(r.stdout, "op-fence") {
		t.Errorf("purge's dry run lists rows it keeps:\n%s", r.stdout)
	}
	if r := b.run("", "outbox", "check", "-table", "Employees"); !strings.Contains(r.stdout, "6 rows") {
		t.Errorf("a dry run changed the rows:\n%s", r.stdout)
	}

	// The stale row's job finishes between purge's read and its delete.
	var out, errOut strings.Builder
	m := &Main{Stdout: &out, Stderr: &errOut, Clock: b.clock, Connect: func() (storeadapter.Store, error) {
		return instrument.Wrap(b.store, instrument.Options{Fault: func(ctx context.Context, c instrument.Call) error {
			if c.Op == instrument.OpDeleteEntity && c.RowKey == "~tk.o.op-stale" {
				_ = b.store.Tables().DeleteEntity(ctx, "Employees", "Sales", "~tk.o.op-stale", storeadapter.ETagAny)
			}
			return nil
		}}), nil
	}}
	if code := m.Run(t.Context(), []string{"outbox", "purge", "-table", "Employees", "-yes", "-o", "json"}); code != 0 {
		t.Fatalf("purge -yes: exit %d\n%s", code, errOut.String())
	}
	var got struct {
		DryRun  bool
		Rows    []outboxRow
		Summary purgeSummary
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatal(err, out.String())
	}
	var actions []string
	for _, r := range got.Rows {
		actions = append(actions, r.OpID+":"+r.Action)
	}
	if want := []string{"op-old:deleted", "op-poisoned:kept", "op-stale:changed, left"}; got.DryRun || !slices.Equal(actions, want) ||
		got.Summary != (purgeSummary{Rows: 6, Selected: 2, Deleted: 1, Raced: 1, Poisoned: 1}) {
		t.Errorf("purge -yes -o json: dry run %v, actions %v, summary %+v; want %v", got.DryRun, actions, got.Summary, want)
	}
	r = b.run("", "outbox", "check", "-table", "Employees", "-o", "json")
	var left outboxCheckJSON
	if err := json.Unmarshal([]byte(r.stdout), &left); err != nil ||
		!slices.Equal(left.statuses(), []string{"op-eng:waiting", "op-fence:fence", "op-fresh:waiting", "op-poisoned:poisoned"}) {
		t.Errorf("rows after purge -yes: %v (%v)", left.statuses(), err)
	}
	r = b.mustRun("", "outbox", "purge", "-table", "Employees", "-yes")
	if !strings.HasSuffix(r.stdout, "deleted 0 of 4 outbox rows of Employees; 1 poisoned rows kept (requeue or delete their poison records first)\n") {
		t.Errorf("a second purge -yes:\n%s", r.stdout)
	}
}

// TestOutboxUsage: the flags' rules, each a usage error naming the flag.
func TestOutboxUsage(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "-table: "},
		{[]string{"check", "-table", "x"}, "-table: "},
		{[]string{"check", "-table", "Employees", "-pk", "a/b"}, "-pk: invalid input: pk: must not contain"},
		{[]string{"check", "-table", "Employees", "-pk", ""}, "-pk: invalid input"},
		{[]string{"check", "-table", "Employees", "-older-than", "30s"}, "-older-than: must be at least 1m0s (younger rows are still waiting for their job), got 30s"},
		{[]string{"check", "-table", "Employees", "-older-than", "soon"}, `-older-than: must be a duration such as 90m, 36h or 7d, got "soon"`},
		{[]string{"check", "-table", "Employees", "extra"}, `unexpected argument "extra"`},
		{[]string{"purge", "-table", "Employees", "-older-than", "59m"}, "-older-than: must be at least 1h0m0s (a younger row's job may still be waiting its turn: deleting its row drops it), got 59m0s"},
		{[]string{"frob"}, `unknown subcommand "frob"`},
	} {
		r := b.run("", append([]string{"outbox"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("outbox %q: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := b.run("", "outbox", "-h"); r.code != 0 || !strings.Contains(r.stdout, "usage: enqueue outbox <subcommand>") {
		t.Errorf("outbox -h: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

// TestStatsCountsDroppedJobs: a worker that drops a job whose transaction
// never committed records the drop in the poison table; stats counts it
// (and only it: the poison commands do not list it), outbox check shows
// the fence until the worker removes it, and poison purge removes the
// record by age.
func TestStatsCountsDroppedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "emp-1"})
		// A job sent by a transaction that never committed: no row.
		env := jobs.Envelope{V: 1, ID: "op-lost", Kind: "index", Args: json.RawMessage(`{"table":"Employees","pk":"Sales","rk":"emp-1"}`),
			Outbox: &jobs.OutboxRef{Table: "Employees", PK: "Sales", RK: jobs.OutboxPrefix + "op-lost", Window: jobs.Duration(30 * time.Second)}}
		cl, err := client.New(client.Config{Store: b.store, Queue: queueName})
		if err != nil {
			t.Fatal(err)
		}
		m, err := cl.PrepareEnvelope(t.Context(), env)
		if err == nil {
			_, err = cl.Send(t.Context(), m)
		}
		if err != nil {
			t.Fatal(err)
		}
		var dropped atomic.Bool
		cfg := runner.Config{Clock: b.clock, Drain: true, OutboxHold: 20 * time.Second, Host: "worker-1",
			Observers: []runner.Observer{runner.ObserverFunc(func(_ context.Context, e runner.Event) {
				if e.Type == runner.Finished && e.Outbox == runner.OutboxDropped {
					dropped.Store(true)
				}
			})}}
		r, err := cli.NewRunner(b.store, queueName, cfg, catalog.Config{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		var finished atomic.Bool
		var runErr error
		go func() { runErr = r.Run(t.Context()); finished.Store(true) }()
		advance := func(cond func() bool) {
			t.Helper()
			for range 3 * 3600 {
				synctest.Wait()
				if cond() {
					return
				}
				b.clock.Advance(time.Second)
			}
			t.Fatal("not reached in 3 h of clock time")
		}
		advance(dropped.Load)

		r1 := b.mustRun("", "stats")
		var s statsOutput
		if err := json.Unmarshal([]byte(b.mustRun("", "stats", "-o", "json").stdout), &s); err != nil || !strings.Contains(r1.stdout, "dropped jobs: 1 (not run: their transaction never committed)") ||
			s.DroppedJobs != 1 || s.DroppedJobsMore {
			t.Errorf("stats after a drop = %+v (%v):\n%s", s, err, r1.stdout)
		}
		if r := b.run("", "outbox", "check", "-table", "Employees"); r.code != 0 || !strings.Contains(r.stdout, "fence ") || !strings.Contains(r.stdout, "op-lost") {
			t.Errorf("check during the hold: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := b.mustRun("", "poison", "list"); !strings.Contains(r.stdout, "no poisoned messages") {
			t.Errorf("poison list shows the drop:\n%s", r.stdout)
		}

		advance(finished.Load)
		if runErr != nil {
			t.Fatal(runErr)
		}
		if r := b.mustRun("", "outbox", "check", "-table", "Employees"); !strings.Contains(r.stdout, "0 rows") {
			t.Errorf("check after the hold, want the fence removed:\n%s", r.stdout)
		}
		if r := b.mustRun("", "poison", "purge", "-older-than", "1d"); strings.TrimSpace(r.stdout) != "purged 0" {
			t.Errorf("poison purge -older-than 1d removed a young drop record:\n%s", r.stdout)
		}
		if r := b.mustRun("", "poison", "purge", "-yes", "-o", "json"); !strings.Contains(r.stdout, `"drops": 1`) {
			t.Errorf("poison purge -yes:\n%s", r.stdout)
		}
		if r := b.mustRun("", "stats"); !strings.Contains(r.stdout, "dropped jobs: 0") {
			t.Errorf("stats after the purge:\n%s", r.stdout)
		}
	})
}

// TestPoisonShowOutbox: poison show names the outbox row of a poisoned
// job sent by a transactional enqueue, in its text and its JSON; a job
// without one shows no such line.
func TestPoisonShowOutbox(t *testing.T) {
	b := setup(t)
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "x"})
	b.poisonJob(b.commitTx("op-1", "Sales"), "op-1")
	r := b.mustRun("", "poison", "show", "op-1")
	if !strings.Contains(r.stdout, "\nOutbox:         Employees/Sales/~tk.o.op-1 (window 30s; the row stays until the job is done") {
		t.Errorf("show lacks the outbox line:\n%s", r.stdout)
	}
	var got struct {
		Outbox *jobs.OutboxRef
	}
	if err := json.Unmarshal([]byte(b.mustRun("", "poison", "show", "op-1", "-o", "json").stdout), &got); err != nil ||
		got.Outbox == nil || *got.Outbox != (jobs.OutboxRef{Table: "Employees", PK: "Sales", RK: "~tk.o.op-1", Window: jobs.Duration(30 * time.Second)}) {
		t.Errorf("show -o json: outbox %+v, %v", got.Outbox, err)
	}

	b.mustRun("", "archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "p", "-rk", "1", "-id", "op-2")
	var id string
	for _, m := range b.receiveAll(b.queue) {
		if env, err := jobs.DecodeEnvelope(m.Text); err == nil && env.ID == "op-2" {
			id = m.ID
			f := poison.Failure{MessageID: m.ID, Text: m.Text, OpID: "op-2", Kind: "archive", Attempt: poison.Attempt{DequeueCount: 1, Time: t0}}
			if err := recorder(t, b.store, b.clock).Move(t.Context(), f, m.PopReceipt, "permanent: boom"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r := b.mustRun("", "poison", "show", id); strings.Contains(r.stdout, "Outbox:") {
		t.Errorf("show of a job without an outbox names one:\n%s", r.stdout)
	}
	if r := b.mustRun("", "poison", "show", id, "-o", "json"); strings.Contains(r.stdout, `"outbox"`) {
		t.Errorf("show -o json of a job without an outbox has one:\n%s", r.stdout)
	}
}

// TestOutboxCheckNeverPrintsSecrets: a scan error that quotes the
// credential goes to stdout (the JSON document's "error") and stderr
// scrubbed.
func TestOutboxCheckNeverPrintsSecrets(t *testing.T) {
	b := setup(t)
	const key = "c2VjcmV0LWtleS12YWx1ZQ=="
	t.Setenv(cli.EnvConnectionString, "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="+key)
	var out, errOut strings.Builder
	m := &Main{Stdout: &out, Stderr: &errOut, Clock: b.clock, Connect: func() (storeadapter.Store, error) {
		return instrument.Wrap(b.store, instrument.Options{Fault: func(context.Context, instrument.Call) error {
			return fmt.Errorf("signed with %s: %w", key, storeadapter.ErrUnavailable)
		}}), nil
	}}
	code := m.Run(t.Context(), []string{"outbox", "check", "-table", "Employees", "-o", "json"})
	var got outboxCheckJSON
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || code != 1 || !strings.Contains(got.Error, "[REDACTED]") ||
		strings.Contains(out.String()+errOut.String(), key) {
		t.Errorf("exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, out.String(), errOut.String())
	}
}
