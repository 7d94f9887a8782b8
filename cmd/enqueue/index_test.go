package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// employeesConfig is a worker config file with the declarations,
// and a runner and an archive section (which enqueue accepts and leaves
// to the worker).
const employeesConfig = `{
  "runner": {"queue": "orders", "concurrency": 4},
  "archive": {"maxConflicts": 5},
  "index": {"tables": {"Employees": [
    {"name": "email",       "property": "Email",    "kind": "copy", "store": "partition"},
    {"name": "emailAll",    "property": "Email",    "kind": "copy", "store": "table", "table": "EmployeesByEmail"},
    {"name": "lastName",    "property": "LastName", "kind": "list", "store": "partition"},
    {"name": "lastNameAll", "property": "LastName", "kind": "list", "store": "table", "table": "EmployeesByLastName"},
    {"name": "lastNameBlob","property": "LastName", "kind": "list", "store": "blob", "container": "employee-index"},
    {"name": "lastNameRows","property": "LastName", "kind": "rows", "table": "EmployeesLastNameRows"}
  ]}}
}`

// employeeIndexes are the index names of employeesConfig.
var employeeIndexes = []string{"email", "emailAll", "lastName", "lastNameAll", "lastNameBlob", "lastNameRows"}

// employees are the seeded entities: pk, rk, Email, LastName.
var employees = [][4]string{
	{"Eng", "0004", "d@contoso.com", "Jones"},
	{"Sales", "0001", "a@contoso.com", "Jones"},
	{"Sales", "0002", "b@contoso.com", "Jones"},
	{"Sales", "0003", "c@contoso.com", "Smith"},
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// openIndexesOf opens the index section of a config file body on the
// bundle's store, as the worker would.
func (b *bundle) openIndexesOf(body string) *indexes.Set {
	b.t.Helper()
	x, err := indexes.Open(b.store, nil, b.openConfig(body))
	if err != nil {
		b.t.Fatal(err)
	}
	return x
}

// put writes an entity (creating the table when missing) without
// reconciling it.
func (b *bundle) put(table string, e storeadapter.Entity) {
	b.t.Helper()
	if err := b.store.Tables().CreateTable(b.t.Context(), table); err != nil && !errors.Is(err, storeadapter.ErrAlreadyExists) {
		b.t.Fatal(err)
	}
	if _, err := b.store.Tables().UpsertEntity(b.t.Context(), table, e, storeadapter.Replace); err != nil {
		b.t.Fatal(err)
	}
}

// reconcile brings an entity's indexes up to date, as the worker would.
func reconcile(t *testing.T, x *indexes.Set, table, pk, rk string) {
	t.Helper()
	out, err := x.Reconcile(t.Context(), table, pk, rk)
	if err != nil || len(out.Conflicts) > 0 || len(out.Unindexable) > 0 {
		t.Fatalf("Reconcile %s %s/%s: %+v, %v", table, pk, rk, out, err)
	}
}

// seedEmployees writes the employees, reconciles them, and returns the
// path of employeesConfig and the indexes.
func seedEmployees(b *bundle) (string, *indexes.Set) {
	b.t.Helper()
	x := b.openIndexesOf(employeesConfig)
	for _, e := range employees {
		b.put("Employees", storeadapter.Entity{PartitionKey: e[0], RowKey: e[1], Properties: map[string]any{
			"Email": e[2], "LastName": e[3], "Age": int32(40)}})
		reconcile(b.t, x, "Employees", e[0], e[1])
	}
	return writeConfig(b.t, employeesConfig), x
}

// lookupJSON is what lookup -o json prints.
type lookupJSON struct {
	Table, Index, Type, Value string
	PK                        *string
	Count                     int
	Matches                   []struct {
		PK, RK string
		Entity json.RawMessage
	}
}

// keys returns the "pk/rk" of each match.
func (l lookupJSON) keys() []string {
	var out []string
	for _, m := range l.Matches {
		out = append(out, m.PK+"/"+m.RK)
	}
	return out
}

// lookup runs index lookup -o json and decodes what it prints.
func (b *bundle) lookup(args ...string) lookupJSON {
	b.t.Helper()
	r := b.mustRun("", append([]string{"index", "lookup", "-o", "json"}, args...)...)
	var out lookupJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		b.t.Fatalf("lookup %v: -o json does not parse: %v\n%s", args, err, r.stdout)
	}
	return out
}

