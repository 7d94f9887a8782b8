package largeentity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Carry returns e as it must be written at its new home, the same keys in
// table: every property offloaded to a blob gets a blob of its own there,
// so that nothing the entity needs belongs to its old key (whose blobs a
// reconcile of the old table collects once the old entity is gone).
//
//   - A reference of mode offload: the blob is read and checked against
//     the reference (SHA-256, length), then put under the managed name of
//     the new key — BlobName(layout.PrefixFor(table, c), table, pk, rk, P,
//     sha256) in c, the container the layout declares for table or else
//     the reference's own — and the reference rewritten to name it, with
//     the put's ETag. The put is unconditional: the name is
//     content-addressed, so a redelivery writes the same bytes, and each
//     put renews the blob's LastModified, which keeps a reconcile of the
//     new table from collecting it before the entity that names it is
//     written (the grace period).
//   - A reference of mode attach (a blob the application owns and
//     blobsync never deletes) and a reference whose property the entity
//     also holds inline (the inline value wins, see Get) are kept as they
//     are.
//
// The blobs are written before the caller writes the entity, so a
// reference never names a blob that was not there. A blob that is missing
// or does not match its reference is an error naming the property
// (wrapping storeadapter.ErrNotFound or ErrMismatch): carrying on would
// lose it. e is not changed; carried counts the blobs put.
func Carry(ctx context.Context, store storeadapter.Store, layout Layout, e storeadapter.Entity, table string) (out storeadapter.Entity, carried int, err error) {
	p := placer{from: store, to: store, layout: layout, table: table, strict: true}
	out, err = p.place(ctx, e)
	return out, p.n.Blobs, err
}

// Placed counts what Place did.
type Placed struct {
	// Blobs is how many blobs were put at the new home, Embedded how many
	// of them were written from a value the entity held beside its
	// reference (see Embed).
	Blobs, Embedded int
	// Dangling is how many references were kept as they are because the
	// blob they name is missing or does not match them (the entity had
	// lost that value before it was read).
	Dangling int
}

// Summary is the tail a kind's result gives its counts of Place:
// ", offloaded blobs: B put, D missing" (D: the references kept whose blob
// was gone), "" when both are 0.
func Summary(blobs, dangling int64) string {
	if blobs == 0 && dangling == 0 {
		return ""
	}
	return fmt.Sprintf(", offloaded blobs: %d put, %d missing", blobs, dangling)
}

// Add adds o to n.
func (n *Placed) Add(o Placed) {
	n.Blobs += o.Blobs
	n.Embedded += o.Embedded
	n.Dangling += o.Dangling
}

// Place is Carry for an entity that comes from a copy of its table — a
// table in another account (from is the store its blobs are in, to the
// store the entity goes to) or an export whose lines hold the offloaded
// values beside their references (Embed) — where the entity's old blobs
// may be gone: the restore and copy kinds use it. For each reference of
// mode offload, the value is
//
//   - the property P the entity holds beside the reference, when it is the
//     reference's content (its SHA-256, length and type): the embedded
//     value, which is put and dropped from the entity; an inline P that is
//     not the reference's content is the application's later value, which
//     wins (see Get), and the pair is kept as it is;
//   - else the blob the reference names, read from from and checked.
//
// and is put, as Carry puts it, in to. A reference whose blob is missing
// or does not match, or that does not parse, is kept as it is and counted
// Dangling: the entity is written as the source held it. Attach references are kept. e is not
// changed.
func Place(ctx context.Context, from, to storeadapter.Store, layout Layout, e storeadapter.Entity, table string) (storeadapter.Entity, Placed, error) {
	p := placer{from: from, to: to, layout: layout, table: table}
	out, err := p.place(ctx, e)
	return out, p.n, err
}

// placer puts an entity's offloaded values under its key in table: the
// one implementation of Carry and Place (strict is Carry's rules).
type placer struct {
	from, to storeadapter.Store
	layout   Layout
	table    string
	strict   bool
	n        Placed
}

