package storeadapter_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// checkErr fails the test unless err matches want: nil when want is nil,
// otherwise an error wrapping want whose message names field.
func checkErr(t *testing.T, err, want error, field string) {
	t.Helper()
	switch {
	case want == nil:
		if err != nil {
			t.Errorf("got error %v, want nil", err)
		}
	case !errors.Is(err, want):
		t.Errorf("got error %v, want one wrapping %q", err, want)
	case !strings.Contains(err.Error(), field):
		t.Errorf("error %q does not name the field %q", err, field)
	}
}

// emoji is outside the Basic Multilingual Plane: one rune, four UTF-8 bytes
// and two UTF-16 code units.
const emoji = "\U0001F600"

func TestValidateTableName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"three letters", "abc", nil},
		{"mixed case and digits", "LoginAttempts20261121", nil},
		{"63 characters", "A" + strings.Repeat("b", 62), nil},
		{"starts with reserved word", "tables1", nil},
		{"empty", "", storeadapter.ErrInvalidInput},
		{"two characters", "ab", storeadapter.ErrInvalidInput},
		{"64 characters", "A" + strings.Repeat("b", 63), storeadapter.ErrInvalidInput},
		{"starts with a digit", "1abc", storeadapter.ErrInvalidInput},
		{"hyphen", "ab-c", storeadapter.ErrInvalidInput},
		{"underscore", "ab_c", storeadapter.ErrInvalidInput},
		{"non-ASCII letter", "tablé", storeadapter.ErrInvalidInput},
		{"reserved name", "tables", storeadapter.ErrInvalidInput},
		{"reserved name in another case", "Tables", storeadapter.ErrInvalidInput},
		{"trailing newline", "abc\n", storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateTableName(tt.in), tt.want, "table name")
		})
	}
}

// TestTableNameMessages: the error states the rule the name broke. "tables"
// is 3-63 letters and digits; saying it must be is no help: it is reserved.
func TestTableNameMessages(t *testing.T) {
	for in, want := range map[string]string{
		"tables": `"tables" is reserved by the table service`,
		"TABLES": `"TABLES" is reserved by the table service`,
		"1abc":   "must be 3-63 letters and digits starting with a letter",
	} {
		err := storeadapter.ValidateTableName(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTableName(%q) = %v, want it to say %q", in, err, want)
		}
		if in != "1abc" && strings.Contains(err.Error(), "must be 3-63") {
			t.Errorf("ValidateTableName(%q) = %v: states a rule the name keeps", in, err)
		}
	}
}

// nameRuleTests are the cases shared by queue and container names, which
// follow the same rule: 3–63 lowercase letters, digits and single hyphens,
// starting and ending with a letter or digit.
var nameRuleTests = []struct {
	name string
	in   string
	want error
}{
	{"three letters", "abc", nil},
	{"digits", "123", nil},
	{"hyphenated", "orders-poison", nil},
	{"shortest hyphenated", "a-b", nil},
	{"63 characters", strings.Repeat("a", 63), nil},
	{"63 characters with hyphens", "a" + strings.Repeat("-b", 31), nil},
	{"empty", "", storeadapter.ErrInvalidInput},
	{"two characters", "ab", storeadapter.ErrInvalidInput},
	{"64 characters", strings.Repeat("a", 64), storeadapter.ErrInvalidInput},
	{"65 characters with hyphens", "a" + strings.Repeat("-b", 32), storeadapter.ErrInvalidInput},
	{"125 characters with hyphens", "a" + strings.Repeat("-b", 62), storeadapter.ErrInvalidInput},
	{"upper case", "Orders", storeadapter.ErrInvalidInput},
	{"leading hyphen", "-abc", storeadapter.ErrInvalidInput},
	{"trailing hyphen", "abc-", storeadapter.ErrInvalidInput},
	{"double hyphen", "ab--cd", storeadapter.ErrInvalidInput},
	{"underscore", "ab_cd", storeadapter.ErrInvalidInput},
	{"dot", "ab.cd", storeadapter.ErrInvalidInput},
}

func TestValidateQueueName(t *testing.T) {
	for _, tt := range nameRuleTests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateQueueName(tt.in), tt.want, "queue name")
		})
	}
}

func TestValidateContainerName(t *testing.T) {
	for _, tt := range nameRuleTests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateContainerName(tt.in), tt.want, "container name")
		})
	}
}

