package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// entity is short for storeadapter.Entity in the cases' literals.
type entity = storeadapter.Entity

// props is short for a property map in the cases' literals.
type props = map[string]any

func tableCases() []testCase {
	return []testCase{
		{"CreateDelete", testCreateDeleteTable},
		{"CreateExisting", testCreateExistingTable},
		{"DeleteMissing", testDeleteMissingTable},
		{"ListTables", testListTables},
		{"InvalidTableNames", testInvalidTableNames},
		{"MissingTable", testMissingTable},
		{"TableBeingDeleted", testTableBeingDeleted},
		{"NamesCaseInsensitive", testTableNamesCaseInsensitive},
		{"InsertGet", testInsertGet},
		{"EmptyKeys", testEmptyKeys},
		{"InsertExisting", testInsertExisting},
		{"GetMissing", testGetMissing},
		{"InputETagAndTimestampIgnored", testInputETagAndTimestampIgnored},
		{"Upsert", testUpsert},
		{"Update", testUpdate},
		{"Delete", testDelete},
		{"ETagChangesOnEveryWrite", testETagChanges},
		{"ValuesAreCopied", testValuesAreCopied},
		{"InvalidKeys", testInvalidKeys},
		{"KeyLimits", testKeyLimits},
		{"PropertyCount", testPropertyCount},
		{"PropertyNames", testPropertyNames},
		{"PropertyTypes", testPropertyTypes},
		{"PropertySizes", testPropertySizes},
		{"EntitySize", testEntitySize},
		{"InvalidModeAndIfMatch", testInvalidModeAndIfMatch},
		{"IfMatchNotWeakETag", testIfMatchNotWeakETag},
		{"EntityOfEscapedCharacters", testEntityOfEscapedCharacters},
	}
}

// listTables lists every table whose name starts with prefix, page by page,
// and reports an error if the names are not in order.
func (e *env) listTables(t *testing.T, prefix string) []string {
	t.Helper()
	var all []string
	token := ""
	for pages := 1; ; pages++ {
		names, next, err := e.tb.ListTables(e.ctx, prefix, token)
		if err != nil {
			t.Fatalf("ListTables(%q): %v", prefix, err)
		}
		all = append(all, names...)
		if next == "" {
			break
		}
		if pages > 1000 {
			t.Fatalf("ListTables(%q) still returns a token after %d pages", prefix, pages)
		}
		token = next
	}
	if !slices.IsSorted(all) {
		t.Errorf("ListTables(%q) = %q, not in name order", prefix, all)
	}
	return all
}

func testCreateDeleteTable(t *testing.T, e *env) {
	name := uniqueTableName()
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			e.tb.DeleteTable(context.Background(), name)
		}
	})
	if got := e.listTables(t, name); !slices.Equal(got, []string{name}) {
		t.Errorf("after CreateTable, ListTables(%q) = %q, want [%s]", name, got, name)
	}
	e.insert(t, name, entity{PartitionKey: "p", RowKey: "r"})

	if err := e.tb.DeleteTable(e.ctx, name); err != nil {
		t.Fatalf("DeleteTable(%s): %v", name, err)
	}
	deleted = true
	_, err := e.tb.GetEntity(e.ctx, name, "p", "r")
	checkErr(t, "GetEntity after DeleteTable", err, storeadapter.ErrTableNotFound)
	_, err = e.tb.Query(e.ctx, name, storeadapter.Query{})
	checkErr(t, "Query after DeleteTable", err, storeadapter.ErrTableNotFound)
	if got := e.listTables(t, name); len(got) != 0 {
		t.Errorf("after DeleteTable, ListTables(%q) = %q, want none", name, got)
	}
}

func testCreateExistingTable(t *testing.T, e *env) {
	name := e.newTable(t)
	checkErr(t, "CreateTable of an existing table", e.tb.CreateTable(e.ctx, name), storeadapter.ErrAlreadyExists)
	// Table names are case-insensitive (on Azurite too); the name keeps
	// the case it was created with.
	checkErr(t, "CreateTable of an existing table in upper case", e.tb.CreateTable(e.ctx, strings.ToUpper(name)), storeadapter.ErrAlreadyExists)
	if got := e.listTables(t, name); !slices.Equal(got, []string{name}) {
		t.Errorf("ListTables(%q) = %q, want [%s]", name, got, name)
	}
}

func testDeleteMissingTable(t *testing.T, e *env) {
	checkErr(t, "DeleteTable of a missing table", e.tb.DeleteTable(e.ctx, uniqueTableName()), storeadapter.ErrTableNotFound)
	name := e.newTable(t)
	checkNoErr(t, "DeleteTable", e.tb.DeleteTable(e.ctx, name))
	checkErr(t, "second DeleteTable", e.tb.DeleteTable(e.ctx, name), storeadapter.ErrTableNotFound)
}

func testListTables(t *testing.T, e *env) {
	base := uniqueTableName()
	create := []string{base + "b", base + "a", base + "c1", base + "c", base + "D"}
	for _, n := range create {
		if err := e.tb.CreateTable(e.ctx, n); err != nil {
			t.Fatalf("CreateTable(%s): %v", n, err)
		}
		t.Cleanup(func() { e.tb.DeleteTable(context.Background(), n) })
	}
	other := e.newTable(t) // a table outside the prefix
	tests := []struct {
		prefix string
		want   []string
	}{
		// Name order is ordinal: upper case sorts before lower case.
		{base, []string{base + "D", base + "a", base + "b", base + "c", base + "c1"}},
		{base + "c", []string{base + "c", base + "c1"}},
		{base + "c1", []string{base + "c1"}},
		{base + "e", nil},
		{other, []string{other}},
	}
	for _, tt := range tests {
		if d := diffLines(tt.want, e.listTables(t, tt.prefix)); d != "" {
			t.Errorf("ListTables(%q) (-want +got):\n%s", tt.prefix, d)
		}
	}
}

