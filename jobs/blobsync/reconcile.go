package blobsync

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// CheckpointStep names a reconcile's checkpoint (the RowKey under the
// operation id in Config.CheckpointTable).
const CheckpointStep = "blobsync"

// Position is a reconcile's checkpoint: the phase (1 the table, 2 the
// container) and the continuation token or marker of the page to read
// next ("" at the phase's start).
type Position struct {
	Phase int    `json:"phase"`
	Token string `json:"token,omitempty"`
}

// reconciler is one run of a reconcile.
type reconciler struct {
	w         *Worker
	a         Args
	c         *ReconcileCounts
	blobs     storeadapter.Blobs
	prefix    string
	grace     time.Duration
	onMissing string
	// rewind is where a retry resumes when entities kept changing: the
	// phase 1 page that held the first of them (nil: none did).
	rewind *Position
}

// reconcile is the reconcile mode (see Worker).
func (w *Worker) reconcile(ctx context.Context, opID string, a Args) (Result, error) {
	res := Result{Mode: ModeReconcile}
	grace := time.Duration(w.cfg.Grace)
	if a.Grace != nil {
		grace = time.Duration(*a.Grace)
	}
	if err := w.cfg.checkGrace(grace); err != nil {
		return res, jobs.Permanentf("args.grace: %w", err)
	}
	prefix := w.cfg.Tables.PrefixFor(a.Table, a.Container)
	if a.Prefix != "" {
		prefix, _ = largeentity.CleanPrefix(a.Prefix) // validated with the args
	}
	r := &reconciler{w: w, a: a, c: &res.Reconcile, blobs: w.Store.Container(a.Container), prefix: prefix,
		grace: grace, onMissing: cmp.Or(a.OnMissing, w.cfg.OnMissing)}

	// One cheap call finds a missing container before the table is read:
	// the properties of one name under the listing prefix (a blob there
	// or not, the answer tells whether the container exists).
	_, err := r.blobs.Properties(ctx, strings.TrimSuffix(r.listPrefix(), "/"))
	switch {
	case errors.Is(err, storeadapter.ErrContainerNotFound):
		return res, jobs.Permanentf("args.container: container %s does not exist", a.Container)
	case err != nil && !errors.Is(err, storeadapter.ErrNotFound):
		return res, fmt.Errorf("blobsync: container %s: %w", a.Container, err)
	}

	pos, err := w.loadPosition(ctx, opID)
	if err != nil {
		return res, err
	}
	if pos.Phase <= 1 {
		if err := r.table(ctx, opID, pos.Token); err != nil {
			return res, err
		}
		pos = Position{Phase: 2}
	}
	if err := r.container(ctx, opID, pos.Token); err != nil {
		return res, err
	}
	if r.rewind != nil {
		// Entities kept changing: the job fails (transient) to be retried,
		// and the checkpoint goes back to the phase 1 page that held the
		// first of them instead of being cleared, so the retry re-checks
		// from there rather than from the table's start. That is safe:
		// every step of both phases is idempotent and remade from fresh
		// reads, and phase 2 (run again whole after phase 1) never relied
		// on phase 1 — its deletes rest on the blob's age, on the entity
		// read after the listing and on If-Match the listed ETag. It must
		// be that page and not the last position saved: a retry resuming
		// after the unsettled entities would never check them again.
		if err := w.savePosition(ctx, opID, *r.rewind); err != nil {
			return res, err
		}
		return res, fmt.Errorf("blobsync: reconcile %s: %d entities %w", a.Table, res.Reconcile.Unsettled, errKeptChanging)
	}
	if err := w.Checkpoints.Clear(ctx, opID, CheckpointStep); err != nil {
		return res, fmt.Errorf("blobsync: %w", err)
	}
	return res, nil
}

// loadPosition returns a reconcile's checkpoint (phase 1 from the start
// when there is none).
func (w *Worker) loadPosition(ctx context.Context, opID string) (Position, error) {
	tok, err := w.Checkpoints.Load(ctx, opID, CheckpointStep)
	if err != nil {
		return Position{}, fmt.Errorf("blobsync: %w", err)
	}
	pos := Position{Phase: 1}
	if tok != "" {
		if err := json.Unmarshal([]byte(tok), &pos); err != nil || pos.Phase < 1 || pos.Phase > 2 {
			return Position{Phase: 1}, nil // not ours (an older layout): start over, every step is idempotent
		}
	}
	return pos, nil
}