func TestValidateBlobName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"one character", "a", nil},
		{"path", "archive/2026/11/21/op-0001.json", nil},
		{"non-ASCII", "日本語/ファイル", nil},
		{"1024 ASCII characters", strings.Repeat("a", 1024), nil},
		{"1024 two-byte characters", strings.Repeat("é", 1024), nil},
		{"empty", "", storeadapter.ErrInvalidInput},
		{"1025 characters", strings.Repeat("a", 1025), storeadapter.ErrInvalidInput},
		{"ends with a dot", "file.", storeadapter.ErrInvalidInput},
		{"ends with a slash", "dir/", storeadapter.ErrInvalidInput},
		{"NUL", "a\x00b", storeadapter.ErrInvalidInput},
		{"newline", "a\nb", storeadapter.ErrInvalidInput},
		{"DEL", "a\x7fb", storeadapter.ErrInvalidInput},
		{"C1 control", "a\u0085b", storeadapter.ErrInvalidInput},
		{"invalid UTF-8", "a\xffb", storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateBlobName(tt.in), tt.want, "blob name")
		})
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty: the Go SDK cannot address it", "", storeadapter.ErrInvalidInput},
		{"plain", "customer-42", nil},
		{"512 characters", strings.Repeat("k", 512), nil},
		{"256 emoji are 512 UTF-16 units", strings.Repeat(emoji, 256), nil},
		{"512 two-byte characters", strings.Repeat("é", 512), nil},
		{"no-break space is not a control character", "a\u00a0b", nil},
		{"quote and percent", `it's 100% "fine"`, nil},
		{"513 characters", strings.Repeat("k", 513), storeadapter.ErrInvalidInput},
		{"257 emoji are 514 UTF-16 units", strings.Repeat(emoji, 257), storeadapter.ErrInvalidInput},
		{"511 characters and an emoji", strings.Repeat("k", 511) + emoji, storeadapter.ErrInvalidInput},
		{"slash", "a/b", storeadapter.ErrInvalidInput},
		{"backslash", `a\b`, storeadapter.ErrInvalidInput},
		{"hash", "a#b", storeadapter.ErrInvalidInput},
		{"question mark", "a?b", storeadapter.ErrInvalidInput},
		{"NUL", "a\x00b", storeadapter.ErrInvalidInput},
		{"tab", "a\tb", storeadapter.ErrInvalidInput},
		{"U+001F", "a\x1fb", storeadapter.ErrInvalidInput},
		{"U+007F", "a\x7fb", storeadapter.ErrInvalidInput},
		{"U+0080", "a\u0080b", storeadapter.ErrInvalidInput},
		{"U+0085", "\u0085", storeadapter.ErrInvalidInput},
		{"U+009F", "a\u009f", storeadapter.ErrInvalidInput},
		{"invalid UTF-8", "a\xc3\x28", storeadapter.ErrInvalidInput},
		{"truncated UTF-8", "\xf0\x9f\x98", storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The field name is the caller's, so the error names it whatever it is.
			checkErr(t, storeadapter.ValidateKey("rkFrom", tt.in), tt.want, "rkFrom")
		})
	}
}

func TestValidatePropertyName(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  error
		field string
	}{
		{"letters", "Name", nil, ""},
		{"leading underscore", "_hidden", nil, ""},
		{"digits after the first", "Address2", nil, ""},
		{"not a system property", "ETag", nil, ""},
		{"255 characters", strings.Repeat("p", 255), nil, ""},
		{"empty", "", storeadapter.ErrInvalidInput, "property name"},
		{"256 characters", strings.Repeat("p", 256), storeadapter.ErrInvalidInput, "property name"},
		{"leading digit", "1st", storeadapter.ErrInvalidInput, "property name"},
		{"hyphen", "first-name", storeadapter.ErrInvalidInput, "property name"},
		{"space", "first name", storeadapter.ErrInvalidInput, "property name"},
		{"dot", "odata.type", storeadapter.ErrInvalidInput, "property name"},
		{"PartitionKey", "PartitionKey", storeadapter.ErrInvalidInput, "PartitionKey"},
		{"RowKey", "RowKey", storeadapter.ErrInvalidInput, "RowKey"},
		{"Timestamp", "Timestamp", storeadapter.ErrInvalidInput, "Timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidatePropertyName(tt.in), tt.want, tt.field)
		})
	}
}

// sizedEntity returns an entity with the given keys whose EntitySize is
// exactly size, made of string properties of at most MaxStringChars
// characters and, when the size's parity needs it, one Boolean property.
func sizedEntity(t *testing.T, pk, rk string, size int) storeadapter.Entity {
	t.Helper()
	e := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: map[string]any{}}
	rest := size - storeadapter.EntitySize(e)
	if rest%2 != 0 {
		e.Properties["B"] = true // 8 + 2*1 + 1 = 11 bytes
		rest -= 11
	}
	// Each string property "Sxx" costs 8 + 2*3 + 4 + 2*chars = 18 + 2*chars.
	const maxProp = 18 + 2*storeadapter.MaxStringChars
	k := (rest + maxProp - 1) / maxProp
	chars := (rest - 18*k) / 2
	for i := range k {
		n := chars / (k - i)
		chars -= n
		e.Properties[fmt.Sprintf("S%02d", i)] = strings.Repeat("x", n)
	}
	if got := storeadapter.EntitySize(e); got != size {
		t.Fatalf("sizedEntity(%d) built an entity of %d bytes", size, got)
	}
	return e
}

// TestBatchOpSizeBoundsJSON checks that BatchOpSize is never below the
// entity's JSON, for the contents that grow most on the wire: binary in
// base64, characters JSON escapes, and CJK text (3 UTF-8 bytes each).
func TestBatchOpSizeBoundsJSON(t *testing.T) {
	for name, v := range map[string]any{
		"binary": make([]byte, 65536), "escapes": strings.Repeat("<\"&>\x01", 5000), "cjk": strings.Repeat("漢", 32768),
		"mixed": "Jones, O'Brien ✓", "int64": int64(-1 << 63), "guid": storeadapter.GUID{1}, "time": time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC),
	} {
		e := storeadapter.Entity{PartitionKey: "pk<&>", RowKey: "漢字", Properties: map[string]any{"Value_" + name: v}}
		data, err := storeadapter.MarshalEntityJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := storeadapter.BatchOpSize(e); got < len(data) {
			t.Errorf("%s: BatchOpSize = %d, below the JSON's %d bytes", name, got, len(data))
		}
	}
}

