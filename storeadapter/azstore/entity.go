package azstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The wire form of an entity is OData JSON. Every property whose type JSON
// cannot tell — Int64, Double, DateTime, Guid, Binary — carries an
// "@odata.type" annotation on the way out; Int64 travels as a string so no
// JSON decoder rounds it. Reads ask for full metadata, so the service
// annotates types on the way back too.

const dateTimeLayout = "2006-01-02T15:04:05.0000000Z"

// encodeEntity renders e as the JSON the SDK sends. e must be valid.
func encodeEntity(e storeadapter.Entity) ([]byte, error) {
	m := make(map[string]any, 2+2*len(e.Properties))
	m["PartitionKey"] = e.PartitionKey
	m["RowKey"] = e.RowKey
	for name, v := range e.Properties {
		var typ storeadapter.EdmType
		switch x := v.(type) {
		case string, bool, int32:
			m[name] = x
			continue
		case int64:
			typ, m[name] = storeadapter.EdmInt64, strconv.FormatInt(x, 10)
		case float64:
			typ, m[name] = storeadapter.EdmDouble, doubleValue(x)
		case time.Time:
			typ, m[name] = storeadapter.EdmDateTime, storeadapter.DateTime(x).Format(dateTimeLayout)
		case storeadapter.GUID:
			typ, m[name] = storeadapter.EdmGUID, x.String()
		case []byte:
			typ, m[name] = storeadapter.EdmBinary, base64.StdEncoding.EncodeToString(x)
		default:
			return nil, fmt.Errorf("%w: property %s: Go type %T has no EDM type", storeadapter.ErrInvalidInput, name, v)
		}
		m[name+"@odata.type"] = typ.String()
	}
	return json.Marshal(m)
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

// decodeEntity parses an entity the SDK returned. etag, when not empty,
// overrides the odata.etag in the body (GetEntity returns it as a header).
func decodeEntity(data []byte, etag string) (storeadapter.Entity, error) {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return storeadapter.Entity{}, fmt.Errorf("decode entity: %w", err)
	}
	e := storeadapter.Entity{ETag: etag, Properties: make(map[string]any, len(raw)/2)}
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
			e.Timestamp = storeadapter.DateTime(t)
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
	typ, ok := storeadapter.ParseEdmType(annotation)
	if !ok {
		return nil, fmt.Errorf("unknown type %q", annotation)
	}
	s, isString := v.(string)
	n, isNumber := v.(json.Number)
	switch {
	case typ == storeadapter.EdmString && isString:
		return s, nil
	case typ == storeadapter.EdmBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case typ == storeadapter.EdmInt32 && isNumber:
		i, err := strconv.ParseInt(n.String(), 10, 32)
		return int32(i), err
	case typ == storeadapter.EdmInt64 && (isString || isNumber):
		if isNumber {
			s = n.String()
		}
		return strconv.ParseInt(s, 10, 64)
	case typ == storeadapter.EdmDouble && isNumber:
		return n.Float64()
	case typ == storeadapter.EdmDouble && isString:
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity", "INF":
			return math.Inf(1), nil
		case "-Infinity", "-INF":
			return math.Inf(-1), nil
		}
		return strconv.ParseFloat(s, 64)
	case typ == storeadapter.EdmDateTime && isString:
		t, err := time.Parse(time.RFC3339Nano, s)
		return storeadapter.DateTime(t), err
	case typ == storeadapter.EdmGUID && isString:
		return storeadapter.ParseGUID(s)
	case typ == storeadapter.EdmBinary && isString:
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("%s value of JSON type %T", typ, v)
}
