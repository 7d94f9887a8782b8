package jobs

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Envelope is the public message contract (see docs/architecture.md):
// every message on the queue is the base64 of this JSON, or the JSON
// itself.
//
//	{"v":1,"id":"op-2026-11-21-0001","kind":"archive","args":{...},"traceparent":"00-…"}
type Envelope struct {
	// V is the envelope version; it must be 1.
	V int `json:"v"`
	// ID is the operation id and idempotency key: 1–128 characters of
	// A-Za-z0-9._:-.
	ID string `json:"id"`
	// Kind selects the handler.
	Kind string `json:"kind"`
	// Args are the kind's arguments, validated strictly by the kind.
	Args json.RawMessage `json:"args,omitempty"`
	// ArgsRef, instead of Args, names a blob "container/blob" that holds
	// the arguments of a payload too large for a message (claim check).
	ArgsRef string `json:"argsRef,omitempty"`
	// TraceParent is an optional W3C trace context.
	TraceParent string `json:"traceparent,omitempty"`
	// Continued is the continuation marker: how many times the runner
	// re-sent this operation because its handler saved its progress and
	// asked to continue later (see ContinueError). Producers leave it out
	// (0). Each continuation is a new message with a fresh dequeue count.
	Continued int `json:"continued,omitempty"`
	// Outbox, when set, ties the job to an application's entity group
	// transaction (a client Tx): the job runs only if the transaction
	// wrote its outbox row (see OutboxRef and docs/client.md).
	Outbox *OutboxRef `json:"outbox,omitempty"`
}

// OutboxRef names the outbox row of a job sent by a transactional
// enqueue (client.Tx): the row the transaction writes, in the partition
// of the application's entities, under the reserved RowKey prefix:
//
//	{"table":"Employees","pk":"Sales","rk":"~tk.o.op-1","window":"30s"}
//
// The runner runs the job only once the row exists, deletes the row when
// the job is done, and drops the job when the row is still missing after
// Window (the transaction never committed).
type OutboxRef struct {
	// Table and PK locate the row: the transaction's table and partition.
	Table string `json:"table"`
	PK    string `json:"pk"`
	// RK is the row's RowKey: OutboxPrefix followed by the envelope's id.
	RK string `json:"rk"`
	// Window is how long after the first send the transaction may still
	// commit (1s-1h): until then a missing row means "not yet".
	Window Duration `json:"window"`
	// Since is when the operation's first message was inserted in the
	// queue, by the queue's clock. Producers leave it out; the runner sets
	// it when it re-sends the operation (to wait for the row, or to
	// continue the job), so the window is never restarted.
	Since time.Time `json:"since,omitzero"`
}

// OutboxPrefix begins the RowKey of every outbox row: the reserved prefix
// (storeadapter.ReservedPrefix) and "o.".
const OutboxPrefix = storeadapter.ReservedPrefix + "o."

// Limits of OutboxRef.Window.
const (
	MinOutboxWindow = time.Second
	MaxOutboxWindow = time.Hour
)

// validate checks an outbox reference of the envelope whose id is id.
func (o *OutboxRef) validate(id string) error {
	if err := storeadapter.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("envelope: outbox.table: %w", err)
	}
	if err := storeadapter.ValidateKey("outbox.pk", o.PK); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if o.RK != OutboxPrefix+id {
		return fmt.Errorf("envelope: outbox.rk: must be %q (the outbox prefix and the envelope's id), got %q", OutboxPrefix+id, text.Truncate(o.RK, 160))
	}
	if d := time.Duration(o.Window); d < MinOutboxWindow || d > MaxOutboxWindow {
		return fmt.Errorf("envelope: outbox.window: must be %v-%v, got %v", MinOutboxWindow, MaxOutboxWindow, d)
	}
	return nil
}

var (
	opIDRE        = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	traceParentRE = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
)