// TestTransactionLineSeparators is the case: U+2028 is 3 bytes of
// UTF-8 but 6 on the wire (\u2028), so two entities of 31 strings of
// 16,384 of them (about 3 MB each as sent) exceed the 4 MiB request limit
// although they are 1.5 MB each in UTF-8. Each alone fits.
func TestTransactionLineSeparators(t *testing.T) {
	ent := func(rk string) storeadapter.Entity {
		e := storeadapter.Entity{PartitionKey: "p", RowKey: rk, Properties: map[string]any{}}
		for i := range 31 {
			e.Properties[fmt.Sprintf("S%02d", i)] = strings.Repeat("\u2028", 16384)
		}
		return e
	}
	ops := []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: ent("a")}, {Action: storeadapter.TxUpsertReplace, Entity: ent("b")}}
	if err := storeadapter.ValidateTransaction(ops); !errors.Is(err, storeadapter.ErrTooLarge) {
		t.Fatalf("ValidateTransaction of two entities of 31 × 16,384 U+2028 = %v, want ErrTooLarge", err)
	}
	if err := storeadapter.ValidateTransaction(ops[:1]); err != nil {
		t.Fatalf("ValidateTransaction of one such entity = %v, want nil", err)
	}
}

// propsEntity returns an entity with n Int32 properties.
func propsEntity(n int) storeadapter.Entity {
	e := storeadapter.Entity{PartitionKey: "pk", RowKey: "rk", Properties: make(map[string]any, n)}
	for i := range n {
		e.Properties[fmt.Sprintf("P%03d", i)] = int32(i)
	}
	return e
}

func TestValidateEntity(t *testing.T) {
	one := func(name string, v any) storeadapter.Entity {
		return storeadapter.Entity{PartitionKey: "pk", RowKey: "rk", Properties: map[string]any{name: v}}
	}
	utc := func(y int, mo time.Month, d, h, mi, s, ns int) time.Time {
		return time.Date(y, mo, d, h, mi, s, ns, time.UTC)
	}
	plusOne := time.FixedZone("UTC+1", 3600)
	tests := []struct {
		name  string
		in    storeadapter.Entity
		want  error
		field string
	}{
		{"keys only", storeadapter.Entity{PartitionKey: "pk", RowKey: "rk"}, nil, ""},
		{"empty keys", storeadapter.Entity{}, storeadapter.ErrInvalidInput, "PartitionKey"},
		{"every type", storeadapter.Entity{PartitionKey: "pk", RowKey: "rk", Properties: map[string]any{
			"S": "text", "B": true, "I": int32(-1), "L": int64(1 << 62), "D": 2.5,
			"T": utc(2026, 11, 21, 0, 0, 0, 0), "G": storeadapter.GUID{1}, "X": []byte{0, 1},
		}}, nil, ""},
		{"bad PartitionKey", storeadapter.Entity{PartitionKey: "a/b", RowKey: "rk"}, storeadapter.ErrInvalidInput, "PartitionKey"},
		{"bad RowKey", storeadapter.Entity{PartitionKey: "pk", RowKey: "a#b"}, storeadapter.ErrInvalidInput, "RowKey"},
		{"long RowKey", storeadapter.Entity{PartitionKey: "pk", RowKey: strings.Repeat("r", 513)}, storeadapter.ErrInvalidInput, "RowKey"},
		{"bad property name", one("bad-name", "v"), storeadapter.ErrInvalidInput, "property name"},
		{"system property", one("Timestamp", time.Now()), storeadapter.ErrInvalidInput, "Timestamp"},

		{"252 properties", propsEntity(252), nil, ""},
		{"253 properties", propsEntity(253), storeadapter.ErrTooLarge, "properties"},

		{"string of 32768 characters", one("S", strings.Repeat("s", 32768)), nil, ""},
		{"string of 32769 characters", one("S", strings.Repeat("s", 32769)), storeadapter.ErrTooLarge, "property S"},
		{"string of 16384 emoji", one("S", strings.Repeat(emoji, 16384)), nil, ""},
		{"string of 16385 emoji", one("S", strings.Repeat(emoji, 16385)), storeadapter.ErrTooLarge, "property S"},
		{"string of invalid UTF-8", one("S", "a\xffb"), storeadapter.ErrInvalidInput, "property S"},
		{"empty string", one("S", ""), nil, ""},

		{"binary of 65536 bytes", one("X", make([]byte, 65536)), nil, ""},
		{"binary of 65537 bytes", one("X", make([]byte, 65537)), storeadapter.ErrTooLarge, "property X"},
		{"nil binary", one("X", []byte(nil)), nil, ""},

		{"int", one("N", 1), storeadapter.ErrInvalidInput, "property N"},
		{"uint64", one("N", uint64(1)), storeadapter.ErrInvalidInput, "property N"},
		{"float32", one("N", float32(1)), storeadapter.ErrInvalidInput, "property N"},
		{"time.Duration", one("N", time.Second), storeadapter.ErrInvalidInput, "property N"},
		{"nil", one("N", nil), storeadapter.ErrInvalidInput, "property N"},
		{"pointer to string", one("N", new(string)), storeadapter.ErrInvalidInput, "property N"},
		{"map", one("N", map[string]any{}), storeadapter.ErrInvalidInput, "property N"},

		{"first DateTime", one("T", utc(1601, 1, 1, 0, 0, 0, 0)), nil, ""},
		{"last DateTime", one("T", utc(9999, 12, 31, 23, 59, 59, 999999900)), nil, ""},
		{"DateTime before 1601", one("T", utc(1600, 12, 31, 23, 59, 59, 999999900)), storeadapter.ErrInvalidInput, "property T"},
		{"DateTime after 9999", one("T", utc(10000, 1, 1, 0, 0, 0, 0)), storeadapter.ErrInvalidInput, "property T"},
		{"zero time.Time", one("T", time.Time{}), storeadapter.ErrInvalidInput, "property T"},
		{"1601 local that is 1600 UTC", one("T", time.Date(1601, 1, 1, 0, 30, 0, 0, plusOne)), storeadapter.ErrInvalidInput, "property T"},

		{"NaN", one("D", math.NaN()), nil, ""},
		{"infinity", one("D", math.Inf(1)), nil, ""},

		{"exactly 1 MiB", sizedEntity(t, "pk", "rk", storeadapter.MaxEntityBytes), nil, ""},
		{"1 MiB and 1 byte", sizedEntity(t, "pk", "rk", storeadapter.MaxEntityBytes+1), storeadapter.ErrTooLarge, "entity pk/rk"},
		{"1 MiB and 2 bytes", sizedEntity(t, "pk", "rk", storeadapter.MaxEntityBytes+2), storeadapter.ErrTooLarge, "entity pk/rk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateEntity(tt.in), tt.want, tt.field)
		})
	}
}

