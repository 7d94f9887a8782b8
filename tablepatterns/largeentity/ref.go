package largeentity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// RefPrefix starts the name of the property that holds a Ref: an entity
// whose property P lives in a blob holds TkBlob_<P> instead of P.
const RefPrefix = "TkBlob_"

// MaxPropertyChars bounds the name of a property blobsync moves, so that
// RefPrefix + the name fits Azure's 255 characters.
const MaxPropertyChars = storeadapter.MaxPropertyNameChars - len(RefPrefix)

// RefVersion is the layout version of a Ref (its "v").
const RefVersion = 1

// Modes of a reference (Ref.Mode): who owns the blob.
const (
	ModeOffload = "offload" // a property moved to a blob blobsync owns
	ModeAttach  = "attach"  // a blob the application uploaded itself
)

// Content types of offloaded properties.
const (
	ContentTypeString = "text/plain; charset=utf-8"
	ContentTypeBinary = "application/octet-stream"
)

// Ref is the reference an entity holds, as the compact JSON string
// property TkBlob_<P>, instead of its property P:
//
//	{"v":1,"container":"c","name":"…","length":N,"contentType":"…",
//	 "sha256":"hex","etag":"…","type":"Edm.String"|"Edm.Binary",
//	 "mode":"offload"|"attach"}
//
// Type is the EDM type P is restored with; Mode says who owns the blob:
// blobsync (offload: a managed, content-addressed name, deleted when the
// property is offloaded again with other content) or the application
// (attach: never deleted by blobsync).
type Ref struct {
	V           int    `json:"v"`
	Container   string `json:"container"`
	Name        string `json:"name"`
	Length      int64  `json:"length"`
	ContentType string `json:"contentType"`
	SHA256      string `json:"sha256"`
	ETag        string `json:"etag"`
	Type        string `json:"type"`
	Mode        string `json:"mode"`
}

// String returns the compact JSON of r, the value of its TkBlob_ property.
func (r Ref) String() string {
	b, _ := json.Marshal(r) // a struct of strings and integers: never fails
	return string(b)
}

// ParseRef parses and checks the value of a TkBlob_ property.
func ParseRef(s string) (Ref, error) {
	var r Ref
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Ref{}, fmt.Errorf("not a blobsync reference: %w", err)
	}
	if dec.More() {
		return Ref{}, errors.New("not a blobsync reference: text after the JSON object")
	}
	switch {
	case r.V != RefVersion:
		return Ref{}, fmt.Errorf("reference version %d, want %d", r.V, RefVersion)
	case storeadapter.ValidateContainerName(r.Container) != nil:
		return Ref{}, fmt.Errorf("reference container %q is not a container name", r.Container)
	case storeadapter.ValidateBlobName(r.Name) != nil:
		return Ref{}, fmt.Errorf("reference name %q is not a blob name", r.Name)
	case r.Length < 0:
		return Ref{}, fmt.Errorf("reference length %d is negative", r.Length)
	case !isSHA256(r.SHA256):
		return Ref{}, fmt.Errorf("reference sha256 %q is not 64 lower-case hex digits", r.SHA256)
	case r.Type != storeadapter.EdmString.String() && r.Type != storeadapter.EdmBinary.String():
		return Ref{}, fmt.Errorf("reference type %q is neither Edm.String nor Edm.Binary", r.Type)
	case r.Mode != ModeOffload && r.Mode != ModeAttach:
		return Ref{}, fmt.Errorf("reference mode %q is neither %s nor %s", r.Mode, ModeOffload, ModeAttach)
	}
	return r, nil
}

// RefOf returns the reference an entity holds for property p: ok false
// when it holds none, an error naming the property when TkBlob_<p> is not
// a valid reference.
func RefOf(e storeadapter.Entity, p string) (r Ref, ok bool, err error) {
	v, found := e.Properties[RefPrefix+p]
	if !found {
		return Ref{}, false, nil
	}
	s, isString := v.(string)
	if !isString {
		return Ref{}, true, fmt.Errorf("property %s%s: is %s, want a String reference", RefPrefix, p, TypeName(v))
	}
	r, err = ParseRef(s)
	if err != nil {
		return Ref{}, true, fmt.Errorf("property %s%s: %w", RefPrefix, p, err)
	}
	return r, true, nil
}