// TestIndexLookupEveryKindAndStore looks values up in each of the six
// index layouts, with and without -pk, in both output formats, and shows
// that lookup reads the index: an entity written but not reconciled is not
// listed.
func TestIndexLookupEveryKindAndStore(t *testing.T) {
	b := setup(t)
	cfg, _ := seedEmployees(b)
	// Written after the reconciles: the index does not list it yet.
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "0009", Properties: map[string]any{"Email": "a@contoso.com", "LastName": "Jones"}})

	for _, c := range []struct {
		index, value, pk string
		want             []string
	}{
		{"email", "a@contoso.com", "Sales", []string{"Sales/0001"}},
		{"email", "d@contoso.com", "Sales", nil},
		{"email", "d@contoso.com", "Eng", []string{"Eng/0004"}},
		{"EMAIL", "b@contoso.com", "Sales", []string{"Sales/0002"}}, // names ignore case
		{"emailAll", "d@contoso.com", "", []string{"Eng/0004"}},
		{"emailAll", "d@contoso.com", "Sales", nil},
		{"emailAll", "nobody@contoso.com", "", nil},
		{"lastName", "Jones", "Sales", []string{"Sales/0001", "Sales/0002"}},
		{"lastName", "Jones", "Eng", []string{"Eng/0004"}},
		{"lastNameAll", "Jones", "", []string{"Eng/0004", "Sales/0001", "Sales/0002"}},
		{"lastNameAll", "Jones", "Sales", []string{"Sales/0001", "Sales/0002"}},
		{"lastNameAll", "Smith", "", []string{"Sales/0003"}},
		{"lastNameBlob", "Jones", "", []string{"Eng/0004", "Sales/0001", "Sales/0002"}},
		{"lastNameBlob", "Jones", "Eng", []string{"Eng/0004"}},
		{"lastNameRows", "Jones", "", []string{"Eng/0004", "Sales/0001", "Sales/0002"}},
		{"lastNameRows", "Jones", "Sales", []string{"Sales/0001", "Sales/0002"}},
		{"lastNameRows", "jones", "", nil}, // strings are exact
	} {
		args := []string{"-config", cfg, "-table", "Employees", "-index", c.index, "-value", c.value}
		if c.pk != "" {
			args = append(args, "-pk", c.pk)
		}
		got := b.lookup(args...)
		if !slices.Equal(got.keys(), c.want) || got.Count != len(c.want) {
			t.Errorf("lookup %s %q pk %q: %v (count %d), want %v", c.index, c.value, c.pk, got.keys(), got.Count, c.want)
		}
		if got.Table != "Employees" || !strings.EqualFold(got.Index, c.index) || got.Type != "string" || got.Value != c.value {
			t.Errorf("lookup %s: document names table %q index %q type %q value %q", c.index, got.Table, got.Index, got.Type, got.Value)
		}
		for _, m := range got.Matches {
			if m.Entity != nil {
				t.Errorf("lookup %s without -entities printed an entity: %s", c.index, m.Entity)
			}
		}

		// The table: a header and one row per key, or a sentence.
		r := b.mustRun("", append([]string{"index", "lookup"}, args...)...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(c.want) == 0 {
			if len(lines) != 1 || !strings.Contains(lines[0], "lists nothing under Edm.String(") {
				t.Errorf("lookup %s %q: table output\n%s", c.index, c.value, r.stdout)
			}
			continue
		}
		if len(lines) != 1+len(c.want) || strings.Join(strings.Fields(lines[0]), " ") != "PK RK" {
			t.Errorf("lookup %s %q: table output\n%s", c.index, c.value, r.stdout)
			continue
		}
		for i, k := range c.want {
			if strings.Join(strings.Fields(lines[1+i]), "/") != k {
				t.Errorf("lookup %s %q: row %d is %q, want %s", c.index, c.value, i+1, lines[1+i], k)
			}
		}
	}
}

// TestIndexLookupEntities prints the entities: a copy index's copy (its
// declared properties only), else the entity as it is now, or none when it
// no longer exists.
func TestIndexLookupEntities(t *testing.T) {
	b := setup(t)
	body := strings.Replace(employeesConfig, `"table": "EmployeesByEmail"}`, `"table": "EmployeesByEmail", "properties": ["LastName"]}`, 1)
	x := b.openIndexesOf(body)
	cfg := writeConfig(t, body)
	for _, e := range employees {
		b.put("Employees", storeadapter.Entity{PartitionKey: e[0], RowKey: e[1], Properties: map[string]any{
			"Email": e[2], "LastName": e[3], "Age": int32(40), "Salary": int64(1) << 40}})
		reconcile(t, x, "Employees", e[0], e[1])
	}
	// Sales/0002 is deleted and not reconciled yet: the lists still name it.
	if err := b.store.Tables().DeleteEntity(t.Context(), "Employees", "Sales", "0002", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}

	entity := func(raw json.RawMessage) storeadapter.Entity {
		t.Helper()
		e, err := storeadapter.UnmarshalEntityJSON(raw, "")
		if err != nil {
			t.Fatalf("entity %s: %v", raw, err)
		}
		return e
	}
	got := b.lookup("-config", cfg, "-table", "Employees", "-index", "lastNameAll", "-value", "Jones", "-entities")
	if len(got.Matches) != 3 || got.keys()[1] != "Sales/0001" || got.keys()[2] != "Sales/0002" {
		t.Fatalf("lookup -entities: %v", got.keys())
	}
	e := entity(got.Matches[1].Entity)
	want := map[string]any{"Email": "a@contoso.com", "LastName": "Jones", "Age": int32(40), "Salary": int64(1) << 40}
	if e.PartitionKey != "Sales" || e.RowKey != "0001" || len(e.Properties) != len(want) {
		t.Errorf("entity of Sales/0001: %+v, want %v", e, want)
	}
	for k, v := range want {
		if !storeadapter.Equal(e.Properties[k], v) {
			t.Errorf("entity of Sales/0001: %s = %s, want %s (types kept)", k, storeadapter.Format(e.Properties[k]), storeadapter.Format(v))
		}
	}
	if string(got.Matches[2].Entity) != "null" {
		t.Errorf("entity of the deleted Sales/0002: %s, want null", got.Matches[2].Entity)
	}

	// A copy index gives its copy: the declared properties only.
	got = b.lookup("-config", cfg, "-table", "Employees", "-index", "emailAll", "-value", "d@contoso.com", "-entities")
	if len(got.Matches) != 1 {
		t.Fatalf("lookup emailAll -entities: %v", got.keys())
	}
	if e := entity(got.Matches[0].Entity); e.PartitionKey != "Eng" || e.RowKey != "0004" || len(e.Properties) != 1 || e.Properties["LastName"] != "Jones" {
		t.Errorf("copy of Eng/0004: %+v, want its LastName only under its own keys", e)
	}
	got = b.lookup("-config", cfg, "-table", "Employees", "-index", "email", "-pk", "Eng", "-value", "d@contoso.com", "-entities")
	if len(got.Matches) != 1 || !strings.Contains(string(got.Matches[0].Entity), `"Salary@odata.type": "Edm.Int64"`) {
		t.Errorf("partition copy of Eng/0004: %s", got.Matches)
	}
	if strings.Contains(string(got.Matches[0].Entity), "tk") {
		t.Errorf("the copy shows bookkeeping properties: %s", got.Matches[0].Entity)
	}

	// The table shows the properties, and says when an entity is gone.
	r := b.mustRun("", "index", "lookup", "-config", cfg, "-table", "Employees", "-index", "lastNameRows", "-value", "Jones", "-entities", "-pk", "Sales")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "PROPERTIES") ||
		!strings.Contains(lines[1], "Age=40 Email=a@contoso.com LastName=Jones Salary=1099511627776") ||
		!strings.Contains(lines[2], "0002") || !strings.Contains(lines[2], "(the entity no longer exists)") {
		t.Errorf("lookup -entities table:\n%s", r.stdout)
	}
}

