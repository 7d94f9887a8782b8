package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// blobTarget splits ToBlob, "container" or "container/prefix", with the
// exporter's rules (tableexport.ParseTarget): the prefix must not hold "."
// or ".." segments (Azure treats \ as /), which would name blobs outside
// it.
func (a Args) blobTarget() (container, prefix string, err error) {
	container, prefix, err = tableexport.ParseTarget(a.ToBlob)
	return container, prefix, fieldErr("toBlob", err)
}

func (bt blobTarget) String() string { return "container " + bt.b.Name() }

func (bt blobTarget) name(pk, rk string) string { return blobName(bt.prefix, bt.table, pk, rk) }

func (bt blobTarget) write(ctx context.Context, es []storeadapter.Entity, src sourceReader) ([]placement, error) {
	out := make([]placement, len(es))
	for i, e := range es {
		o, err := bt.writeOne(ctx, e, src)
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

// writeOne writes one copy with If-None-Match (creating the container on
// first use). When a blob exists, it reads it (content and ETag): when it
// holds e's properties, or it does not and src confirms the source still at
// e's ETag, it writes the copy If-Match the blob's ETag, and reads again
// when that write loses a race.
func (bt blobTarget) writeOne(ctx context.Context, e storeadapter.Entity, src sourceReader) (placement, error) {
	name := bt.name(e.PartitionKey, e.RowKey)
	data, err := storeadapter.MarshalEntityJSON(e)
	if err != nil {
		return placement{}, err
	}
	put := func(ctx context.Context, o storeadapter.PutOptions) error {
		o.ContentType = "application/json"
		_, err := bt.b.Put(ctx, name, data, o)
		return err
	}
	insert := func(ctx context.Context) error { return put(ctx, storeadapter.PutOptions{IfNoneMatchAny: true}) }
	err = idempotent.CreateOnMissing(ctx, bt.b.Create, insert)
	for round := 0; raced(err); round++ {
		if round == bt.rounds {
			return placement{fate: contested}, nil
		}
		old, props, gerr := bt.b.Get(ctx, name)
		switch {
		case errors.Is(gerr, storeadapter.ErrNotFound) && !idempotent.Missing(gerr):
			err = insert(ctx) // deleted since
			continue
		case gerr != nil:
			return placement{}, gerr
		}
		if c, cerr := storeadapter.UnmarshalEntityJSON(old, ""); cerr != nil || !holds(c.Properties, e) {
			current, serr := src(ctx, []storeadapter.Entity{e})
			if serr != nil {
				return placement{}, serr
			}
			if o, ok := confirm(e, current); !ok {
				return o, nil
			}
		}
		err = put(ctx, storeadapter.PutOptions{IfMatch: props.ETag})
	}
	return placement{}, err
}

func (bt blobTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := bt.b.Properties(ctx, bt.name(pk, rk))
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Checkpoint steps of a range moved to blobs: the export's, and the
// generation of the export (see exportRange).
const (
	exportStep     = "archive-export"
	generationStep = "archive-export-gen"
)

// exportRange moves a RowKey range to blobs through the exporter (see
// Worker): JSON-lines parts, each part's rows deleted from the source
// If-Match the ETag in its line once the part is committed, passes from
// the range's start until one finds nothing (at most MaxConflicts), then
// one query for rows left.
func (m *mover) exportRange(ctx context.Context, opID string) error {
	container, prefix, _ := m.args.blobTarget() // validated
	blobs := m.w.Store.Container(container)
	gen, err := m.generation(ctx, opID)
	if err != nil {
		return err
	}
	exportID, step := opID, exportStep
	if gen > 1 {
		// A later generation is a new export: its own parts, manifest
		// and checkpoint ("+" never occurs in an operation id).
		exportID, step = fmt.Sprintf("%s+g%d", opID, gen), fmt.Sprintf("%s+g%d", exportStep, gen)
	}
	man, err := tableexport.Export(ctx, m.w.Store.Tables(), storeadapter.Range{Table: m.args.Table, PK: m.args.PK, RKFrom: m.args.RKFrom, RKTo: m.args.RKTo},
		tableexport.Options{
			Blobs: blobs, Prefix: prefix, MaxPartBytes: m.w.cfg.MaxPartBytes, OpID: exportID,
			Checkpoints: m.w.Checkpoints, Step: step, Passes: m.rounds, CreateContainer: true, SkipEmptyManifest: true,
			AfterPart: func(ctx context.Context, p tableexport.Part) error { return m.deletePart(ctx, blobs, p) },
			Transform: m.exported,
		})
	switch {
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return jobs.Permanentf("archive: source table %s does not exist", m.args.Table)
	case err != nil:
		return fmt.Errorf("archive: export to %s: %w", container, err)
	}
	m.manifest = &man
	if err := m.syncRange(ctx); err != nil {
		return err
	}
	from, to := m.args.rowRange()
	page, err := m.w.Store.Tables().Query(ctx, m.args.Table, storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.RowRange(m.pk, from, to)), Top: 11, Select: []string{"RowKey"}})
	if err != nil {
		return fmt.Errorf("archive: query %s: %w", m.args.Table, err)
	}
	if len(page.Entities) == 0 {
		return nil
	}
	// Rows that changed in every pass: the next delivery starts a new
	// generation of the export for them (this one is done and stays so).
	if err := m.w.Checkpoints.Save(ctx, opID, generationStep, strconv.Itoa(gen+1)); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	rks := make([]string, len(page.Entities))
	for i, e := range page.Entities {
		rks[i] = e.RowKey
	}
	more := ""
	if page.Next != "" || len(rks) > 10 {
		more = " (and maybe more)"
	}
	return fmt.Errorf("archive: %s partition %q: %d passes moved every row they could, but rows %w%s: %s",
		m.args.Table, m.pk, m.rounds, errKeptChanging, more, quoteKeys(rks, 10))
}

// generation returns the generation of a range's export: 1, or more once
// a finished export left rows that kept changing.
func (m *mover) generation(ctx context.Context, opID string) (int, error) {
	tok, err := m.w.Checkpoints.Load(ctx, opID, generationStep)
	if err != nil || tok == "" {
		return 1, err
	}
	gen, err := strconv.Atoi(tok)
	if err != nil || gen < 1 {
		return 0, fmt.Errorf("archive: checkpoint %s/%s: %q is not a generation", opID, generationStep, tok)
	}
	return gen, nil
}

// deletePart deletes the rows of a committed part from the source, each
// If-Match the ETag its line holds, in transactions of up to 100 (the
// range lies in one partition). Rows gone are done, rows changed since
// they were exported stay (a later pass exports their new version); see
// deleteMoved. Memory holds one batch of keys.
func (m *mover) deletePart(ctx context.Context, blobs storeadapter.Blobs, p tableexport.Part) error {
	batch := make([]storeadapter.Entity, 0, storeadapter.MaxBatchOps)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := m.deleteMoved(ctx, batch); err != nil { // changed rows wait for the next pass
			return fmt.Errorf("archive: delete %d exported entities from %s: %w", len(batch), m.args.Table, err)
		}
		if err := m.sync(ctx, m.args.Table, batchSpan(batch)); err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	err := tableexport.ReadPart(ctx, blobs, p.Name, func(e storeadapter.Entity) error {
		if e.PartitionKey != m.pk {
			return fmt.Errorf("archive: part %s holds a row of partition %q, not %q", p.Name, e.PartitionKey, m.pk)
		}
		batch = append(batch, storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, ETag: e.ETag})
		if len(batch) == storeadapter.MaxBatchOps {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
