package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
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
	clock    *clock.Fake
	store    storeadapter.Store
	calls    *instrument.Counts
	registry *jobs.Registry
	set      *indexes.Set
	cfg      catalog.Config
	ops      int
	// fault, when set, sees every storage call first and may fail it.
	fault func(c instrument.Call) error
}

func newApp(t *testing.T, cfg catalog.Config) *app {
	t.Helper()
	a := &app{t: t, ctx: context.Background(), calls: &instrument.Counts{}, clock: clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)), cfg: cfg}
	a.store = instrument.Wrap(localstore.New(localstore.Options{Clock: a.clock}), instrument.Options{
		Observers: []instrument.Observer{a.calls},
		Fault: func(_ context.Context, c instrument.Call) error {
			if a.fault != nil {
				return a.fault(c)
			}
			return nil
		}})
	var err error
	if a.registry, err = catalog.NewRegistry(a.store, nil, cfg); err != nil {
		t.Fatal(err)
	}
	deps, err := catalog.Deps(a.store, nil, cfg)
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
	return a.runID(fmt.Sprintf("op-%d", a.ops), kind, args)
}

// runID is run with an operation id: a redelivery.
func (a *app) runID(id, kind, args string) (string, error) {
	a.t.Helper()
	env := jobs.Envelope{V: 1, ID: id, Kind: kind, Args: json.RawMessage(args)}
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

// checkIndexes fails unless every index declared on table equals the
// table: index check finds nothing, and every entry's entity exists with
// the value.
func (a *app) checkIndexes(table string) {
	a.t.Helper()
	for _, name := range a.set.Names(table) {
		res, err := a.set.Check(a.ctx, table, name, func(f indexes.Finding) error {
			a.t.Errorf("index check %s.%s: %s %s %s/%s %s", table, name, f.Problem, f.Value, f.PK, f.RK, f.Detail)
			return nil
		})
		if err != nil {
			a.t.Fatalf("index check %s.%s: %v", table, name, err)
		}
		if res.Problems() != 0 {
			a.t.Errorf("index check %s.%s: %+v", table, name, res)
		}
	}
}

// lookup returns the keys index name of table lists under value in
// partition pk.
func (a *app) lookup(table, name, value, pk string) []string {
	a.t.Helper()
	ms, err := a.set.Lookup(a.ctx, table, name, value, indexes.LookupOptions{PK: &pk})
	if err != nil {
		a.t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.PK+"/"+m.RK)
	}
	return out
}

// indexedConfig declares the six index kinds on Employees and a rows index
// and a partition copy on the archive table.
func indexedConfig() catalog.Config {
	cfg := catalog.Config{}
	cfg.Index.Tables = map[string][]indexes.Decl{
		staff: sixIndexes(staff),
		archive: {
			{Name: "lastName", Property: "LastName", Kind: indexes.KindRows, Table: archive + "ByLastName"},
			{Name: "email", Property: "Email", Kind: indexes.KindCopy, Store: indexes.StorePartition},
		},
	}
	return cfg
}

