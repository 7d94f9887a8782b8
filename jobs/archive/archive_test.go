package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
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

// assertSameProperties checks that an archived copy holds exactly the
// source's properties, every type and value intact, and nothing else.
func assertSameProperties(t *testing.T, want, got storeadapter.Entity) {
	t.Helper()
	if len(got.Properties) != len(want.Properties) {
		t.Fatalf("got %d properties, want %d", len(got.Properties), len(want.Properties))
	}
	for name, w := range want.Properties {
		if g, ok := got.Properties[name]; !ok || !storeadapter.Equal(w, g) {
			t.Errorf("property %s: got %s, want %s", name, storeadapter.Format(g), storeadapter.Format(w))
		}
	}
}

type archiveBundle struct {
	store storeadapter.Store // localstore through the instrument
	calls *instrument.Counts
	arch  *archive.Worker
	// fault, when set, sees every storage call by its instrument.Op name
	// first and may fail it.
	fault func(op string) error
}

func newArchive(t *testing.T) *archiveBundle {
	t.Helper()
	b := &archiveBundle{}
	// A clock that stands still: every write of an entity must still give
	// it a later Timestamp, the version archive copies record.
	clock := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))
	b.calls = &instrument.Counts{}
	b.store = instrument.Wrap(localstore.New(localstore.Options{Clock: clock}), instrument.Options{
		Observers: []instrument.Observer{b.calls},
		Fault: func(_ context.Context, c instrument.Call) error {
			if b.fault != nil {
				return b.fault(string(c.Op))
			}
			return nil
		}})
	for _, name := range []string{"Employees", "EmployeesArchive"} {
		if err := b.store.Tables().CreateTable(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if b.arch, err = archive.New(kit.Plain(b.store), archive.Config{CheckpointTable: "Checkpoints"}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *archiveBundle) run(t *testing.T, id, args string) error {
	t.Helper()
	parsed, err := jobs.ParseArgs[archive.Args](json.RawMessage(args))
	if err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	return b.arch.Work(context.Background(), &jobs.Job[archive.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: archive.Kind}, Args: parsed})
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
	for _, step := range []string{"GetEntity", "Transact", "DeleteEntity"} {
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
		{`{"table":"Employees","to":"Archive","pk":"a","rk":"~tk.m.b"}`, `args.rk: must not start with "~tk.", which is reserved for tablekeeper's own rows`},
		{`{"table":"Employees","to":"Archive","pk":"a"}`, `args.rk: is required, or args.rkFrom and/or args.rkTo for a range ("rkFrom":"" moves the whole partition)`},
		{`{"table":"Employees","to":"Archive","pk":"a","rkFrom":"m","rkTo":"c"}`, "args.rkTo: must be greater"},
		// Azure orders keys by UTF-16 code units: U+1F600 (a surrogate
		// pair) sorts before U+E000, so this range is empty there.
		{`{"table":"Employees","to":"Archive","pk":"a","rkFrom":"\ue000","rkTo":"\ud83d\ude00"}`, "args.rkTo: must be greater"},
		{`{"table":"Employees","toBlob":"archive/../x","pk":"a","rk":"b"}`, `args.toBlob: "archive/../x": the prefix must not hold "." or ".." path segments`},
		{`{"table":"Employees","toBlob":"archive/./x","pk":"a","rk":"b"}`, `args.toBlob: "archive/./x": the prefix must not hold`},
		{`{"table":"Employees","toBlob":"archive/../../etc","pk":"a","rk":"b"}`, "the prefix must not hold"},
		{`{"table":"Employees","toBlob":"archive/x\\..","pk":"a","rk":"b"}`, "the prefix must not hold"},
		{`{"table":"Employees","toBlob":"archive/` + strings.Repeat("x", 1010) + `","pk":"a","rk":"b"}`, "args.toBlob: the blobs would be named like xxx"},
		{`{"table":"Employees","toBlob":"archive/` + strings.Repeat("x", 1010) + `","pk":"a","rkFrom":""}`, "must be 1-1024 characters"},
		{`{"table":"Employees","toBlob":"Bad_Container","pk":"a","rk":"b"}`, "args.toBlob:"},
		{`[1,2]`, "args: must be a JSON object"},
		{``, "args: is required"},
	}
	for _, c := range cases {
		_, err := jobs.ParseArgs[archive.Args](json.RawMessage(c.args))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseArgs(%.60s) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
	for _, valid := range []string{
		`{"table":"Employees","to":"Archive","pk":"a","rkFrom":"\ud83d\ude00","rkTo":"\ue000"}`, // U+1F600 < U+E000 on Azure
		`{"table":"Employees","to":"Archive","pk":"a","rkTo":"m"}`,                              // a missing bound is open
		`{"table":"Employees","to":"Archive","pk":"a","rkFrom":"","rkTo":""}`,                   // so is an empty one
		`{"table":"Employees","toBlob":"archive/a.b/..c/x..","pk":"a","rk":"b"}`,                // dots inside names are fine
	} {
		if _, err := jobs.ParseArgs[archive.Args](json.RawMessage(valid)); err != nil {
			t.Errorf("ParseArgs(%s) = %v, want it accepted", valid, err)
		}
	}
}

// stallFirstWrite makes the first write to a target (a table write or a
// blob put) wait until release is closed, after signalling on stalled: the
// mover that makes it holds what it read while others run.
func (b *archiveBundle) stallFirstWrite(t *testing.T) (stalled <-chan struct{}, release chan<- struct{}) {
	t.Helper()
	st, rel := make(chan struct{}), make(chan struct{})
	first := true
	var mu sync.Mutex
	b.fault = func(op string) error {
		switch op {
		case "InsertEntity", "UpsertEntity", "UpdateEntity", "Transact", "Put":
		default:
			return nil
		}
		mu.Lock()
		stall := first
		first = false
		mu.Unlock()
		if stall {
			close(st)
			<-rel
		}
		return nil
	}
	return st, rel
}

// within fails the test unless ch delivers within 10 s.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// versioned returns a small entity with a Version property.
func versioned(pk, rk string, v int64) storeadapter.Entity {
	return storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{"Version": v}}
}

// TestArchiveStaleMoverKeepsNewerCopy runs the lost-update interleaving of
// two movers: A reads version 1 and stalls before its target write; the
// application updates the source to version 2; B moves version 2 and
// deletes the source; A resumes. The archive must keep version 2, for a
// single entity, a range and the blob target.
func TestArchiveStaleMoverKeepsNewerCopy(t *testing.T) {
	const pk = "Sales"
	cases := []struct {
		name, args string
		rows       []string
		updated    string // the row the application updates
		copyOf     func(b *archiveBundle, rk string) (storeadapter.Entity, error)
	}{
		{"one", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"7"}`, []string{"7"}, "7", tableCopy},
		{"range", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":"","rkTo":"z"}`,
			[]string{"1", "2", "3", "4", "5", "6", "7", "8"}, "5", tableCopy},
		{"blob", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rk":"7"}`, []string{"7"}, "7", blobCopy},
		// A range to blobs goes through the exporter: A stalls at its
		// first write (the checkpoint before its first part), holding the
		// page it read; its part, written after B's, holds Version 1 of
		// every row, B's the newer Version 2 of the updated one, whose
		// line is the latest.
		{"blob range", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rkFrom":"1"}`,
			[]string{"1", "2", "3", "4"}, "3", rangeBlobCopy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newArchive(t)
			for _, rk := range c.rows {
				b.insert(t, versioned(pk, rk, 1))
			}
			stalled, release := b.stallFirstWrite(t)
			doneA := make(chan error, 1)
			go func() { doneA <- b.run(t, "op-A", c.args) }()
			within(t, "mover A to stall before its target write", stalled)

			if _, err := b.store.Tables().UpdateEntity(context.Background(), "Employees", versioned(pk, c.updated, 2), storeadapter.Replace, storeadapter.ETagAny); err != nil {
				t.Fatal(err)
			}
			if err := b.run(t, "op-B", c.args); err != nil {
				t.Fatalf("mover B: %v", err)
			}
			close(release)
			if err := within(t, "mover A to finish", doneA); err != nil {
				t.Fatalf("mover A = %v, want nil (B moved the entities)", err)
			}

			for _, rk := range c.rows {
				want := int64(1)
				if rk == c.updated {
					want = 2
				}
				got, err := c.copyOf(b, rk)
				if err != nil {
					t.Fatalf("copy of %s: %v", rk, err)
				}
				if got.Properties["Version"] != want {
					t.Errorf("copy of %s holds Version %v, want %d (the last version written)", rk, got.Properties["Version"], want)
				}
				if _, err := b.store.Tables().GetEntity(context.Background(), "Employees", pk, rk); !errors.Is(err, storeadapter.ErrNotFound) {
					t.Errorf("source %s still there: %v", rk, err)
				}
			}
		})
	}
}

