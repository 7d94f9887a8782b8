package index

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

func ptr(s string) *string { return &s }

func TestArgsValidate(t *testing.T) {
	for _, tc := range []struct {
		a    Args
		want string
	}{
		{Args{Table: "T"}, "args.table"},
		{Args{Table: "Tab", RK: ptr("r")}, "args.pk: is required"},
		{Args{Table: "Tab", PK: ptr("p")}, "args.rk: is required"},
		{Args{Table: "Tab", PK: ptr("p"), RK: ptr(storeadapter.ReservedPrefix + "m.x")}, "reserved"},
		{Args{Table: "Tab", Rebuild: true, RK: ptr("r")}, "args.rk: a rebuild"},
		{Args{Table: "Tab", PK: ptr("p/q"), RK: ptr("r")}, "args.pk"},
		{Args{Table: "Tab", Prune: true, Rebuild: true}, "args.prune: a prune is a job of its own"},
		{Args{Table: "Tab", Prune: true, PK: ptr("p")}, "args.pk: a prune covers"},
	} {
		if err := tc.a.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.a, err, tc.want)
		}
	}
	for _, a := range []Args{{Table: "Tab", PK: ptr("p"), RK: ptr("r")}, {Table: "Tab", Rebuild: true}, {Table: "Tab", Rebuild: true, PK: ptr("p")}, {Table: "Tab", Prune: true}} {
		if err := a.Validate(); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
}

// TestPruneMessage: a {"table","prune":true} message deletes the rows
// index's dead rows made dead more than the tombstone grace ago, and says
// how many in its result.
func TestPruneMessage(t *testing.T) {
	ctx := context.Background()
	store := localstore.New(localstore.Options{})
	cfg := indexes.Config{Tables: map[string][]indexes.Decl{"Employees": {{Name: "byName", Property: "Name", Kind: indexes.KindRows, Table: "EmployeesByName"}}}}
	now, err := indexes.Open(store, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tables().CreateTable(ctx, "Employees"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Jones", "Smith", "Brown"} {
		if _, err := store.Tables().UpsertEntity(ctx, "Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "001", Properties: map[string]any{"Name": name}}, storeadapter.Replace); err != nil {
			t.Fatal(err)
		}
		if _, err := now.Reconcile(ctx, "Employees", "Sales", "001"); err != nil {
			t.Fatal(err)
		}
	}
	late := clock.NewFake(time.Now().Add(24 * time.Hour)) // the prune, a day later
	x, err := indexes.Open(store, late, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(kit.Deps{Store: store, Clock: late, Indexes: x}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jobs.ParseArgs[Args](json.RawMessage(`{"table":"Employees","prune":true}`))
	if err != nil {
		t.Fatal(err)
	}
	rctx, res := jobs.WithResult(ctx)
	if err := w.Work(rctx, &jobs.Job[Args]{Envelope: jobs.Envelope{V: 1, ID: "op-prune", Kind: Kind}, Args: parsed}); err != nil {
		t.Fatal(err)
	}
	if got, want := res.Text(), "pruned: 0 table list markers folded, 2 expired dead rows deleted"; got != want {
		t.Errorf("result %q, want %q (Jones's and Smith's rows)", got, want)
	}
	ms, err := x.Lookup(ctx, "Employees", "byName", "Brown", indexes.LookupOptions{})
	if err != nil || len(ms) != 1 {
		t.Errorf("lookup Brown after the prune: %v, %v; want Sales/001", ms, err)
	}
}