func (w *Worker) savePosition(ctx context.Context, opID string, pos Position) error {
	b, _ := json.Marshal(pos)
	if err := w.Checkpoints.Save(ctx, opID, CheckpointStep, string(b)); err != nil {
		return fmt.Errorf("blobsync: %w", err)
	}
	return nil
}

// serviceNow saves pos and returns the time the storage service gave the
// save (the checkpoint's Timestamp): the service's clock, which blobs'
// Last-Modified times are read by. It is a little earlier than the calls
// after it, which only makes blobs look younger.
func (w *Worker) serviceNow(ctx context.Context, opID string, pos Position) (time.Time, error) {
	if err := w.savePosition(ctx, opID, pos); err != nil {
		return time.Time{}, err
	}
	e, err := w.Store.Tables().GetEntity(ctx, w.Checkpoints.Table, opID, CheckpointStep)
	if err != nil {
		return time.Time{}, fmt.Errorf("blobsync: read the checkpoint's time: %w", err)
	}
	return e.Timestamp, nil
}

// problem records a finding, up to MaxProblems.
func (c *ReconcileCounts) problem(format string, args ...any) {
	if len(c.Problems) < MaxProblems {
		c.Problems = append(c.Problems, fmt.Sprintf(format, args...))
	}
}

// table is phase 1: every reference of the table's (or partition's)
// entities into the container.
//
// A table that does not exist is not an error: phase 1 has nothing to
// check, and the reconcile goes on to phase 2, which collects the table's
// managed blobs older than grace (its entity reads answer "gone" for all
// of them). That is safe by the argument phase 2 rests on anyway (see
// Worker): a blob is deleted only when older than grace and If-Match the
// ETag it was listed with, and an offload into the table (created again
// meanwhile) puts its blob, renewing that ETag and LastModified, before
// it writes the entity that names it; an entity that does not exist names
// nothing. What it collects is what a reconcile collects when the
// table's entities are deleted one by one; copies of those entities kept
// elsewhere own blobs of their own (the archive kind carries them to the
// copy's key: largeentity.Carry).
func (r *reconciler) table(ctx context.Context, opID, token string) error {
	t := r.w.Store.Tables()
	q := storeadapter.Query{Top: r.w.cfg.PageSize, Continuation: token, Filter: storeadapter.ApplicationRows(storeadapter.Filter{})}
	if r.a.PK != "" {
		q.Filter = storeadapter.ApplicationRows(storeadapter.PartitionEquals(r.a.PK))
	}
	for {
		pageToken := q.Continuation
		page, err := t.Query(ctx, r.a.Table, q)
		if errors.Is(err, storeadapter.ErrTableNotFound) {
			r.c.NoTable = true
			return r.w.savePosition(ctx, opID, Position{Phase: 2})
		}
		if err != nil {
			return fmt.Errorf("blobsync: query %s: %w", r.a.Table, err)
		}
		unsettled := r.c.Unsettled
		for _, e := range page.Entities {
			if err := r.entity(ctx, e); err != nil {
				return err
			}
		}
		if r.c.Unsettled > unsettled && r.rewind == nil {
			r.rewind = &Position{Phase: 1, Token: pageToken}
		}
		if page.Next == "" {
			return r.w.savePosition(ctx, opID, Position{Phase: 2})
		}
		q.Continuation = page.Next
		if err := r.w.savePosition(ctx, opID, Position{Phase: 1, Token: page.Next}); err != nil {
			return err
		}
	}
}

