package blobsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// Worker keeps entities and their blobs consistent: the large entities
// pattern, done with the eventually consistent transactions pattern. It is
// the handler of the "blobsync" kind. Three rules carry every mode: a blob
// is written before the entity that references it (so a reference never
// names a blob that was not there when it was written); the entity is only
// written If-Match the ETag it was read with, as one replace that removes
// P and sets TkBlob_P together (so an application's update between the
// read and the write is never overwritten: the write fails with 412 and
// the round starts again from a fresh read); and a blob is only deleted
// If-Match the ETag it was seen with, after the entity stopped naming it
// (so a blob someone wrote again since is never deleted).
//
// # offload
//
// For property P of entity (table, pk, rk):
//
//  0. Before any call: the longest managed name the job could write
//     (with the prefix in force for the container, see Config.prefixFor)
//     must fit Azure's blob-name rules, else permanent naming args.pk or
//     args.rk.
//  1. Read the entity: its properties and ETag e. Missing (the
//     application deleted it after sending the job; its table exists):
//     done, nothing offloaded, as an archive takes a moved source; a blob
//     an earlier round put for it is an orphan a reconcile collects.
//     P absent and TkBlob_P present: already done. P absent with no
//     reference: permanent when args named P ("property does not exist"),
//     else nothing to offload. A property over offloadOver whose name is
//     too long for TkBlob_<P> is skipped and reported. The entity as it
//     will be written is checked (storeadapter.ValidateEntity) before
//     anything is put: a reference can be larger than a short value, so
//     near 1 MiB a property named by args.property is a permanent error
//     naming it, and declared properties whose reference is larger than
//     their value are skipped and reported.
//  2. Put P's bytes, unconditionally, to the managed name
//     <prefix>/<table>/<pk>/<rk>/<P>/<sha256 of the bytes>. The name is
//     content-addressed, so rewriting it writes the same bytes: idempotent.
//     The put also renews the blob's ETag and LastModified, which is what
//     keeps a reconcile from collecting it (see below).
//  3. Replace the entity If-Match e with P removed and TkBlob_P set to
//     the Ref of the blob (mode offload, the put's ETag). 412 or 404
//     (changed or deleted since step 1): start again at 1, at most
//     Config.MaxConflicts rounds, then fail (transient) to be retried.
//  4. When the entity held a reference to another blob before (P had
//     been offloaded with other content and written back inline by the
//     application), delete that blob If-Match the ETag its reference
//     records — only if it is this property's own managed blob: mode
//     offload, and its name, parsed with the prefix in force for its
//     container, holds this entity's table, pk, rk and P. Any other
//     previous reference is left alone and counted as kept: an attached
//     blob is the application's, and a reference the application copied
//     from another entity (a copy to a new key, an archived entity moved
//     back) names that entity's blob, which it may still reference. 404 or
//     412: leave it (gone, or written again by another offload since: not
//     ours to delete).
//
// Crash positions: before 2 nothing changed. After 2 the blob exists and
// nothing references it: a redelivery reads the same P, puts the same
// name again and goes on; without a redelivery it is an orphan that
// reconcile deletes once older than the grace period. After 3 the entity
// holds the reference: a redelivery finds P absent and TkBlob_P present,
// done. A crash before 4 leaves the previous blob unreferenced: reconcile
// collects it (the redelivery cannot know its name any more).
//
// Interleavings. The application updating the entity between 1 and 3
// makes 3 fail; the next round reads its update and offloads what it
// wrote (or finds P gone and the reference in place), so its update is
// kept whole: every property it wrote survives, and P is offloaded from
// its value. Two offloads of one entity: both may put blobs; the first
// replace wins, the second fails with 412, re-reads, and finds the
// reference: done. Its blob is either the winner's name (same content:
// one blob, its ETag renewed — the reference's ETag is then stale, which
// Get ignores because it checks the SHA-256, and reconcile refreshes) or
// an orphan reconcile collects. An offload's step 4 against an offload
// that wrote the previous content again (the application wrote v1, v2,
// v1): that put renewed the blob's ETag, so the If-Match delete fails and
// the blob the newer reference names stays.
//
// # attach
//
//  0. Before any call: args.blob must not be a name of the managed
//     layout in args.container (under no prefix or the prefix of any table
//     declared with that container): such a blob belongs to the entity
//     its name holds and is deleted when that entity's property moves on,
//     so linking it elsewhere would lose it. Permanent, naming args.blob.
//  1. Open the blob args.blob and stream it: its SHA-256, length, ETag a
//     and content type. Missing container or blob: permanent, naming
//     args.container or args.blob.
//  2. Read the entity (ETag e). Missing: done, nothing attached (as in
//     offload; the blob is the application's and stays). P inline and
//     neither String nor Binary:
//     permanent, naming args.property (its value would be lost). If
//     TkBlob_P already names this blob with ETag a and that SHA-256 (and P
//     is absent): done. The entity as it will be written is checked
//     (storeadapter.ValidateEntity): refused is permanent naming
//     args.property.
//  3. Replace the entity If-Match e: P removed, TkBlob_P the Ref (mode
//     attach). 412 or 404: start again at 1 (bounded as above).
//  4. Read the blob's properties. Its ETag is still a: done; a previous
//     reference to this property's own managed blob is deleted If-Match as
//     in offload's step 4 (attached blobs are the application's: never
//     deleted). The blob changed since 1: start again at 1.
//
// Crash positions: before 3 nothing changed; after 3 a redelivery finds
// the reference (done at 2, or refreshed if the blob changed since);
// after 4 as for offload. Interleavings: step 4 makes the reference of
// every attach that ends match the blob as it was after its write, so an
// attach that hashed an older version of the blob can never have the last
// word over one that hashed a newer version: if its write comes last, its
// own step 4 sees the newer ETag and it starts again from the newer
// content. An application update of the entity makes 3 fail and is kept,
// as in offload. The application overwriting the blob later leaves the
// reference stale until the next attach (the application enqueues one) or
// reconcile refreshes it; Get meanwhile reports the SHA-256 mismatch.
//
// # reconcile
//
// First one call (the properties of a name under the listing prefix)
// finds a missing container, permanent naming args.container, before the
// table is read. The prefix is Config.prefixFor(table, container) unless
// args.prefix is given.
//
// Phase 1 pages through the table (or partition pk), Config.PageSize
// entities a page; a table that does not exist has no entities and the
// reconcile goes on to phase 2 (see reconciler.table for why that is
// safe). For each reference into args.container it reads the
// blob's properties: missing → with onMissing "clear" the reference is
// removed (replace If-Match the entity's ETag), with "report" it is
// counted and named in the result; another ETag → the blob is streamed and
// hashed: a reference of mode attach gets the blob's new ETag, SHA-256,
// length and content type; one of mode offload gets the new ETag when the
// SHA-256 still matches its content-addressed name, and is reported as
// corrupt when it does not (rewriting the hash would make Get accept
// content that is not the property's). An entity's changes go in one
// replace If-Match its ETag, checked first with
// storeadapter.ValidateEntity (a repair that would be refused is reported,
// not written); 412 re-reads it and checks it again (bounded; an entity
// that keeps changing is reported and the job fails transient at the end,
// after the other entities, its checkpoint set back to that entity's
// page).
//
// Phase 2 pages through the container's blobs under
// <prefix>/<table>/[<pk>/]. A blob whose name does not parse as the
// managed layout is left alone and counted. A blob whose LastModified is
// within the grace period, or unknown (zero), is kept (young). Otherwise
// its entity is read (the last one read is cached: one entity's blobs are
// adjacent) and the blob is deleted If-Match the ETag it was listed with
// when the entity is gone or none of its references (TkBlob_P first)
// names the blob; 404 or 412 leave it.
//
// After each page the phase and the page's continuation token (or
// marker) are checkpointed under the operation id, so a redelivered
// reconcile resumes; re-checking a page is harmless, since every step
// is idempotent. The checkpoint is cleared at the end (unless entities
// kept changing, see above).
//
// Why reconcile never deletes a blob an entity needs: an entity references
// a blob only after the blob was put (offload step 2 before 3), and the put
// renews its LastModified and ETag. A blob old enough to collect was put
// more than grace ago; an offload that put it runs at most maxRunTime
// (jobs are cancelled then, and grace ≥ maxRunTime is enforced), so its
// entity write, if any, happened before the listing, and the entity read
// after the listing shows it: the blob is kept. An offload that puts the
// same name again after the listing changes its ETag, so the delete
// (If-Match the listed ETag) fails and the blob stays. The clearing of a
// missing blob's reference is If-Match the entity's ETag, so a reference
// an offload wrote since (to a blob that exists) is never cleared.
//
// Two reconciles (or a reconcile and offloads/attaches) interleave safely
// for the same reasons: each entity write is If-Match, each delete
// If-Match, and every decision is remade from a fresh read after a lost
// condition.
type Worker struct {
	store       storeadapter.Store
	checkpoints idempotent.Checkpoints
	cfg         Config
}

