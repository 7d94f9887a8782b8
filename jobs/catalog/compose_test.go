package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent/tableexport"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// The composition tests run the kinds together as an application uses
// them, through the catalog's registry, on localstore: one kind's rows and
// blobs must never be another kind's blind spot.

const (
	staff   = "Employees"
	archive = "EmployeesArchive"
)

// sixIndexes declares one index of every kind and store on table.
func sixIndexes(table string) []indexes.Decl {
	return []indexes.Decl{
		{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
		{Name: "emailAll", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StoreTable},
		{Name: "lastName", Property: "LastName", Kind: indexes.KindList, Store: indexes.StorePartition},
		{Name: "lastNameAll", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreTable, Table: table + "ByLastName"},
		{Name: "lastNameBlob", Property: "LastName", Kind: indexes.KindList, Store: indexes.StoreBlob, Container: strings.ToLower(table) + "-index"},
		{Name: "lastNameRows", Property: "LastName", Kind: indexes.KindRows, Table: table + "LastNameRows"},
	}
}

// app is a localstore behind an instrument, the catalog's registry on it
// and the index set the workers use.
type app struct {
	t        *testing.T
	ctx      context.Context
	store    storeadapter.Store
	calls    *instrument.Counts
	registry *jobs.Registry
	set      *indexes.Set
	ops      int
}

func newApp(t *testing.T, cfg catalog.Config) *app {
	t.Helper()
	a := &app{t: t, ctx: context.Background(), calls: &instrument.Counts{}}
	a.store = instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{a.calls}})
	var err error
	if a.registry, err = catalog.NewRegistry(a.store, cfg); err != nil {
		t.Fatal(err)
	}
	deps, err := catalog.Deps(a.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.set = deps.Indexes
	for _, table := range []string{staff, archive} {
		if err := a.store.Tables().CreateTable(a.ctx, table); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.store.Container("exports").Create(a.ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// run runs one job of kind with args to its end (through its
// continuations) and returns its last result.
func (a *app) run(kind, args string) (string, error) {
	a.t.Helper()
	a.ops++
	env := jobs.Envelope{V: 1, ID: fmt.Sprintf("op-%d", a.ops), Kind: kind, Args: json.RawMessage(args)}
	for {
		text, err := jobs.Encode(env)
		if err != nil {
			a.t.Fatal(err)
		}
		task, err := a.registry.Decode(a.ctx, storeadapter.Message{Text: text, DequeueCount: 1})
		if err != nil {
			return "", err
		}
		h, _ := a.registry.Handler(kind)
		ctx, res := jobs.WithResult(a.ctx)
		err = h.Handle(ctx, task)
		if _, ok := jobs.AsContinue(err); ok {
			env.Continued++
			continue
		}
		return res.Text(), err
	}
}

// mustRun runs a job that must succeed.
func (a *app) mustRun(kind, args string) string {
	a.t.Helper()
	res, err := a.run(kind, args)
	if err != nil {
		a.t.Fatalf("%s %s: %v", kind, args, err)
	}
	return res
}

// employee writes an employee and has its indexes reconciled, as an
// application does.
func (a *app) employee(pk, rk, last string, extra map[string]any) {
	a.t.Helper()
	props := map[string]any{"LastName": last, "Email": strings.ToLower(last) + "." + rk + "@contoso.example"}
	for k, v := range extra {
		props[k] = v
	}
	if _, err := a.store.Tables().UpsertEntity(a.ctx, staff, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}, storeadapter.Replace); err != nil {
		a.t.Fatal(err)
	}
	if a.set.Declared(staff) {
		a.mustRun("index", fmt.Sprintf(`{"table":%q,"pk":%q,"rk":%q}`, staff, pk, rk))
	}
}

// rows returns the keys of a table's rows, reserved ones included, as
// "pk/rk".
func (a *app) rows(table string, f storeadapter.Filter) []string {
	a.t.Helper()
	var out []string
	q := storeadapter.Query{Filter: f}
	for {
		page, err := a.store.Tables().Query(a.ctx, table, q)
		if err != nil {
			a.t.Fatalf("query %s: %v", table, err)
		}
		for _, e := range page.Entities {
			out = append(out, e.PartitionKey+"/"+e.RowKey)
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return out
		}
	}
}

// reserved returns the keys of a table's reserved rows.
func (a *app) reserved(table string) []string { return a.rows(table, storeadapter.ReservedRows("")) }

// exportedKeys reads the rows of an export from its manifest (named at
// the end of an export result: "… to exports/<name>").
func (a *app) exportedKeys(result string) []string {
	a.t.Helper()
	i := strings.Index(result, " to exports/")
	if i < 0 {
		a.t.Fatalf("result %q names no manifest in exports", result)
	}
	name, _, _ := strings.Cut(result[i+len(" to exports/"):], " ")
	rep, err := tableexport.Verify(a.ctx, a.store.Container("exports"), name)
	if err != nil || !rep.OK() {
		a.t.Fatalf("verify %s: %+v, %v", name, rep, err)
	}
	var out []string
	for _, p := range rep.Manifest.Parts {
		err := tableexport.ReadPart(a.ctx, a.store.Container("exports"), p.Name, func(e storeadapter.Entity) error {
			out = append(out, e.PartitionKey+"/"+e.RowKey)
			return nil
		})
		if err != nil {
			a.t.Fatal(err)
		}
	}
	return out
}

// TestReservedRowsAreNotData: with every kind of index on a table (and an
// outbox row of a producer), archive ranges, export, purge and blobsync
// reconcile see the application's entities only — in what they move,
// export, delete and count (found by a new user: an archive of a
// 20-entity partition printed "moved 60 entities").
func TestReservedRowsAreNotData(t *testing.T) {
	cfg := catalog.Config{}
	cfg.Index.Tables = map[string][]indexes.Decl{staff: sixIndexes(staff)}
	a := newApp(t, cfg)
	for _, pk := range []string{"Ops", "Sales", "Support"} {
		for i := range 20 {
			a.employee(pk, fmt.Sprintf("%03d", i), []string{"Jones", "Smith", "Okafor"}[i%3], nil)
		}
		// A producer's outbox row, which belongs to tablekeeper too.
		if _, err := a.store.Tables().InsertEntity(a.ctx, staff, storeadapter.Entity{PartitionKey: pk, RowKey: storeadapter.ReservedPrefix + "o.op-" + pk}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.reserved(staff)); n < 3*(20+20+3+1) {
		t.Fatalf("the index rows were not written: %d reserved rows", n)
	}

	res := a.mustRun("export", fmt.Sprintf(`{"table":%q,"to":"exports"}`, staff))
	if !strings.HasPrefix(res, "exported 60 entities ") {
		t.Errorf("export of the table: %q, want 60 entities", res)
	}
	for _, k := range a.exportedKeys(res) {
		if _, rk, _ := strings.Cut(k, "/"); storeadapter.IsReserved(rk) {
			t.Errorf("the export holds reserved row %s", k)
		}
	}
	res = a.mustRun("export", fmt.Sprintf(`{"table":%q,"pk":"Sales","to":"exports"}`, staff))
	if got := a.exportedKeys(res); len(got) != 20 || !strings.HasPrefix(res, "exported 20 entities ") {
		t.Errorf("export of partition Sales: %q, %d rows; want 20", res, len(got))
	}

	res = a.mustRun("archive", fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Ops","rkFrom":""}`, staff, archive))
	if res != "moved 20 entities to table "+archive {
		t.Errorf("archive of partition Ops: %q, want 20 entities moved", res)
	}
	if got := a.rows(archive, storeadapter.Filter{}); len(got) != 20 {
		t.Errorf("the archive table holds %d rows, want the 20 entities: %v", len(got), got)
	}
	res = a.mustRun("archive", fmt.Sprintf(`{"table":%q,"toBlob":"exports/arch","pk":"Support","rkFrom":""}`, staff))
	if !strings.HasPrefix(res, "archived 20 entities in ") {
		t.Errorf("archive of partition Support to blobs: %q, want 20 entities", res)
	}

	res = a.mustRun("blobsync", fmt.Sprintf(`{"mode":"reconcile","table":%q,"container":"exports"}`, staff))
	if !strings.Contains(res, "20 entities") {
		t.Errorf("blobsync reconcile: %q, want 20 entities checked (the Sales partition)", res)
	}

	res = a.mustRun("purge", fmt.Sprintf(`{"table":%q}`, staff))
	if !strings.HasPrefix(res, "deleted 20 entities") {
		t.Errorf("purge of the table: %q, want 20 entities deleted", res)
	}
	for _, pk := range []string{"Ops", "Sales", "Support"} {
		if got := a.rows(staff, storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.ReservedRows("o."))); len(got) != 1 {
			t.Errorf("partition %s: the outbox row is gone after the purge: %v", pk, got)
		}
	}
}
