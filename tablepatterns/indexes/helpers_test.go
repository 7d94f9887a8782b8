package indexes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

const employees = "Employees"

// sixIndexes declares one index of every kind and store on Employees.
func sixIndexes() Config {
	return Config{Tables: map[string][]Decl{employees: {
		{Name: "email", Property: "Email", Kind: KindCopy, Store: StorePartition},
		{Name: "emailAll", Property: "Email", Kind: KindCopy, Store: StoreTable, Table: "EmployeesByEmail"},
		{Name: "lastName", Property: "LastName", Kind: KindList, Store: StorePartition},
		{Name: "lastNameAll", Property: "LastName", Kind: KindList, Store: StoreTable, Table: "EmployeesByLastName"},
		{Name: "lastNameBlob", Property: "LastName", Kind: KindList, Store: StoreBlob, Container: "employee-index"},
		{Name: "lastNameRows", Property: "LastName", Kind: KindRows, Table: "EmployeesLastNameRows"},
	}}}
}

// fixture is a localstore behind an instrument whose fault hook a test
// can set, and the indexes on it.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	raw   *localstore.Store
	store *instrument.Store
	x     *Set
	calls *instrument.Counts
	fault func(ctx context.Context, c instrument.Call) error
	// prunes counts the fixture's prunes, for their operation ids.
	prunes int
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, raw: localstore.New(localstore.Options{}), calls: &instrument.Counts{}}
	f.store = instrument.Wrap(f.raw, instrument.Options{Observers: []instrument.Observer{f.calls}, Fault: func(ctx context.Context, c instrument.Call) error {
		if f.fault != nil {
			return f.fault(ctx, c)
		}
		return nil
	}})
	x, err := Open(f.store, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.x = x
	if err := f.raw.Tables().CreateTable(ctx, employees); err != nil {
		t.Fatal(err)
	}
	return f
}

// put writes an employee (nil props deletes it).
func (f *fixture) put(pk, rk string, props map[string]any) {
	f.t.Helper()
	var err error
	if props == nil {
		err = f.raw.Tables().DeleteEntity(f.ctx, employees, pk, rk, storeadapter.ETagAny)
		if err != nil && strings.Contains(err.Error(), "not found") {
			err = nil
		}
	} else {
		_, err = f.raw.Tables().UpsertEntity(f.ctx, employees, storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}, storeadapter.Replace)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) reconcile(pk, rk string) Outcome {
	f.t.Helper()
	out, err := f.x.Reconcile(f.ctx, employees, pk, rk)
	if err != nil {
		f.t.Fatalf("reconcile %s/%s: %v", pk, rk, err)
	}
	return out
}

// putCosts writes Sales/001 as props (nil: deletes it), reconciles it and
// checks that the reconcile made want storage calls (why names the case)
// and left every index equal to the truth.
func (f *fixture) putCosts(props map[string]any, want int64, why string) {
	f.t.Helper()
	f.put("Sales", "001", props)
	f.costs(want, why)
}

// costs reconciles Sales/001, as it is, and checks the calls it made and
// the indexes after.
func (f *fixture) costs(want int64, why string) {
	f.t.Helper()
	before := f.calls.Snapshot()
	f.reconcile("Sales", "001")
	after := f.calls.Snapshot()
	if n := after.Total().Calls - before.Total().Calls; n != want {
		f.t.Errorf("%s: %d calls, want %d:\n%v", why, n, want, after)
	}
	f.assertTruth()
}

func employee(last, email string) map[string]any {
	p := map[string]any{"Dept": "Sales"}
	if last != "" {
		p["LastName"] = last
	}
	if email != "" {
		p["Email"] = email
	}
	return p
}