func tableCopy(b *archiveBundle, rk string) (storeadapter.Entity, error) {
	return b.store.Tables().GetEntity(context.Background(), "EmployeesArchive", "Sales", rk)
}

func blobCopy(b *archiveBundle, rk string) (storeadapter.Entity, error) {
	data, _, err := b.store.Container("archive").Get(context.Background(), "2026/Employees/Sales/"+rk+".json")
	if err != nil {
		return storeadapter.Entity{}, err
	}
	return storeadapter.UnmarshalEntityJSON(data, "")
}

// rangeBlobLines returns every line of every export part under
// archive/2026/Employees/, by RowKey, in the order of the parts.
func rangeBlobLines(b *archiveBundle) (map[string][]storeadapter.Entity, error) {
	ctx := context.Background()
	c := b.store.Container("archive")
	out := map[string][]storeadapter.Entity{}
	for marker := ""; ; {
		page, err := c.List(ctx, "2026/Employees/", marker)
		if err != nil {
			return nil, err
		}
		for _, p := range page.Blobs {
			if !strings.HasSuffix(p.Name, ".jsonl") {
				continue
			}
			if err := tableexport.ReadPart(ctx, c, p.Name, func(e storeadapter.Entity) error {
				out[e.RowKey] = append(out[e.RowKey], e)
				return nil
			}); err != nil {
				return nil, err
			}
		}
		if marker = page.Next; marker == "" {
			return out, nil
		}
	}
}

