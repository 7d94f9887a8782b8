package storeadapter

import (
	"encoding/base64"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Service limits, as Azure documents them. Both implementations enforce
// them through the Validate functions below, before calling the service.
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
	MaxMessageBytes      = 65536   // queue message text, UTF-8 bytes
	MaxReceiveCount      = 32      // messages in one receive
	MaxVisibility        = 7 * 24 * time.Hour
	MaxBlobNameChars     = 1024
	MaxBlobPathSegments  = 254        // "/"-separated parts of a blob name
	MaxBlockBytes        = 4000 << 20 // one staged block (service version 2019-12-12 on)
	MaxBlocks            = 50000      // blocks in one committed blob
	MaxUncommittedBlocks = 100000     // blocks staged for one blob and not yet committed
	MaxBlockIDBytes      = 64         // a block ID before base64 encoding
	MaxMetadataBytes     = 8 << 10    // a blob's metadata: names and values together
)

var (
	queueNameRE   = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`) // length apart: see validQueueName
	reservedProps = map[string]bool{"PartitionKey": true, "RowKey": true, "Timestamp": true}
)

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
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

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

// ValidateQueueName checks Azure's queue name rule: 3–63 lowercase letters,
// digits and single hyphens, starting and ending with a letter or digit.
func ValidateQueueName(name string) error {
	if !validQueueName(name) {
		return invalid("queue name", "%q must be 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit", name)
	}
	return nil
}

// ValidateContainerName checks Azure's container name rule, which is the
// same as the queue name rule.
func ValidateContainerName(name string) error {
	if !validQueueName(name) {
		return invalid("container name", "%q must be 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit", name)
	}
	return nil
}

// validQueueName reports whether name follows the queue and container name
// rule: 3–63 characters of the shape queueNameRE describes. The length is
// checked apart because a repetition count in the pattern would count "-x"
// as one unit, refusing "a-b" and allowing up to 125 characters.
func validQueueName(name string) bool {
	return len(name) >= 3 && len(name) <= 63 && queueNameRE.MatchString(name)
}

// ValidateBlobName checks a blob name: 1–1,024 characters of valid UTF-8
// without control characters or backslashes, at most 254 path segments,
// not ending with a dot or slash. Azure reads \ in a blob name as /, so a
// name written with \ would be stored under another name; tablekeeper
// refuses it rather than rename it, so names round-trip as written.
func ValidateBlobName(name string) error {
	n := utf8.RuneCountInString(name)
	switch {
	case n == 0 || n > MaxBlobNameChars:
		return invalid("blob name", "must be 1-%d characters, got %d", MaxBlobNameChars, n)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, isControl):
		return invalid("blob name", "%q must be valid UTF-8 without control characters", name)
	case strings.Contains(name, `\`):
		return invalid("blob name", "%q must not contain \\ (Azure reads it as /; write / instead)", name)
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, "/"):
		return invalid("blob name", "%q must not end with a dot or slash", name)
	}
	if segs := strings.Count(name, "/") + 1; segs > MaxBlobPathSegments {
		return invalid("blob name", "must have at most %d path segments (parts between /), got %d", MaxBlobPathSegments, segs)
	}
	return nil
}

// ValidatePutOptions checks a blob write's options: its metadata (see
// ValidateMetadata) and its conditions: Azure takes one condition header
// per write, so IfMatch and IfNoneMatchAny cannot both be set (the service
// would answer 400).
func ValidatePutOptions(o PutOptions) error {
	if o.IfMatch != "" && o.IfNoneMatchAny {
		return invalid("put options", "IfMatch and IfNoneMatchAny cannot be combined: a write takes one condition")
	}
	return ValidateMetadata(o.Metadata)
}

// ValidateMetadata checks a blob's user-defined metadata against the rules
// of "Setting and retrieving properties and metadata for Blob service
// resources" (Azure Storage REST reference): each pair travels as an HTTP
// header x-ms-meta-<name>: <value>; names "must adhere to the naming rules
// for C# identifiers" and "are case-insensitive"; two names that are equal
// ignoring case are a 400; "the total size of all metadata pairs can be up
// to 8 KB"; and the pairs "adhere to all restrictions governing HTTP
// headers". In detail:
//
//   - A name is 1 or more ASCII letters, digits and underscores, not
//     starting with a digit (C# allows other Unicode letters too, but
//     header names are ASCII; Azure's .NET guidance says names "can contain
//     only ASCII characters"). Two names equal ignoring case are refused.
//   - A value is printable ASCII (space to ~) and may be empty. Azure's
//     guidance is that non-ASCII values be Base64- or URL-encoded: send
//     them raw and the request fails (the Go SDK signs the UTF-8 bytes,
//     and Azurite answers 403 AuthorizationFailure), so they are refused
//     here; so are control characters, tab included (Go's HTTP client
//     refuses most of them itself).
//   - A value must not begin or end with a space: HTTP trims the spaces
//     around a header value, so such a value cannot come back as written
//     (Azurite answers 403 AuthorizationFailure, the signature having
//     covered the spaces). Spaces inside a value are kept.
//   - The names and values together (without the x-ms-meta- prefixes)
//     are at most MaxMetadataBytes (8 KiB), else ErrTooLarge, as Azure's
//     400 MetadataTooLarge. Azurite does not enforce this limit.
//
// Errors name the offending metadata name. nil and empty metadata are
// valid (the blob has none).
func ValidateMetadata(md map[string]string) error {
	if len(md) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(md)) // so the error names the same pair each time
	seen := make(map[string]string, len(md))
	size := 0
	for _, name := range names {
		v := md[name]
		switch {
		case !isIdentifier(name):
			return invalid("metadata name "+strconv.Quote(Truncate(name, 80)), "must be ASCII letters, digits and underscores, not starting with a digit (a C# identifier)")
		case seen[strings.ToLower(name)] != "":
			return invalid("metadata name "+strconv.Quote(Truncate(name, 80)), "equals %q ignoring case: Azure metadata names are case-insensitive", seen[strings.ToLower(name)])
		}
		if i := strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
			return invalid("metadata "+Truncate(name, 80), "value must be printable ASCII (encode other text, e.g. as base64 or URL escapes); byte %d is %q", i, v[i:i+1])
		}
		if strings.HasPrefix(v, " ") || strings.HasSuffix(v, " ") {
			return invalid("metadata "+Truncate(name, 80), "value %q must not begin or end with a space (HTTP trims them from header values)", Truncate(v, 80))
		}
		seen[strings.ToLower(name)] = name
		size += len(name) + len(v)
	}
	if size > MaxMetadataBytes {
		largest := names[0]
		for _, name := range names {
			if len(name)+len(md[name]) > len(largest)+len(md[largest]) {
				largest = name
			}
		}
		return tooLarge("metadata", "names and values total %d bytes, over %d (8 KiB); the largest pair is %s (%d bytes)",
			size, MaxMetadataBytes, Truncate(largest, 80), len(largest)+len(md[largest]))
	}
	return nil
}

// LowerMetadata returns md with every name in lower case, as BlobProps
// reports metadata, or nil when md is empty. md must have passed
// ValidateMetadata (no two names equal ignoring case). md is not changed.
func LowerMetadata(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	lower := make(map[string]string, len(md))
	for name, v := range md {
		lower[strings.ToLower(name)] = v
	}
	return lower
}

// ValidateBlockID checks a block ID: standard base64 (with its padding) of
// 1 to 64 bytes, as Put Block requires. That the IDs of one blob share a
// length is checked by ValidateBlockList and, across calls, by the store.
func ValidateBlockID(id string) error {
	raw, err := base64.StdEncoding.Strict().DecodeString(id)
	switch {
	case id == "":
		return invalid("block ID", "must not be empty")
	case err != nil:
		return invalid("block ID", "%q must be standard base64 with padding: %v", id, err)
	case len(raw) > MaxBlockIDBytes:
		return invalid("block ID", "%q must encode at most %d bytes, got %d", id, MaxBlockIDBytes, len(raw))
	}
	return nil
}

// ValidateStageBlock checks a block to stage: its ID and a size of 1 byte
// to MaxBlockBytes. An empty blob needs no block: commit an empty list.
func ValidateStageBlock(id string, size int) error {
	if err := ValidateBlockID(id); err != nil {
		return err
	}
	switch {
	case size == 0:
		return invalid("block "+id, "must hold at least 1 byte (commit no blocks for an empty blob)")
	case int64(size) > MaxBlockBytes:
		return tooLarge("block "+id, "%d bytes exceeds %d (4000 MiB)", size, MaxBlockBytes)
	}
	return nil
}

// ValidateBlockList checks the IDs of a commit: at most MaxBlocks, each a
// valid ID, all of one length (Azure answers 400 InvalidBlockList to a
// list that mixes lengths).
func ValidateBlockList(ids []string) error {
	if len(ids) > MaxBlocks {
		return tooLarge("block list", "at most %d blocks, got %d", MaxBlocks, len(ids))
	}
	for i, id := range ids {
		if err := ValidateBlockID(id); err != nil {
			return err
		}
		if len(id) != len(ids[0]) {
			return invalid("block list", "ID %d (%q) is %d characters long, ID 0 (%q) %d: the IDs of one blob must have one length", i, id, len(id), ids[0], len(ids[0]))
		}
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
	if i := strings.IndexFunc(key, func(r rune) bool { return strings.ContainsRune(`/\#?`, r) || isControl(r) }); i >= 0 {
		return invalid(field, "must not contain / \\ # ? or control characters (found %q at byte %d)", key[i:i+utf8.RuneLen(rune(key[i]))], i)
	}
	return nil
}