// entity checks one entity's references and writes its repairs in one
// replace If-Match; a lost write reads it again and checks again.
func (r *reconciler) entity(ctx context.Context, e storeadapter.Entity) error {
	for round := 1; ; round++ {
		var found ReconcileCounts
		next, changed, err := r.check(ctx, e, &found)
		if err != nil {
			return err
		}
		if changed {
			if err := storeadapter.ValidateEntity(next); err != nil {
				// A refreshed reference can be longer than the one it
				// replaces: near 1 MiB the replace would be refused.
				found.Cleared, found.Refreshed = 0, 0
				r.c.Entities++
				r.c.Refused++
				r.c.add(found)
				r.c.problem("%s/%s: repair not written: %v", e.PartitionKey, e.RowKey, err)
				return nil
			}
			lost, err := r.w.replace(ctx, r.a.Table, next, e.ETag)
			if err != nil {
				return err
			}
			if lost {
				if round == r.w.cfg.MaxConflicts {
					r.c.Entities++
					r.c.Unsettled++
					r.c.problem("%s/%s: %v", e.PartitionKey, e.RowKey, errKeptChanging)
					return nil
				}
				pk, rk := e.PartitionKey, e.RowKey
				e, err = r.w.Store.Tables().GetEntity(ctx, r.a.Table, pk, rk)
				if errors.Is(err, storeadapter.ErrNotFound) {
					return nil // deleted meanwhile: nothing references anything
				}
				if err != nil {
					return fmt.Errorf("blobsync: read %s %s/%s: %w", r.a.Table, pk, rk, err)
				}
				continue
			}
		}
		r.c.Entities++
		r.c.add(found)
		return nil
	}
}

// add adds the counts and problems of one entity's check.
func (c *ReconcileCounts) add(f ReconcileCounts) {
	c.References += f.References
	c.Foreign += f.Foreign
	c.Invalid += f.Invalid
	c.Missing += f.Missing
	c.Cleared += f.Cleared
	c.Refreshed += f.Refreshed
	c.Corrupt += f.Corrupt
	for _, p := range f.Problems {
		c.problem("%s", p)
	}
}

// check compares an entity's references into the container with their
// blobs and returns the entity as it should be, counting into found.
func (r *reconciler) check(ctx context.Context, e storeadapter.Entity, found *ReconcileCounts) (next storeadapter.Entity, changed bool, err error) {
	next = e.Clone()
	props := largeentity.Refs(e)
	slices.Sort(props)
	for _, p := range props {
		where := fmt.Sprintf("%s/%s %s", e.PartitionKey, e.RowKey, p)
		ref, _, err := largeentity.RefOf(e, p)
		if err != nil {
			found.Invalid++
			found.problem("%s: %v", where, err)
			continue
		}
		if ref.Container != r.a.Container {
			found.Foreign++
			continue
		}
		found.References++
		props, err := r.blobs.Properties(ctx, ref.Name)
		switch {
		case errors.Is(err, storeadapter.ErrContainerNotFound):
			return next, false, jobs.Permanentf("args.container: container %s does not exist", r.a.Container)
		case errors.Is(err, storeadapter.ErrNotFound):
			found.Missing++
			if r.onMissing == OnMissingClear {
				delete(next.Properties, largeentity.RefPrefix+p)
				found.Cleared++
				changed = true
			} else {
				found.problem("%s: blob %s is missing", where, ref.Name)
			}
			continue
		case err != nil:
			return next, false, fmt.Errorf("blobsync: properties of %s/%s: %w", r.a.Container, ref.Name, err)
		case largeentity.SameETag(props.ETag, ref.ETag):
			continue
		}
		h, err := largeentity.HashBlob(ctx, r.blobs, ref.Name, nil, -1)
		switch {
		case errors.Is(err, storeadapter.ErrNotFound):
			continue // deleted since its properties were read: the next reconcile sees it missing
		case err != nil:
			return next, false, fmt.Errorf("blobsync: read %s/%s: %w", r.a.Container, ref.Name, err)
		}
		if ref.Mode == ModeOffload && h.Sum != ref.SHA256 {
			found.Corrupt++
			found.problem("%s: blob %s holds content of SHA-256 %s, not the offloaded %s", where, ref.Name, h.Sum, ref.SHA256)
			continue
		}
		ref.ETag, ref.SHA256, ref.Length = h.Props.ETag, h.Sum, h.Length
		if ref.Mode == ModeAttach {
			ref.ContentType = h.Props.ContentType
		}
		next.Properties[largeentity.RefPrefix+p] = ref.String()
		found.Refreshed++
		changed = true
	}
	return next, changed, nil
}