// New returns the blobsync worker on store, configured by cfg (its
// defaults filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := d.Store
	return &Worker{store: store, checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: cfg.CheckpointTable},
		cfg: cfg}, nil
}

// MaxRunTime is the longest one blobsync job may run.
func (w *Worker) MaxRunTime() time.Duration { return time.Duration(w.cfg.MaxRunTime) }

// Work runs one job and records its Result as the job's result text.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	res, err := w.Run(ctx, job.ID, job.Args)
	jobs.SetResult(ctx, res.String())
	return err
}

// Run carries out one blobsync job of operation opID (the reconcile's
// checkpoint key) and returns what it did, also when it fails part way.
// Args must be valid (jobs.ParseArgs validates them).
func (w *Worker) Run(ctx context.Context, opID string, a Args) (Result, error) {
	if err := a.Validate(); err != nil {
		return Result{Mode: a.Mode}, jobs.Permanent(err)
	}
	switch a.Mode {
	case ModeOffload:
		return w.offload(ctx, a)
	case ModeAttach:
		return w.attach(ctx, a)
	default:
		return w.reconcile(ctx, opID, a)
	}
}

// Result is what a blobsync job did.
type Result struct {
	Mode string
	// Properties are the properties this run offloaded or attached
	// (offload, attach), sorted.
	Properties []string
	// Already is set when the entity held the references already.
	Already bool
	// Rounds counts the entity writes lost to other writers and redone.
	Rounds int
	// PreviousDeleted counts previous offloaded blobs deleted after the
	// entity stopped naming them; PreviousKept previous references whose
	// blobs were left: gone or written again since (reconcile collects
	// those), or not this property's own managed blob (an attached blob, a
	// reference copied from another entity).
	PreviousDeleted, PreviousKept int
	// Skipped names the properties an offload without args.property
	// left inline, each with why: a name too long for a TkBlob_ reference,
	// or a reference larger than its value in an entity near 1 MiB.
	Skipped []string
	// Gone is set when the entity does not exist (offload, attach): the
	// application deleted it after sending the job, so there is nothing to
	// do, as an archive takes a source already moved. A blob an earlier
	// round of an offload put for it is an orphan that a reconcile collects
	// after its grace period.
	Gone bool
	// Reconcile holds the counts of a reconcile.
	Reconcile ReconcileCounts
}