// typedConfig declares one index per EDM type.
const typedConfig = `{"index": {"tables": {"Typed": [
  {"name": "s",  "property": "S",  "kind": "rows", "table": "TypedS"},
  {"name": "b",  "property": "B",  "kind": "list", "store": "table", "table": "TypedB"},
  {"name": "i",  "property": "I",  "kind": "list", "store": "partition"},
  {"name": "l",  "property": "L",  "kind": "copy", "store": "table"},
  {"name": "d",  "property": "D",  "kind": "list", "store": "blob", "container": "typed-d"},
  {"name": "t",  "property": "T",  "kind": "rows", "table": "TypedT"},
  {"name": "g",  "property": "G",  "kind": "copy", "store": "partition"},
  {"name": "x",  "property": "X",  "kind": "rows", "table": "TypedX"}
]}}}`

// TestIndexLookupTypes looks up a value of each EDM type with -type, and
// checks that each -type refuses a value it cannot parse, naming -value
// and the rule.
func TestIndexLookupTypes(t *testing.T) {
	b := setup(t)
	x := b.openIndexesOf(typedConfig)
	cfg := writeConfig(t, typedConfig)
	guid, err := storeadapter.ParseGUID("0f8fad5b-d9cb-469f-a165-70867728950e")
	if err != nil {
		t.Fatal(err)
	}
	b.put("Typed", storeadapter.Entity{PartitionKey: "p", RowKey: "r1", Properties: map[string]any{
		"S": "x/y#z", "B": true, "I": int32(-42), "L": int64(1) << 50, "D": 2.5,
		"T": time.Date(2026, 11, 21, 10, 0, 0, 500_000_000, time.UTC), "G": guid, "X": []byte{0x0a, 0xff}}})
	reconcile(t, x, "Typed", "p", "r1")

	for _, c := range []struct{ index, typ, value string }{
		{"s", "string", "x/y#z"},
		{"b", "bool", "true"},
		{"i", "int32", "-42"},
		{"l", "int64", "1125899906842624"},
		{"d", "double", "2.5"},
		{"d", "double", "25e-1"},
		{"t", "datetime", "2026-11-21T10:00:00.5Z"},
		{"t", "datetime", "2026-11-21T11:00:00.500+01:00"},
		{"g", "guid", "0F8FAD5B-D9CB-469F-A165-70867728950E"},
		{"x", "binary", "0aff"},
		{"x", "binary", "0AFF"},
	} {
		got := b.lookup("-config", cfg, "-table", "Typed", "-index", c.index, "-type", c.typ, "-value", c.value, "-pk", "p")
		if !slices.Equal(got.keys(), []string{"p/r1"}) || got.Type != c.typ {
			t.Errorf("lookup -type %s %s: %v (type %q), want p/r1", c.typ, c.value, got.keys(), got.Type)
		}
	}
	// A value of another type is another value.
	for _, c := range []struct{ index, typ, value string }{
		{"i", "int64", "-42"}, {"s", "string", "X/y#z"}, {"b", "bool", "false"}, {"d", "double", "2.50001"},
	} {
		if got := b.lookup("-config", cfg, "-table", "Typed", "-index", c.index, "-type", c.typ, "-value", c.value, "-pk", "p"); len(got.Matches) != 0 {
			t.Errorf("lookup -type %s %s found %v, want nothing", c.typ, c.value, got.keys())
		}
	}

	for _, c := range []struct{ typ, value, want string }{
		{"bool", "yes", `-value: -type bool takes true or false, got "yes"`},
		{"bool", "1", `-value: -type bool takes true or false`},
		{"int32", "2147483648", `-value: -type int32 takes a decimal integer from -2147483648 to 2147483647, got "2147483648"`},
		{"int32", "4.0", `-value: -type int32 takes a decimal integer`},
		{"int64", "0x10", `-value: -type int64 takes a decimal integer from -9223372036854775808 to 9223372036854775807`},
		{"double", "1e400", `-value: -type double takes a decimal number`},
		{"double", "two", `-value: -type double takes a decimal number`},
		{"datetime", "2026-11-21", `-value: -type datetime takes an RFC 3339 time with its offset`},
		{"datetime", "2026-11-21T10:00:00", `-value: -type datetime takes an RFC 3339 time with its offset`},
		{"datetime", "1400-01-01T00:00:00Z", `-value: index: encode Edm.DateTime: invalid input: year 1400 is outside 1601-9999`},
		{"guid", "0f8fad5bd9cb469fa16570867728950e", `-value: -type guid takes the 8-4-4-4-12 hexadecimal form`},
		{"binary", "abc", `-value: -type binary takes hexadecimal, two digits per byte`},
		{"binary", "zz", `-value: -type binary takes hexadecimal`},
		{"string", strings.Repeat("a", 600), `-value: index: encode Edm.String`},
		{"decimal", "1", `-type: must be one of string, bool, int32, int64, double, datetime, guid, binary, got "decimal"`},
	} {
		r := b.run("", "index", "lookup", "-config", cfg, "-table", "Typed", "-index", "s", "-type", c.typ, "-value", c.value)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("-type %s -value %q: exit %d, stderr:\n%s\nwant exit 2 and %q", c.typ, text.Truncate(c.value, 20), r.code, r.stderr, c.want)
		}
	}
}