// utf16LenOver returns UTF16Len(s) when s may exceed limit UTF-16 units,
// and 0 when it cannot: a string never has more UTF-16 units than UTF-8
// bytes, so short strings need no counting.
func utf16LenOver(s string, limit int) int {
	if len(s) <= limit {
		return 0
	}
	return UTF16Len(s)
}

// UTF16Len counts the UTF-16 code units of a valid UTF-8 string, the unit
// in which Azure measures string sizes, without decoding it: one per
// character (every byte that is not a continuation byte), plus one more for
// each 4-byte character (a surrogate pair).
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c&0xC0 != 0x80 {
			n++
		}
		if c >= 0xF0 {
			n++
		}
	}
	return n
}

// Truncate returns s as valid UTF-8 (invalid bytes become U+FFFD) of at
// most n characters: a longer text is cut to n-1 characters followed by
// "…". Error texts and names stored in entities and shown to operators are
// bounded with it.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	count := 0
	for i := range s {
		if count == n-1 {
			return s[:i] + "…"
		}
		count++
	}
	return s
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

// UpdateMode says whether a write replaces the whole entity or merges the
// given properties into the stored ones.
type UpdateMode uint8

// Update modes.
const (
	Replace UpdateMode = iota + 1
	Merge
)

// ValidateMode checks that m is Replace or Merge.
func ValidateMode(m UpdateMode) error {
	if m != Replace && m != Merge {
		return invalid("update mode", "must be Replace or Merge, got %d", m)
	}
	return nil
}

