package storeadapter

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/internal/text"
)

// Table service limits, as Azure documents them. Both implementations enforce them
// through the Validate functions below, before calling the service.
const (
	MaxKeyChars          = 512     // PartitionKey/RowKey: 1 KiB of UTF-16
	MaxCustomProperties  = 252     // 255 minus PartitionKey, RowKey, Timestamp
	MaxPropertyNameChars = 255     // property name length
	MaxEntityBytes       = 1 << 20 // entity size as Azure counts it
	MaxStringChars       = 32768   // string property: 64 KiB of UTF-16
	MaxBinaryBytes       = 65536   // binary property
	MaxBatchOps          = 100     // operations in one entity group transaction
	MaxBatchBytes        = 4 << 20 // payload of one entity group transaction
	MaxPageSize          = 1000    // entities in one query page
)

// reservedProps are the system properties every entity has.
var reservedProps = map[string]bool{"PartitionKey": true, "RowKey": true, "Timestamp": true}

// isTableName matches ^[A-Za-z][A-Za-z0-9]{2,62}$ (by hand: this runs on
// every call, and a regular expression costs more than the store's work).
func isTableName(s string) bool {
	if len(s) < 3 || len(s) > 63 || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isLetter(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// isIdentifier matches ^[A-Za-z_][A-Za-z0-9_]*$.
func isIdentifier(s string) bool {
	if s == "" || !isLetter(s[0]) && s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isLetter(s[i]) && !isDigit(s[i]) && s[i] != '_' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// ValidateTableName checks Azure's table name rule: 3–63 alphanumeric
// characters starting with a letter, and not the reserved name "tables".
func ValidateTableName(name string) error {
	if !isTableName(name) {
		return invalid("table name", "%q must be 3-63 letters and digits starting with a letter", name)
	}
	if strings.EqualFold(name, "tables") {
		return invalid("table name", "%q is reserved by the table service (in any case); choose another name", name)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }

// ValidateKey checks a PartitionKey or RowKey value: 1–512 characters
// (1 KiB of UTF-16) of valid UTF-8, none of them / \ # ? or a control
// character. field names it in the error ("PartitionKey", "rk", ...).
//
// Azure accepts empty keys, but the Azure SDK for Go refuses them on the
// client for get, update, merge and delete (in transactions too), so an
// entity with an empty key could be written and never moved or removed
// again. tablekeeper therefore refuses empty keys everywhere.
func ValidateKey(field, key string) error {
	if key == "" {
		return invalid(field, "must not be empty (the Azure SDK for Go cannot address an entity with an empty key)")
	}
	if !utf8.ValidString(key) {
		return invalid(field, "must be valid UTF-8")
	}
	if n := utf16LenOver(key, MaxKeyChars); n > MaxKeyChars {
		return invalid(field, "must be at most %d characters (1 KiB of UTF-16), got %d", MaxKeyChars, n)
	}
	if i := forbiddenInKey(key); i >= 0 {
		return invalid(field, "must not contain / \\ # ? or control characters (found %q at byte %d)", key[i:i+utf8.RuneLen(rune(key[i]))], i)
	}
	return nil
}

// forbiddenInKey returns the byte offset of the first character of a valid
// UTF-8 key that keys may not hold (/ \ # ? or a control character), or
// -1. It reads bytes, not runes: every such character is ASCII or, for
// U+0080–U+009F, the lead byte 0xC2 followed by 0x80–0x9F.
func forbiddenInKey(key string) int {
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c < 0x20, c == 0x7f, c == '/', c == '\\', c == '#', c == '?':
			return i
		case c == 0xc2 && i+1 < len(key) && key[i+1] <= 0x9f:
			return i
		}
	}
	return -1
}

// ValidatePropertyName checks a custom property name: a C#-style
// identifier of at most 255 characters that is not a system property.
func ValidatePropertyName(name string) error {
	switch {
	case reservedProps[name]:
		return invalid("property "+name, "is a system property and cannot be set")
	case len(name) > MaxPropertyNameChars:
		return invalid("property name", "must be at most %d characters, got %d", MaxPropertyNameChars, len(name))
	case !isIdentifier(name):
		return invalid("property name", "%q must start with a letter or underscore and hold only letters, digits and underscores", name)
	}
	return nil
}

// ValidateEntity checks an entity against Azure's rules before it is
// written: keys, property names and count, property types and sizes, and
// the 1 MiB entity size. It returns ErrInvalidInput or ErrTooLarge naming
// the field.
func ValidateEntity(e Entity) error {
	if err := ValidateKey("PartitionKey", e.PartitionKey); err != nil {
		return err
	}
	if err := ValidateKey("RowKey", e.RowKey); err != nil {
		return err
	}
	if n := len(e.Properties); n > MaxCustomProperties {
		return tooLarge("properties", "at most %d custom properties, got %d", MaxCustomProperties, n)
	}
	for name, v := range e.Properties {
		if err := ValidatePropertyName(name); err != nil {
			return err
		}
		if err := validateValue(name, v); err != nil {
			return err
		}
	}
	if n := entitySize(e, false); n > MaxEntityBytes {
		return tooLarge("entity "+e.PartitionKey+"/"+e.RowKey, "size %d bytes exceeds %d", n, MaxEntityBytes)
	}
	return nil
}

func validateValue(name string, v any) error {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return invalid("property "+name, "string must be valid UTF-8")
		}
		if n := utf16LenOver(x, MaxStringChars); n > MaxStringChars {
			return tooLarge("property "+name, "string of %d characters exceeds %d (64 KiB of UTF-16)", n, MaxStringChars)
		}
	case []byte:
		if len(x) > MaxBinaryBytes {
			return tooLarge("property "+name, "binary of %d bytes exceeds %d", len(x), MaxBinaryBytes)
		}
	case time.Time:
		if y := x.UTC().Year(); y < 1601 || y > 9999 {
			return invalid("property "+name, "DateTime year %d is outside 1601-9999", y)
		}
	case float64, bool, int32, int64, GUID:
	default:
		return invalid("property "+name, "Go type %T has no EDM type (use string, bool, int32, int64, float64, time.Time, GUID or []byte)", v)
	}
	return nil
}