// TestIndexLookupUsageErrors: the mistakes lookup refuses with exit 2,
// naming the flag: a partition-store index without -pk, no -config, an
// undeclared table or index, a bad config file.
func TestIndexLookupUsageErrors(t *testing.T) {
	b := setup(t)
	cfg, _ := seedEmployees(b)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"partition copy without pk", []string{"-config", cfg, "-table", "Employees", "-index", "email", "-value", "a@contoso.com"},
			`-pk: index email of Employees is kept in each partition (store "partition"): give the partition to look in`},
		{"partition list without pk", []string{"-config", cfg, "-table", "Employees", "-index", "lastname", "-value", "Jones"},
			`-pk: index lastName of Employees is kept in each partition`},
		{"no config", []string{"-table", "Employees", "-index", "emailAll", "-value", "x"},
			"-config: lookup reads the index declarations from the worker's config file: give -config FILE or set $TABLEKEEPER_CONFIG"},
		{"missing config file", []string{"-config", cfg + ".missing", "-table", "Employees", "-index", "emailAll", "-value", "x"},
			"-config: open " + cfg + ".missing: no such file"},
		{"undeclared table", []string{"-config", cfg, "-table", "Managers", "-index", "emailAll", "-value", "x"},
			"-table: Managers has no indexes declared in -config " + cfg + " (tables with indexes: Employees)"},
		{"undeclared index", []string{"-config", cfg, "-table", "Employees", "-index", "phone", "-value", "x"},
			`-index: Employees has no index "phone" in -config ` + cfg + " (its indexes: email, emailAll, lastName, lastNameAll, lastNameBlob, lastNameRows)"},
		{"no index", []string{"-config", cfg, "-table", "Employees", "-value", "x"}, "-index: is required"},
		{"no value", []string{"-config", cfg, "-table", "Employees", "-index", "emailAll"}, "-value: is required"},
		{"no table", []string{"-config", cfg, "-index", "emailAll", "-value", "x"}, "-table: invalid input: table name"},
		{"bad pk", []string{"-config", cfg, "-table", "Employees", "-index", "emailAll", "-value", "x", "-pk", "a/b"}, "-pk: invalid input: pk: must not contain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.run("", append([]string{"index", "lookup"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, c.want)
			}
		})
	}

	// Bad config files: strict about the index section, line:column for a
	// key, the declarations' own rules.
	for body, want := range map[string]string{
		"{\"index\": {\"tables\": {\"Employees\": [\n  {\"name\": \"email\", \"propertyName\": \"Email\", \"kind\": \"copy\"}]}}}": `worker.json:2:21: index.tables.Employees[].propertyName: unknown field`,
		`{"index": {"Tables": {}}}`: `index.Tables: unknown field (names are case-sensitive: did you mean "tables"?)`,
		`{"index": {"tables": {"Employees": [{"name": "email", "property": "Email", "kind": "copy", "store": "blob"}]}}}`: `worker.json: index.tables["Employees"] index "email": store: a copy index is stored in`,
		`{"runner": {"queue": "q"}, "archive": {}}`: `worker.json: declares no indexes`,
		`{"index": {}, "index": {}}`:                `worker.json:1:15: index: given twice`,
		`[]`:                                        "not a JSON object",
	} {
		path := writeConfig(t, body)
		r := b.run("", "index", "lookup", "-config", path, "-table", "Employees", "-index", "email", "-value", "x", "-pk", "p")
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("config %s: exit %d, stderr:\n%s\nwant exit 2 and %q", body, r.code, r.stderr, want)
		}
	}

	// $TABLEKEEPER_CONFIG is the default.
	t.Setenv(cli.EnvConfig, cfg)
	if got := b.lookup("-table", "Employees", "-index", "emailAll", "-value", "a@contoso.com"); !slices.Equal(got.keys(), []string{"Sales/0001"}) {
		t.Errorf("lookup with $%s: %v", cli.EnvConfig, got.keys())
	}
}

