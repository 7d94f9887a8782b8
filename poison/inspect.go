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
// no record has that message id, it returns the current record of that
// operation id (see Lookup). It returns an error wrapping
// storeadapter.ErrNotFound when there is none, and one wrapping
// storeadapter.ErrInvalidInput, saying why, when id cannot be a message id
// or an operation id.
func (in *Inspector) Show(ctx context.Context, id string) (Record, error) {
	rec, _, err := in.lookup(ctx, id, false)
	return rec, err
}

// Lookup is Show that also returns the operation's other records: an
// operation requeued and poisoned again has one record per message. The
// record returned is the one asked for by message id or, for an
// operation id, the current one: a poisoned record before a failing one,
// then a requeuing and a requeued one, and among records in the same
// state the latest LastAttempt (see Current). The others are the
// operation's other records, newest first, without their Original. It
// makes one query more than Show when the record has an operation id.
func (in *Inspector) Lookup(ctx context.Context, id string) (Record, []Record, error) {
	return in.lookup(ctx, id, true)
}

// lookup is Show and Lookup; others says whether to return the operation's
// other records.
func (in *Inspector) lookup(ctx context.Context, id string, others bool) (Record, []Record, error) {
	if err := checkID(id); err != nil {
		return Record{}, nil, fmt.Errorf("poison: show: %w", err)
	}
	var rest []entry
	e, err := in.get(ctx, id)
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		var all []entry
		if all, err = in.byOpID(ctx, id); err == nil {
			e, rest = all[0], all[1:]
		}
	case err == nil && others && e.rec.OpID != "":
		var all []entry
		if all, err = in.byOpID(ctx, e.rec.OpID); err == nil {
			rest = slices.DeleteFunc(all, func(o entry) bool { return o.rec.MessageID == e.rec.MessageID })
		} else if errors.Is(err, storeadapter.ErrNotFound) {
			err = nil // removed meanwhile: no others
		}
	}
	if err != nil {
		return Record{}, nil, fmt.Errorf("poison: show %s: %w", id, err)
	}
	if e.rec.Original, err = in.original(ctx, e); err != nil {
		return Record{}, nil, err
	}
	var earlier []Record
	if others {
		for _, o := range rest {
			o.rec.Original = ""
			earlier = append(earlier, o.rec)
		}
	}
	return e.rec, earlier, nil
}

// stateRank orders states for Current: the lower, the more current.
var stateRank = map[string]int{StatePoisoned: 0, StateFailing: 1, StateRequeuing: 2, StateRequeued: 3}

// Current orders two records of one operation: negative when a is more
// current than b. A poisoned record comes first (it is what an operator
// acts on), then a failing one (its message is still being retried), a
// requeuing and a requeued one; in the same state, the latest LastAttempt
// (then RequeuedAt, then message id) first.
func Current(a, b Record) int {
	rank := func(r Record) int {
		if n, ok := stateRank[r.State]; ok {
			return n
		}
		return len(stateRank)
	}
	return cmp.Or(cmp.Compare(rank(a), rank(b)), b.LastAttempt.Compare(a.LastAttempt), b.RequeuedAt.Compare(a.RequeuedAt),
		cmp.Compare(a.MessageID, b.MessageID))
}

// checkID explains why id can be neither a message id nor an operation id
// (both are table keys here), or returns nil.
func checkID(id string) error {
	if err := storeadapter.ValidateKey("id", id); err != nil {
		return fmt.Errorf("%q is not a valid message id or operation id: %w", text.Truncate(id, 80), err)
	}
	return nil
}

// byOpID returns the records of this work queue whose operation id is
// opID, the current one first (see Current); ErrNotFound when there is
// none.
func (in *Inspector) byOpID(ctx context.Context, opID string) ([]entry, error) {
	var found []entry
	f := storeadapter.And(in.filter("", ""), storeadapter.Compare(propOpID, storeadapter.Eq, opID))
	if err := in.scan(ctx, f, func(e entry) { found = append(found, e) }); err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no record with that message id or operation id: %w", storeadapter.ErrNotFound)
	}
	slices.SortFunc(found, func(a, b entry) int { return Current(a.rec, b.rec) })
	return found, nil
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