// rangeBlobCopy returns the latest version (by Timestamp) of a row that
// the export parts of a range moved to blobs hold.
func rangeBlobCopy(b *archiveBundle, rk string) (storeadapter.Entity, error) {
	lines, err := rangeBlobLines(b)
	if err != nil {
		return storeadapter.Entity{}, err
	}
	vs := lines[rk]
	if len(vs) == 0 {
		return storeadapter.Entity{}, fmt.Errorf("no part holds RowKey %s: %w", rk, storeadapter.ErrNotFound)
	}
	latest := vs[0]
	for _, v := range vs[1:] {
		if v.Timestamp.After(latest.Timestamp) {
			latest = v
		}
	}
	return latest, nil
}

// seedRange inserts n entities of partition pk with RowKeys 00000, 00001, …
// in transactions.
func (b *archiveBundle) seedRange(t *testing.T, pk string, n int) {
	t.Helper()
	var ops []storeadapter.TableOp
	for i := range n {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: versioned(pk, fmt.Sprintf("%05d", i), 1)})
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := b.store.Tables().Transact(context.Background(), "Employees", batch); err != nil {
			t.Fatal(err)
		}
	}
}

// all returns every entity of a table.
func (b *archiveBundle) all(t *testing.T, table string) []storeadapter.Entity {
	t.Helper()
	var out []storeadapter.Entity
	q := storeadapter.Query{}
	for {
		p, err := b.store.Tables().Query(context.Background(), table, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Entities...)
		if q.Continuation = p.Next; q.Continuation == "" {
			return out
		}
	}
}