// indexMessages takes every message of the work queue and decodes each as
// the worker does, returning the envelopes and their index args.
func (b *bundle) indexMessages() ([]jobs.Envelope, []index.Args) {
	b.t.Helper()
	var envs []jobs.Envelope
	var args []index.Args
	reg := catalog.ArgsRegistry(nil)
	for _, m := range b.receiveAll(b.queue) {
		task, err := reg.Decode(b.t.Context(), m)
		if err != nil {
			b.t.Fatalf("message %q does not decode: %v", m.Text, err)
		}
		if task.Kind != index.Kind {
			b.t.Fatalf("message kind %q, want index", task.Kind)
		}
		envs = append(envs, task.Envelope)
		args = append(args, task.Args.(index.Args))
	}
	return envs, args
}

// TestIndexReconcileOne enqueues one reconcile with its args exactly, and
// the worker that runs it brings the entity's indexes up to date.
func TestIndexReconcileOne(t *testing.T) {
	b := setup(t)
	cfg, x := seedEmployees(b)
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "0005", Properties: map[string]any{"Email": "e@contoso.com", "LastName": "Brown"}})

	r := b.mustRun("", "index", "reconcile", "-config", cfg, "-table", "Employees", "-pk", "Sales", "-rk", "0005", "-id", "op-reconcile-1")
	if !strings.Contains(r.stdout, "op-reconcile-1") || !strings.Contains(r.stdout, "MESSAGE ID") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	env, err := jobs.DecodeEnvelope(msgs[0].Text)
	if err != nil {
		t.Fatal(err)
	}
	if env.ID != "op-reconcile-1" || env.Kind != "index" || string(env.Args) != `{"table":"Employees","pk":"Sales","rk":"0005"}` {
		t.Errorf("envelope id %q kind %q args %s", env.ID, env.Kind, env.Args)
	}

	// The worker runs it.
	reg, err := catalog.NewRegistry(b.store, nil, catalog.Config{Index: b.openConfig(employeesConfig)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := reg.Decode(t.Context(), msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	h, _ := reg.Handler(index.Kind)
	if err := h.Handle(t.Context(), task); err != nil {
		t.Fatalf("the worker's handler: %v", err)
	}
	ms, err := x.Lookup(t.Context(), "Employees", "lastNameAll", "Brown", indexes.LookupOptions{})
	if err != nil || len(ms) != 1 || ms[0].RK != "0005" {
		t.Errorf("after the reconcile, lastNameAll lists %v under Brown (%v), want Sales/0005", ms, err)
	}

	// Without -config nothing is checked against the declarations; an id
	// is generated.
	r = b.mustRun("", "index", "reconcile", "-o", "json", "-table", "Undeclared", "-pk", "p", "-rk", "r")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !strings.HasPrefix(out.OpID, "op-20261121T100000Z-") || out.MessageID == "" {
		t.Errorf("-o json: %+v (%v)\n%s", out, err, r.stdout)
	}
	if envs, _ := b.indexMessages(); len(envs) != 1 || envs[0].ID != out.OpID {
		t.Errorf("queue holds %v, want the one message of op %s", envs, out.OpID)
	}
}

// openConfig decodes the index section of a config file body.
func (b *bundle) openConfig(body string) indexes.Config {
	b.t.Helper()
	var f struct {
		Index indexes.Config `json:"index"`
	}
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		b.t.Fatal(err)
	}
	return f.Index
}

// TestIndexReconcileAndRebuildUsageErrors: the flag mistakes reconcile and
// rebuild refuse with exit 2, naming the flag, and send nothing.
func TestIndexReconcileAndRebuildUsageErrors(t *testing.T) {
	b := setup(t)
	cfg := writeConfig(t, employeesConfig)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"pk alone", []string{"reconcile", "-table", "Employees", "-pk", "p"}, "-pk and -rk: give both to reconcile one entity, or neither"},
		{"rk alone", []string{"reconcile", "-table", "Employees", "-rk", "r"}, "-pk and -rk: give both"},
		{"keys and file", []string{"reconcile", "-table", "Employees", "-pk", "p", "-rk", "r", "-file", "keys.jsonl"}, "-file: reads the keys of many entities"},
		{"id for many", []string{"reconcile", "-table", "Employees", "-id", "op-1"}, "-id: names the one job of -pk and -rk"},
		{"reserved rk", []string{"reconcile", "-table", "Employees", "-pk", "p", "-rk", "~tk.m.x"}, `-rk: must not start with "~tk."`},
		{"bad pk", []string{"reconcile", "-table", "Employees", "-pk", "a#b", "-rk", "r"}, "-pk: invalid input: pk: must not contain"},
		{"bad table", []string{"reconcile", "-table", "E", "-pk", "p", "-rk", "r"}, "-table: invalid input: table name"},
		{"bad id", []string{"reconcile", "-table", "Employees", "-pk", "p", "-rk", "r", "-id", "op 1"}, "-id: must be 1-128 characters"},
		{"bad concurrency", []string{"reconcile", "-table", "Employees", "-concurrency", "0"}, "-concurrency: must be 1-1024"},
		{"undeclared table", []string{"reconcile", "-config", cfg, "-table", "Managers", "-pk", "p", "-rk", "r"}, "-table: Managers has no indexes declared in -config"},
		{"rebuild undeclared table", []string{"rebuild", "-config", cfg, "-table", "Managers"}, "-table: Managers has no indexes declared"},
		{"rebuild with rk", []string{"rebuild", "-table", "Employees", "-rk", "r"}, "unknown flag -rk"},
		{"rebuild bad pk", []string{"rebuild", "-table", "Employees", "-pk", "a?b"}, "-pk: invalid input: pk: must not contain"},
		{"rebuild no table", []string{"rebuild"}, "-table: invalid input: table name"},
		{"prune with pk", []string{"prune", "-table", "Employees", "-pk", "p"}, "unknown flag -pk"},
		{"prune undeclared table", []string{"prune", "-config", cfg, "-table", "Managers"}, "-table: Managers has no indexes declared"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.run("", append([]string{"index"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, c.want)
			}
			if n := b.count(b.queue); n != 0 {
				t.Errorf("the queue holds %d messages after a usage error, want 0", n)
			}
		})
	}
}

