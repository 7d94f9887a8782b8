package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// edmEntity holds every EDM type at an extreme value.
func edmEntity(pk, rk string) storeadapter.Entity {
	return storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{
		"Name": "Jones, O'Brien ✓", "Active": true, "Age": int32(math.MinInt32), "Salary": int64(1<<62 + 1),
		"Rating": 2.0, "Tiny": math.SmallestNonzeroFloat64, "NotANumber": math.NaN(),
		"Hired": time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC), "ID": storeadapter.GUID{0xde, 0xad, 0xbe, 0xef},
		"Photo": []byte{0, 1, 2, 255},
	}}
}

func assertSameProperties(t *testing.T, want, got storeadapter.Entity) {
	t.Helper()
	if len(got.Properties) != len(want.Properties) {
		t.Fatalf("got %d properties, want %d", len(got.Properties), len(want.Properties))
	}
	for name, w := range want.Properties {
		if g := got.Properties[name]; !storeadapter.Equal(w, g) {
			t.Errorf("property %s: got %s, want %s", name, storeadapter.Format(g), storeadapter.Format(w))
		}
	}
}

type archiveBundle struct {
	store *localstore.Store
	arch  *jobs.Archiver
	fault func(op string) error
}

func newArchive(t *testing.T) *archiveBundle {
	t.Helper()
	b := &archiveBundle{}
	b.store = localstore.New(localstore.Options{Fault: func(op string) error {
		if b.fault != nil {
			return b.fault(op)
		}
		return nil
	}})
	for _, name := range []string{"Employees", "EmployeesArchive"} {
		if err := b.store.Tables().CreateTable(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	b.arch = &jobs.Archiver{Store: b.store, Checkpoints: idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}}
	return b
}

func (b *archiveBundle) run(t *testing.T, id, args string) error {
	t.Helper()
	k := b.arch.Kind()
	parsed, err := k.ParseArgs(json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	return k.Handler.Handle(context.Background(), jobs.Job{Envelope: jobs.Envelope{V: 1, ID: id, Kind: "archive"}, Args: parsed})
}

func (b *archiveBundle) insert(t *testing.T, e storeadapter.Entity) {
	t.Helper()
	if _, err := b.store.Tables().InsertEntity(context.Background(), "Employees", e); err != nil {
		t.Fatal(err)
	}
}

// TestArchiveOne moves one entity with every EDM type intact; a
// redelivery is a no-op; a missing entity with no copy is permanent.
func TestArchiveOne(t *testing.T) {
	b := newArchive(t)
	want := edmEntity("Sales", "00042")
	b.insert(t, want)
	args := `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"00042"}`
	if err := b.run(t, "op-1", args); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Tables().GetEntity(context.Background(), "EmployeesArchive", "Sales", "00042")
	if err != nil {
		t.Fatal(err)
	}
	assertSameProperties(t, want, got)
	if _, err := b.store.Tables().GetEntity(context.Background(), "Employees", "Sales", "00042"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Fatalf("source still there after the move: %v", err)
	}
	if err := b.run(t, "op-1", args); err != nil {
		t.Fatalf("redelivery after a completed move = %v, want nil (already done)", err)
	}
	err = b.run(t, "op-2", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"nobody"}`)
	if !jobs.IsPermanent(err) {
		t.Fatalf("moving an entity that never existed = %v, want a permanent error", err)
	}
}

// TestArchiveCrashPositions fails each storage step once and checks that a
// rerun converges: target holds the entity, source does not.
func TestArchiveCrashPositions(t *testing.T) {
	for _, step := range []string{"GetEntity", "UpsertEntity", "DeleteEntity"} {
		t.Run(step, func(t *testing.T) {
			b := newArchive(t)
			want := edmEntity("Sales", "7")
			b.insert(t, want)
			failed := false
			b.fault = func(op string) error {
				if op == step && !failed {
					failed = true
					return fmt.Errorf("injected crash: %w", storeadapter.ErrUnavailable)
				}
				return nil
			}
			args := `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"7"}`
			if err := b.run(t, "op-1", args); err == nil || jobs.IsPermanent(err) {
				t.Fatalf("run with a crash at %s = %v, want a transient error", step, err)
			}
			if err := b.run(t, "op-1", args); err != nil {
				t.Fatalf("rerun = %v", err)
			}
			got, err := b.store.Tables().GetEntity(context.Background(), "EmployeesArchive", "Sales", "7")
			if err != nil {
				t.Fatal(err)
			}
			assertSameProperties(t, want, got)
			if _, err := b.store.Tables().GetEntity(context.Background(), "Employees", "Sales", "7"); !errors.Is(err, storeadapter.ErrNotFound) {
				t.Fatalf("source still there: %v", err)
			}
		})
	}
}

// TestArchiveConcurrentUpdate changes the source between the read and the
// delete: the ETag-conditional delete fails, and the newer version is what
// ends up archived.
func TestArchiveConcurrentUpdate(t *testing.T) {
	b := newArchive(t)
	b.insert(t, storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{"Salary": int64(100)}})
	updated := false
	b.fault = func(op string) error {
		if op == "DeleteEntity" && !updated {
			updated = true
			_, err := b.store.Tables().UpdateEntity(context.Background(), "Employees",
				storeadapter.Entity{PartitionKey: "Sales", RowKey: "1", Properties: map[string]any{"Salary": int64(200)}}, storeadapter.Merge, storeadapter.ETagAny)
			return err
		}
		return nil
	}
	if err := b.run(t, "op-1", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"1"}`); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Tables().GetEntity(context.Background(), "EmployeesArchive", "Sales", "1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Properties["Salary"] != int64(200) {
		t.Fatalf("archived Salary %v, want the concurrent update's 200", got.Properties["Salary"])
	}
}