// ReconcileCounts are what one run of a reconcile found and repaired
// (a resumed reconcile counts from where it resumed).
type ReconcileCounts struct {
	// Entities read in phase 1; References checked (into the container);
	// Foreign references to other containers (not checked); Invalid
	// TkBlob_ properties that do not parse (reported).
	Entities, References, Foreign, Invalid int
	// Missing references whose blob is gone; Cleared of those removed
	// (onMissing "clear"); Refreshed references given the blob's current
	// ETag (and, for attach, hash, length and content type); Corrupt
	// offloaded blobs whose content no longer matches their hash
	// (reported, not changed); Unsettled entities that kept changing;
	// Refused entities whose repair would break Azure's entity rules (a
	// refreshed reference pushing it past 1 MiB: reported, not written).
	Missing, Cleared, Refreshed, Corrupt, Unsettled, Refused int
	// NoTable is set when the table does not exist: phase 1 had nothing
	// to check, and phase 2 collected the table's old managed blobs.
	NoTable bool
	// Blobs listed in phase 2; Orphans deleted; Young blobs kept for
	// the grace period; Kept blobs their entity references; Unparsed
	// names not of the managed layout (left alone); Raced deletes that
	// found the blob gone or written again (left).
	Blobs, Orphans, Young, Kept, Unparsed, Raced int
	// Problems names up to MaxProblems findings (missing, corrupt,
	// invalid, unsettled), "pk/rk property: what".
	Problems []string
}

