package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func transactionCases() []testCase {
	return []testCase{
		{"AllOrNothing", testTxAllOrNothing},
		{"StaleETag", testTxStaleETag},
		{"DeleteMissing", testTxDeleteMissing},
		{"UpdateRequiresExistence", testTxUpdateRequiresExistence},
		{"Actions", testTxActions},
		{"HundredOps", testTxHundred},
		{"MixedPartitions", testTxMixedPartitions},
		{"DuplicateRow", testTxDuplicateRow},
		{"Limits", testTxLimits},
		{"MissingTable", testTxMissingTable},
		{"AwkwardKeys", testTxAwkwardKeys},
	}
}

// op builds a TableOp on partition "p".
func op(action storeadapter.TxAction, rk string, p props, ifMatch string) storeadapter.TableOp {
	return storeadapter.TableOp{Action: action, Entity: entity{PartitionKey: "p", RowKey: rk, Properties: p}, IfMatch: ifMatch}
}

func testTxAllOrNothing(t *testing.T, e *env) {
	tbl := e.newTable(t)
	etag0 := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r0", Properties: props{"V": int32(0)}})
	etagD := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "rd", Properties: props{"V": int32(0)}})
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r3", Properties: props{"V": int32(0)}})
	ops := []storeadapter.TableOp{
		op(storeadapter.TxUpdateMerge, "r0", props{"V": int32(1)}, storeadapter.ETagAny),
		op(storeadapter.TxInsert, "r1", props{"V": int32(1)}, ""),
		op(storeadapter.TxUpsertReplace, "r2", props{"V": int32(1)}, ""),
		op(storeadapter.TxDelete, "rd", nil, etagD),
		op(storeadapter.TxInsert, "r3", props{"V": int32(1)}, ""), // exists: fails
		op(storeadapter.TxInsert, "r4", props{"V": int32(1)}, ""),
	}
	err := e.tb.Transact(e.ctx, tbl, ops)
	checkTxErr(t, "Transact with a conflicting insert at index 4", err, 4, storeadapter.ErrAlreadyExists)

	// Nothing was applied, before or after the failing operation.
	got := e.get(t, tbl, "p", "r0")
	checkEntity(t, "updated entity after the failed transaction", entity{PartitionKey: "p", RowKey: "r0", Properties: props{"V": int32(0)}}, got)
	if got.ETag != etag0 {
		t.Errorf("ETag of r0 changed from %q to %q by a failed transaction", etag0, got.ETag)
	}
	if got := e.get(t, tbl, "p", "rd"); got.ETag != etagD {
		t.Errorf("ETag of rd changed from %q to %q by a failed transaction", etagD, got.ETag)
	}
	checkEntity(t, "conflicting entity after the failed transaction", entity{PartitionKey: "p", RowKey: "r3", Properties: props{"V": int32(0)}}, e.get(t, tbl, "p", "r3"))
	for _, rk := range []string{"r1", "r2", "r4"} {
		e.checkGone(t, tbl, "p", rk)
	}
	all, _ := e.queryAll(t, tbl, storeadapter.Query{})
	if d := diffLines([]string{"p/r0", "p/r3", "p/rd"}, keysOf(all)); d != "" {
		t.Errorf("table after the failed transaction (-want +got):\n%s", d)
	}

	// Without the conflict, the same transaction applies in full.
	ops = append(ops[:4], ops[5])
	e.transact(t, tbl, ops)
	for _, rk := range []string{"r0", "r1", "r2", "r4"} {
		checkEntity(t, "after the transaction", entity{PartitionKey: "p", RowKey: rk, Properties: props{"V": int32(1)}}, e.get(t, tbl, "p", rk))
	}
	e.checkGone(t, tbl, "p", "rd")
}