// EntitySize returns the entity's size as Azure counts it against the 1 MiB
// limit: 4 bytes, plus the keys in UTF-16, plus for each property 8 bytes,
// its name in UTF-16 and its value's size.
func EntitySize(e Entity) int { return entitySize(e, true) }

// entitySize is EntitySize, or with exact false a fast upper bound that
// counts strings in UTF-8 bytes (never fewer than their UTF-16 units) and
// falls back to the exact size only when the bound exceeds the limit.
func entitySize(e Entity, exact bool) int {
	count := UTF16Len
	if !exact {
		count = func(s string) int { return len(s) }
	}
	n := 4 + 2*count(e.PartitionKey) + 2*count(e.RowKey)
	for name, v := range e.Properties {
		n += 8 + 2*len(name)
		switch x := v.(type) {
		case string:
			n += 4 + 2*count(x)
		case []byte:
			n += 4 + len(x)
		case bool:
			n++
		case int32:
			n += 4
		case GUID:
			n += 16
		default: // int64, float64, time.Time
			n += 8
		}
	}
	if !exact && n > MaxEntityBytes {
		return entitySize(e, true)
	}
	return n
}

// BatchOpSize bounds the bytes an operation on e adds to a transaction's
// request as azstore sends it, which the service measures against its
// 4 MiB limit (not EntitySize): the entity's JSON as Go's encoder writes it
// (the Azure SDK re-encodes it with encoding/json: escaped text, see
// JSONStringSize; binary in base64; one annotation per typed property),
// the keys once more, percent-encoded, in the operation's URL, and a
// kilobyte for the rest of the URL and the multipart and HTTP headers.
func BatchOpSize(e Entity) int {
	n := 1024 + 64 + JSONStringSize(e.PartitionKey) + JSONStringSize(e.RowKey) +
		urlPathSize(e.PartitionKey) + urlPathSize(e.RowKey)
	for name, v := range e.Properties {
		n += 2*len(name) + 48 // "name":value, "name@odata.type":"Edm.Xxx",
		switch x := v.(type) {
		case string:
			n += JSONStringSize(x)
		case []byte:
			n += 2 + 4*((len(x)+2)/3)
		default:
			n += 40
		}
	}
	return n
}

// JSONStringSize returns the length of s as the Azure SDK sends it to the
// table service: as json.Marshal writes it, with its default HTML escaping
// (the SDK re-encodes every entity so, whatever JSON it is given:
// docs/azure-behaviour.md, "SDK gotchas"), quotes included: \" \\ \n \r
// \t \b \f take two bytes; other control characters, < > &, U+2028 and
// U+2029 take six (\u003c, \u2028); each byte of invalid UTF-8 takes six
// (\ufffd). It is not the size of MarshalEntityJSON's text, which does not
// HTML-escape.
func JSONStringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// urlPathSize bounds the length of s percent-encoded in a URL path: three
// bytes for each byte but ASCII letters and digits, six for a quote (it is
// doubled inside the OData key literal, then encoded).
func urlPathSize(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch {
		case isLetter(s[i]) || isDigit(s[i]):
			n++
		case s[i] == '\'':
			n += 6
		default:
			n += 3
		}
	}
	return n
}