// TestArchiveRange moves exactly [rkFrom, rkTo) of one partition.
func TestArchiveRange(t *testing.T) {
	b := newArchive(t)
	for i := range 300 {
		b.insert(t, edmEntity("Sales", fmt.Sprintf("%05d", i)))
	}
	b.insert(t, edmEntity("Support", "00100"))
	if err := b.run(t, "op-r", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":"00010","rkTo":"00250"}`); err != nil {
		t.Fatal(err)
	}
	count := func(table, pk string) int {
		n, tok := 0, ""
		for {
			p, err := b.store.Tables().Query(context.Background(), table, storeadapter.Query{Filter: storeadapter.PartitionEquals(pk), Continuation: tok})
			if err != nil {
				t.Fatal(err)
			}
			n += len(p.Entities)
			if tok = p.Next; tok == "" {
				return n
			}
		}
	}
	if got := count("EmployeesArchive", "Sales"); got != 240 {
		t.Fatalf("archived %d entities, want 240", got)
	}
	if got := count("Employees", "Sales"); got != 60 {
		t.Fatalf("%d source entities left, want 60", got)
	}
	if got := count("Employees", "Support"); got != 1 {
		t.Fatalf("another partition was touched: %d left, want 1", got)
	}
	got, err := b.store.Tables().GetEntity(context.Background(), "EmployeesArchive", "Sales", "00100")
	if err != nil {
		t.Fatal(err)
	}
	assertSameProperties(t, edmEntity("Sales", "00100"), got)
}