// invalidTableNames break Azure's table name rule.
var invalidTableNames = []string{
	"",
	"ab",                          // too short
	"a" + strings.Repeat("b", 63), // 64 characters
	"1abc",                        // starts with a digit
	"ab-c",
	"ab_c",
	"ab c",
	"abé",
	"tables", // reserved
	"Tables",
}

func testInvalidTableNames(t *testing.T, e *env) {
	ent := entity{PartitionKey: "p", RowKey: "r"}
	ops := []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: ent}}
	for _, name := range invalidTableNames {
		calls := []struct {
			op  string
			err error
		}{
			{"CreateTable", e.tb.CreateTable(e.ctx, name)},
			{"DeleteTable", e.tb.DeleteTable(e.ctx, name)},
			{"GetEntity", second(e.tb.GetEntity(e.ctx, name, "p", "r"))},
			{"InsertEntity", second(e.tb.InsertEntity(e.ctx, name, ent))},
			{"UpsertEntity", second(e.tb.UpsertEntity(e.ctx, name, ent, storeadapter.Merge))},
			{"UpdateEntity", second(e.tb.UpdateEntity(e.ctx, name, ent, storeadapter.Replace, storeadapter.ETagAny))},
			{"DeleteEntity", e.tb.DeleteEntity(e.ctx, name, "p", "r", storeadapter.ETagAny)},
			{"Query", second(e.tb.Query(e.ctx, name, storeadapter.Query{}))},
			{"Transact", e.tb.Transact(e.ctx, name, ops)},
		}
		for _, c := range calls {
			checkErr(t, c.op+"("+name+")", c.err, storeadapter.ErrInvalidInput)
		}
	}

	// The longest valid name works.
	name := uniqueTableName()
	name += strings.Repeat("x", 63-len(name))
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable of a 63-character name: %v", err)
	}
	checkNoErr(t, "DeleteTable of a 63-character name", e.tb.DeleteTable(e.ctx, name))
}

// second returns the error of a two-result call.
func second[T any](_ T, err error) error { return err }

func testMissingTable(t *testing.T, e *env) {
	name := uniqueTableName() // never created
	ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a"}}
	calls := []struct {
		op  string
		err error
	}{
		{"GetEntity", second(e.tb.GetEntity(e.ctx, name, "p", "r"))},
		{"InsertEntity", second(e.tb.InsertEntity(e.ctx, name, ent))},
		{"UpsertEntity Replace", second(e.tb.UpsertEntity(e.ctx, name, ent, storeadapter.Replace))},
		{"UpsertEntity Merge", second(e.tb.UpsertEntity(e.ctx, name, ent, storeadapter.Merge))},
		{"UpdateEntity", second(e.tb.UpdateEntity(e.ctx, name, ent, storeadapter.Merge, storeadapter.ETagAny))},
		{"DeleteEntity", e.tb.DeleteEntity(e.ctx, name, "p", "r", storeadapter.ETagAny)},
		{"Query", second(e.tb.Query(e.ctx, name, storeadapter.Query{}))},
		{"Query with a filter", second(e.tb.Query(e.ctx, name, storeadapter.Query{Filter: storeadapter.PartitionEquals("p")}))},
		{"Transact", e.tb.Transact(e.ctx, name, []storeadapter.TableOp{{Action: storeadapter.TxUpsertMerge, Entity: ent}})},
	}
	for _, c := range calls {
		checkErr(t, c.op+" on a missing table", c.err, storeadapter.ErrTableNotFound)
	}
	// None of those calls created the table.
	if got := e.listTables(t, name); len(got) != 0 {
		t.Errorf("ListTables(%q) = %q after calls on the missing table, want none", name, got)
	}
}

func testTableBeingDeleted(t *testing.T, e *env) {
	name := uniqueTableName()
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	e.insert(t, name, entity{PartitionKey: "p", RowKey: "old"})
	if err := e.tb.DeleteTable(e.ctx, name); err != nil {
		t.Fatalf("DeleteTable: %v", err)
	}
	err := e.tb.CreateTable(e.ctx, name)
	if e.h.Azurite {
		if err == nil {
			t.Cleanup(func() { e.tb.DeleteTable(context.Background(), name) })
		}
		t.Skip("Azurite frees a deleted table's name at once; Azure answers 409 TableBeingDeleted for at least 40 s " +
			"(Delete Table; docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	checkErr(t, "CreateTable right after DeleteTable", err, storeadapter.ErrTableBeingDeleted)
	if !storeadapter.IsTransient(err) {
		t.Errorf("IsTransient(%v) = false, want true: the name frees up later", err)
	}
	if !e.fake() {
		return // Azure keeps the name for 40 s or more; don't wait for it.
	}
	// Azure documents "at least 40 seconds".
	e.h.Advance(30 * time.Second)
	checkErr(t, "CreateTable 30 s after DeleteTable", e.tb.CreateTable(e.ctx, name), storeadapter.ErrTableBeingDeleted)
	e.h.Advance(10 * time.Minute)
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable 10 min after DeleteTable: %v", err)
	}
	t.Cleanup(func() { e.tb.DeleteTable(context.Background(), name) })
	if got, _ := e.queryAll(t, name, storeadapter.Query{}); len(got) != 0 {
		t.Errorf("re-created table holds %q, want no entities", keysOf(got))
	}
}

func testInsertGet(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := entity{PartitionKey: "pk", RowKey: "rk", Properties: props{"Name": "Ada", "Age": int32(36), "Admin": true}}
	before := e.now()
	etag := e.insert(t, tbl, want)
	after := e.now()
	got := e.get(t, tbl, "pk", "rk")
	checkEntity(t, "GetEntity", want, got)
	if got.ETag != etag {
		t.Errorf("GetEntity ETag = %q, want the ETag InsertEntity returned, %q", got.ETag, etag)
	}
	e.checkRecent(t, "Timestamp", got.Timestamp, before, after)

	// An entity without custom properties.
	e.insert(t, tbl, entity{PartitionKey: "pk", RowKey: "bare"})
	if got := e.get(t, tbl, "pk", "bare"); len(got.Properties) != 0 {
		t.Errorf("entity inserted without properties reads back with %v", got.Properties)
	}
}

func testEmptyKeys(t *testing.T, e *env) {
	// Azure allows empty PartitionKey and RowKey values, but the Azure SDK
	// for Go cannot get, update or delete such an entity, so ValidateKey
	// refuses them and every store must too, before calling anything.
	tbl := e.newTable(t)
	for _, k := range [][2]string{{"", ""}, {"", "r"}, {"p", ""}} {
		pk, rk := k[0], k[1]
		ent := entity{PartitionKey: pk, RowKey: rk, Properties: props{"A": "a"}}
		checkErr(t, "InsertEntity with an empty key", second(e.tb.InsertEntity(e.ctx, tbl, ent)), storeadapter.ErrInvalidInput)
		checkErr(t, "UpsertEntity with an empty key", second(e.tb.UpsertEntity(e.ctx, tbl, ent, storeadapter.Merge)), storeadapter.ErrInvalidInput)
		checkErr(t, "UpdateEntity with an empty key", second(e.tb.UpdateEntity(e.ctx, tbl, ent, storeadapter.Replace, storeadapter.ETagAny)), storeadapter.ErrInvalidInput)
		_, err := e.tb.GetEntity(e.ctx, tbl, pk, rk)
		checkErr(t, "GetEntity with an empty key", err, storeadapter.ErrInvalidInput)
		checkErr(t, "DeleteEntity with an empty key", e.tb.DeleteEntity(e.ctx, tbl, pk, rk, storeadapter.ETagAny), storeadapter.ErrInvalidInput)
		err = e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{{Action: storeadapter.TxUpsertMerge, Entity: ent}})
		checkErr(t, "Transact with an empty key", err, storeadapter.ErrInvalidInput)
	}
}

