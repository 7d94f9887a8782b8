package indexes

import (
	"context"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Problems Check reports.
const (
	ProblemMissing     = "missing"     // the entity has the value, the index does not list it
	ProblemStale       = "stale"       // the index lists an entity that is gone or has another value (or a copy is out of date)
	ProblemConflict    = "conflict"    // a copy index's value is held by another entity
	ProblemUnindexable = "unindexable" // the value cannot be indexed (too long for a key, a copy too large)
)

// Finding is one discrepancy between an index and its table.
type Finding struct {
	Index   string `json:"index"`
	Problem string `json:"problem"`
	// Value is the value, rendered with its type.
	Value string `json:"value"`
	Key
	Detail string `json:"detail,omitempty"`
}

// CheckResult counts what Check compared and found.
type CheckResult struct {
	Entities    int `json:"entities"`    // entities of the table read
	Indexed     int `json:"indexed"`     // entities that should be in the index
	Entries     int `json:"entries"`     // live entries of the index read
	Missing     int `json:"missing"`     //
	Stale       int `json:"stale"`       //
	Conflicts   int `json:"conflicts"`   //
	Unindexable int `json:"unindexable"` //
}

// Problems is the number of findings.
func (r CheckResult) Problems() int { return r.Missing + r.Stale + r.Conflicts + r.Unindexable }

// Check compares one index with its table, read-only: it pages through
// the table and looks each entity up in the index (missing, conflicting,
// unindexable or outdated entries), then pages through the index and
// reads each entry's entity (stale entries). report is called for each
// finding. It costs about one read per entity and per entry; memory does
// not grow with the table. Run on a table being written, it reports the
// changes not yet reconciled.
func (x *Set) Check(ctx context.Context, table, name string, report func(Finding) error) (CheckResult, error) {
	var res CheckResult
	ix, err := x.index(table, name)
	if err != nil {
		return res, err
	}
	find := func(problem, value string, k Key, detail string) error {
		switch problem {
		case ProblemMissing:
			res.Missing++
		case ProblemStale:
			res.Stale++
		case ProblemConflict:
			res.Conflicts++
		case ProblemUnindexable:
			res.Unindexable++
		}
		return report(Finding{Index: ix.Name, Problem: problem, Value: value, Key: k, Detail: detail})
	}
	lists := map[string]map[Key]bool{} // a few lists' live members, by value
	err = queryAll(ctx, x.tables, table, storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.Filter{})}, func(e storeadapter.Entity) error {
		res.Entities++
		w := wantOf(ix, &e)
		k := Key{PK: e.PartitionKey, RK: e.RowKey}
		if w.problem != nil {
			return find(ProblemUnindexable, storeadapter.Format(e.Properties[ix.Property]), k, w.problem.Error())
		}
		if w.state == "" {
			return nil
		}
		res.Indexed++
		v := stateValue(w.state)
		problem, detail, err := x.checkEntry(ctx, ix, v, k, w, lists)
		if err != nil || problem == "" {
			return err
		}
		return find(problem, describe(v), k, detail)
	})
	if err != nil && !idempotent.Missing(err) {
		return res, err
	}
	var last Entry // a key's rows index rows of two formats are next to each other: counted once
	err = x.scanMembers(ctx, ix, func(en Entry) error {
		if en.Dead || res.Entries > 0 && en.Encoded == last.Encoded && en.Key == last.Key {
			return nil
		}
		last = en
		res.Entries++
		e, err := getOptional(ctx, x.tables, table, en.PK, en.RK)
		if err != nil {
			return err
		}
		switch {
		case e == nil:
			return find(ProblemStale, describe(en.Encoded), en.Key, "the entity does not exist")
		case stateValue(wantOf(ix, e).state) != en.Encoded:
			return find(ProblemStale, describe(en.Encoded), en.Key, "the entity's "+ix.Property+" is "+storeadapter.Format(e.Properties[ix.Property]))
		}
		return nil
	})
	return res, err
}

// checkEntry looks an entity up in the entry of its value.
func (x *Set) checkEntry(ctx context.Context, ix *index, v string, k Key, w want, lists map[string]map[Key]bool) (problem, detail string, err error) {
	if ix.Kind == KindCopy {
		table, pk, rk := ix.table, copyPartition(ix, k.PK), tableCopyRowKey(v)
		if ix.partition() {
			table, pk, rk = ix.source, k.PK, copyRowKey(ix, v)
		}
		row, err := getOptional(ctx, x.tables, table, pk, rk)
		owner, _ := propString(row, propOwner)
		switch {
		case err != nil:
			return "", "", err
		case owner == "":
			return ProblemMissing, "", nil
		case owner != k.RK:
			return ProblemConflict, "held by RowKey " + owner, nil
		case "#"+contentHash(stripBookkeeping(*row).Properties) != strings.TrimPrefix(w.state, v):
			return ProblemStale, "the copy differs from the entity", nil
		}
		return "", "", nil
	}
	if ix.Kind == KindRows {
		live, err := x.rowsLive(ctx, ix, v, k)
		if err != nil || live {
			return "", "", err
		}
		return ProblemMissing, "", nil
	}
	cacheKey := v
	if ix.partition() {
		cacheKey = k.PK + "\t" + v
	}
	members, ok := lists[cacheKey]
	if !ok {
		members = map[Key]bool{}
		if ix.partition() {
			l, err := readList(ctx, x.tables, ix.source, k.PK, listBase(ix, v))
			if err != nil {
				return "", "", err
			}
			for _, rk := range l.lines() {
				members[Key{PK: k.PK, RK: rk}] = true
			}
		} else {
			lines, err := x.listLines(ctx, ix, v)
			if err != nil {
				return "", "", err
			}
			for _, line := range lines {
				if pk, rk, m, err := parseListLine(line); err == nil && !m.dead {
					members[Key{PK: pk, RK: rk}] = true
				}
			}
		}
		if len(lists) >= 64 {
			clear(lists)
		}
		lists[cacheKey] = members
	}
	if !members[k] {
		return ProblemMissing, "", nil
	}
	return "", "", nil
}

// rowsLive reports whether a rows index holds k live under the encoded
// value v: one query of k's rows, the row of this release's format
// (memberKey) and those of a later one (memberKey, a generation; see
// genDigits), which sort next to it.
func (x *Set) rowsLive(ctx context.Context, ix *index, v string, k Key) (bool, error) {
	mk := memberKey(k.PK, k.RK)
	f := storeadapter.And(storeadapter.PartitionEquals(v), storeadapter.Compare("RowKey", storeadapter.Ge, mk),
		storeadapter.Compare("RowKey", storeadapter.Lt, mk+keySep+":"), storeadapter.Compare(propDead, storeadapter.Eq, false))
	live := false
	err := queryAll(ctx, x.tables, ix.table, storeadapter.Query{Filter: f, Select: []string{propDead}}, func(e storeadapter.Entity) error {
		pk, rk, err := splitMemberKey(e.RowKey)
		live = live || err == nil && pk == k.PK && rk == k.RK
		return nil
	})
	if idempotent.Missing(err) { // an index never written
		return false, nil
	}
	return live, err
}

func propBool(e *storeadapter.Entity, name string) (bool, bool) {
	if e == nil {
		return false, false
	}
	b, ok := e.Properties[name].(bool)
	return b, ok
}