// Encode renders an envelope as message text: the base64 of its JSON.
func Encode(env Envelope) (string, error) {
	if err := env.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	text := base64.StdEncoding.EncodeToString(b)
	if len(text) > storeadapter.MaxMessageBytes {
		return "", fmt.Errorf("envelope: %d bytes encoded exceeds the %d-byte message limit: store args in a blob and send argsRef", len(text), storeadapter.MaxMessageBytes)
	}
	return text, nil
}

// DecodeEnvelope parses message text — base64 of JSON, or plain JSON — and
// checks the envelope's own fields. It does not look inside Args. Every
// error is permanent and names the field and the rule; it never panics,
// whatever the text.
func DecodeEnvelope(text string) (Envelope, error) {
	data := []byte(strings.TrimSpace(text))
	if len(data) == 0 {
		return Envelope{}, Permanentf("envelope: the message is empty")
	}
	// JSON first: some JSON values ("null", "1234") are valid base64 too.
	// An object is taken for JSON without a pass of its own: decoding it
	// checks it.
	b64 := false
	if data[0] != '{' && data[0] != '[' && !json.Valid(data) {
		dec, err := base64.StdEncoding.DecodeString(string(data))
		if err != nil {
			return Envelope{}, Permanentf("envelope: the message is neither JSON nor base64 of JSON (%v)", err)
		}
		data, b64 = bytes.TrimSpace(dec), true
	}
	switch {
	case !utf8.Valid(data) && b64:
		return Envelope{}, Permanentf("envelope: the message is base64 of text that is not valid UTF-8")
	case !utf8.Valid(data):
		return Envelope{}, Permanentf("envelope: the JSON is not valid UTF-8")
	case len(data) > 0 && data[0] != '{' && json.Valid(data):
		return Envelope{}, Permanentf("envelope: the message must be a JSON object, got %s", jsonValueName(data[0]))
	}
	var env Envelope
	if err := DecodeStrict(data, &env, ""); err != nil {
		if b64 && !json.Valid(data) {
			return Envelope{}, Permanentf("envelope: the message is base64 of text that is not JSON (%v)", DecodeStrict(data, new(any), ""))
		}
		return Envelope{}, Permanent(fmt.Errorf("envelope: %w", err))
	}
	if err := env.validate(); err != nil {
		return Envelope{}, Permanent(err)
	}
	return env, nil
}

func (env Envelope) validate() error {
	switch {
	case env.V != 1:
		return fmt.Errorf("envelope: v: must be 1, got %d", env.V)
	case !opIDRE.MatchString(env.ID):
		return fmt.Errorf("envelope: id: must be 1-128 characters of A-Za-z0-9._:-, got %q", text.Truncate(env.ID, 140))
	case env.Kind == "":
		return errors.New("envelope: kind: is required")
	case len(env.Args) > 0 && env.ArgsRef != "":
		return errors.New("envelope: args and argsRef: give one, not both")
	case len(env.Args) == 0 && env.ArgsRef == "":
		return errors.New("envelope: args: is required (or argsRef for a payload stored in a blob)")
	case env.Continued < 0:
		return fmt.Errorf("envelope: continued: must not be negative, got %d", env.Continued)
	case env.TraceParent != "" && !traceParentRE.MatchString(env.TraceParent):
		return fmt.Errorf("envelope: traceparent: must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got %q", text.Truncate(env.TraceParent, 80))
	}
	if env.ArgsRef != "" {
		if _, _, err := SplitBlobRef("argsRef", env.ArgsRef); err != nil {
			return fmt.Errorf("envelope: %w", err)
		}
	}
	if env.Outbox != nil {
		return env.Outbox.validate(env.ID)
	}
	return nil
}

// SplitBlobRef splits "container/blob" and validates both names.
func SplitBlobRef(field, ref string) (container, blob string, err error) {
	container, blob, ok := strings.Cut(ref, "/")
	if !ok || blob == "" {
		return "", "", fmt.Errorf("%s: must be \"container/blob\", got %q", field, text.Truncate(ref, 80))
	}
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", fmt.Errorf("%s: %w", field, err)
	}
	if err := storeadapter.ValidateBlobName(blob); err != nil {
		return "", "", fmt.Errorf("%s: %w", field, err)
	}
	return container, blob, nil
}