func TestEntitySize(t *testing.T) {
	// Azure's formula: 4 + 2*len(PartitionKey+RowKey in UTF-16) + for each
	// property 8 + 2*len(name) + the value: string 4 + 2*chars, binary
	// 4 + bytes, Boolean 1, Int32 4, Int64, Double and DateTime 8, Guid 16.
	props := func(name string, v any) storeadapter.Entity {
		return storeadapter.Entity{Properties: map[string]any{name: v}}
	}
	tests := []struct {
		name string
		in   storeadapter.Entity
		want int
	}{
		{"empty", storeadapter.Entity{}, 4},
		{"keys", storeadapter.Entity{PartitionKey: "pk", RowKey: "rk"}, 4 + 4 + 4},
		{"emoji key", storeadapter.Entity{PartitionKey: emoji}, 4 + 4},
		{"two-byte key", storeadapter.Entity{RowKey: "é"}, 4 + 2},
		{"string", props("Name", "hello"), 4 + 8 + 8 + 4 + 10},
		{"empty string", props("S", ""), 4 + 8 + 2 + 4},
		{"emoji string", props("S", emoji), 4 + 8 + 2 + 4 + 4},
		{"binary", props("X", make([]byte, 10)), 4 + 8 + 2 + 4 + 10},
		{"Boolean", props("B", false), 4 + 8 + 2 + 1},
		{"Int32", props("N", int32(1)), 4 + 8 + 2 + 4},
		{"Int64", props("N", int64(1)), 4 + 8 + 2 + 8},
		{"Double", props("N", 1.5), 4 + 8 + 2 + 8},
		{"DateTime", props("T", time.Unix(0, 0)), 4 + 8 + 2 + 8},
		{"Guid", props("G", storeadapter.GUID{}), 4 + 8 + 2 + 16},
		{"mixed", storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{
			"Str":  "abc",    // 8 + 6 + 4 + 6 = 24
			"Num":  int64(7), // 8 + 6 + 8 = 22
			"Flag": true,     // 8 + 8 + 1 = 17
		}}, 4 + 2 + 2 + 24 + 22 + 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := storeadapter.EntitySize(tt.in); got != tt.want {
				t.Errorf("EntitySize() = %d, want %d", got, tt.want)
			}
		})
	}
}

// upserts returns n upsert operations on distinct rows of partition "pk".
func upserts(n int) []storeadapter.TableOp {
	ops := make([]storeadapter.TableOp, n)
	for i := range ops {
		ops[i] = storeadapter.TableOp{
			Action: storeadapter.TxUpsertReplace,
			Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: fmt.Sprintf("r%03d", i), Properties: map[string]any{"N": int32(i)}},
		}
	}
	return ops
}