// container is phase 2: the managed blobs of the table (or partition)
// older than the grace period that their entity does not name. A blob's
// age is the storage service's time less its Last-Modified, both by the
// service's clock: the time is the Timestamp of this phase's checkpoint,
// written at its start (so no clock of the worker's, which may run ahead
// of the service's, ever makes a young blob look old).
func (r *reconciler) container(ctx context.Context, opID, marker string) error {
	listPrefix := r.listPrefix()
	now, err := r.w.serviceNow(ctx, opID, Position{Phase: 2, Token: marker})
	if err != nil {
		return err
	}
	for {
		page, err := r.blobs.List(ctx, listPrefix, marker)
		if errors.Is(err, storeadapter.ErrContainerNotFound) {
			return jobs.Permanentf("args.container: container %s does not exist", r.a.Container)
		}
		if err != nil {
			return fmt.Errorf("blobsync: list %s/%s: %w", r.a.Container, listPrefix, err)
		}
		// The entities are read after the page was listed, never from an
		// earlier page: that order is what makes a blob old enough to list
		// as collectable safe to delete (see Worker).
		cache := entityCache{r: r}
		for _, b := range page.Blobs {
			if err := r.blob(ctx, b, now, &cache); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		marker = page.Next
		if err := r.w.savePosition(ctx, opID, Position{Phase: 2, Token: marker}); err != nil {
			return err
		}
	}
}

// listPrefix is where phase 2 lists: <prefix>/<table>/[<pk>/].
func (r *reconciler) listPrefix() string {
	p := storeadapter.BlobNameSegment(r.a.Table) + "/"
	if r.a.PK != "" {
		p += storeadapter.BlobNameSegment(r.a.PK) + "/"
	}
	if r.prefix != "" {
		p = r.prefix + "/" + p
	}
	return p
}

// blob collects one listed blob if it is an old orphan.
func (r *reconciler) blob(ctx context.Context, b storeadapter.BlobProps, now time.Time, cache *entityCache) error {
	r.c.Blobs++
	m, ok := largeentity.ParseBlobName(r.prefix, b.Name)
	if !ok || m.Table != r.a.Table {
		r.c.Unparsed++
		return nil
	}
	if b.LastModified.IsZero() || now.Sub(b.LastModified) < r.grace {
		// A listing without a Last-Modified tells no age: young, kept.
		r.c.Young++
		return nil
	}
	e, exists, err := cache.get(ctx, m.PK, m.RK)
	if err != nil {
		return err
	}
	if exists && names(e, m.Property, r.a.Container, b.Name) {
		r.c.Kept++
		return nil
	}
	err = r.blobs.Delete(ctx, b.Name, b.ETag)
	switch {
	case err == nil:
		r.c.Orphans++
	case errors.Is(err, storeadapter.ErrContainerNotFound):
		return jobs.Permanentf("args.container: container %s does not exist", r.a.Container)
	case errors.Is(err, storeadapter.ErrNotFound), errors.Is(err, storeadapter.ErrPreconditionFailed):
		r.c.Raced++ // gone, or written again since it was listed: not an orphan to delete now
	default:
		return fmt.Errorf("blobsync: delete %s/%s: %w", r.a.Container, b.Name, err)
	}
	return nil
}

// names reports whether entity e needs blob name of container: its
// reference for property p names it or does not parse (kept to be safe),
// or any other of its references names it (an attach made before attach
// refused managed names).
func names(e storeadapter.Entity, p, container, name string) bool {
	if ref, has, err := largeentity.RefOf(e, p); has && (err != nil || ref.Container == container && ref.Name == name) {
		return true
	}
	for _, q := range largeentity.Refs(e) {
		if ref, has, err := largeentity.RefOf(e, q); has && err == nil && ref.Container == container && ref.Name == name {
			return true
		}
	}
	return false
}

// entityCache holds the last entity phase 2 read: the blobs of one entity
// are adjacent in a listing.
type entityCache struct {
	r      *reconciler
	pk, rk string
	valid  bool
	e      storeadapter.Entity
	exists bool
}

func (c *entityCache) get(ctx context.Context, pk, rk string) (storeadapter.Entity, bool, error) {
	if c.valid && c.pk == pk && c.rk == rk {
		return c.e, c.exists, nil
	}
	e, err := c.r.w.Store.Tables().GetEntity(ctx, c.r.a.Table, pk, rk)
	switch {
	case errors.Is(err, storeadapter.ErrNotFound): // the entity, or its whole table, is gone (see reconciler.table)
		c.pk, c.rk, c.valid, c.e, c.exists = pk, rk, true, storeadapter.Entity{}, false
	case err != nil:
		return e, false, fmt.Errorf("blobsync: read %s %s/%s: %w", c.r.a.Table, pk, rk, err)
	default:
		c.pk, c.rk, c.valid, c.e, c.exists = pk, rk, true, e, true
	}
	return c.e, c.exists, nil
}
