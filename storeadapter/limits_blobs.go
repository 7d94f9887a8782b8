package storeadapter

import (
	"encoding/base64"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/internal/text"
)

// Blob service limits, as Azure documents them. Both implementations enforce them
// through the Validate functions below, before calling the service.
const (
	MaxBlobNameChars     = 1024
	MaxBlobPathSegments  = 254        // "/"-separated parts of a blob name
	MaxBlockBytes        = 4000 << 20 // one staged block (service version 2019-12-12 on)
	MaxBlocks            = 50000      // blocks in one committed blob
	MaxUncommittedBlocks = 100000     // blocks staged for one blob and not yet committed
	MaxBlockIDBytes      = 64         // a block ID before base64 encoding
	MaxMetadataBytes     = 8 << 10    // a blob's metadata: names and values together
)

// ValidateContainerName checks Azure's container name rule, which is the
// same as the queue name rule.
func ValidateContainerName(name string) error {
	if !validQueueName(name) {
		return invalid("container name", "%q must be 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit", name)
	}
	return nil
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
			return invalid("metadata name "+strconv.Quote(text.Truncate(name, 80)), "must be ASCII letters, digits and underscores, not starting with a digit (a C# identifier)")
		case seen[strings.ToLower(name)] != "":
			return invalid("metadata name "+strconv.Quote(text.Truncate(name, 80)), "equals %q ignoring case: Azure metadata names are case-insensitive", seen[strings.ToLower(name)])
		}
		if i := strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
			return invalid("metadata "+text.Truncate(name, 80), "value must be printable ASCII (encode other text, e.g. as base64 or URL escapes); byte %d is %q", i, v[i:i+1])
		}
		if strings.HasPrefix(v, " ") || strings.HasSuffix(v, " ") {
			return invalid("metadata "+text.Truncate(name, 80), "value %q must not begin or end with a space (HTTP trims them from header values)", text.Truncate(v, 80))
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
			size, MaxMetadataBytes, text.Truncate(largest, 80), len(largest)+len(md[largest]))
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
