package blobsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
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
	kit.Base
	cfg Config
}

// New returns the blobsync worker on store, configured by cfg (its
// defaults filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

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

// read reads the entity a job is about; a missing table or entity is
// permanent.
func (w *Worker) read(ctx context.Context, a Args) (storeadapter.Entity, error) {
	e, err := w.Store.Tables().GetEntity(ctx, a.Table, a.PK, a.RK)
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
	_, err = w.Store.Tables().UpdateEntity(ctx, table, next, storeadapter.Replace, etag)
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