func testInsertExisting(t *testing.T, e *env) {
	tbl := e.newTable(t)
	etag := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(1)}})
	_, err := e.tb.InsertEntity(e.ctx, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(2)}})
	checkErr(t, "InsertEntity of an existing entity", err, storeadapter.ErrAlreadyExists)
	got := e.get(t, tbl, "p", "r")
	checkEntity(t, "entity after the failed insert", entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(1)}}, got)
	if got.ETag != etag {
		t.Errorf("ETag after the failed insert = %q, want %q unchanged", got.ETag, etag)
	}
}

func testGetMissing(t *testing.T, e *env) {
	tbl := e.newTable(t)
	_, err := e.tb.GetEntity(e.ctx, tbl, "p", "r")
	checkItemNotFound(t, "GetEntity in an empty table", err)
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r"})
	for _, k := range [][2]string{{"p", "r2"}, {"p2", "r"}, {"P", "r"}, {"p", "R"}} {
		_, err := e.tb.GetEntity(e.ctx, tbl, k[0], k[1])
		checkItemNotFound(t, "GetEntity("+k[0]+"/"+k[1]+")", err)
	}
}

func testInputETagAndTimestampIgnored(t *testing.T, e *env) {
	tbl := e.newTable(t)
	bogus := `W/"datetime'2000-01-01T00%3A00%3A00.0000000Z'"`
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(1)}, ETag: bogus, Timestamp: old}
	before := e.now()
	etag := e.insert(t, tbl, ent)
	after := e.now()
	if etag == bogus {
		t.Errorf("InsertEntity returned the input ETag %q", etag)
	}
	got := e.get(t, tbl, "p", "r")
	e.checkRecent(t, "Timestamp of an entity inserted with an old Timestamp", got.Timestamp, before, after)

	// Entity.ETag plays no part in conditions: only ifMatch does.
	ent.ETag = etag
	_, err := e.tb.UpdateEntity(e.ctx, tbl, ent, storeadapter.Replace, bogus)
	checkErr(t, "UpdateEntity with the current Entity.ETag but a stale ifMatch", err, storeadapter.ErrPreconditionFailed)
	ent.ETag = bogus
	_, err = e.tb.UpdateEntity(e.ctx, tbl, ent, storeadapter.Replace, etag)
	checkNoErr(t, "UpdateEntity with a stale Entity.ETag but the current ifMatch", err)
	_, err = e.tb.UpsertEntity(e.ctx, tbl, ent, storeadapter.Replace)
	checkNoErr(t, "UpsertEntity with a stale Entity.ETag", err)
}