// ETagAny matches any existing entity or blob in an If-Match condition.
const ETagAny = "*"

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
	return invalid("If-Match", "%q is not a table ETag: table ETags are weak, W/\"…\" (pass the ETag as read, or %q)", Truncate(etag, 80), ETagAny)
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

// ValidateMessageText checks a queue message: at most 64 KiB of UTF-8, and
// only characters XML 1.0 can carry (the service's wire format would
// silently replace others). tablekeeper sends base64, which always passes.
func ValidateMessageText(text string) error {
	if len(text) > MaxMessageBytes {
		return tooLarge("message", "%d bytes exceeds %d", len(text), MaxMessageBytes)
	}
	if !utf8.ValidString(text) {
		return invalid("message", "must be valid UTF-8")
	}
	if i := strings.IndexFunc(text, func(r rune) bool {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(text[i:]) // the character, not its first byte
		return invalid("message", "character %q at byte %d cannot be sent as XML text (send base64)", r, i)
	}
	return nil
}

// ValidateReceive checks a receive call: 1–32 messages and a visibility
// timeout from 1 s to 7 days.
func ValidateReceive(n int, visibility time.Duration) error {
	if n < 1 || n > MaxReceiveCount {
		return invalid("count", "must be 1-%d, got %d", MaxReceiveCount, n)
	}
	if visibility < time.Second || visibility > MaxVisibility {
		return invalid("visibility timeout", "must be 1s-7d, got %v", visibility)
	}
	return nil
}

// ValidateVisibility checks a visibility delay or timeout of 0 to 7 days
// (whole seconds are what the service keeps; shorter parts are dropped).
func ValidateVisibility(field string, d time.Duration) error {
	if d < 0 || d > MaxVisibility {
		return invalid(field, "must be 0-7d, got %v", d)
	}
	return nil
}

// ValidateSend checks send options: a delay of 0–7 days, a TTL of at least
// 1 s or NeverExpire (0 means the default 7 days), and a delay shorter than
// the TTL.
func ValidateSend(text string, o SendOptions) error {
	if err := ValidateMessageText(text); err != nil {
		return err
	}
	if err := ValidateVisibility("visibility delay", o.VisibilityDelay); err != nil {
		return err
	}
	ttl := o.TTL
	switch {
	case ttl == NeverExpire:
		return nil
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < time.Second:
		return invalid("ttl", "must be at least 1s, 0 (7 days) or NeverExpire, got %v", o.TTL)
	}
	// The service keeps whole seconds of both (see Seconds), so compare
	// what it will see: a 1.5 s delay with a 1.9 s TTL is 1 s against 1 s.
	if Seconds(o.VisibilityDelay) >= Seconds(ttl) {
		return invalid("visibility delay", "%v must be shorter than the ttl %v", o.VisibilityDelay, ttl)
	}
	return nil
}

// Seconds returns d in whole seconds, rounded down, as queue APIs take it.
func Seconds(d time.Duration) int32 {
	return int32(min(d/time.Second, math.MaxInt32))
}

// BlobNameSegment escapes a table key (or any text) for one path segment
// of a blob name: url.PathEscape, and a final dot written %2E. So no
// segment is "." or "..", or ends with a dot, which URL handling on the way
// to Azure would resolve or drop (PathEscape keeps dots), and no segment
// holds a "/" that would split it; ParseBlobNameSegment gives the text
// back.
func BlobNameSegment(s string) string {
	e := url.PathEscape(s)
	if dots, ok := strings.CutSuffix(e, "."); ok {
		e = dots + "%2E"
	}
	return e
}

// ParseBlobNameSegment is the inverse of BlobNameSegment.
func ParseBlobNameSegment(seg string) (string, error) {
	s, err := url.PathUnescape(seg)
	if err != nil {
		return "", invalid("blob name segment", "%q is not an escaped segment: %v", seg, err)
	}
	return s, nil
}