// MaxProblems bounds ReconcileCounts.Problems.
const MaxProblems = 20

// String summarises the result in one line (the job's result text).
func (r Result) String() string {
	switch r.Mode {
	case ModeOffload, ModeAttach:
		verb := map[string]string{ModeOffload: "offloaded", ModeAttach: "attached"}[r.Mode]
		var s string
		switch {
		case r.Gone:
			s = "nothing " + verb + ": the entity does not exist (deleted since the job was sent); a reconcile collects any blob left for it"
		case len(r.Properties) == 0 && len(r.Skipped) > 0:
			s = "nothing " + verb
		case r.Already || len(r.Properties) == 0:
			s = "already done"
		default:
			s = verb + " " + strings.Join(r.Properties, ", ")
		}
		if len(r.Skipped) > 0 {
			s += "; skipped " + strings.Join(r.Skipped, ", ")
		}
		if r.PreviousDeleted > 0 {
			s += fmt.Sprintf("; deleted %d previous blob(s)", r.PreviousDeleted)
		}
		if r.PreviousKept > 0 {
			s += fmt.Sprintf("; left %d previous blob(s) (gone, rewritten, or not this property's own)", r.PreviousKept)
		}
		if r.Rounds > 0 {
			s += fmt.Sprintf("; %d round(s) lost to concurrent writers", r.Rounds)
		}
		return s
	case ModeReconcile:
		c := r.Reconcile
		s := fmt.Sprintf("checked %d references in %d entities: %d missing (%d cleared), %d refreshed, %d corrupt, %d invalid; "+
			"%d blobs: %d orphans deleted, %d young kept, %d referenced, %d not managed",
			c.References, c.Entities, c.Missing, c.Cleared, c.Refreshed, c.Corrupt, c.Invalid,
			c.Blobs, c.Orphans, c.Young, c.Kept, c.Unparsed)
		if c.NoTable {
			s = "table does not exist; " + s
		}
		if c.Unsettled > 0 {
			s += fmt.Sprintf("; %d entities kept changing", c.Unsettled)
		}
		if c.Refused > 0 {
			s += fmt.Sprintf("; %d repairs not written (entity too large)", c.Refused)
		}
		if len(c.Problems) > 0 {
			s += "; " + strings.Join(c.Problems, "; ")
		}
		return s
	}
	return ""
}

// read reads the entity a job is about; a missing table or entity is
// permanent.
func (w *Worker) read(ctx context.Context, a Args) (storeadapter.Entity, error) {
	e, err := w.store.Tables().GetEntity(ctx, a.Table, a.PK, a.RK)
	switch {
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return e, jobs.Permanentf("args.table: table %s does not exist", a.Table)
	case errors.Is(err, storeadapter.ErrNotFound):
		return e, errEntityGone
	case err != nil:
		return e, fmt.Errorf("blobsync: read %s %s/%s: %w", a.Table, a.PK, a.RK, err)
	}
	return e, nil
}

// errEntityGone is read's answer for an entity that does not exist (its
// table does): the application deleted it after sending the job, which
// offload and attach then take as done (see Result.Gone).
var errEntityGone = errors.New("the entity does not exist")