func testUpsert(t *testing.T, e *env) {
	tbl := e.newTable(t)
	upsert := func(ent entity, mode storeadapter.UpdateMode, want props) {
		t.Helper()
		etag, err := e.tb.UpsertEntity(e.ctx, tbl, ent, mode)
		if err != nil {
			t.Fatalf("UpsertEntity(%s, mode %d): %v", keyOf(ent), mode, err)
		}
		got := e.get(t, tbl, ent.PartitionKey, ent.RowKey)
		checkEntity(t, "after UpsertEntity", entity{PartitionKey: ent.PartitionKey, RowKey: ent.RowKey, Properties: want}, got)
		if etag == "" || got.ETag != etag {
			t.Errorf("UpsertEntity returned ETag %q, GetEntity reads %q; want the same, non-empty", etag, got.ETag)
		}
	}
	// Upsert inserts a missing entity, in either mode.
	upsert(entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a", "B": int32(2)}}, storeadapter.Replace, props{"A": "a", "B": int32(2)})
	upsert(entity{PartitionKey: "p", RowKey: "m", Properties: props{"A": "a"}}, storeadapter.Merge, props{"A": "a"})
	// Replace drops the properties not given.
	upsert(entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a2"}}, storeadapter.Replace, props{"A": "a2"})
	// Merge keeps them, and may change a property's type.
	upsert(entity{PartitionKey: "p", RowKey: "r", Properties: props{"C": true}}, storeadapter.Merge, props{"A": "a2", "C": true})
	upsert(entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": int64(7)}}, storeadapter.Merge, props{"A": int64(7), "C": true})
	// Replace with no properties leaves none.
	upsert(entity{PartitionKey: "p", RowKey: "r"}, storeadapter.Replace, props{})
}

func testUpdate(t *testing.T, e *env) {
	tbl := e.newTable(t)
	etag0 := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a", "B": int32(2)}})
	update := func(ent entity, mode storeadapter.UpdateMode, ifMatch string, want props) string {
		t.Helper()
		etag, err := e.tb.UpdateEntity(e.ctx, tbl, ent, mode, ifMatch)
		if err != nil {
			t.Fatalf("UpdateEntity(%s, mode %d, %q): %v", keyOf(ent), mode, ifMatch, err)
		}
		got := e.get(t, tbl, ent.PartitionKey, ent.RowKey)
		checkEntity(t, "after UpdateEntity", entity{PartitionKey: "p", RowKey: "r", Properties: want}, got)
		if etag == "" || got.ETag != etag {
			t.Errorf("UpdateEntity returned ETag %q, GetEntity reads %q; want the same, non-empty", etag, got.ETag)
		}
		return etag
	}
	etag1 := update(entity{PartitionKey: "p", RowKey: "r", Properties: props{"C": 0.5}}, storeadapter.Merge, storeadapter.ETagAny, props{"A": "a", "B": int32(2), "C": 0.5})
	etag2 := update(entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "z"}}, storeadapter.Replace, etag1, props{"A": "z"})
	etag3 := update(entity{PartitionKey: "p", RowKey: "r", Properties: props{"D": int64(4)}}, storeadapter.Merge, etag2, props{"A": "z", "D": int64(4)})

	for _, stale := range []string{etag0, etag1, etag2} {
		for _, mode := range []storeadapter.UpdateMode{storeadapter.Replace, storeadapter.Merge} {
			_, err := e.tb.UpdateEntity(e.ctx, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"X": "x"}}, mode, stale)
			checkErr(t, "UpdateEntity with a stale ETag", err, storeadapter.ErrPreconditionFailed)
		}
	}
	got := e.get(t, tbl, "p", "r")
	checkEntity(t, "after failed updates", entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "z", "D": int64(4)}}, got)
	if got.ETag != etag3 {
		t.Errorf("ETag after failed updates = %q, want %q unchanged", got.ETag, etag3)
	}

	// Update never creates: a missing entity is ErrNotFound, whatever the ETag.
	for _, ifMatch := range []string{storeadapter.ETagAny, etag3} {
		for _, mode := range []storeadapter.UpdateMode{storeadapter.Replace, storeadapter.Merge} {
			_, err := e.tb.UpdateEntity(e.ctx, tbl, entity{PartitionKey: "p", RowKey: "missing"}, mode, ifMatch)
			checkItemNotFound(t, "UpdateEntity of a missing entity", err)
		}
	}
	e.checkGone(t, tbl, "p", "missing")
}

