package largeentity

import (
	"context"
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
			return out, carried, err
		}
		if ref.Mode != ModeOffload {
			continue
		}
		v, err := Read(ctx, store, p, ref)
		if err != nil {
			return out, carried, err
		}
		data, _ := v.([]byte)
		if s, ok := v.(string); ok {
			data = []byte(s)
		}
		container := ref.Container
		if tc := layout.Table(table); tc != nil {
			container = tc.Container
		}
		name := BlobName(layout.PrefixFor(table, container), table, e.PartitionKey, e.RowKey, p, ref.SHA256)
		if err := storeadapter.ValidateBlobName(name); err != nil {
			return out, carried, fmt.Errorf("property %s: its blob's name under table %s: %w", p, table, err)
		}
		blobs := store.Container(container)
		var etag string
		err = idempotent.CreateOnMissing(ctx, blobs.Create, func(ctx context.Context) error {
			var err error
			etag, err = blobs.Put(ctx, name, data, storeadapter.PutOptions{ContentType: ref.ContentType})
			return err
		})
		if err != nil {
			return out, carried, fmt.Errorf("property %s: put blob %s/%s: %w", p, container, name, err)
		}
		ref.Container, ref.Name, ref.ETag = container, name, etag
		out.Properties[RefPrefix+p] = ref.String()
		carried++
	}
	return out, carried, nil
}