// DecodeError is an error of DecodeStrict with where in the input it was
// found, so that a caller holding the text (a config file) can name the
// line and column.
type DecodeError struct {
	// Offset is the byte offset in the input of the key or value at fault.
	Offset int64
	Err    error
	// Key and Known, for an unknown key, are the key and the keys its
	// object takes, so that a caller can suggest one.
	Key   string
	Known []string
}

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeStrict decodes one JSON object into v, rejecting unknown fields,
// field names in another case than v's (encoding/json alone matches them
// case-insensitively), keys given twice (encoding/json alone keeps the
// last), trailing data and wrong types with a message that names the field
// (prefix + "." + name). Errors about a key or value are *DecodeError.
func DecodeStrict(data []byte, v any, prefix string) error {
	// The common case, a well-formed message, takes one pass to decode
	// (encoding/json validates as it goes) and one over the keys, when
	// checkKeys knows v's type as exactly as encoding/json does (see
	// keysExact). Anything wrong goes the slow way below, which says what.
	if t := reflect.TypeOf(v); keysExact(t) && json.Unmarshal(data, v) == nil {
		k := keyScanner{data: data, root: prefix}
		err := k.checkKeys(t)
		if err != nil {
			reflect.ValueOf(v).Elem().SetZero() // refused: as if never decoded
		}
		return err
	}
	if json.Valid(data) {
		// The keys are checked first, over the bytes; numbers are not
		// read there, so one out of its range (1e400) fails below, decoded
		// into its field, with an error that names the field.
		k := keyScanner{data: data, root: prefix}
		if err := k.checkKeys(reflect.TypeOf(v)); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return &DecodeError{Offset: dec.InputOffset(), Err: errors.New("unexpected data after the JSON object")}
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if prefix != "" {
			field = prefix + "." + field
		}
		if te.Field == "" {
			return &DecodeError{Offset: te.Offset, Err: fmt.Errorf("%s: must be a JSON object, got %s", cmp.Or(prefix, "message"), te.Value)}
		}
		want := jsonTypeName(te.Type.Kind())
		if te.Type == reflect.TypeFor[Duration]() {
			want = `a duration with its unit, such as "30s", "1m30s" or "2h"`
		}
		if got, ok := strings.CutPrefix(te.Value, "number "); ok {
			// encoding/json reports the offset after the literal: point
			// at its start, as errors about keys do.
			te.Offset = max(te.Offset-int64(len(got)), 0)
			switch {
			case want == "an integer" && outOfRange(got, te.Type):
				lo, hi := intRange(te.Type)
				return &DecodeError{Offset: te.Offset, Err: fmt.Errorf("%s: must be an integer from %d to %d, got %s", field, lo, hi, got)}
			case want == "an integer":
				return &DecodeError{Offset: te.Offset, Err: fmt.Errorf("%s: must be an integer, got %s", field, got)}
			case want == "a number":
				return &DecodeError{Offset: te.Offset, Err: fmt.Errorf("%s: must be a number from -%g to %g, got %s", field, math.MaxFloat64, math.MaxFloat64, got)}
			}
		}
		return &DecodeError{Offset: te.Offset, Err: fmt.Errorf("%s: must be %s, got %s", field, want, te.Value)}
	case errors.As(err, &se):
		return &DecodeError{Offset: se.Offset, Err: fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// checkKeys finds unknown fields of structs first; this is a
		// field encoding/json refuses that it let through.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if prefix != "" {
			name = prefix + "." + name
		}
		return fmt.Errorf("%s: unknown field", name)
	}
	var de *DecodeError
	if errors.As(err, &de) { // from a field's own UnmarshalJSON
		return de
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

// checkKeys reads one JSON value of data (valid JSON) from its offset i
// and refuses a key given twice in any object, and a key of a struct that
// matches no field (with a hint when it matches one in another case). t is
// the Go type the value decodes into (nil when unknown, as inside a
// json.RawMessage: then only duplicates are checked); root and the keys
// on the way to the value name it in errors. It walks the bytes itself
// (valid JSON: json.Valid or a json.Unmarshal that succeeded has checked
// them): the decoder's Token, which it replaces, built and dropped an
// error for every scalar, a third of a worker's CPU per message. A
// well-formed value costs no allocation but for a key with an escape:
// names are built only for an error.
type keyScanner struct {
	data []byte
	i    int
	root string   // the name of the value checked ("" at the top)
	path [][]byte // the keys (unescaped) and arrayStep from root to the value being read
}

// arrayStep is an array's step in keyScanner.path.
var arrayStep = []byte("[]")

// name names the value at the end of k.path, with key after it when not
// nil: root, then each key after a dot (none first), each array as "[]".
func (k *keyScanner) name(key []byte) string {
	var b strings.Builder
	b.WriteString(k.root)
	for _, step := range append(k.path[:len(k.path):len(k.path)], key) {
		switch {
		case step == nil:
		case len(step) == 2 && &step[0] == &arrayStep[0]:
			b.Write(step)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.Write(step)
		}
	}
	return b.String()
}

// ws skips white space.
func (k *keyScanner) ws() {
	for k.i < len(k.data) {
		switch k.data[k.i] {
		case ' ', '\t', '\r', '\n':
			k.i++
		default:
			return
		}
	}
}

// str reads the string at k.i (its opening quote) and returns its text:
// the bytes of data between the quotes, or, when it has an escape, the
// string decoded.
func (k *keyScanner) str() []byte {
	start, escaped := k.i, false
	for k.i++; k.data[k.i] != '"'; k.i++ {
		if k.data[k.i] == '\\' {
			escaped = true
			k.i++ // the escaped byte (a quote or a backslash included)
		}
	}
	k.i++
	if !escaped {
		return k.data[start+1 : k.i-1]
	}
	var out string
	_ = json.Unmarshal(k.data[start:k.i], &out) // valid JSON: a valid string
	return []byte(out)
}

// maxSeenLinear is how many keys of one object checkKeys compares one by
// one for duplicates before it keeps them in a map.
const maxSeenLinear = 16

func (k *keyScanner) checkKeys(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	k.ws()
	switch k.data[k.i] {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		k.i++
		k.path = append(k.path, arrayStep)
		for k.ws(); k.data[k.i] != ']'; k.ws() {
			if err := k.checkKeys(elem); err != nil {
				return err
			}
			if k.ws(); k.data[k.i] == ',' {
				k.i++
			}
		}
		k.path = k.path[:len(k.path)-1]
		k.i++
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType) {
			fields = structFields(t)
		}
		var (
			few  [maxSeenLinear][]byte
			seen = few[:0]
			many map[string]bool
		)
		k.i++
		for k.ws(); k.data[k.i] != '}'; k.ws() {
			at := int64(k.i)
			key := k.str()
			twice := false
			if many != nil {
				twice = many[string(key)]
				many[string(key)] = true
			} else if twice = slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, key) }); len(seen) < maxSeenLinear {
				seen = append(seen, key)
			} else {
				many = map[string]bool{string(key): true}
				for _, s := range seen {
					many[string(s)] = true
				}
			}
			if twice {
				return &DecodeError{Offset: at, Err: fmt.Errorf("%s: given twice (each key may appear once)", text.Truncate(k.name(key), 80))}
			}
			var ft reflect.Type
			switch {
			case fields != nil:
				var ok bool
				if ft, ok = fields[string(key)]; !ok {
					return k.unknown(at, key, fields)
				}
			case t != nil && t.Kind() == reflect.Map:
				ft = t.Elem()
			}
			k.ws()
			k.i++ // the colon
			k.path = append(k.path, key)
			if err := k.checkKeys(ft); err != nil {
				return err
			}
			k.path = k.path[:len(k.path)-1]
			if k.ws(); k.data[k.i] == ',' {
				k.i++
			}
		}
		k.i++
	case '"':
		k.str()
	default: // a number, true, false or null
		for k.i < len(k.data) && strings.IndexByte(" \t\r\n,]}", k.data[k.i]) < 0 {
			k.i++
		}
	}
	return nil
}