// replace writes next over the entity If-Match etag. lost reports a
// write that lost to another writer (412, or the entity deleted since).
func (w *Worker) replace(ctx context.Context, table string, next storeadapter.Entity, etag string) (lost bool, err error) {
	_, err = w.store.Tables().UpdateEntity(ctx, table, next, storeadapter.Replace, etag)
	if idempotent.Lost(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("blobsync: replace %s %s/%s: %w", table, next.PartitionKey, next.RowKey, err)
	}
	return false, nil
}

// missingContainer turns a missing container into a permanent error
// naming the field that chose it.
func missingContainer(err error, fieldName, container string) error {
	if errors.Is(err, storeadapter.ErrContainerNotFound) {
		return jobs.Permanentf("%s: container %s does not exist", fieldName, container)
	}
	return err
}

// offload is the offload mode (see Worker).
func (w *Worker) offload(ctx context.Context, a Args) (Result, error) {
	res := Result{Mode: ModeOffload}
	tc := w.cfg.Tables.Table(a.Table)
	container, containerField := a.Container, "args.container"
	if container == "" && tc != nil {
		container, containerField = tc.Container, fmt.Sprintf("blobsync.tables[%s].container", tc.Table)
	}
	if container == "" {
		return res, jobs.Permanentf("args.container: is required: table %s has no blobsync.tables entry", a.Table)
	}
	prefix := w.cfg.Tables.PrefixFor(a.Table, container)
	if err := managedNameFits(prefix, a.Table, a.PK, a.RK, a.Property); err != nil {
		return res, jobs.Permanent(err)
	}
	blobs := w.store.Container(container)
	for round := 0; round < w.cfg.MaxConflicts; round++ {
		e, err := w.read(ctx, a)
		if errors.Is(err, errEntityGone) {
			res.Gone = true
			return res, nil
		}
		if err != nil {
			return res, err
		}
		props, skipped, err := pick(e, a, tc)
		if err != nil {
			return res, err
		}
		res.Skipped = skipped
		if len(props) == 0 {
			res.Already = len(skipped) == 0
			return res, nil
		}
		// The entity as it will be written is checked before any blob is
		// put, with a stand-in for each reference's ETag (the put gives
		// the real one), so a refused replace leaves no blob behind.
		next := e.Clone()
		refs := map[string]largeentity.Ref{}
		data := map[string][]byte{}
		for _, p := range props {
			d, typ := valueBytes(e.Properties[p])
			sum := largeentity.Digest(d)
			ctype := largeentity.ContentTypeBinary
			if typ == storeadapter.EdmString {
				ctype = largeentity.ContentTypeString
			}
			data[p] = d
			refs[p] = largeentity.Ref{V: largeentity.RefVersion, Container: container, Name: largeentity.BlobName(prefix, a.Table, a.PK, a.RK, p, sum), Length: int64(len(d)),
				ContentType: ctype, SHA256: sum, ETag: etagStandIn, Type: typ.String(), Mode: ModeOffload}
			setRef(next, p, refs[p])
		}
		props, err = fitOffload(a, tc, e, next, props, &res)
		if err != nil {
			return res, err
		}
		if len(props) == 0 {
			return res, nil
		}
		var previous []largeentity.Ref
		kept := 0
		for _, p := range props {
			ref := refs[p]
			etag, err := blobs.Put(ctx, ref.Name, data[p], storeadapter.PutOptions{ContentType: ref.ContentType})
			if err != nil {
				return res, missingContainer(fmt.Errorf("blobsync: put %s/%s: %w", container, ref.Name, err), containerField, container)
			}
			ref.ETag = etag
			setRef(next, p, ref)
			if old, ok, _ := largeentity.RefOf(e, p); ok {
				w.sortPrevious(a.Table, a.PK, a.RK, p, old, ref, &previous, &kept)
			}
		}
		if err := storeadapter.ValidateEntity(next); err != nil {
			return res, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid: %w", offloadField(a, tc), strings.Join(props, ", "), a.PK, a.RK, err)
		}
		lost, err := w.replace(ctx, a.Table, next, e.ETag)
		if err != nil {
			return res, err
		}
		if lost {
			res.Rounds++
			continue
		}
		res.Properties = props
		res.PreviousKept += kept
		return res, w.deletePrevious(ctx, &res, previous)
	}
	return res, fmt.Errorf("blobsync: %s %s/%s %w", a.Table, a.PK, a.RK, errKeptChanging)
}