func testDelete(t *testing.T, e *env) {
	tbl := e.newTable(t)
	etag0 := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "a"}})
	etag1, err := e.tb.UpsertEntity(e.ctx, tbl, entity{PartitionKey: "p", RowKey: "r", Properties: props{"A": "b"}}, storeadapter.Replace)
	if err != nil {
		t.Fatal(err)
	}
	checkErr(t, "DeleteEntity with a stale ETag", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", etag0), storeadapter.ErrPreconditionFailed)
	e.get(t, tbl, "p", "r") // still there
	checkNoErr(t, "DeleteEntity with the current ETag", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", etag1))
	e.checkGone(t, tbl, "p", "r")
	checkItemNotFound(t, "DeleteEntity of a deleted entity", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", storeadapter.ETagAny))
	checkItemNotFound(t, "DeleteEntity of a deleted entity with its old ETag", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", etag1))

	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r"})
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "other"})
	checkNoErr(t, "DeleteEntity with ETagAny", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", storeadapter.ETagAny))
	e.checkGone(t, tbl, "p", "r")
	e.get(t, tbl, "p", "other") // untouched
}

func testETagChanges(t *testing.T, e *env) {
	tbl := e.newTable(t)
	seen := map[string]string{} // ETag -> the write that produced it
	check := func(step, etag string) {
		t.Helper()
		got := e.get(t, tbl, "p", "r")
		if etag == "" {
			etag = got.ETag // Transact returns no ETags
		}
		switch {
		case etag == "":
			t.Errorf("%s: empty ETag", step)
		case got.ETag != etag:
			t.Errorf("%s returned ETag %q, but GetEntity reads %q", step, etag, got.ETag)
		case seen[etag] != "":
			t.Errorf("%s left ETag %q, the same as %s", step, etag, seen[etag])
		}
		seen[etag] = step
		if again := e.get(t, tbl, "p", "r"); again.ETag != got.ETag {
			t.Errorf("after %s, reading twice gave ETags %q and %q", step, got.ETag, again.ETag)
		}
	}
	ent := func(v int32) entity { return entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": v}} }
	etag := e.insert(t, tbl, ent(1))
	check("InsertEntity", etag)
	etag, err := e.tb.UpsertEntity(e.ctx, tbl, ent(2), storeadapter.Replace)
	checkNoErr(t, "UpsertEntity Replace", err)
	check("UpsertEntity Replace", etag)
	// Writing the same values again still changes the ETag.
	etag, err = e.tb.UpsertEntity(e.ctx, tbl, ent(2), storeadapter.Merge)
	checkNoErr(t, "UpsertEntity Merge", err)
	check("UpsertEntity Merge", etag)
	etag, err = e.tb.UpdateEntity(e.ctx, tbl, ent(2), storeadapter.Replace, storeadapter.ETagAny)
	checkNoErr(t, "UpdateEntity Replace", err)
	check("UpdateEntity Replace", etag)
	etag, err = e.tb.UpdateEntity(e.ctx, tbl, ent(3), storeadapter.Merge, etag)
	checkNoErr(t, "UpdateEntity Merge", err)
	check("UpdateEntity Merge", etag)
	e.transact(t, tbl, []storeadapter.TableOp{{Action: storeadapter.TxUpdateMerge, Entity: ent(4), IfMatch: etag}})
	check("Transact TxUpdateMerge", "")
	e.transact(t, tbl, []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: ent(5)}})
	check("Transact TxUpsertReplace", "")
}

func testValuesAreCopied(t *testing.T, e *env) {
	tbl := e.newTable(t)
	bin := []byte{1, 2, 3}
	in := entity{PartitionKey: "p", RowKey: "r", Properties: props{"B": bin, "S": "s"}}
	e.insert(t, tbl, in)
	if len(in.Properties) != 2 {
		t.Errorf("InsertEntity changed the caller's property map: %v", in.Properties)
	}
	bin[0] = 99 // must not reach the stored entity
	want := entity{PartitionKey: "p", RowKey: "r", Properties: props{"B": []byte{1, 2, 3}, "S": "s"}}
	got := e.get(t, tbl, "p", "r")
	checkEntity(t, "after changing the inserted slice", want, got)
	if b, ok := got.Properties["B"].([]byte); ok && len(b) > 1 {
		b[1] = 99 // nor may changing what was read
	}
	got.Properties["S"] = "changed"
	checkEntity(t, "after changing a read entity", want, e.get(t, tbl, "p", "r"))
}

// invalidKeys break Azure's key rules.
var invalidKeys = []struct {
	name, key string
}{
	{"slash", "a/b"},
	{"backslash", `a\b`},
	{"hash", "a#b"},
	{"question mark", "a?b"},
	{"NUL", "a\x00b"},
	{"tab", "a\tb"},
	{"newline", "a\nb"},
	{"carriage return", "\r"},
	{"unit separator", "a\x1fb"},
	{"DEL", "a\x7fb"},
	{"C1 control", "a\u0085b"},
	{"C1 control U+009F", "\u009f"},
	{"invalid UTF-8", "a\xffb"},
	{"513 characters", strings.Repeat("k", storeadapter.MaxKeyChars+1)},
	{"257 emoji (514 UTF-16 units)", strings.Repeat("😀", storeadapter.MaxKeyChars/2+1)},
}

func testInvalidKeys(t *testing.T, e *env) {
	// The table does not exist: validation must answer before the service.
	tbl := uniqueTableName()
	for _, k := range invalidKeys {
		t.Run(k.name, func(t *testing.T) {
			for _, ent := range []entity{{PartitionKey: k.key, RowKey: "r"}, {PartitionKey: "p", RowKey: k.key}} {
				pk, rk := ent.PartitionKey, ent.RowKey
				calls := []struct {
					op  string
					err error
				}{
					{"InsertEntity", second(e.tb.InsertEntity(e.ctx, tbl, ent))},
					{"UpsertEntity", second(e.tb.UpsertEntity(e.ctx, tbl, ent, storeadapter.Replace))},
					{"UpdateEntity", second(e.tb.UpdateEntity(e.ctx, tbl, ent, storeadapter.Merge, storeadapter.ETagAny))},
					{"GetEntity", second(e.tb.GetEntity(e.ctx, tbl, pk, rk))},
					{"DeleteEntity", e.tb.DeleteEntity(e.ctx, tbl, pk, rk, storeadapter.ETagAny)},
					{"Transact", e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: ent}})},
					{"Transact TxDelete", e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{{Action: storeadapter.TxDelete, Entity: ent, IfMatch: storeadapter.ETagAny}})},
				}
				for _, c := range calls {
					checkErr(t, c.op+" with a bad key", c.err, storeadapter.ErrInvalidInput)
				}
			}
		})
	}
}

func testKeyLimits(t *testing.T, e *env) {
	tbl := e.newTable(t)
	keys := []struct {
		name, pk, rk string
	}{
		{"512 characters", strings.Repeat("p", storeadapter.MaxKeyChars), strings.Repeat("r", storeadapter.MaxKeyChars)},
		{"256 emoji (512 UTF-16 units)", "p", strings.Repeat("😀", storeadapter.MaxKeyChars/2)},
		{"punctuation and non-ASCII", `p'q "x" !$&()*+,-.:;<=>@[]^_{|}~`, `r' or '1' eq '1 é日本😀`},
		{"spaces", " p ", " "},
	}
	for _, k := range keys {
		want := entity{PartitionKey: k.pk, RowKey: k.rk, Properties: props{"Case": k.name}}
		e.insert(t, tbl, want)
		checkEntity(t, "GetEntity with keys of "+k.name, want, e.get(t, tbl, k.pk, k.rk))
		page, err := e.tb.Query(e.ctx, tbl, storeadapter.Query{Filter: storeadapter.And(
			storeadapter.PartitionEquals(k.pk), storeadapter.Compare("RowKey", storeadapter.Eq, k.rk))})
		switch {
		case err != nil:
			t.Errorf("Query for keys of %s: %v", k.name, err)
		case len(page.Entities) != 1:
			t.Errorf("Query for keys of %s returned %q, want exactly that entity", k.name, keysOf(page.Entities))
		default:
			checkEntity(t, "Query with keys of "+k.name, want, page.Entities[0])
		}
		checkNoErr(t, "UpdateEntity with keys of "+k.name, second(e.tb.UpdateEntity(e.ctx, tbl, want, storeadapter.Merge, storeadapter.ETagAny)))
		checkNoErr(t, "DeleteEntity with keys of "+k.name, e.tb.DeleteEntity(e.ctx, tbl, k.pk, k.rk, storeadapter.ETagAny))
		e.checkGone(t, tbl, k.pk, k.rk)
	}
}