// unknown is the error of a key at offset at that names no field of a
// struct with fields, with a hint when it names one in another case.
func (k *keyScanner) unknown(at int64, key []byte, fields map[string]reflect.Type) error {
	name := text.Truncate(k.name(key), 80)
	for f := range fields {
		if strings.EqualFold(f, string(key)) {
			return &DecodeError{Offset: at, Err: fmt.Errorf("%s: unknown field (names are case-sensitive: did you mean %q?)", name, f)}
		}
	}
	return &DecodeError{Offset: at, Err: fmt.Errorf("%s: unknown field", name), Key: string(key), Known: slices.Sorted(maps.Keys(fields))}
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// fieldsOf caches jsonFields by struct type: every message decodes the
// same few types.
var fieldsOf sync.Map // reflect.Type → map[string]reflect.Type

// structFields returns jsonFields(t), computed once per type. The map
// returned is shared: callers only read it.
func structFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsOf.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields, _ := jsonFields(t, map[string]reflect.Type{})
	f, _ := fieldsOf.LoadOrStore(t, fields)
	return f.(map[string]reflect.Type)
}

// jsonFields adds to fields the JSON names of struct type t's fields (those
// of embedded structs included) with their types, and returns it. exact
// reports whether those are the names encoding/json itself gives t's keys:
// not with an embedded pointer or non-struct (encoding/json flattens the
// one and ignores the other), a name given twice (it drops the names two
// embedded structs share, or keeps the shallower) or a tag name outside
// [A-Za-z0-9_.-] (it ignores some).
func jsonFields(t reflect.Type, fields map[string]reflect.Type) (_ map[string]reflect.Type, exact bool) {
	exact = true
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			_, e := jsonFields(f.Type, fields)
			exact = exact && e
		default:
			embedded := f.Anonymous && name == ""
			name = cmp.Or(name, f.Name)
			_, twice := fields[name]
			exact = exact && !twice && !embedded &&
				strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == ""
			fields[name] = f.Type
		}
	}
	return fields, exact
}