func testTxStaleETag(t *testing.T, e *env) {
	tbl := e.newTable(t)
	stale := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r1", Properties: props{"V": int32(0)}})
	current, err := e.tb.UpsertEntity(e.ctx, tbl, entity{PartitionKey: "p", RowKey: "r1", Properties: props{"V": int32(1)}}, storeadapter.Merge)
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []storeadapter.TxAction{storeadapter.TxUpdateMerge, storeadapter.TxUpdateReplace, storeadapter.TxDelete} {
		err := e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{
			op(storeadapter.TxInsert, "r0", nil, ""),
			op(action, "r1", props{"V": int32(2)}, stale),
		})
		checkTxErr(t, fmt.Sprintf("Transact with action %d and a stale ETag at index 1", action), err, 1, storeadapter.ErrPreconditionFailed)
		e.checkGone(t, tbl, "p", "r0")
	}
	got := e.get(t, tbl, "p", "r1")
	if got.ETag != current || !storeadapter.Equal(got.Properties["V"], int32(1)) {
		t.Errorf("r1 after failed transactions: ETag %q, V %s; want %q, Edm.Int32(1)", got.ETag, storeadapter.Format(got.Properties["V"]), current)
	}
	// With the current ETag it works.
	e.transact(t, tbl, []storeadapter.TableOp{op(storeadapter.TxUpdateReplace, "r1", props{"W": "w"}, current)})
	checkEntity(t, "after a conditional replace", entity{PartitionKey: "p", RowKey: "r1", Properties: props{"W": "w"}}, e.get(t, tbl, "p", "r1"))
}

func testTxDeleteMissing(t *testing.T, e *env) {
	tbl := e.newTable(t)
	e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r2"})
	err := e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{
		op(storeadapter.TxUpsertMerge, "r0", props{"V": int32(1)}, ""),
		op(storeadapter.TxDelete, "r2", nil, storeadapter.ETagAny),
		op(storeadapter.TxDelete, "r9", nil, storeadapter.ETagAny), // missing
	})
	checkTxErr(t, "Transact deleting a missing entity at index 2", err, 2, storeadapter.ErrNotFound)
	checkItemNotFound(t, "Transact deleting a missing entity", err)
	e.checkGone(t, tbl, "p", "r0")
	e.get(t, tbl, "p", "r2")
}

func testTxUpdateRequiresExistence(t *testing.T, e *env) {
	tbl := e.newTable(t)
	etag := e.insert(t, tbl, entity{PartitionKey: "p", RowKey: "r0"})
	for _, action := range []storeadapter.TxAction{storeadapter.TxUpdateMerge, storeadapter.TxUpdateReplace} {
		for _, ifMatch := range []string{storeadapter.ETagAny, etag} {
			err := e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{
				op(storeadapter.TxUpdateMerge, "r0", props{"V": int32(1)}, etag),
				op(action, "missing", props{"V": int32(1)}, ifMatch),
			})
			checkTxErr(t, fmt.Sprintf("Transact with action %d on a missing entity", action), err, 1, storeadapter.ErrNotFound)
			checkItemNotFound(t, fmt.Sprintf("Transact with action %d on a missing entity", action), err)
			e.checkGone(t, tbl, "p", "missing")
		}
	}
	if got := e.get(t, tbl, "p", "r0"); got.ETag != etag {
		t.Errorf("r0 changed by failed transactions: ETag %q, want %q", got.ETag, etag)
	}
}

