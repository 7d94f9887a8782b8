package poison

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
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
	q := storeadapter.Query{Filter: f}
	for {
		page, err := in.cfg.Tables.Query(ctx, in.cfg.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range page.Entities {
			if e.RowKey == recordRowKey {
				fn(decodeEntry(e))
			}
		}
		if page.Next == "" {
			return nil
		}
		q.Continuation = page.Next
	}
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
		return fmt.Errorf("%q is not a valid message id or operation id: %w", storeadapter.Truncate(id, 80), err)
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

// RequeueOptions select the records Requeue sends back.
type RequeueOptions struct {
	// IDs are original message ids. Exactly one of IDs and All is required.
	IDs []string
	// All selects every record of the work queue.
	All bool
	// Kind, when not "", keeps only the records of that kind.
	Kind string
	// Group, when not "", keeps only the records of that GroupName.
	Group string
	// DryRun returns what would be requeued without changing anything.
	DryRun bool
	// Skipped, when set, is called for each record named in IDs that is
	// not requeued, with the reason.
	Skipped func(r Record, why string)
	// Progress, when set, is called after each selected record with how
	// many of them are done.
	Progress func(done, total int)
}

// Requeue sends poisoned messages back to the work queue and returns the
// records it requeued (or, with DryRun, would requeue), newest first.
//
// For each selected record in State "poisoned" it:
//
//  1. claims the record: an ETag-conditional merge to State "requeuing"
//     (idempotent.UpdateCAS). Of two concurrent requeues of the same
//     record one loses the claim (ErrPreconditionFailed), re-reads the
//     record, finds it claimed and skips it, so the original is sent once;
//  2. sends the original text, untouched (read from the blob when needed),
//     to the work queue as a fresh message with the default time to live;
//  3. merges State "requeued", RequeuedAt, RequeuedBy (this host) and
//     RequeuedMessageID, conditional on the claim's ETag.
//
// Then it removes the requeued records' messages from the poison queue (all
// of them, duplicates included) and marks the records swept: by the ids
// and receipts the records note, and for the rest in one pass over the
// poison queue (see the package documentation). The pass receives every
// poison message, hiding each for 30 seconds, and makes the ones it keeps
// visible again at the end; a concurrent Requeue, Delete or Purge
// therefore cannot see them meanwhile. If the pass may have missed some
// that way, the records stay unswept and the next Requeue that selects
// them removes the rest.
//
// Crash positions: after 1 the record stays "requeuing"; once it is older
// than RequeueTimeout the next Requeue claims it again and sends it (after
// 2 that is a second copy on the work queue, which handlers tolerate: they
// are idempotent by operation id). After 3 the poison messages remain; the
// next Requeue that selects the record finds it "requeued" but not swept
// and removes them without sending anything.
//
// Records in other states are skipped, so a second Requeue does nothing.
// An id without a record (or whose record belongs to another work queue)
// gives an error wrapping storeadapter.ErrNotFound; the other ids are still
// requeued, and the error is returned with them.
func (in *Inspector) Requeue(ctx context.Context, o RequeueOptions) ([]Record, error) {
	if o.All == (len(o.IDs) > 0) {
		return nil, fmt.Errorf("poison: requeue: %w: give either IDs or All", storeadapter.ErrInvalidInput)
	}
	var (
		entries []entry
		errs    []error
	)
	if o.All {
		err := in.scan(ctx, in.filter(o.Kind, ""), func(e entry) {
			if o.Group == "" || GroupName(e.rec) == o.Group {
				entries = append(entries, e)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("poison: requeue: %w", err)
		}
	} else {
		seen := map[string]bool{}
		for _, id := range o.IDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			if err := checkID(id); err != nil {
				errs = append(errs, fmt.Errorf("poison: requeue: %w", err))
				continue
			}
			e, err := in.get(ctx, id)
			if errors.Is(err, storeadapter.ErrNotFound) {
				errs = append(errs, fmt.Errorf("poison: requeue %s: %w", id, err))
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("poison: requeue %s: %w", id, err)
			}
			if e.rec.Queue != in.cfg.Source.Name() {
				errs = append(errs, fmt.Errorf("poison: requeue %s: the record belongs to queue %q, not %q: %w",
					id, e.rec.Queue, in.cfg.Source.Name(), storeadapter.ErrNotFound))
				continue
			}
			switch {
			case o.Kind != "" && e.rec.Kind != o.Kind:
				skip(o, e.rec, fmt.Sprintf("its kind is %q, not %q", e.rec.Kind, o.Kind))
			case o.Group != "" && GroupName(e.rec) != o.Group:
				skip(o, e.rec, fmt.Sprintf("its group is %s, not %s", GroupName(e.rec), o.Group))
			default:
				entries = append(entries, e)
			}
		}
	}

	now := in.now()
	var out []Record
	sweep := map[string]entry{} // message id -> the record to remove the poison messages of, with the ETag to mark it swept with ("": do not)
	for i, e := range entries {
		if o.Progress != nil && i > 0 {
			o.Progress(i, len(entries))
		}
		if !o.All {
			if why := notRequeueable(e, now); why != "" {
				skip(o, e.rec, why)
			}
		}
		switch {
		case requeueable(e, now):
			if o.DryRun {
				out = append(out, e.rec)
				continue
			}
			rec, last, sent, err := in.requeueOne(ctx, e, now)
			if sent {
				out = append(out, rec)
				sweep[rec.MessageID] = last
			}
			if err != nil {
				errs = append(errs, err)
			}
		case e.rec.State == StateRequeued && !e.swept && !o.DryRun:
			sweep[e.rec.MessageID] = e
		}
	}
	if o.Progress != nil && len(entries) > 0 {
		o.Progress(len(entries), len(entries))
	}
	sortNewest(out)
	if len(sweep) > 0 {
		complete, err := in.removePoisonMessages(ctx, slices.Collect(maps.Values(sweep)))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("poison: requeue: %w", err))
		case complete:
			errs = append(errs, in.markSwept(ctx, sweep))
		}
	}
	return out, errors.Join(errs...)
}