// TestMovesAndDeletesKeepIndexes: archive (one entity, a range, a range to
// blobs), purge and purgeday remove what they move or delete from the
// source's indexes, and an archive into a table with indexes of its own
// indexes the copies: every lookup equals the table afterwards (found by
// a new user: an archived employee was still listed under its last name,
// pointing at nothing).
func TestMovesAndDeletesKeepIndexes(t *testing.T) {
	a := newApp(t, indexedConfig())
	for _, pk := range []string{"Ops", "Sales", "Support", "Legal"} {
		for i := range 12 {
			a.employee(pk, fmt.Sprintf("%03d", i), []string{"Jones", "Smith", "Okafor"}[i%3], nil)
		}
	}
	a.checkIndexes(staff)

	before := a.calls.Snapshot().Total().Calls
	a.mustRun("archive", fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Sales","rk":"000"}`, staff, archive))
	t.Logf("archive of one entity indexed six ways in the source and two in the target: %d storage calls", a.calls.Snapshot().Total().Calls-before)
	if got := a.lookup(staff, "lastNameRows", "Jones", "Sales"); slices.Contains(got, "Sales/000") {
		t.Errorf("the archived Sales/000 is still listed under Jones: %v", got)
	}
	if got := a.lookup(archive, "lastName", "Jones", "Sales"); !slices.Equal(got, []string{"Sales/000"}) {
		t.Errorf("the archive table's index lists %v under Jones, want the archived Sales/000", got)
	}
	a.mustRun("archive", fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Ops","rkFrom":"","rkTo":"006"}`, staff, archive))
	a.mustRun("archive", fmt.Sprintf(`{"table":%q,"toBlob":"exports/arch","pk":"Support","rkFrom":"003"}`, staff))
	a.mustRun("purge", fmt.Sprintf(`{"table":%q,"pk":"Legal"}`, staff))
	a.mustRun("purge", fmt.Sprintf(`{"table":%q,"pk":"Sales","rkFrom":"008"}`, staff))
	a.checkIndexes(staff)
	a.checkIndexes(archive)
	for _, pk := range []string{"Ops", "Sales", "Support", "Legal"} {
		got := a.lookup(staff, "lastNameRows", "Smith", pk)
		want := a.rows(staff, storeadapter.ApplicationRows(storeadapter.And(storeadapter.PartitionEquals(pk), storeadapter.Compare("LastName", storeadapter.Eq, "Smith"))))
		if !slices.Equal(got, want) {
			t.Errorf("partition %s: Smith lists %v, the table holds %v", pk, got, want)
		}
	}
	if got := a.lookup(archive, "lastName", "Smith", "Ops"); len(got) != 2 {
		t.Errorf("the archive table lists %v under Smith in Ops, want the 2 archived", got)
	}
}

// TestRestoreAndCopyKeepIndexes: through the catalog, a mirror restore of
// an export puts back a purged partition, undoes a rename and deletes an
// employee added since, and a copy of a partition into the archive table
// indexes the copies: every index of both tables equals its table.
func TestRestoreAndCopyKeepIndexes(t *testing.T) {
	a := newApp(t, indexedConfig())
	for _, pk := range []string{"Ops", "Sales"} {
		for i := range 12 {
			a.employee(pk, fmt.Sprintf("%03d", i), []string{"Jones", "Smith", "Okafor"}[i%3], nil)
		}
	}
	res := a.mustRun("export", fmt.Sprintf(`{"table":%q,"to":"exports"}`, staff))
	i := strings.Index(res, " to exports/")
	if i < 0 {
		t.Fatalf("export result %q names no manifest", res)
	}
	manifest, _, _ := strings.Cut(res[i+len(" to "):], " ")
	a.mustRun("purge", fmt.Sprintf(`{"table":%q,"pk":"Sales"}`, staff))
	a.employee("Ops", "001", "Renamed", nil)
	a.employee("Ops", "100", "Newcomer", nil)

	res = a.mustRun("restore", fmt.Sprintf(`{"manifests":[%q],"mode":"mirror"}`, manifest))
	if !strings.Contains(res, "24 rows written, 0 skipped (exist), 1 deleted, indexes: ") || !strings.HasSuffix(res, ", 1 removed") {
		t.Errorf("restore: %q, want 24 rows written, 1 deleted and removed from the indexes", res)
	}
	a.checkIndexes(staff)
	for _, name := range []string{"Renamed", "Newcomer"} {
		if got := a.lookup(staff, "lastNameRows", name, "Ops"); len(got) != 0 {
			t.Errorf("%s still lists %v after the mirror", name, got)
		}
	}
	if got := a.lookup(staff, "lastNameAll", "Smith", "Sales"); !slices.Equal(got, []string{"Sales/001", "Sales/004", "Sales/007", "Sales/010"}) {
		t.Errorf("the restored Sales lists %v under Smith", got)
	}

	a.mustRun("copy", fmt.Sprintf(`{"table":%q,"target":%q,"pk":"Sales"}`, staff, archive))
	a.checkIndexes(archive)
	if got := a.lookup(archive, "lastName", "Smith", "Sales"); len(got) != 4 {
		t.Errorf("the archive table lists %v under Smith in Sales, want the 4 copied", got)
	}
}

// TestArchiveCrashKeepsIndexes fails an archive range's n-th storage call,
// for every n, and runs it again (the redelivery): the indexes of source
// and target always equal their tables, and every archived entity reads
// back whole, its offloaded property included.
func TestArchiveCrashKeepsIndexes(t *testing.T) {
	cfg := indexedConfig()
	cfg.Blobsync.Tables = largeentity.Layout{{Table: staff, Container: "staff-blobs", Properties: []string{"Bio"}}}
	for n := 1; ; n += 2 {
		a := newApp(t, cfg)
		if err := a.store.Container("staff-blobs").Create(a.ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			rk := fmt.Sprintf("%03d", i)
			a.employee("Sales", rk, []string{"Jones", "Smith"}[i%2], map[string]any{"Bio": "bio of " + rk})
			if i%2 == 0 {
				a.mustRun("blobsync", fmt.Sprintf(`{"mode":"offload","table":%q,"pk":"Sales","rk":%q}`, staff, rk))
			}
		}
		calls := 0
		a.fault = func(instrument.Call) error {
			if calls++; calls == n {
				return fmt.Errorf("crash at call %d: %w", n, storeadapter.ErrUnavailable)
			}
			return nil
		}
		args := fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Sales","rkFrom":""}`, staff, archive)
		_, err := a.runID("op-move", "archive", args)
		a.fault = nil
		if err == nil && calls < n {
			t.Logf("crashed at every other one of the move's %d calls", calls)
			return
		}
		if _, err := a.runID("op-move", "archive", args); err != nil {
			t.Fatalf("crash at call %d, then: %v", n, err)
		}
		a.checkIndexes(staff)
		a.checkIndexes(archive)
		for i := range 8 {
			rk := fmt.Sprintf("%03d", i)
			if got, err := largeentity.Get(a.ctx, a.store, archive, "Sales", rk); err != nil || got.Properties["Bio"] != "bio of "+rk {
				t.Errorf("archived %s: %v, Bio %v", rk, err, got.Properties["Bio"])
			}
		}
		if t.Failed() {
			t.Fatalf("crash at call %d", n)
		}
	}
}

// TestPurgedayDropsDayIndexes: a day table with declared indexes takes
// the indexes' tables and blob lists with it.
func TestPurgedayDropsDayIndexes(t *testing.T) {
	day := "Logins20261101"
	cfg := catalog.Config{}
	cfg.Index.Tables = map[string][]indexes.Decl{day: {
		{Name: "user", Property: "User", Kind: indexes.KindRows, Table: "LoginsByUser20261101"},
		{Name: "userBlob", Property: "User", Kind: indexes.KindList, Store: indexes.StoreBlob, Container: "logins-index"},
		{Name: "userHere", Property: "User", Kind: indexes.KindCopy, Store: indexes.StoreTable},
	}}
	a := newApp(t, cfg)
	if err := a.store.Tables().CreateTable(a.ctx, day); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := a.store.Tables().InsertEntity(a.ctx, day, storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprint(i), Properties: map[string]any{"User": fmt.Sprint("u", i)}}); err != nil {
			t.Fatal(err)
		}
		a.mustRun("index", fmt.Sprintf(`{"table":%q,"pk":"p","rk":"%d"}`, day, i))
	}
	res := a.mustRun("purgeday", `{"prefix":"Logins","keepDays":3}`)
	if !strings.Contains(res, "dropped their indexes' 1 tables and 5 blobs") {
		t.Errorf("purgeday: %q, want the index table and the 5 blob lists dropped", res)
	}
	for _, table := range []string{day, "LoginsByUser20261101"} {
		if _, err := a.store.Tables().Query(a.ctx, table, storeadapter.Query{}); !errors.Is(err, storeadapter.ErrTableNotFound) {
			t.Errorf("table %s after the purge: %v, want it gone", table, err)
		}
	}
	if page, err := a.store.Container("logins-index").List(a.ctx, "", ""); err != nil || len(page.Blobs) != 0 {
		t.Errorf("blob lists left: %v, %v", page.Blobs, err)
	}
}