// manyProps returns n properties P000, P001, … holding their index.
func manyProps(n int) props {
	p := make(props, n)
	for i := range n {
		p[propName(i)] = int32(i)
	}
	return p
}

func propName(i int) string {
	return "P" + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

func testPropertyCount(t *testing.T, e *env) {
	tooMany := entity{PartitionKey: "p", RowKey: "r", Properties: manyProps(storeadapter.MaxCustomProperties + 1)}
	missing := uniqueTableName()
	// Azurite accepts more than 255 properties; our validation must not.
	checkErr(t, "InsertEntity with 253 properties", second(e.tb.InsertEntity(e.ctx, missing, tooMany)), storeadapter.ErrTooLarge)
	checkErr(t, "UpsertEntity with 253 properties", second(e.tb.UpsertEntity(e.ctx, missing, tooMany, storeadapter.Merge)), storeadapter.ErrTooLarge)
	checkErr(t, "UpdateEntity with 253 properties", second(e.tb.UpdateEntity(e.ctx, missing, tooMany, storeadapter.Merge, storeadapter.ETagAny)), storeadapter.ErrTooLarge)
	checkErr(t, "Transact with 253 properties", e.tb.Transact(e.ctx, missing, []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: tooMany}}), storeadapter.ErrTooLarge)

	tbl := e.newTable(t)
	most := entity{PartitionKey: "p", RowKey: "r", Properties: manyProps(storeadapter.MaxCustomProperties)}
	e.insert(t, tbl, most)
	checkEntity(t, "entity with 252 properties", most, e.get(t, tbl, "p", "r"))
}

func testPropertyNames(t *testing.T, e *env) {
	missing := uniqueTableName()
	bad := []string{
		"", "1abc", "a-b", "a b", "a.b", "odata.type", "é", "a$",
		"PartitionKey", "RowKey", "Timestamp",
		strings.Repeat("n", storeadapter.MaxPropertyNameChars+1),
	}
	for _, name := range bad {
		ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{"Good": "g", name: "v"}}
		checkErr(t, "InsertEntity with property name "+name, second(e.tb.InsertEntity(e.ctx, missing, ent)), storeadapter.ErrInvalidInput)
		checkErr(t, "UpsertEntity with property name "+name, second(e.tb.UpsertEntity(e.ctx, missing, ent, storeadapter.Replace)), storeadapter.ErrInvalidInput)
	}

	tbl := e.newTable(t)
	good := entity{PartitionKey: "p", RowKey: "r", Properties: props{
		"a": "lower", "Z": "upper", "_u": "underscore", "a1_B2": "mixed",
		strings.Repeat("n", storeadapter.MaxPropertyNameChars): "255 characters",
	}}
	e.insert(t, tbl, good)
	checkEntity(t, "entity with unusual valid property names", good, e.get(t, tbl, "p", "r"))
}

func testPropertyTypes(t *testing.T, e *env) {
	missing := uniqueTableName()
	s := "s"
	bad := []struct {
		name  string
		value any
	}{
		{"int", 1},
		{"nil", nil},
		{"uint8", uint8(1)},
		{"int16", int16(1)},
		{"uint64", uint64(1)},
		{"float32", float32(1)},
		{"time.Duration", time.Second},
		{"*string", &s},
		{"[16]byte", [16]byte{}},
		{"[]string", []string{"a"}},
		{"map", map[string]any{}},
		{"struct", struct{}{}},
		{"invalid UTF-8 string", "a\xffb"},
		{"zero time.Time (year 1)", time.Time{}},
		{"DateTime before 1601", time.Date(1600, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"DateTime after 9999", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, b := range bad {
		ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": b.value}}
		calls := []struct {
			op  string
			err error
		}{
			{"InsertEntity", second(e.tb.InsertEntity(e.ctx, missing, ent))},
			{"UpsertEntity", second(e.tb.UpsertEntity(e.ctx, missing, ent, storeadapter.Merge))},
			{"UpdateEntity", second(e.tb.UpdateEntity(e.ctx, missing, ent, storeadapter.Replace, storeadapter.ETagAny))},
			{"Transact", e.tb.Transact(e.ctx, missing, []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: ent}})},
		}
		for _, c := range calls {
			checkErr(t, c.op+" with a "+b.name+" property", c.err, storeadapter.ErrInvalidInput)
		}
	}
}

func testPropertySizes(t *testing.T, e *env) {
	missing := uniqueTableName()
	tooLarge := []struct {
		name  string
		value any
	}{
		{"string of 32769 characters", strings.Repeat("s", storeadapter.MaxStringChars+1)},
		// 16385 runes, but 32770 UTF-16 units: the limit counts UTF-16.
		{"string of 16385 emoji", strings.Repeat("😀", storeadapter.MaxStringChars/2+1)},
		{"binary of 65537 bytes", make([]byte, storeadapter.MaxBinaryBytes+1)},
	}
	for _, b := range tooLarge {
		ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": b.value}}
		checkErr(t, "InsertEntity with a "+b.name, second(e.tb.InsertEntity(e.ctx, missing, ent)), storeadapter.ErrTooLarge)
		checkErr(t, "UpsertEntity with a "+b.name, second(e.tb.UpsertEntity(e.ctx, missing, ent, storeadapter.Replace)), storeadapter.ErrTooLarge)
		checkErr(t, "UpdateEntity with a "+b.name, second(e.tb.UpdateEntity(e.ctx, missing, ent, storeadapter.Merge, storeadapter.ETagAny)), storeadapter.ErrTooLarge)
	}

	tbl := e.newTable(t)
	largest := entity{PartitionKey: "p", RowKey: "r", Properties: props{
		"Ascii": strings.Repeat("s", storeadapter.MaxStringChars),
		"Emoji": strings.Repeat("😀", storeadapter.MaxStringChars/2),
	}}
	if e.h.Azurite {
		// Azurite decodes each chunk of a request body as UTF-8 on its own
		// (segments.join("") in its generated serializer), so a multi-byte
		// character split across a 64 KiB chunk boundary is corrupted, and
		// the string may even grow past the limit. Our validation of the
		// emoji limit ran above; here keep the body's non-ASCII text small.
		largest.Properties["Emoji"] = strings.Repeat("😀", 1000)
	}
	e.insert(t, tbl, largest)
	checkEntity(t, "entity with 32768-character strings", largest, e.get(t, tbl, "p", "r"))
}

// bigBinaries returns n binary properties of 64 KiB each.
func bigBinaries(n int) props {
	p := make(props, n)
	for i := range n {
		b := make([]byte, storeadapter.MaxBinaryBytes)
		for j := range b {
			b[j] = byte(i + j)
		}
		p[propName(i)] = b
	}
	return p
}

func testEntitySize(t *testing.T, e *env) {
	missing := uniqueTableName()
	// Azurite accepts entities over 1 MiB; our validation must not.
	big := []struct {
		name string
		p    props
	}{
		{"17 binaries of 64 KiB", bigBinaries(17)},
		{"16 binaries of 64 KiB (with names and overhead)", bigBinaries(16)},
		{"33 strings of 32768 characters (64 KiB of UTF-16 each)", func() props {
			p := make(props)
			for i := range 33 {
				p[propName(i)] = strings.Repeat("x", storeadapter.MaxStringChars)
			}
			return p
		}()},
	}
	for _, b := range big {
		ent := entity{PartitionKey: "p", RowKey: "r", Properties: b.p}
		if n := storeadapter.EntitySize(ent); n <= storeadapter.MaxEntityBytes {
			t.Fatalf("test bug: %s is only %d bytes", b.name, n)
		}
		checkErr(t, "InsertEntity of "+b.name, second(e.tb.InsertEntity(e.ctx, missing, ent)), storeadapter.ErrTooLarge)
		checkErr(t, "UpsertEntity of "+b.name, second(e.tb.UpsertEntity(e.ctx, missing, ent, storeadapter.Merge)), storeadapter.ErrTooLarge)
		checkErr(t, "UpdateEntity of "+b.name, second(e.tb.UpdateEntity(e.ctx, missing, ent, storeadapter.Replace, storeadapter.ETagAny)), storeadapter.ErrTooLarge)
		checkErr(t, "Transact of "+b.name, e.tb.Transact(e.ctx, missing, []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: ent}}), storeadapter.ErrTooLarge)
	}

	tbl := e.newTable(t)
	large := entity{PartitionKey: "p", RowKey: "r", Properties: bigBinaries(15)} // about 960 KiB
	e.insert(t, tbl, large)
	checkEntity(t, "entity of 15 binaries of 64 KiB", large, e.get(t, tbl, "p", "r"))
}

