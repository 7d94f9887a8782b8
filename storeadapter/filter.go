package storeadapter

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
)

// Filter is an OData $filter expression for Query. The only way to make one
// is through the functions of this file, which render every value as a
// typed literal with quotes escaped ('), so no caller ever concatenates user
// input into a filter. A Filter built from an invalid value carries the
// error, and Query returns it as ErrInvalidInput. A filter holds at most
// MaxFilterComparisons comparisons, as on Azure; And, Or and Not refuse to
// build a larger one.
type Filter struct {
	expr string
	err  error
	n    int // comparisons
}

// MaxFilterComparisons is the most comparisons Azure allows in one $filter.
const MaxFilterComparisons = 15

// String returns the OData text of the filter ("" for the zero Filter).
func (f Filter) String() string { return f.expr }

// Err returns the validation error of a filter built from invalid input.
func (f Filter) Err() error { return f.err }

// IsZero reports whether f is the zero Filter, which matches everything.
func (f Filter) IsZero() bool { return f.expr == "" && f.err == nil }

// Op is a comparison operator.
type Op string

// Comparison operators.
const (
	Eq Op = "eq"
	Ne Op = "ne"
	Gt Op = "gt"
	Ge Op = "ge"
	Lt Op = "lt"
	Le Op = "le"
)

// Compare returns "property op literal". property is PartitionKey, RowKey,
// Timestamp or a custom property name; value is one of the Go types an
// Entity property may hold (see Entity) and is rendered as a typed literal.
//
// The service compares a property only with a literal of its own EDM type
// ("The constant value must be of the same data type as the property in
// order for the filter to return valid results"): a custom property of
// another type simply does not match. PartitionKey and RowKey are always
// strings and Timestamp always a DateTime, so Compare refuses a literal of
// another type for them: such a filter is a mistake, never a query
// (docs/azure-behaviour.md, "Issue 18 decisions").
func Compare(property string, op Op, value any) Filter {
	if !reservedProps[property] {
		if err := ValidatePropertyName(property); err != nil {
			return Filter{err: err}
		}
	} else if want := reservedTypes[property]; !isType(value, want) {
		return Filter{err: invalid("filter on "+property, "%s is an %s: compare it with a Go %s, not %T", property, want, goTypeOf[want], value)}
	}
	switch op {
	case Eq, Ne, Gt, Ge, Lt, Le:
	default:
		return Filter{err: invalid("filter operator", "%q is not eq, ne, gt, ge, lt or le", op)}
	}
	lit, err := Literal(value)
	if err != nil {
		return Filter{err: err}
	}
	return Filter{expr: property + " " + string(op) + " " + lit, n: 1}
}

// reservedTypes are the EDM types of the system properties.
var reservedTypes = map[string]EdmType{"PartitionKey": EdmString, "RowKey": EdmString, "Timestamp": EdmDateTime}

// goTypeOf names the Go type of an EDM type in error messages.
var goTypeOf = map[EdmType]string{EdmString: "string", EdmDateTime: "time.Time"}

// isType reports whether v holds a value of EDM type t.
func isType(v any, t EdmType) bool {
	got, ok := TypeOf(v)
	return ok && got == t
}

// Literal renders a value as an OData literal: strings quoted with ' doubled,
// 64-bit integers with the L suffix, doubles always with a decimal point,
// and datetime'…', guid'…' and X'…' for the other types. A DateTime must lie
// in Edm.DateTime's range, 1601–9999, like a stored value: no entity can
// hold another, and the service cannot represent a year past 9999.
func Literal(value any) (string, error) {
	switch v := value.(type) {
	case string:
		if err := validateValue("filter value", v); err != nil {
			return "", err
		}
		return "'" + strings.ReplaceAll(v, "'", "''") + "'", nil
	case bool:
		return strconv.FormatBool(v), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int64:
		return strconv.FormatInt(v, 10) + "L", nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "", invalid("filter value", "a double literal must be finite, got %v", v)
		}
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s, nil
	case time.Time:
		if err := validateValue("filter value", v); err != nil {
			return "", err
		}
		return "datetime'" + DateTime(v).Format("2006-01-02T15:04:05.0000000Z") + "'", nil
	case GUID:
		return "guid'" + v.String() + "'", nil
	case []byte:
		return "X'" + hex.EncodeToString(v) + "'", nil
	}
	return "", invalid("filter value", "Go type %T has no EDM literal", value)
}

// And joins filters with "and"; zero filters are skipped.
func And(fs ...Filter) Filter { return join("and", fs) }

// Or joins filters with "or"; zero filters are skipped.
func Or(fs ...Filter) Filter { return join("or", fs) }

func join(op string, fs []Filter) Filter {
	var parts []string
	n := 0
	for _, f := range fs {
		if f.err != nil {
			return f
		}
		if f.expr != "" {
			parts = append(parts, "("+f.expr+")")
			n += f.n
		}
	}
	if n > MaxFilterComparisons {
		return Filter{err: invalid("filter", "at most %d comparisons (Azure's limit), got %d: split the query", MaxFilterComparisons, n)}
	}
	if len(parts) == 1 {
		return Filter{expr: strings.TrimSuffix(strings.TrimPrefix(parts[0], "("), ")"), n: n}
	}
	return Filter{expr: strings.Join(parts, " "+op+" "), n: n}
}

// Not negates a filter. Not of the zero Filter is the zero Filter.
func Not(f Filter) Filter {
	if f.err != nil || f.expr == "" {
		return f
	}
	return Filter{expr: "not (" + f.expr + ")", n: f.n}
}

// PartitionEquals selects one partition.
func PartitionEquals(pk string) Filter { return Compare("PartitionKey", Eq, pk) }

// RowRange selects the RowKeys in [from, to) of one partition; an empty to
// means no upper bound. It is the range the archive job moves.
func RowRange(pk, from, to string) Filter {
	f := And(PartitionEquals(pk), Compare("RowKey", Ge, from))
	if to != "" {
		f = And(f, Compare("RowKey", Lt, to))
	}
	return f
}
