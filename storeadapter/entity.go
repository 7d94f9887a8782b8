package storeadapter

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"
)

// EdmType names one of the Entity Data Model types a table property can have.
type EdmType uint8

// The EDM types Azure Table storage supports. Each maps to exactly one Go
// type in Entity.Properties (see Entity).
const (
	EdmString   EdmType = iota + 1 // string
	EdmBoolean                     // bool
	EdmInt32                       // int32
	EdmInt64                       // int64, full 64-bit range
	EdmDouble                      // float64, including NaN and ±Inf
	EdmDateTime                    // time.Time, UTC, 100 ns precision
	EdmGUID                        // GUID
	EdmBinary                      // []byte
)

var edmNames = [...]string{"", "Edm.String", "Edm.Boolean", "Edm.Int32", "Edm.Int64", "Edm.Double", "Edm.DateTime", "Edm.Guid", "Edm.Binary"}

// String returns the OData name of the type, such as "Edm.Int64".
func (t EdmType) String() string {
	if int(t) < len(edmNames) && t != 0 {
		return edmNames[t]
	}
	return fmt.Sprintf("EdmType(%d)", uint8(t))
}

// ParseEdmType returns the type named by an OData type annotation.
func ParseEdmType(name string) (EdmType, bool) {
	for i, n := range edmNames {
		if i > 0 && n == name {
			return EdmType(i), true
		}
	}
	return 0, false
}

// TypeOf returns the EDM type of a property value, or false when v is not
// one of the Go types an Entity may hold.
func TypeOf(v any) (EdmType, bool) {
	switch v.(type) {
	case string:
		return EdmString, true
	case bool:
		return EdmBoolean, true
	case int32:
		return EdmInt32, true
	case int64:
		return EdmInt64, true
	case float64:
		return EdmDouble, true
	case time.Time:
		return EdmDateTime, true
	case GUID:
		return EdmGUID, true
	case []byte:
		return EdmBinary, true
	}
	return 0, false
}

// GUID is an Edm.Guid value. Its text form is the usual lowercase
// 8-4-4-4-12 hexadecimal layout, bytes in the order they are written.
type GUID [16]byte

// String returns the 8-4-4-4-12 form.
func (g GUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], g[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], g[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], g[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], g[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], g[10:16])
	return string(b[:])
}

// ParseGUID parses the 8-4-4-4-12 form (either case).
func ParseGUID(s string) (GUID, error) {
	var g GUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, invalid("guid", "%q is not in 8-4-4-4-12 form", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(g[:], []byte(h)); err != nil {
		return g, invalid("guid", "%q is not hexadecimal", s)
	}
	return g, nil
}

// DateTime normalises a time to what Edm.DateTime stores: UTC, truncated to
// 100 ns, without a monotonic reading. Implementations store times through
// it, so a value read back equals the value written after DateTime.
func DateTime(t time.Time) time.Time {
	return t.UTC().Truncate(100 * time.Nanosecond).Round(0)
}

// Entity is one table entity. Properties maps each custom property name to a
// value of one of these Go types, which fix its EDM type exactly:
//
//	string    Edm.String     bool     Edm.Boolean
//	int32     Edm.Int32      int64    Edm.Int64
//	float64   Edm.Double     time.Time Edm.DateTime (see DateTime)
//	GUID      Edm.Guid       []byte   Edm.Binary
//
// An entity read from one table and written to another keeps every type and
// value; archive moves depend on it.
type Entity struct {
	PartitionKey string
	RowKey       string
	// Properties holds the custom properties. Nil and empty are the same.
	Properties map[string]any
	// ETag is set by the store on reads and writes and ignored on input;
	// conditional writes take the ETag as a separate argument.
	ETag string
	// Timestamp is maintained by the store and ignored on input.
	Timestamp time.Time
}

// Clone returns a deep copy of e: changing the copy's properties or binary
// values does not change e.
func (e Entity) Clone() Entity {
	c := e
	if e.Properties != nil {
		c.Properties = make(map[string]any, len(e.Properties))
		for k, v := range e.Properties {
			c.Properties[k] = CloneValue(v)
		}
	}
	return c
}

// CloneValue returns v, with a []byte copied so the copy shares no memory.
func CloneValue(v any) any {
	if b, ok := v.([]byte); ok {
		return bytes.Clone(b)
	}
	return v
}

// Merge returns a copy of e whose properties are e's overlaid with patch's,
// as an Azure merge does: properties absent from patch are kept.
func (e Entity) Merge(patch Entity) Entity {
	c := e.Clone()
	if c.Properties == nil {
		c.Properties = make(map[string]any, len(patch.Properties))
	}
	maps.Copy(c.Properties, patch.Clone().Properties)
	return c
}

// Equal reports whether two property values are the same EDM type and
// value. NaN equals NaN, so a round-tripped NaN compares equal.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case float64:
		y, ok := b.(float64)
		return ok && (x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y))
	}
	return a == b
}

// Format renders a property value with its type for messages and tests,
// such as "Edm.Int64(9223372036854775807)".
func Format(v any) string {
	t, ok := TypeOf(v)
	if !ok {
		return fmt.Sprintf("%T(%v)", v, v)
	}
	var s string
	switch x := v.(type) {
	case time.Time:
		s = x.UTC().Format(time.RFC3339Nano)
	case []byte:
		s = hex.EncodeToString(x)
	default:
		s = fmt.Sprint(x)
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return t.String() + "(" + strings.ToValidUTF8(s, "?") + ")"
}