func testInvalidModeAndIfMatch(t *testing.T, e *env) {
	missing := uniqueTableName()
	ent := entity{PartitionKey: "p", RowKey: "r"}
	checkErr(t, "UpsertEntity with mode 0", second(e.tb.UpsertEntity(e.ctx, missing, ent, 0)), storeadapter.ErrInvalidInput)
	checkErr(t, "UpsertEntity with mode 9", second(e.tb.UpsertEntity(e.ctx, missing, ent, 9)), storeadapter.ErrInvalidInput)
	checkErr(t, "UpdateEntity with mode 0", second(e.tb.UpdateEntity(e.ctx, missing, ent, 0, storeadapter.ETagAny)), storeadapter.ErrInvalidInput)
	checkErr(t, "UpdateEntity with an empty ifMatch", second(e.tb.UpdateEntity(e.ctx, missing, ent, storeadapter.Merge, "")), storeadapter.ErrInvalidInput)
	checkErr(t, "DeleteEntity with an empty ifMatch", e.tb.DeleteEntity(e.ctx, missing, "p", "r", ""), storeadapter.ErrInvalidInput)
}

// testIfMatchNotWeakETag: table ETags are weak (W/"…"), and Azure answers
// 400 InvalidInput to an If-Match that is neither "*" nor a weak ETag — a
// bare or strong ETag is malformed, not merely stale — while a weak ETag it
// never issued is a 412 (docs/azure-behaviour.md, "Issue 18 decisions").
// Our validation refuses the malformed ones before the call.
func testIfMatchNotWeakETag(t *testing.T, e *env) {
	tbl := e.newTable(t)
	want := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(1)}}
	etag := e.insert(t, tbl, want)
	if !strings.HasPrefix(etag, `W/"`) || !strings.HasSuffix(etag, `"`) {
		t.Fatalf("InsertEntity returned ETag %q, want a weak ETag W/\"…\"", etag)
	}
	strong := strings.TrimPrefix(etag, "W/")
	bare := strings.Trim(strong, `"`)
	for _, bad := range []string{bare, strong, "abc", `"abc"`, `datetime'2026-11-21T09%3A30%3A00.0000000Z'`, `W/abc`, `W/"a"b"`, "**"} {
		update := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(2)}}
		checkErr(t, "DeleteEntity with If-Match "+bad, e.tb.DeleteEntity(e.ctx, tbl, "p", "r", bad), storeadapter.ErrInvalidInput)
		checkErr(t, "UpdateEntity with If-Match "+bad, second(e.tb.UpdateEntity(e.ctx, tbl, update, storeadapter.Merge, bad)), storeadapter.ErrInvalidInput)
		err := e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{{Action: storeadapter.TxDelete, Entity: update, IfMatch: bad}})
		checkErr(t, "Transact TxDelete with If-Match "+bad, err, storeadapter.ErrInvalidInput)
		err = e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{{Action: storeadapter.TxUpdateReplace, Entity: update, IfMatch: bad}})
		checkErr(t, "Transact TxUpdateReplace with If-Match "+bad, err, storeadapter.ErrInvalidInput)
	}
	got := e.get(t, tbl, "p", "r")
	checkEntity(t, "entity after the malformed If-Match calls", want, got)
	if got.ETag != etag {
		t.Errorf("ETag after the malformed If-Match calls = %q, want %q unchanged", got.ETag, etag)
	}
	// A well-formed weak ETag the service never issued is merely stale.
	checkErr(t, `DeleteEntity with If-Match W/"wrong"`, e.tb.DeleteEntity(e.ctx, tbl, "p", "r", `W/"wrong"`), storeadapter.ErrPreconditionFailed)
	checkErr(t, `UpdateEntity with If-Match w/"wrong"`, second(e.tb.UpdateEntity(e.ctx, tbl, want, storeadapter.Merge, `w/"wrong"`)), storeadapter.ErrPreconditionFailed)
	checkNoErr(t, "DeleteEntity with the current ETag", e.tb.DeleteEntity(e.ctx, tbl, "p", "r", etag))
}

