package restore

import (
	"context"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Planned is what a restore would do, as Plan counts it.
type Planned struct {
	// Table is the target; Manifests and Parts count what would be read,
	// Rows the rows the manifests hold.
	Table            string
	Manifests, Parts int
	Rows             int64
	// Write counts the rows that would be written, Skip those insert would
	// leave (the target holds them), Delete those mirror would delete.
	Write, Skip, Delete int64
}

// Plan counts what the restore a names would write, skip and delete,
// writing nothing: it reads the manifests, checks every part as the
// restore would (a damaged or missing part is the restore's permanent
// error), and for insert and mirror joins the parts' keys with a read of
// the target in the export's scope (reserved rows left out), a read that
// checks each part again as the restore's does. Memory holds
// one line and one page. The target may change before the restore runs;
// the counts are those of now.
func Plan(ctx context.Context, store storeadapter.Store, a Args) (Planned, error) {
	if err := a.Validate(); err != nil {
		return Planned{}, err
	}
	src, err := open(ctx, store, a)
	if err != nil {
		return Planned{}, err
	}
	p := Planned{Table: src.table, Manifests: len(src.manifests)}
	for m, man := range src.manifests {
		p.Parts += len(man.Parts)
		p.Rows += man.Entities
		for i := range man.Parts {
			if err := src.check(ctx, m, i, 0); err != nil {
				return p, err
			}
		}
	}
	if a.Mode == ModeReplace {
		p.Write = p.Rows
		return p, nil
	}
	t := newTarget(store.Tables(), src.scope(), nil)
	extra := func(storeadapter.Entity) error { p.Delete++; return nil }
	for _, part := range src.manifests[0].Parts {
		err := tableexport.ReadCheckedPart(ctx, src.blobs[0], part, func(e storeadapter.Entity) error {
			k := storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
			has, err := t.upTo(ctx, &k, extra)
			if has && a.Mode != ModeMirror {
				p.Skip++
			} else {
				p.Write++
			}
			return err
		})
		if err != nil {
			return p, err
		}
	}
	if a.Mode == ModeMirror {
		return p, t.rest(ctx, extra)
	}
	p.Delete = 0 // insert deletes nothing; the join only skipped past them
	return p, nil
}