// etagStandIn stands for a reference's ETag while the entity is checked
// before the put: longer than Azure's (about 20 characters, quoted).
var etagStandIn = `"` + strings.Repeat("0", 62) + `"`

// setRef replaces property p of e by its reference.
func setRef(e storeadapter.Entity, p string, ref largeentity.Ref) {
	delete(e.Properties, p)
	e.Properties[largeentity.RefPrefix+p] = ref.String()
}

// offloadField names what chose an offload's properties: args.property,
// or the table's config entry.
func offloadField(a Args, tc *largeentity.TableConfig) string {
	if a.Property != "" || tc == nil {
		return "args.property"
	}
	return fmt.Sprintf("blobsync.tables[%s].properties", tc.Table)
}

// fitOffload checks next, the entity an offload of props would write
// (e with each of props replaced by its reference), against Azure's
// entity rules before anything is written. A reference can be larger than
// the value it replaces (a short declared property), so near 1 MiB the
// replace would be refused: a property named by args.property is then a
// permanent error naming it; of properties chosen by the config, those
// whose reference is larger than their value are put back in next,
// skipped and reported in res.Skipped, and the rest (which only shrink the
// entity) go on. It returns the properties to offload.
func fitOffload(a Args, tc *largeentity.TableConfig, e, next storeadapter.Entity, props []string, res *Result) ([]string, error) {
	err := storeadapter.ValidateEntity(next)
	if err == nil {
		return props, nil
	}
	if !errors.Is(err, storeadapter.ErrTooLarge) || a.Property != "" {
		return nil, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid (a reference can be larger than a short value): %w",
			offloadField(a, tc), strings.Join(props, ", "), a.PK, a.RK, err)
	}
	var keep []string
	for _, p := range props {
		refSize, valSize := propertySize(largeentity.RefPrefix+p, next.Properties[largeentity.RefPrefix+p]), propertySize(p, e.Properties[p])
		if refSize > valSize {
			delete(next.Properties, largeentity.RefPrefix+p)
			next.Properties[p] = e.Properties[p]
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (its reference, %d bytes, is larger than its value, %d bytes, and the entity would pass %d bytes)",
				p, refSize, valSize, storeadapter.MaxEntityBytes))
			continue
		}
		keep = append(keep, p)
	}
	if err := storeadapter.ValidateEntity(next); err != nil {
		return nil, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid: %w", offloadField(a, tc), strings.Join(keep, ", "), a.PK, a.RK, err)
	}
	return keep, nil
}

// propertySize is the size one property adds to an entity as Azure counts
// it against the 1 MiB limit.
func propertySize(name string, v any) int {
	return storeadapter.EntitySize(storeadapter.Entity{Properties: map[string]any{name: v}}) - storeadapter.EntitySize(storeadapter.Entity{})
}

// sortPrevious files the reference old, which an entity held for p before
// this job replaced it by cur, as a blob to delete after the replace (into
// previous) or one to leave (kept). Only a blob blobsync owns for this
// very property is deleted: a reference of mode offload whose name, parsed
// with the prefix in force for its container, is the managed name of
// (table, pk, rk, p), and which is not the blob cur names. Any other
// previous reference is left alone: an attached blob is the
// application's, and a reference copied from another entity (the
// application copied the entity to a new key, or the archive moved it)
// names that entity's blob, which the other entity may still reference.
func (w *Worker) sortPrevious(table, pk, rk, p string, old, cur largeentity.Ref, previous *[]largeentity.Ref, kept *int) {
	if old.Container == cur.Container && old.Name == cur.Name {
		return // the same blob: nothing was replaced
	}
	m, ok := largeentity.ParseBlobName(w.cfg.Tables.PrefixFor(table, old.Container), old.Name)
	if old.Mode == ModeOffload && ok && strings.EqualFold(m.Table, table) && m.PK == pk && m.RK == rk && m.Property == p {
		*previous = append(*previous, old)
		return
	}
	*kept++
}