// TestArchiveRowThatKeepsChanging rewrites one row of a 300-row range
// before every write the movers make, so its delete never matches the ETag
// read. The other 299 rows move in that one delivery, and the error names
// the row; once the row stops changing, a redelivery moves it alone.
func TestArchiveRowThatKeepsChanging(t *testing.T) {
	b := newArchive(t)
	b.seedRange(t, "P", 300)
	const hot = "00150"
	version := int64(1)
	rewriting := true
	b.fault = func(op string) error {
		if rewriting && (op == "Transact" || op == "DeleteEntity") {
			version++
			// Ignore the outcome: the hook's own write must not fail the call.
			b.store.Tables().UpdateEntity(context.Background(), "Employees", versioned("P", hot, version), storeadapter.Replace, storeadapter.ETagAny)
		}
		return nil
	}
	args := `{"table":"Employees","to":"EmployeesArchive","pk":"P","rkFrom":""}`
	err := b.run(t, "op-hot", args)
	if err == nil || jobs.IsPermanent(err) || !strings.Contains(err.Error(), hot) {
		t.Fatalf("range with a row that keeps changing = %v, want a transient error naming %s", err, hot)
	}
	if left := keys(b.all(t, "Employees")); !slices.Equal(left, []string{"P/" + hot}) {
		t.Fatalf("source holds %d rows after the delivery (%v), want only %s", len(left), left[:min(len(left), 3)], hot)
	}
	if n := len(b.all(t, "EmployeesArchive")); n < 299 {
		t.Fatalf("archive holds %d rows, want the other 299 at least", n)
	}

	rewriting = false
	if err := b.run(t, "op-hot", args); err != nil {
		t.Fatalf("redelivery once the row settled = %v", err)
	}
	if left := b.all(t, "Employees"); len(left) != 0 {
		t.Fatalf("source holds %d rows, want 0", len(left))
	}
	archived := b.all(t, "EmployeesArchive")
	if len(archived) != 300 {
		t.Fatalf("archive holds %d rows, want 300", len(archived))
	}
	for _, e := range archived {
		want := int64(1)
		if e.RowKey == hot {
			want = version
		}
		if e.Properties["Version"] != want {
			t.Errorf("copy of %s holds Version %v, want %d", e.RowKey, e.Properties["Version"], want)
		}
	}
}

func keys(es []storeadapter.Entity) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.PartitionKey + "/" + e.RowKey
	}
	return out
}

// TestArchiveCallCount pins what a move costs when nothing races: one
// read, one target write and one delete for an entity; one query page and
// per 100 rows one target transaction and one delete transaction for a
// range (plus loading and clearing its checkpoint).
func TestArchiveCallCount(t *testing.T) {
	cases := []struct {
		name, args string
		rows       int
		want       int64
	}{
		{"one", `{"table":"Employees","to":"EmployeesArchive","pk":"P","rk":"00000"}`, 1, 3},
		{"blob", `{"table":"Employees","toBlob":"archive","pk":"P","rk":"00000"}`, 1, 3},
		{"range", `{"table":"Employees","to":"EmployeesArchive","pk":"P","rkFrom":""}`, 250, 1 + 1 + 3 + 3 + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newArchive(t)
			if err := b.store.Container("archive").Create(context.Background()); err != nil {
				t.Fatal(err)
			}
			b.seedRange(t, "P", c.rows)
			before := b.calls.Snapshot().Total().Calls
			if err := b.run(t, "op-count", c.args); err != nil {
				t.Fatal(err)
			}
			if got := b.calls.Snapshot().Total().Calls - before; got != c.want {
				t.Errorf("the move made %d storage calls, want %d", got, c.want)
			}
		})
	}
}

// checkMoved checks that the source table is empty and that the copy of
// each row of partition Sales holds the Version want gives.
func (b *archiveBundle) checkMoved(t *testing.T, copyOf func(b *archiveBundle, rk string) (storeadapter.Entity, error), want map[string]int64) {
	t.Helper()
	for rk, v := range want {
		got, err := copyOf(b, rk)
		if err != nil {
			t.Fatalf("copy of %s: %v", rk, err)
		}
		if got.Properties["Version"] != v {
			t.Errorf("copy of %s holds Version %v, want %d", rk, got.Properties["Version"], v)
		}
	}
	if left := keys(b.all(t, "Employees")); len(left) != 0 {
		t.Errorf("source holds %v, want nothing", left)
	}
}