// TestIndexReconcileBulk reads keys as JSON lines from stdin, sends one
// reconcile per good line, reports each bad line by its number and goes
// on, and exits 1.
func TestIndexReconcileBulk(t *testing.T) {
	b := setup(t)
	cfg := writeConfig(t, employeesConfig)
	in := strings.Join([]string{
		`{"pk":"Sales","rk":"0001"}`,
		`{"pk":"Sales"}`,
		``,
		`{"pk":"Sales","rk":"0002","extra":1}`,
		`not json`,
		`{"pk":"Sales","rk":"~tk.m.0001"}`,
		`{"pk":"Sa/les","rk":"0003"}`,
		`{"pk":"Eng","rk":7}`,
		`{"PK":"Eng","rk":"0004"}`,
		`  {"rk":"0004","pk":"Eng"}  `,
		`{"pk":"Eng","rk":"0004"} {}`,
	}, "\n")
	r := b.run(in, "index", "reconcile", "-config", cfg, "-table", "Employees", "-concurrency", "3")
	if r.code != 1 {
		t.Errorf("exit %d, want 1 (some lines failed)", r.code)
	}
	if strings.TrimSpace(r.stdout) != "sent 2, failed 8" {
		t.Errorf("stdout %q, want the summary \"sent 2, failed 8\"", r.stdout)
	}
	for _, want := range []string{
		"line 2: rk: is required",
		"line 4: extra: unknown field",
		`line 5: must be a JSON object {"pk":"…","rk":"…"}`,
		`line 6: rk: must not start with "~tk."`,
		"line 7: pk: invalid input: pk: must not contain",
		"line 8: rk: must be a string, got number",
		`line 9: PK: unknown field (names are case-sensitive: did you mean "pk"?)`,
		"line 11: unexpected data after the JSON object",
		"enqueue index reconcile: 8 of 10 lines failed",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	envs, args := b.indexMessages()
	var got []string
	for i, a := range args {
		if a.Table != "Employees" || a.Rebuild || a.PK == nil || a.RK == nil {
			t.Errorf("args %+v", a)
			continue
		}
		got = append(got, *a.PK+"/"+*a.RK)
		if !strings.HasPrefix(envs[i].ID, "op-20261121T100000Z-") {
			t.Errorf("op id %q is not a generated one", envs[i].ID)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"Eng/0004", "Sales/0001"}) || envs[0].ID == envs[1].ID {
		t.Errorf("sent %v with ids %v, want Eng/0004 and Sales/0001 with two ids", got, envs)
	}

	// From -file, with the progress line on a terminal and -o json.
	file := filepath.Join(t.TempDir(), "keys.jsonl")
	if err := os.WriteFile(file, []byte("{\"pk\":\"Sales\",\"rk\":\"0003\"}\n{\"pk\":\"Sales\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Clock: b.clock, IsTerminal: func(any) bool { return true },
		Connect: func() (storeadapter.Store, error) { return b.store, nil }}
	if code := m.Run(t.Context(), []string{"index", "reconcile", "-table", "Employees", "-file", file, "-o", "json"}); code != 1 {
		t.Errorf("-file: exit %d, want 1", code)
	}
	var out struct {
		Sent, Failed int
		Failures     []struct {
			Line  int
			Error string
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Sent != 1 || out.Failed != 1 || len(out.Failures) != 1 ||
		out.Failures[0].Line != 2 || out.Failures[0].Error != "rk: is required" {
		t.Errorf("-o json: %+v (%v)\n%s", out, err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "\rsent 1/2 (") {
		t.Errorf("no progress line with the file's total on a terminal:\n%q", stderr.String())
	}
	if _, args := b.indexMessages(); len(args) != 1 || *args[0].RK != "0003" {
		t.Errorf("-file sent %+v, want Sales/0003", args)
	}
}

// TestIndexReconcileBulkSaysHowToResume: when the queue fails part way,
// the report gives the command to resume with, this one.
func TestIndexReconcileBulkSaysHowToResume(t *testing.T) {
	var stdout, stderr bytes.Buffer
	down := unreachable()
	m := &Main{Stdin: strings.NewReader(`{"pk":"p","rk":"r"}` + "\n"), Stdout: &stdout, Stderr: &stderr,
		Connect: func() (storeadapter.Store, error) { return down, nil }}
	t.Setenv(cli.EnvConfig, "")
	if code := m.Run(t.Context(), []string{"index", "reconcile", "-table", "Employees"}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "resume with: tail -n +1 <input> | enqueue index reconcile -table Employees (") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestIndexRebuild enqueues {"table","rebuild":true} and, with -pk,
// {"table","pk","rebuild":true}; index prune {"table","prune":true}.
func TestIndexRebuild(t *testing.T) {
	b := setup(t)
	cfg := writeConfig(t, employeesConfig)
	b.mustRun("", "index", "rebuild", "-config", cfg, "-table", "Employees", "-id", "op-rebuild-1")
	b.mustRun("", "index", "rebuild", "-table", "Employees", "-pk", "Sales", "-id", "op-rebuild-2")
	b.mustRun("", "index", "prune", "-config", cfg, "-table", "Employees", "-id", "op-prune-1")
	msgs := b.receiveAll(b.queue)
	want := map[string]string{
		"op-rebuild-1": `{"table":"Employees","rebuild":true}`,
		"op-rebuild-2": `{"table":"Employees","pk":"Sales","rebuild":true}`,
		"op-prune-1":   `{"table":"Employees","prune":true}`,
	}
	if len(msgs) != 3 {
		t.Fatalf("queue holds %d messages, want 3", len(msgs))
	}
	for _, msg := range msgs {
		env, err := jobs.DecodeEnvelope(msg.Text)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind != "index" || string(env.Args) != want[env.ID] {
			t.Errorf("op %s: kind %q args %s, want index %s", env.ID, env.Kind, env.Args, want[env.ID])
		}
	}
}

// checkDocument is what check -o json prints.
type checkDocument struct {
	Table, Index string
	Findings     []indexes.Finding
	Summary      struct {
		indexes.CheckResult
		Problems int
	}
	Error string
}

// TestIndexCheck: a clean index exits 0 with a summary; an entity deleted
// and one written without a reconcile make a stale and a missing entry in
// every index, which check prints, in both formats, and exits 1.
func TestIndexCheck(t *testing.T) {
	b := setup(t)
	cfg, _ := seedEmployees(b)
	for _, name := range employeeIndexes {
		r := b.mustRun("", "index", "check", "-config", cfg, "-table", "Employees", "-index", name)
		if want := "index " + name + " of Employees is consistent: 4 entities read, 4 indexed, 4 entries read\n"; r.stdout != want {
			t.Errorf("check %s: stdout %q, want %q", name, r.stdout, want)
		}
		r = b.mustRun("", "index", "check", "-config", cfg, "-table", "Employees", "-index", name, "-o", "json")
		var doc checkDocument
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Index != name || doc.Table != "Employees" || doc.Findings == nil ||
			len(doc.Findings) != 0 || doc.Summary.Problems != 0 || doc.Summary.Entities != 4 || doc.Summary.Entries != 4 {
			t.Errorf("check %s -o json: %+v (%v)\n%s", name, doc, err, r.stdout)
		}
		if !strings.Contains(r.stdout, "\"findings\": [],\n") {
			t.Errorf("check %s -o json is not indented as the other commands' JSON:\n%s", name, r.stdout)
		}
	}

	// Plant a stale entry (Sales/0003 deleted) and a missing one
	// (Sales/0005 written), neither reconciled.
	if err := b.store.Tables().DeleteEntity(t.Context(), "Employees", "Sales", "0003", storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: "0005", Properties: map[string]any{"Email": "e@contoso.com", "LastName": "Brown"}})

	for _, name := range employeeIndexes {
		value := map[bool]string{true: "Edm.String(c@contoso.com)", false: "Edm.String(Smith)"}[strings.HasPrefix(name, "email")]
		newValue := map[bool]string{true: "Edm.String(e@contoso.com)", false: "Edm.String(Brown)"}[strings.HasPrefix(name, "email")]
		r := b.run("", "index", "check", "-config", cfg, "-table", "Employees", "-index", name)
		if r.code != 1 || !strings.Contains(r.stderr, "enqueue index check: index "+name+" of Employees: 2 problem(s) found") {
			t.Errorf("check %s: exit %d, stderr:\n%s", name, r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		fields := func(prefix string) string {
			for _, l := range lines {
				if strings.HasPrefix(l, prefix) {
					return strings.Join(strings.Fields(l), " ")
				}
			}
			return ""
		}
		if len(lines) != 4 || fields("PROBLEM") != "PROBLEM INDEX VALUE PK RK DETAIL" ||
			fields("missing") != "missing "+name+" "+newValue+" Sales 0005 -" ||
			fields("stale") != "stale "+name+" "+value+" Sales 0003 the entity does not exist" ||
			lines[3] != "index "+name+" of Employees: 4 entities read, 4 indexed, 4 entries read; 1 missing, 1 stale, 0 conflicts, 0 unindexable" {
			t.Errorf("check %s: stdout:\n%s", name, r.stdout)
		}

		r = b.run("", "index", "check", "-config", cfg, "-table", "Employees", "-index", name, "-o", "json")
		var doc checkDocument
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 1 {
			t.Fatalf("check %s -o json: exit %d, %v\n%s", name, r.code, err, r.stdout)
		}
		slices.SortFunc(doc.Findings, func(a, b indexes.Finding) int { return strings.Compare(a.Problem, b.Problem) })
		want := []indexes.Finding{
			{Index: name, Problem: "missing", Value: newValue, Key: indexes.Key{PK: "Sales", RK: "0005"}},
			{Index: name, Problem: "stale", Value: value, Key: indexes.Key{PK: "Sales", RK: "0003"}, Detail: "the entity does not exist"},
		}
		if !slices.Equal(doc.Findings, want) || doc.Summary.Problems != 2 || doc.Summary.Missing != 1 || doc.Summary.Stale != 1 || doc.Error != "" {
			t.Errorf("check %s -o json: %+v\nwant findings %+v", name, doc, want)
		}
	}

	// check needs -config, and names the index.
	if r := b.run("", "index", "check", "-table", "Employees", "-index", "email"); r.code != 2 || !strings.Contains(r.stderr, "-config: check reads the index declarations") {
		t.Errorf("check without -config: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "index", "check", "-config", cfg, "-table", "Employees"); r.code != 2 || !strings.Contains(r.stderr, "-index: is required") {
		t.Errorf("check without -index: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestIndexCheckManyFindings prints more findings than one block of the
// table: every one once, the header once.
func TestIndexCheckManyFindings(t *testing.T) {
	b := setup(t)
	cfg := writeConfig(t, employeesConfig)
	const n = 2*checkFlushRows + 17
	for i := range n {
		b.put("Employees", storeadapter.Entity{PartitionKey: "Sales", RowKey: fmt.Sprintf("%05d", i), Properties: map[string]any{"LastName": "Jones"}})
	}
	r := b.run("", "index", "check", "-config", cfg, "-table", "Employees", "-index", "lastNameRows")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 1 || len(lines) != n+2 || strings.Count(r.stdout, "PROBLEM") != 1 || strings.Count(r.stdout, "\nmissing ") != n ||
		!strings.Contains(lines[n+1], fmt.Sprintf("%d missing, 0 stale", n)) {
		t.Errorf("exit %d, %d lines:\n%s", r.code, len(lines), r.stdout)
	}
}

// TestIndexCheckFailsPartWay: a check whose storage fails prints what it
// found so far and ends the JSON document with the error, still valid.
func TestIndexCheckFailsPartWay(t *testing.T) {
	b := setup(t)
	cfg, _ := seedEmployees(b)
	var stdout, stderr bytes.Buffer
	down := unreachable()
	m := &Main{Stdout: &stdout, Stderr: &stderr, Connect: func() (storeadapter.Store, error) { return down, nil }}
	if code := m.Run(t.Context(), []string{"index", "check", "-config", cfg, "-table", "Employees", "-index", "emailAll", "-o", "json"}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var doc checkDocument
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || !strings.Contains(doc.Error, "unavailable") || len(doc.Findings) != 0 {
		t.Errorf("document %+v (%v):\n%s", doc, err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "enqueue index check: ") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestIndexUsage: the index subcommands are listed by the usage texts.
func TestIndexUsage(t *testing.T) {
	b := setup(t)
	r := b.run("", "help")
	for _, cmd := range []string{"index lookup", "index reconcile", "index rebuild", "index prune", "index check"} {
		if !strings.Contains(r.stdout, "\n  "+cmd+" ") {
			t.Errorf("usage does not list %q:\n%s", cmd, r.stdout)
		}
	}
	if r := b.run("", "index"); r.code != 2 || !strings.Contains(r.stderr, "usage: enqueue index <subcommand>") {
		t.Errorf("index: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "index", "frob"); r.code != 2 || !strings.Contains(r.stderr, `unknown subcommand "frob"`) {
		t.Errorf("index frob: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "index", "lookup", "-h"); r.code != 0 || !strings.Contains(r.stdout, "usage: enqueue index lookup -table T") || !strings.Contains(r.stdout, "-entities") {
		t.Errorf("index lookup -h: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}
