package poison

import (
	"context"
	"fmt"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Operation returns every record of one operation id on this work queue, in
// any state, newest last attempt first (an original kept only in a blob is
// not loaded: Show loads it). An operation requeued and poisoned again has one record per message
// that carried it: the requeue sends a new message, so its history is the
// list. It reads the records table once with a filter on the operation id.
// A missing table, or an id without records, gives none.
func (in *Inspector) Operation(ctx context.Context, opID string) ([]Record, error) {
	if err := checkID(opID); err != nil {
		return nil, fmt.Errorf("poison: operation: %w", err)
	}
	var recs []Record
	f := storeadapter.And(in.filter("", ""), storeadapter.Compare(propOpID, storeadapter.Eq, opID))
	if err := in.scan(ctx, f, func(e entry) { recs = append(recs, e.rec) }); err != nil {
		return nil, fmt.Errorf("poison: operation %s: %w", opID, err)
	}
	sortNewest(recs)
	return recs, nil
}
