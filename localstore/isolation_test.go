package localstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestEntitiesShareNoMemoryWithCallers: whatever a caller does to the maps
// and []byte values it wrote or read, the stored entities do not change,
// through every way in (insert, upsert and merge, a transaction) and out
// (get, query with and without a selection), and an entity read before a
// replace keeps the values it was read with.
func TestEntitiesShareNoMemoryWithCallers(t *testing.T) {
	ctx := context.Background()
	tables := localstore.New(localstore.Options{Clock: clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))}).Tables()
	if err := tables.CreateTable(ctx, "Iso"); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := map[string]any{"Name": "a", "Bin": []byte{1, 2, 3}, "When": when}
	fresh := func() map[string]any { return map[string]any{"Name": "a", "Bin": []byte{1, 2, 3}, "When": when} }
	// scribble changes a map and its []byte values the way a careless
	// caller might.
	scribble := func(p map[string]any) {
		if b, ok := p["Bin"].([]byte); ok && len(b) > 0 {
			b[0] = 99
		}
		if b, ok := p["Extra"].([]byte); ok && len(b) > 0 {
			b[0] = 99
		}
		p["Name"] = "scribbled"
		p["Added"] = int64(1)
	}
	check := func(step, rk string, want map[string]any) {
		t.Helper()
		got, err := tables.GetEntity(ctx, "Iso", "p", rk)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !sameProps(got.Properties, want) {
			t.Errorf("%s: stored properties are %v, want %v", step, got.Properties, want)
		}
	}

	p := fresh()
	if _, err := tables.InsertEntity(ctx, "Iso", storeadapter.Entity{PartitionKey: "p", RowKey: "insert", Properties: p}); err != nil {
		t.Fatal(err)
	}
	scribble(p)
	check("after the caller changed what it inserted", "insert", want)

	got, err := tables.GetEntity(ctx, "Iso", "p", "insert")
	if err != nil {
		t.Fatal(err)
	}
	scribble(got.Properties)
	check("after the caller changed what it read", "insert", want)

	before, err := tables.GetEntity(ctx, "Iso", "p", "insert")
	if err != nil {
		t.Fatal(err)
	}
	p = fresh()
	p["Name"] = "b"
	if _, err := tables.UpsertEntity(ctx, "Iso", storeadapter.Entity{PartitionKey: "p", RowKey: "insert", Properties: p}, storeadapter.Replace); err != nil {
		t.Fatal(err)
	}
	scribble(p)
	if !sameProps(before.Properties, want) {
		t.Errorf("an entity read before a replace changed with it: %v, want %v", before.Properties, want)
	}
	replaced := fresh()
	replaced["Name"] = "b"
	check("after the caller changed what it upserted", "insert", replaced)

	patch := map[string]any{"Extra": []byte{7}}
	if _, err := tables.UpsertEntity(ctx, "Iso", storeadapter.Entity{PartitionKey: "p", RowKey: "insert", Properties: patch}, storeadapter.Merge); err != nil {
		t.Fatal(err)
	}
	scribble(patch)
	merged := fresh()
	merged["Name"], merged["Extra"] = "b", []byte{7}
	check("after the caller changed what it merged", "insert", merged)

	p = fresh()
	if err := tables.Transact(ctx, "Iso", []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "p", RowKey: "tx", Properties: p}}}); err != nil {
		t.Fatal(err)
	}
	scribble(p)
	check("after the caller changed what it wrote in a transaction", "tx", want)

	for _, sel := range [][]string{nil, {"Name", "Bin", "Extra"}} {
		page, err := tables.Query(ctx, "Iso", storeadapter.Query{Filter: storeadapter.PartitionEquals("p"), Select: sel})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entities) != 2 {
			t.Fatalf("query with Select %q returned %d entities, want 2", sel, len(page.Entities))
		}
		for _, e := range page.Entities {
			scribble(e.Properties)
		}
		check("after the caller changed what it queried", "insert", merged)
		check("after the caller changed what it queried", "tx", want)
	}
}

func sameProps(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !storeadapter.Equal(v, w) {
			return false
		}
	}
	return true
}