func (pl *placer) place(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
	props := Refs(e)
	if len(props) == 0 {
		return e, nil
	}
	out := e.Clone()
	slices.Sort(props)
	for _, p := range props {
		inline, hasInline := e.Properties[p]
		if hasInline && pl.strict {
			continue
		}
		ref, _, err := RefOf(e, p)
		switch {
		case err != nil && hasInline:
			continue // the inline value wins over a reference it makes moot
		case err != nil && !pl.strict:
			pl.n.Dangling++ // kept as the source held it
			continue
		case err != nil:
			return out, err
		case ref.Mode != ModeOffload:
			continue
		}
		var data []byte
		embedded := false
		if hasInline {
			if data, embedded = content(inline, ref); !embedded {
				continue // the application's later value: it wins
			}
		} else {
			v, err := Read(ctx, pl.from, p, ref)
			if !pl.strict && lost(err) {
				pl.n.Dangling++
				continue
			}
			if err != nil {
				return out, err
			}
			data = valueBytes(v)
		}
		if ref, err = pl.put(ctx, e, p, ref, data); err != nil {
			return out, err
		}
		delete(out.Properties, p)
		out.Properties[RefPrefix+p] = ref.String()
		pl.n.Blobs++
		if embedded {
			pl.n.Embedded++
		}
	}
	return out, nil
}

// put writes data, property p's content, under e's managed name in the
// table's container and returns the reference rewritten to name it.
func (pl *placer) put(ctx context.Context, e storeadapter.Entity, p string, ref Ref, data []byte) (Ref, error) {
	container := ref.Container
	if tc := pl.layout.Table(pl.table); tc != nil {
		container = tc.Container
	}
	name := BlobName(pl.layout.PrefixFor(pl.table, container), pl.table, e.PartitionKey, e.RowKey, p, ref.SHA256)
	if err := storeadapter.ValidateBlobName(name); err != nil {
		return ref, fmt.Errorf("property %s: its blob's name under table %s: %w", p, pl.table, err)
	}
	blobs := pl.to.Container(container)
	var etag string
	err := idempotent.CreateOnMissing(ctx, blobs.Create, func(ctx context.Context) error {
		var err error
		etag, err = blobs.Put(ctx, name, data, storeadapter.PutOptions{ContentType: ref.ContentType})
		return err
	})
	if err != nil {
		return ref, fmt.Errorf("property %s: put blob %s/%s: %w", p, container, name, err)
	}
	ref.Container, ref.Name, ref.ETag = container, name, etag
	return ref, nil
}

// content returns an inline value's bytes and whether they are ref's
// content: its type, length and SHA-256.
func content(v any, ref Ref) ([]byte, bool) {
	var data []byte
	switch x := v.(type) {
	case string:
		if ref.Type != storeadapter.EdmString.String() {
			return nil, false
		}
		data = []byte(x)
	case []byte:
		if ref.Type != storeadapter.EdmBinary.String() {
			return nil, false
		}
		data = x
	default:
		return nil, false
	}
	if int64(len(data)) != ref.Length {
		return nil, false
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]) == ref.SHA256
}

func valueBytes(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, _ := v.([]byte)
	return b
}

// Embed returns e with the value of every offloaded property beside its
// reference: P read back from the blob (checked, see Read) next to
// TkBlob_P, which stays. An export made so holds everything its rows
// need, whatever becomes of the blobs (a reconcile collects those of
// deleted entities), and Place puts each value back in a blob when the
// row is restored. A reference of mode attach (the application's blob), a
// property the entity holds inline already (its own value wins) and a
// reference whose blob is missing or does not match (the value was lost
// before the export; the line holds the reference as the source did) are
// left as they are. e is not changed; embedded counts the values added.
func Embed(ctx context.Context, store storeadapter.Store, e storeadapter.Entity) (out storeadapter.Entity, embedded int, err error) {
	props := Refs(e)
	if len(props) == 0 {
		return e, 0, nil
	}
	out = e.Clone()
	slices.Sort(props)
	for _, p := range props {
		if _, inline := e.Properties[p]; inline {
			continue
		}
		ref, _, err := RefOf(e, p)
		if err != nil {
			return out, embedded, err
		}
		if ref.Mode != ModeOffload {
			continue
		}
		v, err := Read(ctx, store, p, ref)
		switch {
		case lost(err):
			continue
		case err != nil:
			return out, embedded, err
		}
		if b, ok := v.([]byte); ok {
			v = bytes.Clone(b)
		}
		out.Properties[p] = v
		embedded++
	}
	return out, embedded, nil
}

// lost reports whether err says a reference's value is gone: its blob
// (or container) is missing or does not match it.
func lost(err error) bool {
	return errors.Is(err, storeadapter.ErrNotFound) || errors.Is(err, storeadapter.ErrContainerNotFound) || errors.Is(err, ErrMismatch)
}

// Embedding is Embed on store as a function of an entity alone, the form
// an export's transform takes (tableexport.Options.Transform).
func Embedding(store storeadapter.Store) func(context.Context, storeadapter.Entity) (storeadapter.Entity, error) {
	return func(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
		out, _, err := Embed(ctx, store, e)
		return out, err
	}
}