// requeueable reports whether Requeue should send a record: it is
// poisoned, or a requeue claimed it longer than RequeueTimeout ago and
// never finished.
func requeueable(e entry, now time.Time) bool {
	return e.rec.State == StatePoisoned ||
		e.rec.State == StateRequeuing && !now.Before(e.requeuingAt.Add(RequeueTimeout))
}

// notRequeueable says why Requeue does not send a record, or returns "".
func notRequeueable(e entry, now time.Time) string {
	switch {
	case requeueable(e, now):
		return ""
	case e.rec.State == StateFailing:
		return "it is not poisoned: the message is still being retried on the work queue"
	case e.rec.State == StateRequeuing:
		return fmt.Sprintf("a requeue by %s started at %s is still sending it (retried after %v)",
			e.rec.RequeuedBy, e.requeuingAt.UTC().Format(time.RFC3339), RequeueTimeout)
	}
	return fmt.Sprintf("it was already requeued at %s as message %s", e.rec.RequeuedAt.UTC().Format(time.RFC3339), e.rec.RequeuedMessageID)
}

// skip reports a record Requeue does not send.
func skip(o RequeueOptions, r Record, why string) {
	if o.Skipped != nil {
		o.Skipped(r, why)
	}
}

// requeueOne claims, sends and finishes one record (see Requeue). sent
// reports whether the original was sent; last is the record as last read,
// with its ETag after the last step ("" when it could not be finished).
func (in *Inspector) requeueOne(ctx context.Context, e entry, now time.Time) (rec Record, last entry, sent bool, err error) {
	id := e.rec.MessageID
	claimed := false
	claim := func(cur *storeadapter.Entity) (*storeadapter.Entity, error) {
		claimed = false
		if cur == nil {
			return nil, nil // deleted meanwhile
		}
		if e = decodeEntry(*cur); !requeueable(e, now) {
			return nil, nil // another requeue has it
		}
		claimed = true
		return &storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{
			propState: StateRequeuing, propRequeuingAt: now, propRequeuedBy: in.cfg.Host}}, nil
	}
	claimedAs, err := idempotent.UpdateCAS(ctx, in.cfg.Tables, in.cfg.Table, id, recordRowKey, claim, idempotent.CASOptions{Start: &e.raw})
	if err != nil {
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: claim: %w", id, err)
	}
	if !claimed {
		return Record{}, entry{}, false, nil
	}

	text, err := in.original(ctx, e)
	if err != nil {
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: %w", id, err)
	}
	newMsg, err := send(ctx, in.cfg.Source, text, storeadapter.SendOptions{})
	if err != nil {
		return Record{}, entry{}, false, fmt.Errorf("poison: requeue %s: send: %w", id, err)
	}

	rec = e.rec
	rec.Original = text
	rec.State, rec.RequeuedAt, rec.RequeuedBy, rec.RequeuedMessageID = StateRequeued, now, in.cfg.Host, newMsg.ID
	done := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{
		propState: StateRequeued, propRequeuedAt: now, propRequeuedBy: in.cfg.Host,
		propRequeuedMessageID: newMsg.ID, propSwept: false}}
	last = e
	last.etag, err = in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, done, storeadapter.Merge, claimedAs.ETag)
	switch {
	case err == nil:
		return rec, last, true, nil
	case errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound):
		// Someone changed the record since the claim (poisoned it again,
		// deleted it); their state stands.
		last.etag = ""
		return rec, last, true, nil
	}
	last.etag = ""
	return rec, last, true, fmt.Errorf("poison: requeue %s: finish: %w", id, err)
}

