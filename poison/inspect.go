package poison

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Inspector is the operators' side of poison handling: it lists and shows
// records and requeues, deletes and purges them with their poison messages
// and blobs. It holds no state besides its configuration and is safe for
// concurrent use, but operator commands that change records are meant to
// run one at a time (see Delete and Purge).
type Inspector struct {
	records
}

// NewInspector returns the Inspector of cfg with its defaults filled in,
// or the error of cfg.Validate.
func NewInspector(cfg Config) (*Inspector, error) {
	r, err := newRecords(cfg)
	if err != nil {
		return nil, err
	}
	return &Inspector{records: r}, nil
}

// sweepVisibility is how long a sweep hides the poison messages it looks at
// before making the ones it keeps visible again.
const sweepVisibility = 30 * time.Second

// List returns the records in State "poisoned" of this work queue (only
// those of one kind when kind is not ""), newest LastAttempt first. It
// streams the table page by page and sorts in memory: poison records are
// few, and an operator who has millions has a bigger problem than this
// sort. A missing table means no records.
func (in *Inspector) List(ctx context.Context, kind string) ([]Record, error) {
	var recs []Record
	err := in.scan(ctx, in.filter(kind, StatePoisoned), func(e entry) { recs = append(recs, e.rec) })
	if err != nil {
		return nil, fmt.Errorf("poison: list: %w", err)
	}
	sortNewest(recs)
	return recs, nil
}

// filter selects the records of this work queue, of one kind unless kind is
// "" and in one state unless state is "".
func (in *Inspector) filter(kind, state string) storeadapter.Filter {
	f := storeadapter.Compare(propQueue, storeadapter.Eq, in.cfg.Source.Name())
	if kind != "" {
		f = storeadapter.And(f, storeadapter.Compare(propKind, storeadapter.Eq, kind))
	}
	if state != "" {
		f = storeadapter.And(f, storeadapter.Compare(propState, storeadapter.Eq, state))
	}
	return f
}

// scan calls fn with every record matching f, page by page. A missing table
// holds no records.
func (in *Inspector) scan(ctx context.Context, f storeadapter.Filter, fn func(entry)) error {
	return in.scanSelect(ctx, f, nil, fn)
}

// scanSelect is scan reading only the properties sel (nil: all).
func (in *Inspector) scanSelect(ctx context.Context, f storeadapter.Filter, sel []string, fn func(entry)) error {
	q := storeadapter.Query{Filter: f, Select: sel}
	for {
		page, err := in.cfg.Tables.Query(ctx, in.cfg.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range page.Entities {
			if e.RowKey == recordRowKey && !reservedPartition(e.PartitionKey) {
				fn(decodeEntry(e))
			}
		}
		if page.Next == "" {
			return nil
		}
		q.Continuation = page.Next
	}
}

// PoisonedOps returns the operation ids of this work queue's records in
// State "poisoned" (a record whose envelope did not decode has none). It
// reads the records table once, the OpID property only: one query per
// 1,000 records of the queue, whatever the number of ids asked about, and
// the ids in memory (poison records are few; see List).
func (in *Inspector) PoisonedOps(ctx context.Context) (map[string]bool, error) {
	ops := map[string]bool{}
	err := in.scanSelect(ctx, in.filter("", StatePoisoned), []string{propOpID}, func(e entry) {
		if e.rec.OpID != "" {
			ops[e.rec.OpID] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("poison: poisoned operations: %w", err)
	}
	return ops, nil
}

// sortNewest orders records by LastAttempt, newest first, then by id.
func sortNewest(recs []Record) {
	slices.SortFunc(recs, func(a, b Record) int {
		return cmp.Or(b.LastAttempt.Compare(a.LastAttempt), cmp.Compare(a.MessageID, b.MessageID))
	})
}

// Show returns the record of one original message id, in any state, with
// its Original loaded (from the blob when only OriginalRef holds it). When
// no record has that message id, it looks for the records of that
// operation id: one is returned like a message id's; several give an error
// that lists their message ids. It returns an error wrapping
// storeadapter.ErrNotFound when there is none, and one wrapping
// storeadapter.ErrInvalidInput, saying why, when id cannot be a message id
// or an operation id.
func (in *Inspector) Show(ctx context.Context, id string) (Record, error) {
	if err := checkID(id); err != nil {
		return Record{}, fmt.Errorf("poison: show: %w", err)
	}
	e, err := in.get(ctx, id)
	if errors.Is(err, storeadapter.ErrNotFound) {
		e, err = in.byOpID(ctx, id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("poison: show %s: %w", id, err)
	}
	if e.rec.Original, err = in.original(ctx, e); err != nil {
		return Record{}, err
	}
	return e.rec, nil
}

// checkID explains why id can be neither a message id nor an operation id
// (both are table keys here), or returns nil.
func checkID(id string) error {
	if err := storeadapter.ValidateKey("id", id); err != nil {
		return fmt.Errorf("%q is not a valid message id or operation id: %w", text.Truncate(id, 80), err)
	}
	return nil
}

// byOpID returns the one record of this work queue whose operation id is
// opID; ErrNotFound when there is none.
func (in *Inspector) byOpID(ctx context.Context, opID string) (entry, error) {
	var found []entry
	f := storeadapter.And(in.filter("", ""), storeadapter.Compare(propOpID, storeadapter.Eq, opID))
	if err := in.scan(ctx, f, func(e entry) { found = append(found, e) }); err != nil {
		return entry{}, err
	}
	switch len(found) {
	case 0:
		return entry{}, fmt.Errorf("no record with that message id or operation id: %w", storeadapter.ErrNotFound)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, e := range found {
		ids[i] = e.rec.MessageID
	}
	slices.Sort(ids)
	return entry{}, fmt.Errorf("%w: operation id %s has %d records (message ids %s): give one message id",
		storeadapter.ErrInvalidInput, opID, len(found), strings.Join(ids, ", "))
}

// original returns a record's original text: the Original property when
// present, else the blob OriginalRef names.
func (in *Inspector) original(ctx context.Context, e entry) (string, error) {
	if e.hasOriginal || e.rec.OriginalRef == "" {
		return e.rec.Original, nil
	}
	container, name, ok := strings.Cut(e.rec.OriginalRef, "/")
	if !ok || container != in.cfg.Blobs.Name() {
		return "", fmt.Errorf("poison: original of %s: reference %q is not in container %s", e.rec.MessageID, e.rec.OriginalRef, in.cfg.Blobs.Name())
	}
	data, _, err := in.cfg.Blobs.Get(ctx, name)
	if err != nil {
		return "", fmt.Errorf("poison: original of %s: read blob %s: %w", e.rec.MessageID, e.rec.OriginalRef, err)
	}
	return string(data), nil
}

// deleteBlob deletes the original blob of a removed record, if it refers
// to one: only the version the record names (any version in records
// written before OriginalETag was kept). A blob rewritten since belongs to
// a newer Move of the same message, whose record is written after it.
func (in *Inspector) deleteBlob(ctx context.Context, e entry) error {
	if e.rec.OriginalRef == "" {
		return nil
	}
	name := blobName(e.rec.MessageID)
	err := in.cfg.Blobs.Delete(ctx, name, cmp.Or(e.blobETag, storeadapter.ETagAny))
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		return fmt.Errorf("delete blob %s: %w", name, err)
	}
	return nil
}