func TestValidateTransaction(t *testing.T) {
	with := func(ops []storeadapter.TableOp, i int, change func(*storeadapter.TableOp)) []storeadapter.TableOp {
		change(&ops[i])
		return ops
	}
	// binaryOps are entities of 15 binary properties of 64 KiB: under
	// 1 MiB each as Azure counts entities, but about 1.3 MB each on the
	// wire in base64, so three fit a 4 MiB request and four do not.
	binaryOps := make([]storeadapter.TableOp, 4)
	for i := range binaryOps {
		e := storeadapter.Entity{PartitionKey: "pk", RowKey: fmt.Sprintf("r%d", i), Properties: map[string]any{}}
		for j := range 15 {
			e.Properties[fmt.Sprintf("B%02d", j)] = make([]byte, storeadapter.MaxBinaryBytes)
		}
		binaryOps[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e}
	}
	tests := []struct {
		name  string
		in    []storeadapter.TableOp
		want  error
		field string
		index int // the failing operation, or -1 when the error is not a *TransactionError
	}{
		{"no operations", nil, storeadapter.ErrInvalidInput, "transaction", -1},
		{"one operation", upserts(1), nil, "", -1},
		{"100 operations", upserts(100), nil, "", -1},
		{"101 operations", upserts(101), storeadapter.ErrTooLarge, "transaction", -1},
		{"every action", []storeadapter.TableOp{
			{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "a"}},
			{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "b"}},
			{Action: storeadapter.TxUpsertMerge, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "c"}},
			{Action: storeadapter.TxUpdateReplace, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "d"}, IfMatch: storeadapter.ETagAny},
			{Action: storeadapter.TxUpdateMerge, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "e"}, IfMatch: `W/"1"`},
			{Action: storeadapter.TxDelete, Entity: storeadapter.Entity{PartitionKey: "pk", RowKey: "f"}, IfMatch: storeadapter.ETagAny},
		}, nil, "", -1},
		{"mixed partitions", with(upserts(5), 3, func(op *storeadapter.TableOp) { op.Entity.PartitionKey = "other" }),
			storeadapter.ErrInvalidInput, "PartitionKey", 3},
		{"duplicate RowKey", with(upserts(10), 7, func(op *storeadapter.TableOp) { op.Entity.RowKey = "r002" }),
			storeadapter.ErrInvalidInput, "RowKey", 7},
		{"update without If-Match", with(upserts(5), 2, func(op *storeadapter.TableOp) { op.Action = storeadapter.TxUpdateReplace }),
			storeadapter.ErrInvalidInput, "If-Match", 2},
		{"merge without If-Match", with(upserts(5), 4, func(op *storeadapter.TableOp) { op.Action = storeadapter.TxUpdateMerge }),
			storeadapter.ErrInvalidInput, "If-Match", 4},
		{"delete without If-Match", with(upserts(5), 1, func(op *storeadapter.TableOp) { op.Action = storeadapter.TxDelete }),
			storeadapter.ErrInvalidInput, "If-Match", 1},
		{"delete ignores properties", with(upserts(2), 1, func(op *storeadapter.TableOp) {
			op.Action, op.IfMatch = storeadapter.TxDelete, storeadapter.ETagAny
			op.Entity.Properties = map[string]any{"bad-name": 1}
		}), nil, "", -1},
		// TableOp.IfMatch "must be empty for the other actions": an insert or
		// upsert carrying one is a caller mistake the service would treat
		// differently (an If-Match header turns an upsert into an update).
		{"insert with If-Match", with(upserts(3), 1, func(op *storeadapter.TableOp) {
			op.Action, op.IfMatch = storeadapter.TxInsert, storeadapter.ETagAny
		}), storeadapter.ErrInvalidInput, "If-Match", 1},
		{"upsert with If-Match", with(upserts(3), 2, func(op *storeadapter.TableOp) { op.IfMatch = `W/"1"` }),
			storeadapter.ErrInvalidInput, "If-Match", 2},
		{"unknown action", with(upserts(3), 1, func(op *storeadapter.TableOp) { op.Action = 0 }),
			storeadapter.ErrInvalidInput, "action", 1},
		{"invalid entity", with(upserts(3), 2, func(op *storeadapter.TableOp) { op.Entity.Properties["bad-name"] = 1 }),
			storeadapter.ErrInvalidInput, "property name", 2},
		{"bad RowKey", with(upserts(3), 1, func(op *storeadapter.TableOp) { op.Entity.RowKey = "a?b" }),
			storeadapter.ErrInvalidInput, "RowKey", 1},
		{"three 1 MB binary entities", binaryOps[:3], nil, "", -1},
		{"four 1 MB binary entities: over 4 MiB in base64", binaryOps,
			storeadapter.ErrTooLarge, "transaction", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := storeadapter.ValidateTransaction(tt.in)
			checkErr(t, err, tt.want, tt.field)
			var txErr *storeadapter.TransactionError
			isTx := errors.As(err, &txErr)
			switch {
			case tt.index < 0 && isTx:
				t.Errorf("got *TransactionError %v, want a plain error", err)
			case tt.index >= 0 && !isTx:
				t.Errorf("got %v, want a *TransactionError", err)
			case tt.index >= 0 && txErr.Index != tt.index:
				t.Errorf("TransactionError.Index = %d, want %d", txErr.Index, tt.index)
			}
		})
	}
}