// testTableNamesCaseInsensitive: "Table names preserve the case with which
// they were created, but are case-insensitive when used" (Understanding the
// Table service data model), entity operations included
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testTableNamesCaseInsensitive(t *testing.T, e *env) {
	name := "Mixed" + uniqueTableName() // created in mixed case
	if err := e.tb.CreateTable(e.ctx, name); err != nil {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
	t.Cleanup(func() { e.tb.DeleteTable(context.Background(), name) })
	upper, lower := strings.ToUpper(name), strings.ToLower(name)
	mixed := "mIXED" + name[5:]
	if e.h.Azurite {
		t.Skip("Azurite answers 404 TableNotFound to entity operations through another case of a table name created " +
			"with capitals; Azure's table names are case-insensitive when used (docs/azure-behaviour.md, " +
			"\"Azurite deviations the contract skips\")")
	}
	want := entity{PartitionKey: "p", RowKey: "r", Properties: props{"V": int32(1)}}
	etag := e.insert(t, upper, want)
	got := e.get(t, name, "p", "r")
	checkEntity(t, "GetEntity through the created spelling", want, got)
	if got.ETag != etag {
		t.Errorf("GetEntity ETag = %q, want %q", got.ETag, etag)
	}
	checkEntity(t, "GetEntity through another spelling", want, e.get(t, lower, "p", "r"))
	want.Properties["V"] = int32(2)
	checkNoErr(t, "UpdateEntity through another spelling", second(e.tb.UpdateEntity(e.ctx, mixed, want, storeadapter.Replace, etag)))
	e.transact(t, upper, []storeadapter.TableOp{{Action: storeadapter.TxInsert, Entity: entity{PartitionKey: "p", RowKey: "s"}}})
	page, err := e.tb.Query(e.ctx, mixed, storeadapter.Query{Filter: storeadapter.PartitionEquals("p")})
	if err != nil || len(page.Entities) != 2 {
		t.Errorf("Query through another spelling = %q, %v; want p/r and p/s", keysOf(page.Entities), err)
	}
	checkNoErr(t, "DeleteEntity through another spelling", e.tb.DeleteEntity(e.ctx, upper, "p", "s", storeadapter.ETagAny))
	e.checkGone(t, name, "p", "s")
	if got := e.listTables(t, name); !slices.Equal(got, []string{name}) {
		t.Errorf("ListTables(%q) = %q, want the spelling it was created with", name, got)
	}
}

// testEntityOfEscapedCharacters: Azure measures an entity against its 1 MiB
// limit by the data model (strings at two bytes a UTF-16 unit), not by the
// JSON that carries it, so an entity of U+2028 and < just under 1 MiB is
// stored although the SDK's JSON of it (six bytes each) is about 3 MB: within
// the 4 MiB a request body may hold (docs/azure-behaviour.md, "Issue 18
// decisions").
func testEntityOfEscapedCharacters(t *testing.T, e *env) {
	tbl := e.newTable(t)
	ent := entity{PartitionKey: "p", RowKey: "r", Properties: props{}}
	fill := []string{"\u2028", "<", "\u2029", ">", "&", "\x01"}
	const target = storeadapter.MaxEntityBytes - 1024
	for i := 0; storeadapter.EntitySize(ent) < target; i++ {
		name := propName(i)
		room := (target - storeadapter.EntitySize(ent) - 8 - 2*len(name) - 4) / 2
		ent.Properties[name] = strings.Repeat(fill[i%len(fill)], max(1, min(storeadapter.MaxStringChars, room)))
	}
	if n := storeadapter.EntitySize(ent); n > storeadapter.MaxEntityBytes || n < target-64 {
		t.Fatalf("test bug: the entity is %d bytes, want just under %d", n, storeadapter.MaxEntityBytes)
	}
	e.insert(t, tbl, ent)
	checkEntity(t, "entity of escaped characters after InsertEntity", ent, e.get(t, tbl, "p", "r"))
	if e.h.Azurite {
		t.Skip("Azurite refuses an update or merge whose request body is over 1 MiB (400 EntityTooLarge); Azure " +
			"measures the entity, not its JSON (docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	ent.Properties[propName(0)] = strings.Repeat(">", storeadapter.MaxStringChars)
	if _, err := e.tb.UpsertEntity(e.ctx, tbl, ent, storeadapter.Replace); err != nil {
		t.Fatalf("UpsertEntity of %d bytes of escaped characters: %v", storeadapter.EntitySize(ent), err)
	}
	checkEntity(t, "entity of escaped characters after UpsertEntity", ent, e.get(t, tbl, "p", "r"))
	if _, err := e.tb.UpdateEntity(e.ctx, tbl, ent, storeadapter.Merge, storeadapter.ETagAny); err != nil {
		t.Fatalf("UpdateEntity (merge) of %d bytes of escaped characters: %v", storeadapter.EntitySize(ent), err)
	}
}