// truth computes, from the table alone, what each index must hold: per
// index, encoded value -> sorted keys.
func (f *fixture) truth() map[string]map[string][]Key {
	f.t.Helper()
	out := map[string]map[string][]Key{}
	ti, _ := f.x.indexes(employees)
	for _, ix := range ti.indexes {
		out[ix.Name] = map[string][]Key{}
	}
	err := queryAll(f.ctx, f.raw.Tables(), employees, storeadapter.Query{}, func(e storeadapter.Entity) error {
		if storeadapter.IsReserved(e.RowKey) {
			return nil
		}
		for _, ix := range ti.indexes {
			v, ok := e.Properties[ix.Property]
			if !ok {
				continue
			}
			enc, err := EncodeValue(v)
			if err != nil || fitsIndex(ix, e.PartitionKey, e.RowKey, enc) != nil {
				continue // unindexable: a value or a key too long for the index
			}
			out[ix.Name][enc] = append(out[ix.Name][enc], Key{PK: e.PartitionKey, RK: e.RowKey})
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// dump reads what each index holds.
func (f *fixture) dump() map[string]map[string][]Key {
	f.t.Helper()
	out := map[string]map[string][]Key{}
	for _, name := range f.x.Names(employees) {
		out[name] = map[string][]Key{}
		err := f.x.Entries(f.ctx, employees, name, func(e Entry) error {
			out[name][e.Encoded] = append(out[name][e.Encoded], e.Key)
			return nil
		})
		if err != nil {
			f.t.Fatalf("entries of %s: %v", name, err)
		}
	}
	return out
}

// assertTruth fails unless every index equals the truth, and Check finds
// nothing.
func (f *fixture) assertTruth() {
	f.t.Helper()
	want, got := f.truth(), f.dump()
	for name := range want {
		for _, m := range []map[string][]Key{want[name], got[name]} {
			for v := range m {
				slices.SortFunc(m[v], Key.Compare)
			}
		}
		if !maps.EqualFunc(want[name], got[name], slices.Equal) {
			f.t.Errorf("index %s:\n got %v\nwant %v", name, summarize(got[name]), summarize(want[name]))
		}
		ix := mustIndex(f.t, f.x, name)
		if ix.Kind == KindList && ix.Store == StoreTable {
			// Lookups read the lines and the markers not folded, Entries
			// every row (see markers): they must agree.
			for _, v := range slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, bool) bool) {
				for v := range want[name] {
					yield(v, true)
				}
				for v := range got[name] {
					yield(v, true)
				}
			}))) {
				value, err := DecodeValue(v)
				if err != nil {
					f.t.Fatal(err)
				}
				if keys := lookupKeys(f.t, f.x, name, value, nil); !slices.Equal(keys, want[name][v]) {
					f.t.Errorf("index %s: lookup of %s = %v, want %v", name, v, keys, want[name][v])
				}
			}
		}
		res, err := f.x.Check(f.ctx, employees, name, func(fd Finding) error {
			if fd.Problem != ProblemUnindexable || !errors.Is(fitsIndex(ix, fd.PK, fd.RK, ""), storeadapter.ErrTooLarge) {
				f.t.Errorf("check %s: %s %s %s/%s %s", name, fd.Problem, fd.Value, fd.PK, fd.RK, fd.Detail)
			}
			return nil
		})
		if err != nil {
			f.t.Fatalf("check %s: %v", name, err)
		}
		if res.Problems() != f.unfit(ix) {
			f.t.Errorf("check %s: %+v; want no problem but %d unindexable (keys too long)", name, res, f.unfit(ix))
		}
	}
}

func summarize(m map[string][]Key) string {
	var b strings.Builder
	for _, v := range slices.Sorted(maps.Keys(m)) {
		if len(m[v]) > 6 {
			fmt.Fprintf(&b, "%s:%d keys ", v, len(m[v]))
			continue
		}
		fmt.Fprintf(&b, "%s:%v ", v, m[v])
	}
	return b.String()
}

func lookupKeys(t *testing.T, x *Set, name string, value any, pk *string) []Key {
	t.Helper()
	ms, err := x.Lookup(context.Background(), employees, name, value, LookupOptions{PK: pk})
	if err != nil {
		t.Fatalf("lookup %s %v: %v", name, value, err)
	}
	var out []Key
	for _, m := range ms {
		out = append(out, m.Key)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