func TestValidateMessageText(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", nil},
		{"base64", "eyJ2IjoxfQ==", nil},
		{"JSON", `{"v":1,"id":"op-1","kind":"archive"}`, nil},
		{"tab, newline and carriage return", "a\tb\nc\r", nil},
		{"C1 control allowed by XML", "a\u0085b", nil},
		{"non-ASCII", "日本語 " + emoji, nil},
		{"65536 bytes", strings.Repeat("m", 65536), nil},
		{"65536 bytes of two-byte characters", strings.Repeat("é", 32768), nil},
		{"65537 bytes", strings.Repeat("m", 65537), storeadapter.ErrTooLarge},
		{"65538 bytes of two-byte characters", strings.Repeat("é", 32769), storeadapter.ErrTooLarge},
		{"NUL", "a\x00b", storeadapter.ErrInvalidInput},
		{"U+001F", "a\x1f", storeadapter.ErrInvalidInput},
		{"escape", "\x1b[31m", storeadapter.ErrInvalidInput},
		{"U+FFFE", "a\ufffe", storeadapter.ErrInvalidInput},
		{"U+FFFF", "\uffff", storeadapter.ErrInvalidInput},
		{"invalid UTF-8", "a\xffb", storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateMessageText(tt.in), tt.want, "message")
		})
	}
}

// TestValidateMessageTextNamesCharacter checks that the error quotes the
// character it refuses, not the first byte of its UTF-8 encoding.
func TestValidateMessageTextNamesCharacter(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"a\x01", `'\x01'`},
		{"ab\ufffe", `'\ufffe'`},
		{"\uffff", `'\uffff'`},
	}
	for _, tt := range tests {
		err := storeadapter.ValidateMessageText(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidateMessageText(%q) = %v, want an error quoting %s", tt.in, err, tt.want)
		}
	}
}

func TestValidateReceive(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name       string
		n          int
		visibility time.Duration
		want       error
		field      string
	}{
		{"one for a second", 1, time.Second, nil, ""},
		{"32 for 7 days", 32, 7 * day, nil, ""},
		{"worker default", 32, 30 * time.Second, nil, ""},
		{"zero messages", 0, 30 * time.Second, storeadapter.ErrInvalidInput, "count"},
		{"negative count", -1, 30 * time.Second, storeadapter.ErrInvalidInput, "count"},
		{"33 messages", 33, 30 * time.Second, storeadapter.ErrInvalidInput, "count"},
		{"zero visibility", 1, 0, storeadapter.ErrInvalidInput, "visibility timeout"},
		{"under a second", 1, 999 * time.Millisecond, storeadapter.ErrInvalidInput, "visibility timeout"},
		{"over 7 days", 1, 7*day + time.Second, storeadapter.ErrInvalidInput, "visibility timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateReceive(tt.n, tt.visibility), tt.want, tt.field)
		})
	}
}

func TestValidateSend(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name  string
		text  string
		o     storeadapter.SendOptions
		want  error
		field string
	}{
		{"defaults", "m", storeadapter.SendOptions{}, nil, ""},
		{"delay under the default TTL", "m", storeadapter.SendOptions{VisibilityDelay: 6 * day}, nil, ""},
		{"delay equal to the default TTL", "m", storeadapter.SendOptions{VisibilityDelay: 7 * day}, storeadapter.ErrInvalidInput, "visibility delay"},
		{"delay under the TTL", "m", storeadapter.SendOptions{VisibilityDelay: 9 * time.Second, TTL: 10 * time.Second}, nil, ""},
		{"delay equal to the TTL", "m", storeadapter.SendOptions{VisibilityDelay: 10 * time.Second, TTL: 10 * time.Second}, storeadapter.ErrInvalidInput, "visibility delay"},
		{"delay over the TTL", "m", storeadapter.SendOptions{VisibilityDelay: time.Minute, TTL: 10 * time.Second}, storeadapter.ErrInvalidInput, "visibility delay"},
		// The service keeps whole seconds: 1.5 s and 1.9 s both become 1 s,
		// and a delay of 1 s with a TTL of 1 s is not shorter than it.
		{"delay equal to the TTL in whole seconds", "m", storeadapter.SendOptions{VisibilityDelay: 1500 * time.Millisecond, TTL: 1900 * time.Millisecond}, storeadapter.ErrInvalidInput, "visibility delay"},
		{"never expire with the longest delay", "m", storeadapter.SendOptions{VisibilityDelay: 7 * day, TTL: storeadapter.NeverExpire}, nil, ""},
		{"never expire", "m", storeadapter.SendOptions{TTL: storeadapter.NeverExpire}, nil, ""},
		{"TTL of one second", "m", storeadapter.SendOptions{TTL: time.Second}, nil, ""},
		{"TTL over 7 days", "m", storeadapter.SendOptions{TTL: 30 * day}, nil, ""},
		{"TTL under a second", "m", storeadapter.SendOptions{TTL: 500 * time.Millisecond}, storeadapter.ErrInvalidInput, "ttl"},
		{"negative TTL other than NeverExpire", "m", storeadapter.SendOptions{TTL: -2 * time.Second}, storeadapter.ErrInvalidInput, "ttl"},
		{"negative delay", "m", storeadapter.SendOptions{VisibilityDelay: -time.Second}, storeadapter.ErrInvalidInput, "visibility delay"},
		{"delay over 7 days", "m", storeadapter.SendOptions{VisibilityDelay: 7*day + time.Second, TTL: storeadapter.NeverExpire}, storeadapter.ErrInvalidInput, "visibility delay"},
		{"text too large", strings.Repeat("m", 65537), storeadapter.SendOptions{}, storeadapter.ErrTooLarge, "message"},
		{"text with a control character", "a\x00", storeadapter.SendOptions{}, storeadapter.ErrInvalidInput, "message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateSend(tt.text, tt.o), tt.want, tt.field)
		})
	}
}

