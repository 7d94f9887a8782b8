package storetest

import (
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
		// A query names the version as GetEntity does: the index kind
		// compares an ETag a batch read with a query to one a reconcile
		// read with GetEntity (a difference costs it a write).
		page, err := e.tb.Query(e.ctx, tbl, storeadapter.Query{Filter: storeadapter.PartitionEquals("p")})
		checkNoErr(t, "Query after "+step, err)
		if len(page.Entities) != 1 || page.Entities[0].ETag != got.ETag {
			t.Errorf("after %s, a query read %d entities, the first's ETag not GetEntity's %q: %+v", step, len(page.Entities), got.ETag, page.Entities)
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
