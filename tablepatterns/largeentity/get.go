package largeentity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ErrMismatch is wrapped by Get's errors when a blob does not hold what
// its reference says (another SHA-256, another length, or text that is not
// UTF-8 for an Edm.String).
var ErrMismatch = errors.New("blob does not match its reference")

// MismatchError says which property's blob does not match its reference.
type MismatchError struct {
	Property        string // P (the reference is TkBlob_<P>)
	Container, Name string // the blob
	What            string // "sha256", "length" or "utf-8"
	Want, Got       string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("property %s: blob %s/%s: %s is %s, the reference says %s", e.Property, e.Container, e.Name, e.What, e.Got, e.Want)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Get reads an entity and returns it with every TkBlob_<P> property
// replaced by P as it was offloaded or attached: read back from its blob
// (streamed, its SHA-256 and length checked against the reference), with
// its EDM type (Edm.String or Edm.Binary) restored. A property P the
// entity also holds inline (the application wrote it after the offload)
// wins over its reference, which is dropped unread. A missing table or
// entity wraps storeadapter.ErrNotFound; a missing blob is an error naming
// the property that wraps storeadapter.ErrNotFound too; a blob that does
// not match is a *MismatchError (errors.Is ErrMismatch). Every blob is
// read whole into memory, but never more than its reference's length (plus
// one byte): a longer blob is a length mismatch.
func Get(ctx context.Context, store storeadapter.Store, table, pk, rk string) (storeadapter.Entity, error) {
	e, err := store.Tables().GetEntity(ctx, table, pk, rk)
	if err != nil {
		return e, fmt.Errorf("largeentity: get %s %s/%s: %w", table, pk, rk, err)
	}
	e, err = Restore(ctx, store, e)
	if err != nil {
		return e, fmt.Errorf("largeentity: %s %s/%s: %w", table, pk, rk, err)
	}
	return e, nil
}

// Restore is Get for an entity already read: it returns a copy of e with
// every reference replaced by its property read back from its blob and
// checked (see Get). e is not changed.
func Restore(ctx context.Context, store storeadapter.Store, e storeadapter.Entity) (storeadapter.Entity, error) {
	e = e.Clone()
	props := Refs(e)
	slices.Sort(props)
	for _, p := range props {
		if _, inline := e.Properties[p]; inline {
			delete(e.Properties, RefPrefix+p)
			continue
		}
		ref, _, err := RefOf(e, p)
		if err != nil {
			return e, err
		}
		v, err := Read(ctx, store, p, ref)
		if err != nil {
			return e, err
		}
		delete(e.Properties, RefPrefix+p)
		e.Properties[p] = v
	}
	return e, nil
}

// Read reads the blob of property p's reference and returns p's value
// (string or []byte, as the reference's type says), checked against the
// reference's SHA-256 and length (*MismatchError otherwise).
func Read(ctx context.Context, store storeadapter.Store, p string, ref Ref) (any, error) {
	var buf bytes.Buffer
	// The size Open reports is compared with the reference before any
	// byte is read, and the read stops one byte past ref.Length: a blob
	// swapped for a larger one costs no more than the reference's length.
	h, err := HashBlob(ctx, store.Container(ref.Container), ref.Name, &buf, ref.Length)
	if err != nil {
		return nil, fmt.Errorf("property %s: blob %s/%s: %w", p, ref.Container, ref.Name, err)
	}
	mismatch := func(what, want, got string) error {
		return &MismatchError{Property: p, Container: ref.Container, Name: ref.Name, What: what, Want: want, Got: got}
	}
	switch {
	case h.Length != ref.Length:
		got := fmt.Sprint(h.Length)
		if h.Sum == "" && h.Length == ref.Length+1 {
			got = "more than " + fmt.Sprint(ref.Length) // the read stopped there
		}
		return nil, mismatch("length", fmt.Sprint(ref.Length), got)
	case h.Sum != ref.SHA256:
		return nil, mismatch("sha256", ref.SHA256, h.Sum)
	case ref.Type == storeadapter.EdmString.String():
		if !utf8.Valid(buf.Bytes()) {
			return nil, mismatch("utf-8", "valid UTF-8 text (Edm.String)", "not UTF-8")
		}
		return buf.String(), nil
	}
	if buf.Len() == 0 {
		return []byte{}, nil // an empty Edm.Binary, not a nil one
	}
	return buf.Bytes(), nil
}