func TestValidateQuery(t *testing.T) {
	tests := []struct {
		name  string
		in    storeadapter.Query
		want  error
		field string
	}{
		{"zero", storeadapter.Query{}, nil, ""},
		{"full page", storeadapter.Query{Top: 1000, Select: []string{"PartitionKey", "RowKey", "Timestamp", "Name"}}, nil, ""},
		{"negative top", storeadapter.Query{Top: -1}, storeadapter.ErrInvalidInput, "top"},
		{"top over a page", storeadapter.Query{Top: 1001}, storeadapter.ErrInvalidInput, "top"},
		{"bad select", storeadapter.Query{Select: []string{"Name", "bad-name"}}, storeadapter.ErrInvalidInput, "property name"},
		{"bad filter", storeadapter.Query{Filter: storeadapter.Compare("bad-name", storeadapter.Eq, "x")}, storeadapter.ErrInvalidInput, "property name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateQuery(tt.in), tt.want, tt.field)
		})
	}
}

func TestValidateModeAndIfMatch(t *testing.T) {
	checkErr(t, storeadapter.ValidateMode(storeadapter.Replace), nil, "")
	checkErr(t, storeadapter.ValidateMode(storeadapter.Merge), nil, "")
	checkErr(t, storeadapter.ValidateMode(0), storeadapter.ErrInvalidInput, "update mode")
	checkErr(t, storeadapter.ValidateMode(3), storeadapter.ErrInvalidInput, "update mode")
	checkErr(t, storeadapter.ValidateIfMatch(storeadapter.ETagAny), nil, "")
	checkErr(t, storeadapter.ValidateIfMatch(`W/"datetime'2026-11-21'"`), nil, "")
	for _, weak := range []string{`w/"x"`, `W/""`, `W/"a\"b"`, `W/"datetime'2026-11-21T09%3A30%3A00.1234567Z'"`} {
		checkErr(t, storeadapter.ValidateIfMatch(weak), nil, "")
	}
	// Azure answers 400 to an If-Match that is not a weak ETag.
	for _, bad := range []string{"", "abc", `"abc"`, `datetime'2026-11-21'`, `W/abc`, `W/"a"b"`, `W"abc"`, `W/"abc`, "**", " *"} {
		checkErr(t, storeadapter.ValidateIfMatch(bad), storeadapter.ErrInvalidInput, "If-Match")
	}
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int32
	}{
		{0, 0},
		{999 * time.Millisecond, 0},
		{1500 * time.Millisecond, 1},
		{7 * 24 * time.Hour, 604800},
		{time.Duration(1<<63 - 1), 1<<31 - 1},
	}
	for _, tt := range tests {
		if got := storeadapter.Seconds(tt.in); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ééé", 2, "é…"},
		{"a\xffb", 5, "a\uFFFDb"},
	} {
		if got := text.Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("text.Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestValidateMetadata(t *testing.T) {
	fill := func(name string, total int) map[string]string { // one pair of total bytes
		return map[string]string{name: strings.Repeat("v", total-len(name))}
	}
	tests := []struct {
		name  string
		in    map[string]string
		want  error
		field string // the metadata name the error must mention
	}{
		{"nil", nil, nil, ""},
		{"empty", map[string]string{}, nil, ""},
		{"identifiers", map[string]string{"firstTimestamp": "2026-11-21T00:00:00Z", "_x": "1", "a9_": "", "Count": "42"}, nil, ""},
		{"printable ASCII value", map[string]string{"v": `a  b !#$%&'()*+,-./:;<=>?@[\]^_` + "`{|}~"}, nil, ""},
		{"exactly 8 KiB", fill("big", storeadapter.MaxMetadataBytes), nil, ""},
		{"over 8 KiB", fill("big", storeadapter.MaxMetadataBytes+1), storeadapter.ErrTooLarge, "big"},
		{"over 8 KiB in many pairs", func() map[string]string {
			m := map[string]string{}
			for i := range 9 {
				m[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 1000)
			}
			return m
		}(), storeadapter.ErrTooLarge, "metadata"},
		{"starts with a digit", map[string]string{"1a": "x"}, storeadapter.ErrInvalidInput, `"1a"`},
		{"hyphen", map[string]string{"a-b": "x"}, storeadapter.ErrInvalidInput, `"a-b"`},
		{"empty name", map[string]string{"": "x"}, storeadapter.ErrInvalidInput, `""`},
		{"non-ASCII name", map[string]string{"é": "x"}, storeadapter.ErrInvalidInput, `"é"`},
		{"space in name", map[string]string{"a b": "x"}, storeadapter.ErrInvalidInput, `"a b"`},
		{"names equal ignoring case", map[string]string{"count": "1", "Count": "2"}, storeadapter.ErrInvalidInput, "count"},
		{"non-ASCII value", map[string]string{"v": "ü"}, storeadapter.ErrInvalidInput, "metadata v"},
		{"emoji value", map[string]string{"v": emoji}, storeadapter.ErrInvalidInput, "metadata v"},
		{"newline in value", map[string]string{"v": "a\nb"}, storeadapter.ErrInvalidInput, "metadata v"},
		{"tab in value", map[string]string{"v": "a\tb"}, storeadapter.ErrInvalidInput, "metadata v"},
		{"DEL in value", map[string]string{"v": "a\x7fb"}, storeadapter.ErrInvalidInput, "metadata v"},
		{"leading space", map[string]string{"v": " a"}, storeadapter.ErrInvalidInput, "metadata v"},
		{"trailing space", map[string]string{"v": "a "}, storeadapter.ErrInvalidInput, "metadata v"},
		{"only a space", map[string]string{"v": " "}, storeadapter.ErrInvalidInput, "metadata v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, storeadapter.ValidateMetadata(tt.in), tt.want, tt.field)
			// Put and CommitBlocks check it through ValidatePutOptions.
			checkErr(t, storeadapter.ValidatePutOptions(storeadapter.PutOptions{Metadata: tt.in}), tt.want, tt.field)
		})
	}
}