// Refs returns the names of the properties an entity holds references for
// (P of each TkBlob_<P>), in no particular order.
func Refs(e storeadapter.Entity) []string {
	var out []string
	for name := range e.Properties {
		if p, ok := strings.CutPrefix(name, RefPrefix); ok && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// BlobName is the managed name of an offloaded property's content:
// <prefix>/<table>/<pk>/<rk>/<property>/<sha256> (no prefix: it starts at
// the table), each key escaped by storeadapter.BlobNameSegment, sha256 the
// lower-case hex digest of the content. The name is immutable: other
// content gets another name.
func BlobName(prefix, table, pk, rk, property, sum string) string {
	name := storeadapter.BlobNameSegment(table) + "/" + storeadapter.BlobNameSegment(pk) + "/" +
		storeadapter.BlobNameSegment(rk) + "/" + storeadapter.BlobNameSegment(property) + "/" + sum
	if prefix != "" {
		name = prefix + "/" + name
	}
	return name
}

// ManagedName is a blob name of the managed layout, parsed.
type ManagedName struct {
	Table, PK, RK, Property, SHA256 string
}

// ParseBlobName parses a name of the managed layout under prefix (see
// BlobName). ok is false when the name is not one: another number of
// segments, a key not escaped as BlobName escapes it, a property name
// blobsync would not use, or a leaf that is not a SHA-256.
func ParseBlobName(prefix, name string) (m ManagedName, ok bool) {
	if prefix != "" {
		rest, found := strings.CutPrefix(name, prefix+"/")
		if !found {
			return m, false
		}
		name = rest
	}
	segs := strings.Split(name, "/")
	if len(segs) != 5 {
		return m, false
	}
	var err error
	if m.PK, err = storeadapter.ParseBlobNameSegment(segs[1]); err != nil || storeadapter.BlobNameSegment(m.PK) != segs[1] {
		return ManagedName{}, false
	}
	if m.RK, err = storeadapter.ParseBlobNameSegment(segs[2]); err != nil || storeadapter.BlobNameSegment(m.RK) != segs[2] {
		return ManagedName{}, false
	}
	m.Table, m.Property, m.SHA256 = segs[0], segs[3], segs[4]
	if storeadapter.ValidateTableName(m.Table) != nil || CheckProperty(m.Property) != nil || !isSHA256(m.SHA256) ||
		storeadapter.ValidateKey("pk", m.PK) != nil || storeadapter.ValidateKey("rk", m.RK) != nil {
		return ManagedName{}, false
	}
	return m, true
}

// CheckProperty checks the name of a property blobsync moves: a valid
// property name of at most MaxPropertyChars that is not itself a
// reference.
func CheckProperty(p string) error {
	if err := storeadapter.ValidatePropertyName(p); err != nil {
		return err
	}
	if n := len(p); n > MaxPropertyChars {
		return fmt.Errorf("must be at most %d characters (so that %s<name> fits 255), got %d", MaxPropertyChars, RefPrefix, n)
	}
	if strings.HasPrefix(p, RefPrefix) {
		return fmt.Errorf("%q must not start with %s, which names references", p, RefPrefix)
	}
	return nil
}

// CleanPrefix checks a blob name prefix (no "." or ".." segments, no
// backslash) and trims its slashes.
func CleanPrefix(prefix string) (string, error) {
	if strings.Contains(prefix, `\`) {
		return "", fmt.Errorf("%q must not contain \\ (Azure reads it as /)", prefix)
	}
	for _, seg := range strings.Split(strings.Trim(prefix, "/"), "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%q must not hold \".\" or \"..\" path segments", prefix)
		}
	}
	p := strings.Trim(prefix, "/")
	if p != "" {
		if err := storeadapter.ValidateBlobName(p + "/x"); err != nil {
			return "", err
		}
		if strings.Contains(p, "//") {
			return "", fmt.Errorf("%q must not hold empty path segments", prefix)
		}
	}
	return p, nil
}

func isSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// TypeName names the EDM type of a property value.
func TypeName(v any) string {
	if t, ok := storeadapter.TypeOf(v); ok {
		return t.String()
	}
	return fmt.Sprintf("%T", v)
}

// SameETag reports whether two ETags are equal, with or without quotes.
func SameETag(a, b string) bool { return strings.Trim(a, `"`) == strings.Trim(b, `"`) }

// Hashed is a blob's content as read: its digest and length.
type Hashed struct {
	// Sum is the lower-case hex SHA-256 ("" when the read stopped at its
	// limit), Length the bytes read (or the size Open reported).
	Sum    string
	Length int64
	// Props are the properties Open gave: the ETag the content belongs to.
	Props storeadapter.BlobProps
}

// HashBlob streams a blob and returns its SHA-256 and length, with the
// properties Open gave (the ETag the content belongs to). keep, when not
// nil, receives the content as it streams. limit, when not negative, is
// the most bytes the caller wants: a blob whose size (as Open reports it)
// is over limit is not read at all, and at most limit+1 bytes are read
// whatever the size said, so a blob swapped for a larger one never costs
// more; the returned length then exceeds limit and sum is empty.
func HashBlob(ctx context.Context, b storeadapter.Blobs, name string, keep io.Writer, limit int64) (Hashed, error) {
	r, props, err := b.Open(ctx, name)
	if err != nil {
		return Hashed{}, err
	}
	defer r.Close()
	if limit >= 0 && props.Size > limit {
		return Hashed{Length: props.Size, Props: props}, nil
	}
	h := sha256.New()
	w := io.Writer(h)
	if keep != nil {
		w = io.MultiWriter(h, keep)
	}
	src := io.Reader(r)
	if limit >= 0 {
		src = io.LimitReader(r, limit+1)
	}
	n, err := io.Copy(w, src)
	if err != nil {
		return Hashed{}, fmt.Errorf("read blob %s: %w", name, err)
	}
	if limit >= 0 && n > limit {
		return Hashed{Length: n, Props: props}, nil
	}
	return Hashed{Sum: hex.EncodeToString(h.Sum(nil)), Length: n, Props: props}, nil
}

// Digest returns the lower-case hex SHA-256 of data.
func Digest(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}