func testTxActions(t *testing.T, e *env) {
	tbl := e.newTable(t)
	step := func(name string, o storeadapter.TableOp, want props) {
		t.Helper()
		e.transact(t, tbl, []storeadapter.TableOp{o})
		if want == nil {
			e.checkGone(t, tbl, "p", o.Entity.RowKey)
			return
		}
		checkEntity(t, "after "+name, entity{PartitionKey: "p", RowKey: o.Entity.RowKey, Properties: want}, e.get(t, tbl, "p", o.Entity.RowKey))
	}
	// Upserts create.
	step("TxUpsertMerge of a missing entity", op(storeadapter.TxUpsertMerge, "m", props{"A": "a"}, ""), props{"A": "a"})
	step("TxUpsertReplace of a missing entity", op(storeadapter.TxUpsertReplace, "r", props{"A": "a"}, ""), props{"A": "a"})
	step("TxInsert", op(storeadapter.TxInsert, "i", props{"A": "a", "B": int32(2)}, ""), props{"A": "a", "B": int32(2)})
	// Merge keeps other properties, replace drops them.
	step("TxUpsertMerge", op(storeadapter.TxUpsertMerge, "i", props{"C": true}, ""), props{"A": "a", "B": int32(2), "C": true})
	step("TxUpsertReplace", op(storeadapter.TxUpsertReplace, "i", props{"D": 1.5}, ""), props{"D": 1.5})
	current := e.get(t, tbl, "p", "i").ETag
	step("TxUpdateMerge with the current ETag", op(storeadapter.TxUpdateMerge, "i", props{"E": int64(5)}, current), props{"D": 1.5, "E": int64(5)})
	step("TxUpdateReplace with ETagAny", op(storeadapter.TxUpdateReplace, "i", props{"F": "f"}, storeadapter.ETagAny), props{"F": "f"})
	current = e.get(t, tbl, "p", "i").ETag
	step("TxDelete with the current ETag", op(storeadapter.TxDelete, "i", nil, current), nil)
	step("TxDelete with ETagAny", op(storeadapter.TxDelete, "m", nil, storeadapter.ETagAny), nil)
	e.get(t, tbl, "p", "r") // untouched
}

func testTxHundred(t *testing.T, e *env) {
	tbl := e.newTable(t)
	for i := range 10 {
		e.insert(t, tbl, entity{PartitionKey: "p", RowKey: fmt.Sprintf("%03d", i), Properties: props{"Old": true}})
	}
	// 100 operations of every kind: the first ten rows exist.
	ops := make([]storeadapter.TableOp, storeadapter.MaxBatchOps)
	want := map[string]props{}
	for i := range ops {
		rk := fmt.Sprintf("%03d", i)
		p := props{"N": int32(i)}
		switch {
		case i < 3:
			ops[i] = op(storeadapter.TxDelete, rk, nil, storeadapter.ETagAny)
		case i < 6:
			ops[i] = op(storeadapter.TxUpdateMerge, rk, p, storeadapter.ETagAny)
			want[rk] = props{"Old": true, "N": int32(i)}
		case i < 10:
			ops[i] = op(storeadapter.TxUpdateReplace, rk, p, storeadapter.ETagAny)
			want[rk] = p
		case i%3 == 0:
			ops[i] = op(storeadapter.TxUpsertMerge, rk, p, "")
			want[rk] = p
		case i%3 == 1:
			ops[i] = op(storeadapter.TxUpsertReplace, rk, p, "")
			want[rk] = p
		default:
			ops[i] = op(storeadapter.TxInsert, rk, p, "")
			want[rk] = p
		}
	}
	e.transact(t, tbl, ops)
	got, _ := e.queryAll(t, tbl, storeadapter.Query{})
	if len(got) != len(want) {
		t.Errorf("after a 100-op transaction the table holds %d entities, want %d", len(got), len(want))
	}
	for _, ent := range got {
		checkEntity(t, "after a 100-op transaction", entity{PartitionKey: "p", RowKey: ent.RowKey, Properties: want[ent.RowKey]}, ent)
	}
}

func testTxMixedPartitions(t *testing.T, e *env) {
	tbl := e.newTable(t)
	// Azurite commits a batch that spans partitions (docs/azure-behaviour.md,
	// "Where Azurite is looser than Azure"); Azure
	// refuses it. Our validation refuses it before the call, on both.
	ops := []storeadapter.TableOp{
		{Action: storeadapter.TxInsert, Entity: entity{PartitionKey: "p1", RowKey: "r"}},
		{Action: storeadapter.TxInsert, Entity: entity{PartitionKey: "p2", RowKey: "r"}},
	}
	err := e.tb.Transact(e.ctx, tbl, ops)
	checkErr(t, "Transact across two partitions", err, storeadapter.ErrInvalidInput)
	if te := (*storeadapter.TransactionError)(nil); errors.As(err, &te) && te.Index != 1 {
		t.Errorf("Transact across two partitions: TransactionError.Index = %d, want 1 (the first op in another partition)", te.Index)
	}
	e.checkGone(t, tbl, "p1", "r")
	e.checkGone(t, tbl, "p2", "r")
}

