package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// parseValue parses -value as -type says, into the Go type of that EDM
// type. Each error names -value and the type's rule.
func parseValue(typ, s string) (any, error) {
	bad := func(rule string) error {
		return usagef("-value: -type %s takes %s, got %q", typ, rule, text.Truncate(s, 60))
	}
	switch typ {
	case "string":
		return s, nil
	case "bool":
		switch s {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, bad("true or false")
	case "int32":
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, bad(fmt.Sprintf("a decimal integer from %d to %d", math.MinInt32, math.MaxInt32))
		}
		return int32(n), nil
	case "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, bad(fmt.Sprintf("a decimal integer from %d to %d", int64(math.MinInt64), int64(math.MaxInt64)))
		}
		return n, nil
	case "double":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, bad("a decimal number within ±1.8e308 (such as 42, -0.5 or 6.02e23), NaN, Infinity or -Infinity")
		}
		return f, nil
	case "datetime":
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, bad("an RFC 3339 time with its offset, such as 2026-11-21T10:00:00Z or 2026-11-21T11:00:00.5+01:00")
		}
		return t, nil
	case "guid":
		g, err := storeadapter.ParseGUID(s)
		if err != nil {
			return nil, bad("the 8-4-4-4-12 hexadecimal form, such as 0f8fad5b-d9cb-469f-a165-70867728950e")
		}
		return g, nil
	case "binary":
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, bad("hexadecimal, two digits per byte, such as 0aff (\"\" for no bytes)")
		}
		return b, nil
	}
	return nil, usagef("-type: must be one of %s, got %q", strings.Join(valueTypes, ", "), text.Truncate(typ, 40))
}

// indexLookup prints the keys (and with -entities the entities) an index
// lists under a value, through indexes.Set.Lookup: it reads the index,
// never scans the table.
func (m *Main) indexLookup(ctx context.Context, args []string) error {
	var (
		c                                    common
		table, name, value, typ, pk, cfgPath string
		entities                             bool
	)
	fs := m.newFlagSet("index lookup", "index lookup -table T -index NAME -value V [-type TYPE] [-pk P] [-entities] [-config FILE] [flags]",
		"Prints the keys of the entities that index -index of table -table lists under the value -value, in key\n"+
			"order, reading the index only (the table is never scanned). The value's type must be the indexed\n"+
			"property's: -type int64 does not find an Edm.Int32 property's 42. With -entities it also prints each\n"+
			"entity: for a copy index the copy (its declared properties), else the entity as it is now (none when it\n"+
			"no longer exists). The indexes kept in each partition (store \"partition\") need -pk; for the others\n"+
			"-pk keeps that partition's keys only. The declarations come from -config.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&name, "index", "", "index name, as declared (required; names ignore case)")
	fs.StringVar(&value, "value", "", "the value to look up (required; \"\" is a string value)")
	fs.StringVar(&typ, "type", "string", "the value's type: "+strings.Join(valueTypes, ", ")+
		"\n(datetime: RFC 3339 with offset; guid: 8-4-4-4-12; binary: hexadecimal)")
	fs.StringVar(&pk, "pk", "", "PartitionKey: required for a partition-store index, a filter for the others")
	fs.BoolVar(&entities, "entities", false, "print the entities too (one more read per key, except for a copy index)")
	configFlag(fs, &cfgPath, "required")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	if err := checkTableFlag(table); err != nil {
		return err
	}
	switch {
	case name == "":
		return usagef("-index: is required")
	case !set["value"]:
		return usagef("-value: is required (-value '' looks up the empty string)")
	}
	v, err := parseValue(typ, value)
	if err != nil {
		return err
	}
	if _, err := indexes.EncodeValue(v); err != nil {
		return usagef("-value: %v", err)
	}
	var o indexes.LookupOptions
	o.Entities = entities
	if set["pk"] {
		if err := storeadapter.ValidateKey("pk", pk); err != nil {
			return usagef("-pk: %v", err)
		}
		o.PK = &pk
	}
	x, d, err := m.openIndex(&c, cfgPath, table, name, "lookup")
	if err != nil {
		return err
	}
	if d.Store == indexes.StorePartition && o.PK == nil {
		return usagef("-pk: index %s of %s is kept in each partition (store %q): give the partition to look in", d.Name, table, indexes.StorePartition)
	}
	matches, err := x.Lookup(ctx, table, d.Name, v, o)
	if errors.Is(err, storeadapter.ErrInvalidInput) {
		return &usageError{err: err}
	}
	if err != nil {
		return err
	}
	if c.json() {
		return writeLookupJSON(m.Stdout, table, d.Name, typ, value, o, matches)
	}
	if len(matches) == 0 {
		where := ""
		if o.PK != nil {
			where = fmt.Sprintf(" in partition %q", pk)
		}
		fmt.Fprintf(m.Stdout, "index %s of %s lists nothing under %s%s\n", d.Name, table, cell(storeadapter.Format(v), 0), where)
		return nil
	}
	tw := newTable(m.Stdout)
	if entities {
		row(tw, "PK", "RK", "PROPERTIES")
	} else {
		row(tw, "PK", "RK")
	}
	for _, mt := range matches {
		if !entities {
			row(tw, mt.PK, mt.RK)
			continue
		}
		props := "(the entity no longer exists)"
		if mt.Entity != nil {
			props = cell(properties(*mt.Entity), propertiesChars)
		}
		row(tw, mt.PK, mt.RK, props)
	}
	return tw.Flush()
}

// properties renders an entity's properties for a table cell, by name:
// "Email=jones@contoso.com LastName=Jones".
func properties(e storeadapter.Entity) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(e.Properties)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		var s string
		switch v := e.Properties[name].(type) {
		case time.Time:
			s = v.UTC().Format(time.RFC3339Nano)
		case []byte:
			s = hex.EncodeToString(v)
		default:
			s = fmt.Sprint(v)
		}
		b.WriteString(name + "=" + s)
	}
	return b.String()
}

// lookupMatchJSON is one match of lookup -o json; entity is the OData
// JSON of the entity (every EDM type kept, as the service writes it),
// null when it no longer exists, and absent without -entities.
type lookupMatchJSON struct {
	PK     string          `json:"pk"`
	RK     string          `json:"rk"`
	Entity json.RawMessage `json:"entity,omitempty"`
}

// writeLookupJSON writes lookup's result as one JSON document.
func writeLookupJSON(w io.Writer, table, name, typ, value string, o indexes.LookupOptions, matches []indexes.Match) error {
	out := struct {
		Table   string            `json:"table"`
		Index   string            `json:"index"`
		Type    string            `json:"type"`
		Value   string            `json:"value"`
		PK      *string           `json:"pk,omitempty"`
		Count   int               `json:"count"`
		Matches []lookupMatchJSON `json:"matches"`
	}{Table: table, Index: name, Type: typ, Value: value, PK: o.PK, Count: len(matches), Matches: []lookupMatchJSON{}}
	for _, mt := range matches {
		j := lookupMatchJSON{PK: mt.PK, RK: mt.RK}
		switch {
		case !o.Entities:
		case mt.Entity == nil:
			j.Entity = json.RawMessage("null")
		default:
			data, err := storeadapter.MarshalEntityJSON(*mt.Entity)
			if err != nil {
				return err
			}
			j.Entity = data
		}
		out.Matches = append(out.Matches, j)
	}
	return writeJSON(w, out)
}