// ValidateMode checks that m is Replace or Merge.
func ValidateMode(m UpdateMode) error {
	if m != Replace && m != Merge {
		return invalid("update mode", "must be Replace or Merge, got %d", m)
	}
	return nil
}

// ValidateIfMatch checks the If-Match of a table operation: ETagAny or a
// weak ETag, W/"…" (w/ too), as the table service issues them. Azure
// answers 400 InvalidInput to any other value — a bare or strong ETag is
// malformed, not merely stale — while a weak ETag it never issued is a 412
// (docs/azure-behaviour.md, "Issue 18 decisions"), so both stores refuse
// the malformed ones here, before the call.
func ValidateIfMatch(etag string) error {
	switch {
	case etag == "":
		return invalid("If-Match", "must be an ETag or %q", ETagAny)
	case etag == ETagAny || isWeakETag(etag):
		return nil
	}
	return invalid("If-Match", "%q is not a table ETag: table ETags are weak, W/\"…\" (pass the ETag as read, or %q)", text.Truncate(etag, 80), ETagAny)
}

// isWeakETag matches ^[Ww]/"([^"]|\\")*"$: W/ and a quoted string in which
// a quote appears only escaped.
func isWeakETag(s string) bool {
	if len(s) < 4 || s[0] != 'W' && s[0] != 'w' || s[1] != '/' || s[2] != '"' || s[len(s)-1] != '"' {
		return false
	}
	inner := s[3 : len(s)-1]
	for i := 0; i < len(inner); i++ {
		if inner[i] == '"' && (i == 0 || inner[i-1] != '\\') {
			return false
		}
	}
	return true
}

// ValidateTransaction checks an entity group transaction against Azure's
// rules: 1–100 operations, one PartitionKey, each RowKey at most once, valid
// entities, and a payload within 4 MiB, counted with BatchOpSize (an upper
// bound of what the request carries), so a batch that passes also passes
// the service's limit.
func ValidateTransaction(ops []TableOp) error {
	if len(ops) == 0 {
		return invalid("transaction", "needs at least one operation")
	}
	if len(ops) > MaxBatchOps {
		return tooLarge("transaction", "at most %d operations, got %d", MaxBatchOps, len(ops))
	}
	pk := ops[0].Entity.PartitionKey
	seen := make(map[string]bool, len(ops))
	size := 0
	for i, op := range ops {
		e := op.Entity
		if e.PartitionKey != pk {
			return &TransactionError{Index: i, Err: invalid("transaction", "operation %d has PartitionKey %q, not %q: all operations must share one partition", i, e.PartitionKey, pk)}
		}
		if seen[e.RowKey] {
			return &TransactionError{Index: i, Err: invalid("transaction", "operation %d repeats RowKey %q: one operation per entity", i, e.RowKey)}
		}
		seen[e.RowKey] = true
		if err := ValidateOp(op); err != nil {
			return &TransactionError{Index: i, Err: err}
		}
		size += BatchOpSize(e)
	}
	if size > MaxBatchBytes {
		return tooLarge("transaction", "payload of about %d bytes exceeds %d", size, MaxBatchBytes)
	}
	return nil
}

// ValidateOp checks one table operation on its own: its action, its
// If-Match and its entity (keys only for a delete). Single-entity calls use
// it; ValidateTransaction adds the rules of a batch.
func ValidateOp(op TableOp) error {
	switch op.Action {
	case TxDelete:
		if err := ValidateKey("PartitionKey", op.Entity.PartitionKey); err != nil {
			return err
		}
		if err := ValidateKey("RowKey", op.Entity.RowKey); err != nil {
			return err
		}
		return ValidateIfMatch(op.IfMatch)
	case TxUpdateReplace, TxUpdateMerge:
		if err := ValidateIfMatch(op.IfMatch); err != nil {
			return err
		}
	case TxInsert, TxUpsertReplace, TxUpsertMerge:
		// TableOp.IfMatch must be empty here: an insert or upsert cannot be
		// conditional, and silently ignoring an ETag would turn a caller's
		// intended compare-and-swap into an unconditional write.
		if op.IfMatch != "" {
			return invalid("If-Match", "must be empty for an insert or upsert, got %q (use TxUpdateReplace or TxUpdateMerge)", op.IfMatch)
		}
	default:
		return invalid("transaction action", "unknown action %d", op.Action)
	}
	return ValidateEntity(op.Entity)
}

// ValidateQuery checks a query's page size and filter.
func ValidateQuery(q Query) error {
	if q.Top < 0 || q.Top > MaxPageSize {
		return invalid("top", "must be 0 (default %d) to %d, got %d", MaxPageSize, MaxPageSize, q.Top)
	}
	for _, s := range q.Select {
		if reservedProps[s] {
			continue
		}
		if err := ValidatePropertyName(s); err != nil {
			return err
		}
	}
	return q.Filter.err
}