func testTxDuplicateRow(t *testing.T, e *env) {
	tbl := e.newTable(t)
	for _, second := range []storeadapter.TableOp{
		op(storeadapter.TxUpsertMerge, "r", props{"B": "b"}, ""),
		op(storeadapter.TxDelete, "r", nil, storeadapter.ETagAny),
	} {
		err := e.tb.Transact(e.ctx, tbl, []storeadapter.TableOp{op(storeadapter.TxInsert, "r", props{"A": "a"}, ""), op(storeadapter.TxInsert, "s", nil, ""), second})
		checkErr(t, "Transact with one RowKey twice", err, storeadapter.ErrInvalidInput)
		if te := (*storeadapter.TransactionError)(nil); errors.As(err, &te) && te.Index != 2 {
			t.Errorf("Transact with one RowKey twice: TransactionError.Index = %d, want 2 (the repeat)", te.Index)
		}
		e.checkGone(t, tbl, "p", "r")
		e.checkGone(t, tbl, "p", "s")
	}
}

func testTxLimits(t *testing.T, e *env) {
	missing := uniqueTableName() // validation must answer before the service
	many := make([]storeadapter.TableOp, storeadapter.MaxBatchOps+1)
	for i := range many {
		many[i] = op(storeadapter.TxInsert, fmt.Sprintf("%03d", i), nil, "")
	}
	checkErr(t, "Transact of 101 operations", e.tb.Transact(e.ctx, missing, many), storeadapter.ErrTooLarge)
	checkErr(t, "Transact of no operations", e.tb.Transact(e.ctx, missing, []storeadapter.TableOp{}), storeadapter.ErrInvalidInput)
	checkErr(t, "Transact of nil", e.tb.Transact(e.ctx, missing, nil), storeadapter.ErrInvalidInput)

	// Five entities of about 960 KiB each: under 1 MiB apiece, over 4 MiB together.
	big := bigBinaries(15)
	var heavy []storeadapter.TableOp
	for i := range 5 {
		heavy = append(heavy, op(storeadapter.TxUpsertReplace, fmt.Sprint(i), big, ""))
	}
	checkErr(t, "Transact of more than 4 MiB", e.tb.Transact(e.ctx, missing, heavy), storeadapter.ErrTooLarge)

	// The limit is on the wire: U+2028 is 3 bytes of UTF-8 but 6 in the
	// request's JSON (\u2028). Two entities of 31 strings of 16,384 of
	// them are about 3 MB each as sent; they must be refused before
	// sending, as Azure answers 413 (Azurite is not the judge here: the
	// transaction never reaches it).
	seps := strings.Repeat("\u2028", 16384)
	var wide []storeadapter.TableOp
	for _, rk := range []string{"a", "b"} {
		p := props{}
		for i := range 31 {
			p[fmt.Sprintf("S%02d", i)] = seps
		}
		wide = append(wide, op(storeadapter.TxUpsertReplace, rk, p, ""))
	}
	checkErr(t, "Transact of two entities of 31 × 16,384 U+2028", e.tb.Transact(e.ctx, missing, wide), storeadapter.ErrTooLarge)

	// An invalid operation is named by its index.
	bad := []struct {
		name string
		op   storeadapter.TableOp
		want error
	}{
		{"an int property", op(storeadapter.TxInsert, "x", props{"V": 1}, ""), storeadapter.ErrInvalidInput},
		{"a bad RowKey", op(storeadapter.TxUpsertMerge, "a/b", nil, ""), storeadapter.ErrInvalidInput},
		{"a 64 KiB + 1 binary", op(storeadapter.TxUpsertMerge, "x", props{"V": make([]byte, storeadapter.MaxBinaryBytes+1)}, ""), storeadapter.ErrTooLarge},
		{"action 0", op(0, "x", nil, ""), storeadapter.ErrInvalidInput},
		{"an unknown action", op(storeadapter.TxDelete+1, "x", nil, ""), storeadapter.ErrInvalidInput},
		{"TxUpdateMerge without IfMatch", op(storeadapter.TxUpdateMerge, "x", nil, ""), storeadapter.ErrInvalidInput},
		{"TxUpdateReplace without IfMatch", op(storeadapter.TxUpdateReplace, "x", nil, ""), storeadapter.ErrInvalidInput},
		{"TxDelete without IfMatch", op(storeadapter.TxDelete, "x", nil, ""), storeadapter.ErrInvalidInput},
		// IfMatch "must be empty for the other actions": an insert or upsert
		// cannot be made conditional, so an ETag there is a caller's mistake.
		{"TxInsert with IfMatch", op(storeadapter.TxInsert, "x", nil, storeadapter.ETagAny), storeadapter.ErrInvalidInput},
		{"TxUpsertReplace with IfMatch", op(storeadapter.TxUpsertReplace, "x", nil, `W/"datetime'2026-01-01T00%3A00%3A00Z'"`), storeadapter.ErrInvalidInput},
		{"TxUpsertMerge with IfMatch", op(storeadapter.TxUpsertMerge, "x", nil, storeadapter.ETagAny), storeadapter.ErrInvalidInput},
	}
	for _, b := range bad {
		ops := []storeadapter.TableOp{op(storeadapter.TxInsert, "a", nil, ""), op(storeadapter.TxInsert, "b", nil, ""), b.op}
		checkTxErr(t, "Transact with "+b.name+" at index 2", e.tb.Transact(e.ctx, missing, ops), 2, b.want)
	}
}