// TestValidateMetadataNamesOnePair: with several bad pairs, the error names
// the same one every time (the first name in byte order), not whichever
// map iteration met first.
func TestValidateMetadataNamesOnePair(t *testing.T) {
	md := map[string]string{"z-z": "x", "a-a": "x", "m-m": "x", "ok": "x"}
	first := storeadapter.ValidateMetadata(md).Error()
	if !strings.Contains(first, `"a-a"`) {
		t.Errorf("error %q does not name the first bad name \"a-a\"", first)
	}
	for range 20 {
		if got := storeadapter.ValidateMetadata(md).Error(); got != first {
			t.Fatalf("error changed between calls: %q, then %q", first, got)
		}
	}
}

func TestLowerMetadata(t *testing.T) {
	in := map[string]string{"FirstTimestamp": "a", "count": "1", "_X": ""}
	got := storeadapter.LowerMetadata(in)
	want := map[string]string{"firsttimestamp": "a", "count": "1", "_x": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("LowerMetadata(%v) = %v, want %v", in, got, want)
	}
	if _, ok := in["FirstTimestamp"]; !ok || len(in) != 3 {
		t.Errorf("LowerMetadata changed its argument: %v", in)
	}
	for _, empty := range []map[string]string{nil, {}} {
		if got := storeadapter.LowerMetadata(empty); got != nil {
			t.Errorf("LowerMetadata(%#v) = %#v, want nil", empty, got)
		}
	}
}

func TestBlobPropsEqual(t *testing.T) {
	now := time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)
	p := storeadapter.BlobProps{Name: "b", ETag: `"0x1"`, Size: 3, ContentType: "text/plain", LastModified: now, Metadata: map[string]string{"a": "1"}}
	same := p
	same.Metadata = map[string]string{"a": "1"}
	same.LastModified = now.In(time.FixedZone("x", 3600))
	if !p.Equal(same) {
		t.Errorf("%+v.Equal(%+v) = false, want true", p, same)
	}
	for _, change := range []func(q *storeadapter.BlobProps){
		func(q *storeadapter.BlobProps) { q.Name = "c" },
		func(q *storeadapter.BlobProps) { q.ETag = `"0x2"` },
		func(q *storeadapter.BlobProps) { q.Size = 4 },
		func(q *storeadapter.BlobProps) { q.ContentType = "" },
		func(q *storeadapter.BlobProps) { q.LastModified = now.Add(time.Second) },
		func(q *storeadapter.BlobProps) { q.Metadata = nil },
		func(q *storeadapter.BlobProps) { q.Metadata = map[string]string{"a": "2"} },
		func(q *storeadapter.BlobProps) { q.Metadata = map[string]string{"a": "1", "b": ""} },
	} {
		q := p
		q.Metadata = map[string]string{"a": "1"}
		change(&q)
		if p.Equal(q) {
			t.Errorf("%+v.Equal(%+v) = true, want false", p, q)
		}
	}
	var empty storeadapter.BlobProps
	if !empty.Equal(storeadapter.BlobProps{Metadata: map[string]string{}}) {
		t.Error("nil and empty Metadata compare unequal")
	}
}

func TestBlobNameSegmentRoundTrips(t *testing.T) {
	for _, key := range []string{"a", ".", "..", "x.", "a.b", "c d.e", "a/b", "%", "é😀", "?#\\"} {
		seg := storeadapter.BlobNameSegment(key)
		if seg == "." || seg == ".." || strings.HasSuffix(seg, ".") || strings.Contains(seg, "/") {
			t.Errorf("BlobNameSegment(%q) = %q: a dot segment, a final dot or a slash", key, seg)
		}
		if got, err := storeadapter.ParseBlobNameSegment(seg); err != nil || got != key {
			t.Errorf("ParseBlobNameSegment(%q) = %q, %v; want %q", seg, got, err, key)
		}
	}
	if _, err := storeadapter.ParseBlobNameSegment("%zz"); !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Errorf("ParseBlobNameSegment(%%zz) = %v, want ErrInvalidInput", err)
	}
}