// exactOf caches keysExact by type.
var exactOf sync.Map // reflect.Type → bool

// keysExact reports whether jsonFields names the keys of t, and of every
// type within it, as encoding/json does (see jsonFields), so that
// checkKeys alone refuses every key encoding/json would ignore. An
// interface field does not (its value decides). DecodeStrict decodes the
// other types through a json.Decoder that refuses unknown fields besides.
func keysExact(t reflect.Type) bool {
	if e, ok := exactOf.Load(t); ok {
		return e.(bool)
	}
	e := exactWalk(t, map[reflect.Type]bool{})
	exactOf.Store(t, e)
	return e
}

func exactWalk(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	switch {
	case seen[t] || t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType):
		return true
	case t.Kind() == reflect.Interface:
		return false
	case t.Kind() != reflect.Struct:
		return true
	}
	seen[t] = true
	fields, exact := jsonFields(t, map[string]reflect.Type{})
	for _, ft := range fields {
		exact = exact && exactWalk(ft, seen)
	}
	return exact
}

// jsonValueName names the kind of JSON value that starts with c.
func jsonValueName(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
}

func jsonTypeName(kind reflect.Kind) string {
	switch kind {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// outOfRange reports whether the JSON number text is a whole number that
// integer type t cannot hold (99999999999999999999 for an int64, 1e400),
// rather than a fraction.
func outOfRange(text string, t reflect.Type) bool {
	f, ok := new(big.Float).SetString(text)
	if !ok || !f.IsInt() {
		return false
	}
	lo, hi := intRange(t)
	return f.Cmp(new(big.Float).SetInt64(lo)) < 0 || f.Cmp(new(big.Float).SetUint64(hi)) > 0
}

// intRange returns the smallest and largest values of integer type t.
func intRange(t reflect.Type) (lo int64, hi uint64) {
	bits := t.Bits()
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return 0, math.MaxUint64 >> (64 - bits)
	}
	return math.MinInt64 >> (64 - bits), math.MaxInt64 >> (64 - bits)
}