// pick returns the properties an offload moves now, sorted: args.property,
// or the table's declared properties and those over its offloadOver. A
// property over offloadOver whose name is too long for a TkBlob_
// reference is skipped and reported (skipped), not an error: the others
// still move.
func pick(e storeadapter.Entity, a Args, tc *largeentity.TableConfig) (props, skipped []string, err error) {
	if a.Property != "" {
		v, ok := e.Properties[a.Property]
		if !ok {
			if _, has := e.Properties[largeentity.RefPrefix+a.Property]; has {
				return nil, nil, nil // offloaded already
			}
			return nil, nil, jobs.Permanentf("args.property: property %s does not exist in %s %s/%s", a.Property, a.Table, a.PK, a.RK)
		}
		if _, ok := movable(v); !ok {
			return nil, nil, jobs.Permanentf("args.property: %s is %s: only Edm.String and Edm.Binary properties can be offloaded", a.Property, largeentity.TypeName(v))
		}
		return []string{a.Property}, nil, nil
	}
	if tc == nil {
		return nil, nil, jobs.Permanentf("args.property: is required: table %s has no blobsync.tables entry declaring properties", a.Table)
	}
	var out []string
	for _, p := range tc.Properties {
		v, ok := e.Properties[p]
		if !ok {
			continue
		}
		if _, ok := movable(v); !ok {
			return nil, nil, jobs.Permanentf("blobsync.tables[%s].properties: %s is %s in %s/%s: only Edm.String and Edm.Binary properties can be offloaded",
				tc.Table, p, largeentity.TypeName(v), a.PK, a.RK)
		}
		out = append(out, p)
	}
	if tc.OffloadOver > 0 {
		for p, v := range e.Properties {
			n, ok := movable(v)
			if !ok || n <= tc.OffloadOver || strings.HasPrefix(p, largeentity.RefPrefix) || slices.Contains(out, p) {
				continue
			}
			if err := largeentity.CheckProperty(p); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s (over offloadOver, but %v)", p, err))
				continue
			}
			out = append(out, p)
		}
	}
	slices.Sort(out)
	slices.Sort(skipped)
	return out, skipped, nil
}

// movable reports whether a value can live in a blob (String or Binary)
// and its size there in bytes.
func movable(v any) (int64, bool) {
	switch x := v.(type) {
	case string:
		return int64(len(x)), true
	case []byte:
		return int64(len(x)), true
	}
	return 0, false
}

// valueBytes returns a String or Binary value's bytes and its type.
func valueBytes(v any) ([]byte, storeadapter.EdmType) {
	if s, ok := v.(string); ok {
		return []byte(s), storeadapter.EdmString
	}
	return v.([]byte), storeadapter.EdmBinary
}

// deletePrevious deletes previous offloaded blobs the entity no longer
// names, each If-Match the ETag its reference recorded.
func (w *Worker) deletePrevious(ctx context.Context, res *Result, previous []largeentity.Ref) error {
	for _, old := range previous {
		err := w.store.Container(old.Container).Delete(ctx, old.Name, old.ETag)
		switch {
		case err == nil:
			res.PreviousDeleted++
		case errors.Is(err, storeadapter.ErrPreconditionFailed), errors.Is(err, storeadapter.ErrNotFound):
			res.PreviousKept++
		default:
			return fmt.Errorf("blobsync: delete previous blob %s/%s: %w", old.Container, old.Name, err)
		}
	}
	return nil
}