// TestArchiveReplacesDifferingCopies prepares target copies for a range
// of five rows, each holding Version 1 in the source: row 1's copy holds
// other content (Version 0), row 2's the same content, row 3 has none.
// Rows 4 and 5 have copies of Version 9, and right after the range is
// read, the application updates row 4 to Version 5 and deletes row 5. A
// differing copy is replaced only while the source still holds the
// mover's version: rows 1–3 end with Version 1, row 4 with the newer
// Version 5, and row 5's copy is left as it is (its source is gone).
func TestArchiveReplacesDifferingCopies(t *testing.T) {
	cases := []struct {
		name, args, write string
		prepare           func(t *testing.T, b *archiveBundle, e storeadapter.Entity)
		copyOf            func(b *archiveBundle, rk string) (storeadapter.Entity, error)
	}{
		{"table", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`, "Transact",
			func(t *testing.T, b *archiveBundle, e storeadapter.Entity) {
				if _, err := b.store.Tables().InsertEntity(context.Background(), "EmployeesArchive", e); err != nil {
					t.Fatal(err)
				}
			}, tableCopy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newArchive(t)
			for _, rk := range []string{"1", "2", "3", "4", "5"} {
				b.insert(t, versioned("Sales", rk, 1))
			}
			c.prepare(t, b, versioned("Sales", "1", 0))
			c.prepare(t, b, versioned("Sales", "2", 1))
			c.prepare(t, b, versioned("Sales", "4", 9))
			c.prepare(t, b, versioned("Sales", "5", 9))
			changed := false
			b.fault = func(op string) error {
				if op != c.write || changed {
					return nil
				}
				changed = true
				ctx := context.Background()
				if _, err := b.store.Tables().UpdateEntity(ctx, "Employees", versioned("Sales", "4", 5), storeadapter.Replace, storeadapter.ETagAny); err != nil {
					return err
				}
				return b.store.Tables().DeleteEntity(ctx, "Employees", "Sales", "5", storeadapter.ETagAny)
			}
			if err := b.run(t, "op-1", c.args); err != nil {
				t.Fatal(err)
			}
			b.checkMoved(t, c.copyOf, map[string]int64{"1": 1, "2": 1, "3": 1, "4": 5, "5": 9})
		})
	}
}

// TestArchiveRecreatedEntity archives an entity, re-creates it in the
// source and archives it again: the archive must end with the re-created
// version, whatever Timestamps the two versions carry (localstore, like
// Azure, may give a re-created entity an older Timestamp than its
// predecessor's last update; the fake clock stands still here).
func TestArchiveRecreatedEntity(t *testing.T) {
	for _, args := range []string{
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"7"}`,
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`,
		`{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rk":"7"}`,
	} {
		t.Run(args, func(t *testing.T) {
			b := newArchive(t)
			b.insert(t, versioned("Sales", "7", 1))
			if _, err := b.store.Tables().UpdateEntity(context.Background(), "Employees", versioned("Sales", "7", 2), storeadapter.Replace, storeadapter.ETagAny); err != nil {
				t.Fatal(err)
			}
			if err := b.run(t, "op-1", args); err != nil {
				t.Fatal(err)
			}
			b.insert(t, versioned("Sales", "7", 3))
			if err := b.run(t, "op-2", args); err != nil {
				t.Fatal(err)
			}
			copyOf := tableCopy
			if strings.Contains(args, "toBlob") {
				copyOf = blobCopy
			}
			b.checkMoved(t, copyOf, map[string]int64{"7": 3}) // the re-created entity
		})
	}
}

// TestArchiveMostProperties archives entities with Azure's most custom
// properties (252) to a table, one and as a range: the copy adds none.
func TestArchiveMostProperties(t *testing.T) {
	wide := func(rk string) storeadapter.Entity {
		e := storeadapter.Entity{PartitionKey: "Sales", RowKey: rk, Properties: map[string]any{}}
		for i := range storeadapter.MaxCustomProperties {
			e.Properties[fmt.Sprintf("P%03d", i)] = int32(i)
		}
		return e
	}
	for _, args := range []string{
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"1"}`,
		`{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`,
	} {
		t.Run(args, func(t *testing.T) {
			b := newArchive(t)
			for _, rk := range []string{"1", "2", "3"} {
				b.insert(t, wide(rk))
			}
			if err := b.run(t, "op-1", args); err != nil {
				t.Fatal(err)
			}
			got, err := tableCopy(b, "1")
			if err != nil {
				t.Fatal(err)
			}
			assertSameProperties(t, wide("1"), got)
		})
	}
}

// TestArchiveBlobNamesWithDots archives keys that would make "." or ".."
// path segments, or segments ending with a dot, which Azure's URL handling
// would rewrite: a key's final dot is written %2E, so the name reads back
// to the key with url.PathUnescape.
func TestArchiveBlobNamesWithDots(t *testing.T) {
	cases := []struct{ pk, rk, name string }{
		{"..", "a.", "2026/Employees/.%2E/a%2E.json"},
		{".", ".", "2026/Employees/%2E/%2E.json"},
		{"x.", "..", "2026/Employees/x%2E/.%2E.json"},
		{"a.b", "c d.e", "2026/Employees/a.b/c%20d.e.json"},
	}
	b := newArchive(t)
	for _, c := range cases {
		want := versioned(c.pk, c.rk, 1)
		b.insert(t, want)
		raw, _ := json.Marshal(archive.Args{Table: "Employees", ToBlob: "archive/2026", PK: &c.pk, RK: &c.rk})
		if err := b.run(t, "op-"+c.name, string(raw)); err != nil {
			t.Fatalf("archive %q/%q: %v", c.pk, c.rk, err)
		}
		data, _, err := b.store.Container("archive").Get(context.Background(), c.name)
		if err != nil {
			t.Errorf("archive %q/%q: blob %s: %v", c.pk, c.rk, c.name, err)
			continue
		}
		got, err := storeadapter.UnmarshalEntityJSON(data, "")
		if err != nil {
			t.Fatal(err)
		}
		assertSameProperties(t, want, got)
	}
	page, err := b.store.Container("archive").List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page.Blobs {
		for _, seg := range strings.Split(p.Name, "/") {
			if seg == "." || seg == ".." || strings.HasSuffix(seg, ".") {
				t.Errorf("blob %s has the path segment %q", p.Name, seg)
			}
		}
	}
}

// interleave runs the hook once, at the n-th call of op the archive makes
// (counting from 1); calls the hook itself makes are not counted.
func (b *archiveBundle) interleave(op string, n int, hook func() error) {
	var mu sync.Mutex
	seen, running := 0, false
	b.fault = func(got string) error {
		mu.Lock()
		if got != op || running {
			mu.Unlock()
			return nil
		}
		seen++
		run := seen == n
		running = run
		mu.Unlock()
		if !run {
			return nil
		}
		err := hook()
		mu.Lock()
		running = false
		mu.Unlock()
		return err
	}
}

// TestArchiveCopyChangedBeforeReplace changes a copy between a mover's
// read of it and its conditional replace. The source holds Version 2 and
// the target an older copy (Version 1, from a mover whose delete lost to
// the update). Mover A reads the copy, confirms that the source still
// holds Version 2 and is about to replace the copy when the application
// writes a last version and mover B moves it. A's replace fails (412); A
// reads the copy again, finds other content, finds the source gone and
// leaves the copy: the archive holds the last version. That holds when the
// last version is new content (Version 3) and when it returns to the
// content the old copy holds (Version 1): B, finding its content there
// already, rewrites the copy (If-Match) before deleting the source, which
// is what makes A's replace fail.
func TestArchiveCopyChangedBeforeReplace(t *testing.T) {
	cases := []struct {
		name, args, write string
		rows              []string
		hot               string
		copyOf            func(b *archiveBundle, rk string) (storeadapter.Entity, error)
	}{
		{"one", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rk":"3"}`, "Transact", []string{"3"}, "3", tableCopy},
		{"range", `{"table":"Employees","to":"EmployeesArchive","pk":"Sales","rkFrom":""}`, "Transact", []string{"1", "2", "3", "4"}, "3", tableCopy},
		{"blob", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rk":"3"}`, "Put", []string{"3"}, "3", blobCopy},
		// A range to blobs has no copies to replace: its parts are
		// immutable (TestArchiveRangeToBlobConcurrentChanges).
	}
	for _, c := range cases {
		for _, last := range []int64{3, 1} {
			t.Run(fmt.Sprintf("%s last %d", c.name, last), func(t *testing.T) {
				b := newArchive(t)
				for _, rk := range c.rows {
					b.insert(t, versioned("Sales", rk, 1))
				}
				// A mover of Version 1 of the hot row copied it, then lost its
				// delete to the application's update to Version 2.
				if err := b.run(t, "op-0", strings.Replace(c.args, `"rkFrom":""`, `"rk":"`+c.hot+`"`, 1)); err != nil {
					t.Fatal(err)
				}
				b.insert(t, versioned("Sales", c.hot, 2))
				// A's writes: the insert that finds the copy, then the replace.
				b.interleave(c.write, 2, func() error {
					ctx := context.Background()
					if _, err := b.store.Tables().UpdateEntity(ctx, "Employees", versioned("Sales", c.hot, last), storeadapter.Replace, storeadapter.ETagAny); err != nil {
						return err
					}
					return b.run(t, "op-B", c.args)
				})
				if err := b.run(t, "op-A", c.args); err != nil {
					t.Fatalf("mover A: %v", err)
				}
				want := map[string]int64{}
				for _, rk := range c.rows {
					want[rk] = 1
				}
				want[c.hot] = last
				b.checkMoved(t, c.copyOf, want)
			})
		}
	}
}