// markSwept records that the poison messages of requeued records are gone,
// conditional on each record's ETag; a record changed meanwhile, or without
// an ETag, is left alone.
func (in *Inspector) markSwept(ctx context.Context, entries map[string]entry) error {
	var errs []error
	for id, en := range entries {
		if en.etag == "" {
			continue
		}
		e := storeadapter.Entity{PartitionKey: id, RowKey: recordRowKey, Properties: map[string]any{propSwept: true}}
		_, err := in.cfg.Tables.UpdateEntity(ctx, in.cfg.Table, e, storeadapter.Merge, en.etag)
		if err != nil && !errors.Is(err, storeadapter.ErrPreconditionFailed) && !errors.Is(err, storeadapter.ErrNotFound) {
			errs = append(errs, fmt.Errorf("poison: requeue %s: mark swept: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Delete removes the record of one original message id, in any state,
// with its blob and its poison-queue messages. It returns an error wrapping
// storeadapter.ErrNotFound when there is no record.
//
// It removes the poison messages first, then the record (unconditionally),
// then the blob, conditional on the ETag the record names: a redelivered
// original poisoned again meanwhile has rewritten the blob before its
// record, and that record keeps its blob. A crash before the record's
// delete leaves the record in place and running Delete again finishes the
// job; a crash after it leaves a blob nothing refers to, which the next
// Move of that message id overwrites. A poison message hidden by the pass
// of a concurrent Requeue, Delete or Purge is missed and outlives the
// record: run operator commands one at a time.
func (in *Inspector) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("poison: delete: %w", err)
	}
	e, err := in.get(ctx, id)
	if err != nil {
		return fmt.Errorf("poison: delete %s: %w", id, err)
	}
	if _, err := in.removePoisonMessages(ctx, []entry{e}); err != nil {
		return fmt.Errorf("poison: delete %s: %w", id, err)
	}
	err = in.cfg.Tables.DeleteEntity(ctx, in.cfg.Table, id, recordRowKey, storeadapter.ETagAny)
	if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
		return fmt.Errorf("poison: delete %s: %w", id, err)
	}
	if err := in.deleteBlob(ctx, e); err != nil {
		return fmt.Errorf("poison: delete %s: %w", id, err)
	}
	return nil
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

// DefaultStaleAfter is PurgeOptions.StaleAfter's default: the default time
// to live of a queue message. A failing record whose last attempt is older
// belongs to a message that cannot exist any more.
const DefaultStaleAfter = 7 * 24 * time.Hour

// PurgeOptions select the records Purge removes.
type PurgeOptions struct {
	// OlderThan keeps records whose last activity (last attempt, or
	// requeue) is younger than this; 0 removes them whatever their age.
	OlderThan time.Duration
	// Kind and Group, when not "", keep only the records of that kind and
	// of that GroupName.
	Kind, Group string
	// StaleAfter is the age of its last attempt past which a failing record
	// is removed: its message succeeded (and the runner could not drop the
	// record) or expired. It must be at least the work queue's message time
	// to live, or a record of a message still being retried is lost (a new
	// one is started by its next failure). 0 means DefaultStaleAfter; a
	// negative value keeps failing records.
	StaleAfter time.Duration
	// CheckpointTable, when not "", is the table of range checkpoints
	// (PartitionKey = operation id): the checkpoints of the operations whose
	// poisoned or failing records Purge removes are removed too, unless
	// another record of the same operation remains or was requeued.
	CheckpointTable string
	// DryRun returns what would be removed without changing anything.
	DryRun bool
	// Progress, when set, is called after each removed record with how many
	// of the selected records are done.
	Progress func(done, total int)
}

// PurgeResult is what Purge removed (or, with DryRun, would remove).
type PurgeResult struct {
	// Records are the removed records, newest first.
	Records []Record
	// Checkpoints is how many checkpoint entities were removed.
	Checkpoints int
}

// Purge removes the records of this work queue that are done with:
// poisoned records (with their blobs and poison-queue messages), requeued
// records (their messages were sent back: nothing refers to them any more),
// failing records older than StaleAfter, and the range checkpoints of the
// abandoned operations (see PurgeOptions). Records being requeued are left
// alone.
//
// Like Delete it removes the poison messages (those the records note by
// id, the others in one pass for all), then each
// record, then its blob (only the version the record names; see Delete),
// so a crash leaves the records not yet deleted for the next Purge;
// checkpoints go after their records. A record's delete is conditional on
// the ETag read: one that changed meanwhile (a newer attempt, a requeue, a
// new Move) is kept with its blob and not counted. Run it alone: a Requeue
// working on the same records may find their blobs gone, and a poison
// message hidden by the pass of a concurrent Requeue, Delete or Purge is
// missed and outlives its record.
func (in *Inspector) Purge(ctx context.Context, o PurgeOptions) (PurgeResult, error) {
	if o.OlderThan < 0 {
		return PurgeResult{}, fmt.Errorf("poison: purge: %w: OlderThan %v is negative", storeadapter.ErrInvalidInput, o.OlderThan)
	}
	now := in.now()
	stale := cmp.Or(o.StaleAfter, DefaultStaleAfter)
	var (
		sel      []entry
		requeued []Record            // selected requeued records
		liveOps  = map[string]bool{} // operations with a record that stays or a requeued copy
	)
	err := in.scan(ctx, in.filter(o.Kind, ""), func(e entry) {
		if o.Group != "" && GroupName(e.rec) != o.Group {
			liveOps[e.rec.OpID] = true
			return
		}
		last := e.rec.LastAttempt
		if e.rec.RequeuedAt.After(last) {
			last = e.rec.RequeuedAt
		}
		old := o.OlderThan == 0 || last.Before(now.Add(-o.OlderThan))
		switch e.rec.State {
		case StatePoisoned:
		case StateRequeued:
			requeued = append(requeued, e.rec)
		case StateFailing:
			old = old && stale > 0 && last.Before(now.Add(-stale))
		default:
			old = false
		}
		if !old {
			liveOps[e.rec.OpID] = true
			return
		}
		sel = append(sel, e)
	})
	if err != nil {
		return PurgeResult{}, fmt.Errorf("poison: purge: %w", err)
	}
	// A requeued copy may still run, unless it failed in turn and its
	// record goes too.
	selected := map[string]bool{}
	for _, e := range sel {
		selected[e.rec.MessageID] = true
	}
	for _, r := range requeued {
		if !selected[r.RequeuedMessageID] {
			liveOps[r.OpID] = true
		}
	}
	var res PurgeResult
	if o.DryRun {
		for _, e := range sel {
			res.Records = append(res.Records, e.rec)
		}
		sortNewest(res.Records)
		res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(sel, liveOps), true)
		return res, err
	}
	if len(sel) == 0 {
		return res, nil
	}
	var parked []entry // the records that may have poison messages
	for _, e := range sel {
		if e.rec.State != StateFailing {
			parked = append(parked, e)
		}
	}
	if _, err := in.removePoisonMessages(ctx, parked); err != nil {
		return res, fmt.Errorf("poison: purge: %w", err)
	}
	var removed []entry
	for i, e := range sel {
		id := e.rec.MessageID
		err := in.cfg.Tables.DeleteEntity(ctx, in.cfg.Table, id, recordRowKey, e.etag)
		switch {
		case err == nil:
			removed = append(removed, e)
			res.Records = append(res.Records, e.rec)
			if err := in.deleteBlob(ctx, e); err != nil {
				sortNewest(res.Records)
				return res, fmt.Errorf("poison: purge %s: %w", id, err)
			}
		case errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound):
			liveOps[e.rec.OpID] = true // changed meanwhile: it stays
		default:
			sortNewest(res.Records)
			return res, fmt.Errorf("poison: purge %s: %w", id, err)
		}
		if o.Progress != nil {
			o.Progress(i+1, len(sel))
		}
	}
	sortNewest(res.Records)
	res.Checkpoints, err = in.clearCheckpoints(ctx, o.CheckpointTable, abandoned(removed, liveOps), false)
	return res, err
}

// abandoned returns the operation ids of the poisoned and failing records
// among sel whose operation has no record in live.
func abandoned(sel []entry, live map[string]bool) []string {
	var ops []string
	for _, e := range sel {
		op := e.rec.OpID
		if op != "" && !live[op] && e.rec.State != StateRequeued && !slices.Contains(ops, op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// clearCheckpoints deletes (or, with dryRun, counts) the checkpoint
// entities of operations ops in table; "" does nothing. Each delete is
// conditional on the ETag read, so a checkpoint saved meanwhile by a run of
// the same operation stays.
func (in *Inspector) clearCheckpoints(ctx context.Context, table string, ops []string, dryRun bool) (int, error) {
	n := 0
	for _, op := range ops {
		if table == "" || storeadapter.ValidateKey("op", op) != nil {
			continue
		}
		q := storeadapter.Query{Filter: storeadapter.PartitionEquals(op)}
		for {
			page, err := in.cfg.Tables.Query(ctx, table, q)
			if errors.Is(err, storeadapter.ErrNotFound) {
				return n, nil
			}
			if err != nil {
				return n, fmt.Errorf("poison: purge: checkpoints of %s: %w", op, err)
			}
			for _, e := range page.Entities {
				if dryRun {
					n++
					continue
				}
				err := in.cfg.Tables.DeleteEntity(ctx, table, e.PartitionKey, e.RowKey, e.ETag)
				switch {
				case err == nil:
					n++
				case !errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrPreconditionFailed):
					return n, fmt.Errorf("poison: purge: checkpoint %s/%s: %w", op, e.RowKey, err)
				}
			}
			if page.Next == "" {
				break
			}
			q.Continuation = page.Next
		}
	}
	return n, nil
}

// removePoisonMessages deletes the poison messages of the records es and
// reports whether it is sure every one is gone. A record whose every poison
// message is noted (see Recorder.Move) has them deleted directly, by id and
// the pop receipt Send returned: no queue message is received. The others
// (records written before poison messages were noted, or with a send left
// unnoted by a crash) and the noted messages whose delete fails for their
// receipt (received since, by a sweep or another consumer of the poison
// queue: 400 or 404, see below) are removed by one sweep of the whole poison queue, matched by
// their original message id. The queue API deletes a message only with a
// current pop receipt, and only Send and a receive hand one out, so the
// sweep stays as that fallback.
func (in *Inspector) removePoisonMessages(ctx context.Context, es []entry) (complete bool, err error) {
	rest := map[string]bool{} // message ids to sweep for
	for _, e := range es {
		if !e.poisonKnown {
			rest[e.rec.MessageID] = true
			continue
		}
		for _, p := range e.poisonMsgs {
			err := in.cfg.Poison.DeleteMessage(ctx, p.ID, p.PopReceipt)
			switch {
			case err == nil, errors.Is(err, storeadapter.ErrQueueNotFound):
				// Gone, or the poison queue is.
			case errors.Is(err, storeadapter.ErrNotFound), errors.Is(err, storeadapter.ErrPopReceiptMismatch):
				// A stale receipt: Azurite answers 400 PopReceiptMismatch,
				// Azure's documentation has Delete Message answer 404 when
				// no message has that receipt, so 404 may mean "received
				// since" as well as "gone". The sweep tells them apart.
				rest[e.rec.MessageID] = true
			default:
				return false, fmt.Errorf("delete poison message %s of %s: %w", p.ID, e.rec.MessageID, err)
			}
		}
	}
	if len(rest) == 0 {
		return true, nil
	}
	return in.sweep(ctx, func(id string) bool { return rest[id] })
}

// sweepPasses is how many times a sweep looks again when the queue holds
// more messages than it saw, before it reports itself incomplete.
const sweepPasses = 3

// sweep makes one pass over the poison queue and deletes the messages whose
// original message id matches; it returns whether it is sure it saw every
// message. It receives batches of 32, hiding them for
// sweepVisibility, until a receive returns nothing (or returns a message the
// pass already holds, which means the pass outlasted the visibility
// timeout). Then it compares the queue's approximate message count with
// the messages it holds: more means messages it never saw (hidden by a
// concurrent pass, sent meanwhile, or a count that lags behind deletes, as
// Azure's may), and it receives again, up to sweepPasses times, before
// reporting itself incomplete. Messages it
// keeps, including those that do not decode, are made visible again at the
// end with their own text. A missing poison queue holds nothing.
func (in *Inspector) sweep(ctx context.Context, match func(messageID string) bool) (complete bool, err error) {
	type held struct{ id, receipt, text string }
	var kept []held
	index := map[string]int{}
	defer func() {
		// Restore even when ctx is done: otherwise the messages stay hidden
		// until their visibility timeout ends, which is harmless but slow.
		rctx := context.WithoutCancel(ctx)
		for _, h := range kept {
			_, uerr := in.cfg.Poison.Update(rctx, h.id, h.receipt, h.text, 0)
			if uerr != nil && !errors.Is(uerr, storeadapter.ErrNotFound) && !errors.Is(uerr, storeadapter.ErrPopReceiptMismatch) {
				err = errors.Join(err, fmt.Errorf("sweep: restore poison message %s: %w", h.id, uerr))
			}
		}
	}()
	missed, passes := 0, 0
	for {
		msgs, err := in.cfg.Poison.Receive(ctx, storeadapter.MaxReceiveCount, sweepVisibility)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("sweep: receive: %w", err)
		}
		wrapped := false
		for _, msg := range msgs {
			if i, ok := index[msg.ID]; ok {
				kept[i].receipt = msg.PopReceipt
				wrapped = true
				continue
			}
			if s, _, _, derr := DecodeMessage(msg.Text); derr == nil && match(s.MessageID) {
				err := in.cfg.Poison.DeleteMessage(ctx, msg.ID, msg.PopReceipt)
				switch {
				case err == nil, errors.Is(err, storeadapter.ErrNotFound):
					// Deleted (or deleted by another pass).
				case errors.Is(err, storeadapter.ErrPopReceiptMismatch):
					missed++ // our hold expired and another pass has it
				default:
					return false, fmt.Errorf("sweep: delete poison message %s: %w", msg.ID, err)
				}
				continue
			}
			index[msg.ID] = len(kept)
			kept = append(kept, held{msg.ID, msg.PopReceipt, msg.Text})
		}
		if len(msgs) > 0 && !wrapped {
			continue
		}
		n, err := in.cfg.Poison.ApproximateCount(ctx)
		if err != nil {
			return false, fmt.Errorf("sweep: count: %w", err)
		}
		if n <= len(kept) {
			return missed == 0, nil
		}
		if passes++; passes == sweepPasses || wrapped {
			return false, nil
		}
	}
}