// attach is the attach mode (see Worker).
func (w *Worker) attach(ctx context.Context, a Args) (Result, error) {
	res := Result{Mode: ModeAttach}
	if p, ok := w.cfg.Tables.ManagedIn(a.Container, a.Blob); ok {
		return res, jobs.Permanentf("args.blob: %s is a name of blobsync's managed layout (%s<table>/<pk>/<rk>/<property>/<sha256>) in container %s: "+
			"blobsync deletes such blobs when their own entity's property moves on, so they cannot be attached; copy the blob to a name of your own",
			a.Blob, p, a.Container)
	}
	blobs := w.store.Container(a.Container)
	// previous are the offloaded blobs the entity named before a replace
	// of this run succeeded; a later round may replace the run's own
	// reference, so they are kept across rounds.
	var previous []largeentity.Ref
	kept := 0
	for round := 0; round < w.cfg.MaxConflicts; round++ {
		h, err := largeentity.HashBlob(ctx, blobs, a.Blob, nil, -1)
		switch {
		case errors.Is(err, storeadapter.ErrContainerNotFound):
			return res, jobs.Permanentf("args.container: container %s does not exist", a.Container)
		case errors.Is(err, storeadapter.ErrNotFound):
			return res, jobs.Permanentf("args.blob: blob %s does not exist in container %s", a.Blob, a.Container)
		case err != nil:
			return res, fmt.Errorf("blobsync: read %s/%s: %w", a.Container, a.Blob, err)
		}
		e, err := w.read(ctx, a)
		if errors.Is(err, errEntityGone) {
			res.Gone = true
			return res, w.deletePrevious(ctx, &res, previous)
		}
		if err != nil {
			return res, err
		}
		cur, hasRef, _ := largeentity.RefOf(e, a.Property)
		v, inline := e.Properties[a.Property]
		if _, ok := movable(v); inline && !ok {
			return res, jobs.Permanentf("args.property: %s is %s in %s %s/%s: only an Edm.String or Edm.Binary property can be replaced by a blob reference",
				a.Property, largeentity.TypeName(v), a.Table, a.PK, a.RK)
		}
		if hasRef && !inline && cur.Container == a.Container && cur.Name == a.Blob && largeentity.SameETag(cur.ETag, h.Props.ETag) && cur.SHA256 == h.Sum {
			res.Already = len(previous) == 0 // else this run attached it in an earlier round
			if !res.Already {
				res.Properties = []string{a.Property}
			}
			res.PreviousKept += kept
			return res, w.deletePrevious(ctx, &res, previous)
		}
		typ := storeadapter.EdmBinary.String()
		if v, ok := e.Properties[a.Property]; ok {
			if _, isString := v.(string); isString {
				typ = storeadapter.EdmString.String()
			}
		} else if hasRef {
			typ = cur.Type
		}
		next := e.Clone()
		ref := largeentity.Ref{V: largeentity.RefVersion, Container: a.Container, Name: a.Blob, Length: h.Length,
			ContentType: h.Props.ContentType, SHA256: h.Sum, ETag: h.Props.ETag, Type: typ, Mode: ModeAttach}
		setRef(next, a.Property, ref)
		if err := storeadapter.ValidateEntity(next); err != nil {
			return res, jobs.Permanentf("args.property: attaching %s would make entity %s/%s invalid: %w", a.Property, a.PK, a.RK, err)
		}
		lost, err := w.replace(ctx, a.Table, next, e.ETag)
		if err != nil {
			return res, err
		}
		if lost {
			res.Rounds++
			continue
		}
		if hasRef {
			w.sortPrevious(a.Table, a.PK, a.RK, a.Property, cur, ref, &previous, &kept)
		}
		now, err := blobs.Properties(ctx, a.Blob)
		if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
			return res, fmt.Errorf("blobsync: read %s/%s: %w", a.Container, a.Blob, err)
		}
		if err != nil || !largeentity.SameETag(now.ETag, h.Props.ETag) {
			res.Rounds++ // the blob changed (or went) since it was hashed: again from its current state
			continue
		}
		res.Properties = []string{a.Property}
		res.PreviousKept += kept
		return res, w.deletePrevious(ctx, &res, previous)
	}
	return res, fmt.Errorf("blobsync: %s %s/%s or blob %s/%s %w", a.Table, a.PK, a.RK, a.Container, a.Blob, errKeptChanging)
}
