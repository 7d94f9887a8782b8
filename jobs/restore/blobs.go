package restore

import (
	"context"
	"fmt"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// add hands a line's entity to the writer once its offloaded values are
// in blobs of the target's key (largeentity.Place): an export holds each
// value beside its reference (largeentity.Embed), which is put under the
// target table's managed name — in the container the blobsync layout
// declares for the target, or else the reference's — and the reference
// rewritten to name it; a line of an older export, with the reference
// only, has its blob read (when it is still there) and put the same way.
// A reference whose value is gone is kept as it is (counted Dangling):
// the row is restored as the export holds it.
//
// The blobs are put before the row is handed to the writer, so a
// reference never names a blob that is not there. A put is unconditional
// and its name content-addressed: a redelivery puts the same bytes under
// the same name, and renews the blob's LastModified, so a reconcile of
// the target table does not collect it before the row is written (the
// blobsync grace). A blob put for a row insert then skips (the row was
// there) names no row unless that row holds the same value: a reconcile
// of the target table collects it after the grace, as it collects the
// blobs of rows replace overwrites and mirror deletes.
func (r *run) add(ctx context.Context, e storeadapter.Entity) error {
	e, placed, err := largeentity.Place(ctx, r.w.Store, r.w.Store, r.w.Layout, e, r.src.table)
	if err != nil {
		return fmt.Errorf("row %s/%s: %w", e.PartitionKey, e.RowKey, err)
	}
	r.placed.Add(placed)
	return r.wr.Add(ctx, e)
}