// TestArchiveRangeResumes crashes a range move after its first page and
// checks the rerun resumes from the checkpoint and converges.
func TestArchiveRangeResumes(t *testing.T) {
	b := newArchive(t)
	var ops []storeadapter.TableOp
	for i := range 2500 {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "P", RowKey: fmt.Sprintf("%05d", i), Properties: map[string]any{"N": int32(i)}}})
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := b.store.Tables().Transact(context.Background(), "Employees", batch); err != nil {
			t.Fatal(err)
		}
	}
	queries := 0
	b.fault = func(op string) error {
		if op == "Query" {
			if queries++; queries == 2 {
				return fmt.Errorf("injected crash: %w", storeadapter.ErrUnavailable)
			}
		}
		return nil
	}
	args := `{"table":"Employees","to":"EmployeesArchive","pk":"P","rkFrom":"00000"}`
	if err := b.run(t, "op-big", args); err == nil {
		t.Fatal("the injected crash did not surface")
	}
	cp := idempotent.Checkpoints{Tables: b.store.Tables(), Table: "Checkpoints"}
	tok, err := cp.Load(context.Background(), "op-big", "archive")
	if err != nil || tok == "" {
		t.Fatalf("no checkpoint after the first page (token %q, err %v)", tok, err)
	}
	if err := b.run(t, "op-big", args); err != nil {
		t.Fatal(err)
	}
	page, err := b.store.Tables().Query(context.Background(), "Employees", storeadapter.Query{})
	if err != nil || len(page.Entities) != 0 {
		t.Fatalf("%d source entities left (err %v), want 0", len(page.Entities), err)
	}
	n, tok := 0, ""
	for {
		p, err := b.store.Tables().Query(context.Background(), "EmployeesArchive", storeadapter.Query{Continuation: tok})
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Entities)
		if tok = p.Next; tok == "" {
			break
		}
	}
	if n != 2500 {
		t.Fatalf("archived %d entities, want 2500", n)
	}
	if tok, _ := cp.Load(context.Background(), "op-big", "archive"); tok != "" {
		t.Fatalf("checkpoint %q left after the range finished", tok)
	}
}

// TestArchiveToBlob writes the entity as annotated JSON that reads back
// with every type.
func TestArchiveToBlob(t *testing.T) {
	b := newArchive(t)
	want := edmEntity("Sales", "Jones, A. 1")
	b.insert(t, want)
	if err := b.run(t, "op-b", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rk":"Jones, A. 1"}`); err != nil {
		t.Fatal(err)
	}
	data, props, err := b.store.Container("archive").Get(context.Background(), "2026/Employees/Sales/Jones%2C%20A.%201.json")
	if err != nil {
		t.Fatal(err)
	}
	if props.ContentType != "application/json" {
		t.Errorf("content type %q, want application/json", props.ContentType)
	}
	got, err := storeadapter.UnmarshalEntityJSON(data, "")
	if err != nil {
		t.Fatal(err)
	}
	assertSameProperties(t, want, got)
	if err := b.run(t, "op-b", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rk":"Jones, A. 1"}`); err != nil {
		t.Fatalf("redelivery = %v, want nil", err)
	}
}

// TestArchiveArgs checks strict validation: every error is permanent and
// names the field and the rule.
func TestArchiveArgs(t *testing.T) {
	cases := []struct{ args, want string }{
		{`{"table":"Employees","to":"Archive","pk":"a","rk":"b","extra":1}`, "args.extra: unknown field"},
		{`{"table":"Employees","to":"Archive","rk":"b"}`, "args.pk: is required"},
		{`{"table":"Employees","to":"Archive","pk":5,"rk":"b"}`, "args.pk: must be a string"},
		{`{"table":"Em_ployees","to":"Archive","pk":"a","rk":"b"}`, "args.table:"},
		{`{"table":"Employees","pk":"a","rk":"b"}`, "args.to: is required"},
		{`{"table":"Employees","to":"employees","pk":"a","rk":"b"}`, "args.to: must differ"},
		{`{"table":"Employees","to":"Archive","pk":"a/b","rk":"b"}`, "args.pk:"},
		{`{"table":"Employees","to":"Archive","pk":"a","rk":"` + strings.Repeat("x", 513) + `"}`, "at most 512"},
		{`{"table":"Employees","to":"Archive","pk":"a","rk":"b","rkFrom":"a"}`, "not both"},
		{`{"table":"Employees","to":"Archive","pk":"a"}`, "args.rk: is required"},
		{`{"table":"Employees","to":"Archive","pk":"a","rkFrom":"m","rkTo":"c"}`, "args.rkTo: must be greater"},
		{`{"table":"Employees","toBlob":"Bad_Container","pk":"a","rk":"b"}`, "args.toBlob:"},
		{`[1,2]`, "args: must be a JSON object"},
		{``, "args: is required"},
	}
	k := (&jobs.Archiver{}).Kind()
	for _, c := range cases {
		_, err := k.ParseArgs(json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%.60s) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