// TestArchiveCarriesOffloadedBlobs: an entity whose large property
// blobsync offloaded is archived whole — to a table (its blob carried to
// the archived key, the reference rewritten), to a blob and to export
// parts (the property read back inline) — and stays whole after a
// reconcile of the source collects the source's blobs (found when
// blobsync was built: the archive kept references to blobs the next
// reconcile deleted, losing the property).
func TestArchiveCarriesOffloadedBlobs(t *testing.T) {
	cfg := catalog.Config{}
	cfg.Blobsync.Tables = largeentity.Layout{{Table: staff, Container: "staff-blobs", Prefix: "large", Properties: []string{"Bio"}}}
	// A grace of a minute: every kind that writes a blob before its
	// entity runs at most that long.
	cfg.Blobsync.MaxRunTime, cfg.Archive.MaxRunTime = jobs.Duration(time.Minute), jobs.Duration(time.Minute)
	cfg.Copy.MaxRunTime, cfg.Restore.MaxRunTime = jobs.Duration(time.Minute), jobs.Duration(time.Minute)
	cfg.Blobsync.Grace = jobs.Duration(time.Minute)
	a := newApp(t, cfg)
	if err := a.store.Container("staff-blobs").Create(a.ctx); err != nil {
		t.Fatal(err)
	}
	bio := func(rk string) string { return strings.Repeat("A long biography of "+rk+". ", 1000) }
	for _, rk := range []string{"001", "002", "003", "004", "005"} {
		a.employee("Sales", rk, "Jones", map[string]any{"Bio": bio(rk)})
		a.mustRun("blobsync", fmt.Sprintf(`{"mode":"offload","table":%q,"pk":"Sales","rk":%q}`, staff, rk))
	}
	raw, err := a.store.Tables().GetEntity(a.ctx, staff, "Sales", "001")
	if _, inline := raw.Properties["Bio"]; err != nil || inline {
		t.Fatalf("Bio was not offloaded: %v %v", err, raw.Properties)
	}

	res := a.mustRun("archive", fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Sales","rk":"001"}`, staff, archive))
	if !strings.Contains(res, "1 offloaded blobs carried") {
		t.Errorf("archive of one entity: %q, want its blob carried", res)
	}
	a.mustRun("archive", fmt.Sprintf(`{"table":%q,"to":%q,"pk":"Sales","rkFrom":"002","rkTo":"004"}`, staff, archive))
	a.mustRun("archive", fmt.Sprintf(`{"table":%q,"toBlob":"exports/one","pk":"Sales","rk":"004"}`, staff))
	res = a.mustRun("archive", fmt.Sprintf(`{"table":%q,"toBlob":"exports/range","pk":"Sales","rkFrom":"005"}`, staff))

	// The source's blobs are orphans now: a reconcile of the source table
	// after the grace period deletes them.
	a.clock.Advance(2 * time.Minute)
	w, err := blobsync.New(kit.Plain(a.store), cfg.Blobsync)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := w.Run(a.ctx, "op-reconcile", blobsync.Args{Mode: blobsync.ModeReconcile, Table: staff, Container: "staff-blobs"})
	if err != nil || rec.Reconcile.Orphans != 5 {
		t.Fatalf("reconcile of %s: %v, %+v; want the 5 source blobs collected", staff, err, rec.Reconcile)
	}
	for _, rk := range []string{"001", "002", "003"} {
		got, err := largeentity.Get(a.ctx, a.store, archive, "Sales", rk)
		if err != nil || got.Properties["Bio"] != bio(rk) {
			t.Errorf("archived %s after the source's reconcile: %v (Bio intact: %v)", rk, err, got.Properties["Bio"] == bio(rk))
		}
		ref, _, _ := largeentity.RefOf(mustGet(t, a, archive, rk), "Bio")
		if !strings.HasPrefix(ref.Name, archive+"/Sales/"+rk+"/Bio/") || ref.Container != "staff-blobs" {
			t.Errorf("archived %s names blob %s/%s, want one of its own under %s/Sales/%s/Bio/", rk, ref.Container, ref.Name, archive, rk)
		}
	}
	data, _, err := a.store.Container("exports").Get(a.ctx, "one/"+staff+"/Sales/004.json")
	if err != nil {
		t.Fatal(err)
	}
	one, err := storeadapter.UnmarshalEntityJSON(data, "")
	if err != nil || one.Properties["Bio"] != bio("004") || len(largeentity.Refs(one)) != 0 {
		t.Errorf("the blob archive of 004 holds %v, want Bio inline and no reference", one.Properties)
	}
	i := strings.Index(res, " to exports/")
	rep, err := tableexport.Verify(a.ctx, a.store.Container("exports"), strings.TrimSuffix(res[i+len(" to exports/"):strings.Index(res, ".json")+len(".json")], ""))
	if err != nil || !rep.OK() || len(rep.Manifest.Parts) == 0 {
		t.Fatalf("verify the range archive (%q): %+v, %v", res, rep, err)
	}
	err = tableexport.ReadPart(a.ctx, a.store.Container("exports"), rep.Manifest.Parts[0].Name, func(e storeadapter.Entity) error {
		if e.Properties["Bio"] != bio(e.RowKey) || len(largeentity.Refs(e)) != 0 {
			t.Errorf("the range archive's line of %s holds %d properties, want Bio inline and no reference", e.RowKey, len(e.Properties))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, a *app, table, rk string) storeadapter.Entity {
	t.Helper()
	e, err := a.store.Tables().GetEntity(a.ctx, table, "Sales", rk)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
