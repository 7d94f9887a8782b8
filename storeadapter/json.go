package storeadapter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The JSON form of an entity is the service's OData JSON. Every property
// whose type JSON cannot tell — Int64, Double, DateTime, Guid, Binary —
// carries an "@odata.type" annotation; Int64 travels as a string so no JSON
// decoder rounds it. azstore hands it to the Azure SDK, and jobs use it to
// store entities in blobs, so both keep every EDM type.
//
// It is written without HTML escaping: < > & are themselves, not the
// six-byte \u003c \u003e \u0026 that json.Marshal writes by default, so
// exports and archived entities are not inflated by up to six times. (What
// the SDK sends to the service is its own re-encoding, HTML-escaped
// whatever we pass it: JSONStringSize and BatchOpSize count that form; see
// docs/azure-behaviour.md, "SDK gotchas".)

const dateTimeLayout = "2006-01-02T15:04:05.0000000Z"

// MarshalEntityJSON renders e's keys and properties as annotated OData JSON.
// ETag and Timestamp are left out.
func MarshalEntityJSON(e Entity) ([]byte, error) {
	m, err := entityMap(e, 0)
	if err != nil {
		return nil, err
	}
	return marshalJSON(m)
}

// marshalJSON is json.Marshal without HTML escaping (and so without the
// newline json.Encoder adds). Map keys come out sorted, as with Marshal.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MarshalEntityLine renders e as one line of an export (JSON lines): the
// object MarshalEntityJSON writes plus "Timestamp" (annotated Edm.DateTime,
// seven fractional digits, as the service writes it) and "odata.etag" (the
// ETag the entity was read with), followed by "\n". Keys are sorted, so the
// same entity always gives the same bytes. UnmarshalEntityJSON reads the
// line back with every property, the Timestamp and the ETag.
func MarshalEntityLine(e Entity) ([]byte, error) {
	m, err := entityMap(e, 3)
	if err != nil {
		return nil, err
	}
	m["Timestamp"] = FormatDateTime(e.Timestamp)
	m["Timestamp@odata.type"] = EdmDateTime.String()
	m["odata.etag"] = e.ETag
	b, err := marshalJSON(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// FormatDateTime renders a time as the service writes an Edm.DateTime:
// UTC, RFC 3339 with exactly seven fractional digits.
func FormatDateTime(t time.Time) string { return DateTime(t).Format(dateTimeLayout) }

// entityMap returns e's keys and annotated properties as a map for
// json.Marshal (which sorts its keys), with room for extra more entries.
func entityMap(e Entity, extra int) (map[string]any, error) {
	m := make(map[string]any, 2+2*len(e.Properties)+extra)
	m["PartitionKey"] = e.PartitionKey
	m["RowKey"] = e.RowKey
	for name, v := range e.Properties {
		var typ EdmType
		switch x := v.(type) {
		case string, bool, int32:
			m[name] = x
			continue
		case int64:
			typ, m[name] = EdmInt64, strconv.FormatInt(x, 10)
		case float64:
			typ, m[name] = EdmDouble, doubleValue(x)
		case time.Time:
			typ, m[name] = EdmDateTime, DateTime(x).Format(dateTimeLayout)
		case GUID:
			typ, m[name] = EdmGUID, x.String()
		case []byte:
			typ, m[name] = EdmBinary, base64.StdEncoding.EncodeToString(x)
		default:
			return nil, invalid("property "+name, "Go type %T has no EDM type", v)
		}
		m[name+"@odata.type"] = typ.String()
	}
	return m, nil
}

// doubleValue renders a double as the service expects: a JSON number, or
// the strings "NaN", "Infinity" and "-Infinity".
func doubleValue(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// UnmarshalEntityJSON parses an entity in OData JSON, as the service returns
// it or MarshalEntityJSON writes it. etag, when not empty, overrides the
// odata.etag in the body (GetEntity returns it as a header). A number
// without annotation is an Int32 when written without a decimal point or
// exponent, else a Double, as on the service.
func UnmarshalEntityJSON(data []byte, etag string) (Entity, error) {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Entity{}, fmt.Errorf("decode entity: %w", err)
	}
	e := Entity{ETag: etag, Properties: make(map[string]any, len(raw)/2)}
	for name, v := range raw {
		switch {
		case name == "PartitionKey":
			e.PartitionKey, _ = v.(string)
		case name == "RowKey":
			e.RowKey, _ = v.(string)
		case name == "odata.etag":
			if e.ETag == "" {
				e.ETag, _ = v.(string)
			}
		case name == "Timestamp":
			s, _ := v.(string)
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return e, fmt.Errorf("decode entity: Timestamp %q: %w", s, err)
			}
			e.Timestamp = DateTime(t)
		case strings.HasPrefix(name, "odata.") || strings.Contains(name, "@odata.") || v == nil:
			// Metadata and annotations (read with their property), and the
			// nulls a $select returns for properties an entity lacks.
		default:
			ann, _ := raw[name+"@odata.type"].(string)
			val, err := decodeValue(ann, v)
			if err != nil {
				return e, fmt.Errorf("decode entity: property %s: %w", name, err)
			}
			e.Properties[name] = val
		}
	}
	return e, nil
}

// decodeValue converts one JSON value with its (possibly empty) type
// annotation to the Go type of its EDM type.
func decodeValue(annotation string, v any) (any, error) {
	if annotation == "" {
		switch x := v.(type) {
		case string, bool:
			return x, nil
		case json.Number:
			// Without an annotation the text decides, as on the service: a
			// number with a decimal point or exponent is a Double (the
			// service writes an integral Double as 2.0), else an Int32.
			if !strings.ContainsAny(x.String(), ".eE") {
				if n, err := strconv.ParseInt(x.String(), 10, 32); err == nil {
					return int32(n), nil
				}
			}
			return x.Float64()
		}
		return nil, fmt.Errorf("unexpected JSON value %T", v)
	}
	typ, ok := ParseEdmType(annotation)
	if !ok {
		return nil, fmt.Errorf("unknown type %q", annotation)
	}
	s, isString := v.(string)
	n, isNumber := v.(json.Number)
	switch {
	case typ == EdmString && isString:
		return s, nil
	case typ == EdmBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case typ == EdmInt32 && isNumber:
		i, err := strconv.ParseInt(n.String(), 10, 32)
		return int32(i), err
	case typ == EdmInt64 && (isString || isNumber):
		if isNumber {
			s = n.String()
		}
		return strconv.ParseInt(s, 10, 64)
	case typ == EdmDouble && isNumber:
		return n.Float64()
	case typ == EdmDouble && isString:
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity", "INF":
			return math.Inf(1), nil
		case "-Infinity", "-INF":
			return math.Inf(-1), nil
		}
		return strconv.ParseFloat(s, 64)
	case typ == EdmDateTime && isString:
		t, err := time.Parse(time.RFC3339Nano, s)
		return DateTime(t), err
	case typ == EdmGUID && isString:
		return ParseGUID(s)
	case typ == EdmBinary && isString:
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("%s value of JSON type %T", typ, v)
}