// testTxMissingTable: Azure fails the first operation of a batch sent to a
// missing table ("0:The table specified does not exist.", 404 TableNotFound
// in the change set: docs/azure-behaviour.md, "Issue 18 decisions"), so the
// error names operation 0 and still matches ErrTableNotFound.
func testTxMissingTable(t *testing.T, e *env) {
	ops := []storeadapter.TableOp{op(storeadapter.TxUpsertReplace, "r", nil, ""), op(storeadapter.TxInsert, "s", nil, "")}
	err := e.tb.Transact(e.ctx, uniqueTableName(), ops)
	checkTxErr(t, "Transact on a missing table", err, 0, storeadapter.ErrTableNotFound)
}

// testTxAwkwardKeys runs every action on keys holding characters that need
// quoting or escaping in a request URL (a quote is doubled in OData key
// literals; %, +, spaces and non-ASCII are percent-encoded), in a partition
// named the same way.
func testTxAwkwardKeys(t *testing.T, e *env) {
	tbl := e.newTable(t)
	const pk = "o'brien & co %20+ é"
	for _, rk := range []string{"it's", "''", "a%2Fb", "x+y z", "naïve\U0001f600"} {
		o := func(action storeadapter.TxAction, p props, ifMatch string) []storeadapter.TableOp {
			return []storeadapter.TableOp{{Action: action, Entity: entity{PartitionKey: pk, RowKey: rk, Properties: p}, IfMatch: ifMatch}}
		}
		e.transact(t, tbl, o(storeadapter.TxInsert, props{"V": int32(1)}, ""))
		e.transact(t, tbl, o(storeadapter.TxUpsertMerge, props{"W": int32(2)}, ""))
		e.transact(t, tbl, o(storeadapter.TxUpsertReplace, props{"V": int32(3)}, ""))
		e.transact(t, tbl, o(storeadapter.TxUpdateMerge, props{"W": int32(4)}, storeadapter.ETagAny))
		current := e.get(t, tbl, pk, rk)
		checkEntity(t, "key "+rk, entity{PartitionKey: pk, RowKey: rk, Properties: props{"V": int32(3), "W": int32(4)}}, current)
		e.transact(t, tbl, o(storeadapter.TxUpdateReplace, props{"V": int32(5)}, current.ETag))
		e.transact(t, tbl, o(storeadapter.TxDelete, nil, e.get(t, tbl, pk, rk).ETag))
		e.checkGone(t, tbl, pk, rk)
	}
}
