package restore

import (
	"context"
	"fmt"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// segment is the keys handed to the writer since the last save: the first
// and the last, in key order (one part's lines).
type segment struct {
	first, last storeadapter.Key
	n           int64
}

func (s *segment) add(e storeadapter.Entity) {
	k := storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
	if s.n == 0 {
		s.first = k
	}
	s.last = k
	s.n++
}

// syncIndexes brings the target's declared indexes up to date for the
// keys written or deleted since the last save, before pos is saved (see
// Worker for the spans and why they cover what a crashed run left), and
// adds what Sync did to pos's counts. A target without declared indexes
// costs nothing.
func (r *run) syncIndexes(ctx context.Context, pos *state) error {
	pos.Indexed, pos.Unindexed = r.st.Indexed, r.st.Unindexed
	var sp indexes.Span
	switch {
	case r.st.Phase == phaseMirror && r.w.Indexes.Declared(r.src.table):
		var through *storeadapter.Key
		if pos.Phase != phaseDone {
			if sameKey(pos.After, r.st.After) {
				return nil // no export line since the last save
			}
			through = pos.After
		}
		sp = indexes.Within(r.src.scope(), r.st.After, through)
	case r.st.Phase == phaseWrite && r.syncWrites && r.seg.n > 0:
		first, last := r.seg.first, r.seg.last
		sp = indexes.Span{From: &first, Through: &last}
	default:
		return nil
	}
	r.seg = segment{}
	res, err := r.w.Indexes.Sync(ctx, r.src.table, sp)
	if err != nil {
		return fmt.Errorf("reconcile the indexes of %s: %w", r.src.table, err)
	}
	pos.Indexed += int64(res.Registered - res.Removed)
	pos.Unindexed += int64(res.Removed)
	return nil
}

// sameKey reports whether a and b are the same key, or both nil.
func sameKey(a, b *storeadapter.Key) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
