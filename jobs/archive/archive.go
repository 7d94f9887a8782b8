package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Kind is the envelope kind of archive moves.
const Kind = "archive"

// Args are the arguments of an archive move (docs/archive.md documents
// them). Exactly one of To and ToBlob names the target; RK selects one
// entity, RKFrom/RKTo the half-open RowKey range [RKFrom, RKTo) of the
// partition in Azure's key order (storeadapter.CompareUTF16). A missing or
// empty RKFrom starts at the first row, a missing or empty RKTo runs to the
// last, but at least one of them must be present: args naming no row are
// refused, never taken for the whole partition.
type Args struct {
	Table  string  `json:"table"`
	To     string  `json:"to,omitempty"`
	ToBlob string  `json:"toBlob,omitempty"`
	PK     *string `json:"pk"`
	RK     *string `json:"rk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
}

// Kind returns "archive".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := fieldErr("table", storeadapter.ValidateTableName(a.Table)); err != nil {
		return err
	}
	switch {
	case a.To == "" && a.ToBlob == "":
		return errors.New("args.to: is required (or args.toBlob)")
	case a.To != "" && a.ToBlob != "":
		return errors.New("args.to and args.toBlob: give one, not both")
	case a.To != "":
		if err := fieldErr("to", storeadapter.ValidateTableName(a.To)); err != nil {
			return err
		}
		if strings.EqualFold(a.To, a.Table) {
			return fmt.Errorf("args.to: must differ from args.table (%s)", a.Table)
		}
	default:
		if _, _, err := a.blobTarget(); err != nil {
			return err
		}
	}
	if a.PK == nil {
		return errors.New("args.pk: is required")
	}
	if err := fieldErr("pk", storeadapter.ValidateKey("pk", *a.PK)); err != nil {
		return err
	}
	if err := a.validateRows(); err != nil {
		return err
	}
	if a.ToBlob == "" {
		return nil
	}
	_, prefix, _ := a.blobTarget() // validated above
	if a.RK == nil {
		// A range goes through the exporter: its names must fit.
		if err := tableexport.ValidateNames(prefix, a.Table); err != nil {
			return fmt.Errorf("args.toBlob: %w", err)
		}
		return nil
	}
	// The blob name of the one entity must fit Azure's limits.
	name := blobName(prefix, a.Table, *a.PK, *a.RK)
	if err := storeadapter.ValidateBlobName(name); err != nil {
		if len(name) > 60 {
			name = name[:30] + "…" + name[len(name)-30:]
		}
		return fmt.Errorf("args.toBlob: the blobs would be named like %s: %w", strings.ToValidUTF8(name, ""), err)
	}
	return nil
}

// validateRows checks rk, or the range [rkFrom, rkTo). At least one of
// rkFrom and rkTo must be present, so that a message that names no row is
// never taken for the whole partition; a missing or empty bound is open.
func (a Args) validateRows() error {
	ranged := a.RKFrom != nil || a.RKTo != nil
	switch {
	case a.RK != nil && ranged:
		return errors.New("args.rk: give rk for one entity or rkFrom/rkTo for a range, not both")
	case a.RK != nil && storeadapter.IsReserved(*a.RK):
		return fmt.Errorf("args.rk: must not start with %q, which is reserved for tablekeeper's own rows", storeadapter.ReservedPrefix)
	case a.RK != nil:
		return fieldErr("rk", storeadapter.ValidateKey("rk", *a.RK))
	case !ranged:
		return errors.New(`args.rk: is required, or args.rkFrom and/or args.rkTo for a range ("rkFrom":"" moves the whole partition)`)
	}
	from, to := a.rowRange()
	for field, bound := range map[string]string{"rkFrom": from, "rkTo": to} {
		if bound == "" { // an open end of the range
			continue
		}
		if err := fieldErr(field, storeadapter.ValidateKey(field, bound)); err != nil {
			return err
		}
	}
	if to != "" && storeadapter.CompareUTF16(from, to) >= 0 {
		return fmt.Errorf("args.rkTo: must be greater than rkFrom in Azure's key order (UTF-16 code units; the range is [rkFrom, rkTo)), got [%q, %q)", from, to)
	}
	return nil
}

// fieldErr prefixes a validation error with its args field.
func fieldErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("args.%s: %w", field, err)
}

func (a Args) rowRange() (from, to string) {
	if a.RKFrom != nil {
		from = *a.RKFrom
	}
	if a.RKTo != nil {
		to = *a.RKTo
	}
	return from, to
}

// blobTarget splits ToBlob, "container" or "container/prefix", with the
// exporter's rules (tableexport.ParseTarget): the prefix must not hold "."
// or ".." segments (Azure treats \ as /), which would name blobs outside
// it.
func (a Args) blobTarget() (container, prefix string, err error) {
	container, prefix, err = tableexport.ParseTarget(a.ToBlob)
	return container, prefix, fieldErr("toBlob", err)
}

// blobName is the blob an entity is archived to:
// <prefix>/<table>/<pk>/<rk>.json, each key escaped by
// storeadapter.BlobNameSegment.
func blobName(prefix, table, pk, rk string) string {
	name := table + "/" + storeadapter.BlobNameSegment(pk) + "/" + storeadapter.BlobNameSegment(rk) + ".json"
	if prefix != "" {
		name = prefix + "/" + name
	}
	return name
}

// errKeptChanging marks an entity (or a target copy) that other writers
// changed in every round of a move: the move is retried later.
var errKeptChanging = errors.New("kept changing while being moved; retrying later")

// Worker moves entities from one table to another table or to blobs, as
// the eventually consistent transactions pattern describes. It is the
// handler of the "archive" kind. A copy holds exactly the source's
// properties. Its writes are fenced without a clock and without an extra
// property: by content, by re-reading the source, and by making every write
// to an existing copy conditional on the ETag the copy was read with.
// Nothing depends on the order of Timestamps (Azure does not document it,
// Azurite's goes backwards within a millisecond, and a re-created entity
// may get an older one than its deleted predecessor had).
//
// One entity, by a mover holding the version v (properties) with ETag e it
// read:
//
//  1. Read the source entity: v and e.
//  2. Insert the copy of v (If-None-Match for a blob); inserted: go to 3.
//     If a copy exists, read it (its content c, its ETag t):
//     a. c has exactly v's properties (names, EDM types, values): write v
//     again, If-Match t (this changes no content, only the copy's ETag;
//     see below why), and go to 3.
//     b. Otherwise read the source again. Still at e: replace the copy
//     with v, If-Match t, and go to 3. At another ETag: start 2 again
//     with that version. Gone: done, the copy stays as it is (whoever
//     deleted the source saw its own content there, or the application
//     deleted it).
//     A conditional write that fails (412, or the copy vanished) reads the
//     copy again and repeats a or b.
//  3. Delete the source with If-Match e. 412: start again from 1. 404:
//     done.
//  4. (The runner) delete the message.
//
// Two kinds' state travels with the entity (see "Indexes and offloaded
// blobs" below): before step 2 the version is prepared — its offloaded
// properties' blobs copied to the target's key (a table target) or read
// back inline (a blob target) — and v in steps 2 and 3 is the prepared
// version (the source's ETag e); after step 2 a table target with declared
// indexes has the copy reconciled into them, and after step 3 the source's
// indexes drop the entity.
//
// Every round above is bounded by Config.MaxConflicts. Two rules make every
// interleaving converge. (i) A copy that exists is only written If-Match
// the ETag its writer read it with, and either with the content it held
// then (2a) or by a mover that confirmed, after that read, that the source
// still has its version (2b). (ii) A source is only deleted, If-Match e, by
// a mover that itself wrote v to the copy after reading e. Say M deletes
// the source at e. M's write changed the copy's ETag, so any later write
// to the copy was planned on a read made after M's write. Its writer keeps
// the content it read (2a), or confirmed the source after that read:
// while the source was still at e (it holds v as well), or after M's
// delete, when only a re-created source, a newer version, can be found.
// So the copy holds v when the source goes, and only a newer generation of
// the entity replaces it. A stale mover, holding a version older than e,
// cannot confirm the source at its version once M has read e, and a
// replace it planned on a copy read before M's write fails on that write.
//
// Why 2a writes instead of deleting the source at once: content can come
// back (v1 {Status: a}, v2 {b}, v3 {a}). Say A holds v2, has read a copy
// {a} of v1 (its mover's delete lost to v2) and confirmed the source at
// v2; the application writes v3 and B, finding {a} at the target, deletes
// the source. A's replace would still match the copy's ETag and put v2
// over the last version. B's write in 2a makes it fail; A reads the copy
// again, finds other content and the source gone: done, v3 archived.
//
// Crash positions: before 2 nothing changed. After 2 the copy holds v and
// the source is intact: a redelivery reads the source again (v: 2a; or a
// newer version: 2b replaces the copy) and deletes it. After 3 the source
// is gone and the target holds it: a redelivery finds no source and a
// present copy, which means done. If the source changed between 1 and 3,
// the delete fails with 412 and the move starts again from 1, so a
// concurrent update is never lost. A source missing with no copy at the
// target was never there: a permanent error.
//
// Two movers of one entity (a duplicate message, overlapping ranges, a
// redelivery after a lost lease):
//   - A reads v1 and stalls; the application writes v2; B moves v2 and
//     deletes the source; A resumes. A's insert finds B's copy, whose
//     content is not v1; A reads the source, finds it gone and leaves the
//     copy: v2 archived. If A stalls in 2b instead, between confirming the
//     source at v1 and its replace, v2 and B's write of it come after A's
//     read of the copy: B's write changes the copy's ETag, A's replace
//     fails (412), and A reads the copy again and ends as above.
//   - A and B hold the same version: each finds its own content or writes
//     it; one delete wins, the other gets 404.
//   - A's delete fails with 412 (the application wrote a newer version):
//     A moves the newer version, replacing its own older copy in 2b.
//   - Delete and re-create: the source was moved at v2 and the application
//     creates it again (v3). A mover of v3 finds v2 at the target, confirms
//     the source at v3, replaces the copy and deletes the source: v3
//     archived. A stale mover of v2 finds either v2 there (it rewrites it,
//     then its delete fails with 412 against v3 and it starts over with v3)
//     or v3 (it re-reads the source and finds v3 or nothing).
//
// A RowKey range runs the same steps per page of the query, in entity group
// transactions of up to 100 entities. One transaction inserts the batch's
// copies. When some exist (or a write lost a race), one query reads the
// target rows of the batch's key span: missing copies are inserted again,
// copies holding their row's content are written again (2a), and when some
// differ, one query of the source rows of the span confirms their ETags:
// rows still at the version read get their copy replaced (2b), rows whose
// source changed are moved one by one from their new version, rows whose
// source is gone are done. One transaction makes those writes (a bounded
// number of rounds on 412 or 409). Another transaction deletes the written
// rows from the source, each If-Match its ETag. When that delete fails
// because rows changed or vanished (the whole transaction rolled back),
// one query reads the batch's current versions: vanished rows were moved
// by another mover, unchanged rows are deleted again in one transaction,
// and each changed row is moved on its own as above. A row that keeps
// changing does not hold the range back: the range moves every other row,
// then the job fails (transient) naming the rows that would not settle, and
// its redelivery finds only those left. After each page the continuation
// token is checkpointed under the operation id, so a redelivered range
// resumes there; rows before the token were moved already, and any step
// re-run on a moved row is a no-op. No checkpoint is saved past a row that
// would not settle, so a redelivery rescans it. The checkpoint is cleared
// when the range is done; a crash after that rescans the range and finds
// nothing left to move.
//
// # Indexes and offloaded blobs
//
// A move keeps what other kinds hold for the entity consistent, in its own
// idempotent steps, through the shared libraries (never another kind):
//
//   - Offloaded properties (blobsync's TkBlob_ references): the blobs
//     belong to the source's key, and a reconcile of the source table
//     collects them once the source is gone. So the prepared version of a
//     table target carries them (largeentity.Carry: each blob put under
//     the target key's managed name, content-addressed, before the copy
//     that names it; the reference rewritten), and that of a blob target
//     holds them inline (largeentity.Restore), checked against their
//     SHA-256. A crash after a carried blob and before the copy leaves an
//     unreferenced blob that a reconcile of the target collects after its
//     grace; the redelivery puts it again (same name, same bytes). A blob
//     missing or not matching its reference is a permanent error: the move
//     would lose the property.
//   - Indexes (the config's "index" section): a table target's indexes
//     take the copy before the source goes (indexes.Set.Reconcile of the
//     target key after step 2, so a crash before step 3 redoes it on the
//     redelivery, which still finds the source), and the source's drop
//     the entity after step 3 (Reconcile of the source key: the entity is
//     gone, so it is removed). A redelivery that finds the source gone and
//     the copy in place runs both again (a crash came after step 3); both
//     are idempotent and cost two reads when there is nothing to do. A
//     conflict or an unindexable value in the target's indexes does not
//     fail the move; the result counts it and index check reports it.
//
// A range does the same per batch: the batch prepared, the copies written,
// the target's span synced (indexes.Set.Sync), the sources deleted, the
// source's span synced; and once the range is moved, one Sync of the whole
// range in the source and a table target, before the checkpoint is
// cleared, removes the entities a crashed delivery moved after its last
// saved page (their membership records are still in the range; no page
// shows their rows again).
//
// One entity to a blob runs the same protocol: Put If-None-Match *, then
// Get (content and the blob's ETag) and Put If-Match that ETag, to the one
// blob <prefix>/<table>/<pk>/<rk>.json.
//
// A RowKey range to blobs goes through the shared exporter
// (tableexport.Export; its doc gives the part protocol) instead: JSON-lines
// parts under <prefix>/<table>/YYYY/MM/DD/HHMM/, each line holding the
// row's version and the ETag it was read with, and a manifest. A copy is
// then never replaced: a committed part is immutable, and the archive is
// the log of the versions it moved. The steps:
//
//  1. Load the range's export generation (checkpoint "archive-export-gen";
//     none: 1) and run the export of that generation (checkpoint
//     "archive-export", or "archive-export+gN" under the operation id
//     "<id>+gN" for a later one), the container created on first use.
//  2. For each part, once it is committed and checkpointed (AfterPart):
//     stream it back and delete its rows from the source in transactions
//     of up to 100, each If-Match the ETag in its line. When a transaction
//     fails with 412 or 404 (it rolled back), one query reads the batch's
//     key span: rows gone are done, rows still at the line's ETag are
//     deleted again, rows whose ETag changed stay in the source.
//  3. When a pass over the range ends having exported rows, another pass
//     starts from the range's start (new parts, numbers continue): it
//     exports the new versions of the rows that stayed and rows inserted
//     behind the scan. At most MaxConflicts passes; a pass that finds
//     nothing ends the export, which marks its checkpoint done and writes
//     the manifest (none when nothing moved).
//  4. One query of the range: rows left (they changed in every pass) save
//     generation+1 and fail the job (transient) naming them, every other
//     row moved; the redelivery runs a new export for them.
//  5. (The runner) delete the message.
//
// Only a row whose exact version (ETag) sits in a committed, immutable part
// is deleted, so nothing is lost; a row updated meanwhile keeps its new
// version in the source until a pass exports it. Crash positions: before a
// part's commit nothing of it is visible and the redelivery rewrites it
// from the same start key. Between the commit and its checkpoint the
// redelivery finds the part with its op and adopts it, and runs step 2 for
// it; between the checkpoint and the end of step 2 the checkpoint names the
// part as pending and the redelivery runs step 2 for it again (deletes of
// rows already gone are no-ops). After the done mark the redelivery writes
// (or finds) the manifest and goes to step 4; after step 4's save it starts
// the new generation. Two movers: two deliveries of one operation share
// one checkpoint, created by insert and then only saved If-Match its ETag,
// which registers each part before its deletes run: they pick one minute
// folder, commit each part number once (If-None-Match *) and the other
// adopts it, so their deletes name the same versions; a stale delivery
// whose save loses takes the checkpoint as it stands, and when that is
// done it stops without deleting anything (a part it committed meanwhile
// stays unlisted, its rows still in the source, and step 4 names them).
// So every row deleted sits in a part the manifest lists. Movers of different operations over the
// same rows (overlapping ranges, a duplicate message under another id)
// write parts of their own, numbered in turn in a shared minute folder,
// and each deletes only the versions its own parts hold: a row is deleted
// once (the other's delete finds it gone) and may be archived in both.
type Worker struct {
	store       storeadapter.Store
	checkpoints idempotent.Checkpoints
	cfg         Config
	indexes     *indexes.Set
	layout      largeentity.Layout
}

// New returns the archive worker on store, configured by cfg (its defaults
// filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := d.Store
	return &Worker{store: store, checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: cfg.CheckpointTable}, cfg: cfg,
		indexes: d.Indexes, layout: d.Layout}, nil
}

// MaxRunTime is how long one archive job may run; see Config.MaxRunTime.
func (w *Worker) MaxRunTime() time.Duration { return time.Duration(w.cfg.MaxRunTime) }

// Work moves the entity or range job.Args names.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	mv := w.mover(job.Args)
	var err error
	switch {
	case job.Args.RK != nil:
		err = mv.one(ctx, *job.Args.RK, nil)
	case job.Args.ToBlob != "":
		err = mv.exportRange(ctx, job.ID)
	default:
		err = mv.rangeMove(ctx, job.ID)
	}
	if err == nil {
		jobs.SetResult(ctx, mv.result())
	}
	return err
}

// prepare returns a source version as its copy must hold it: for a table
// target with its offloaded properties carried to blobs of its new key
// (largeentity.Carry), for a blob target with them read back inline
// (largeentity.Restore). Keys and ETag stay the source's. A blob that is
// missing or does not match its reference is a permanent error: moving
// the entity would lose the property.
func (m *mover) prepare(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
	if len(largeentity.Refs(e)) == 0 {
		return e, nil
	}
	var out storeadapter.Entity
	var err error
	if m.args.To != "" {
		var n int
		out, n, err = largeentity.Carry(ctx, m.w.store, m.w.layout, e, m.args.To)
		m.carried += n
	} else {
		out, err = largeentity.Restore(ctx, m.w.store, e)
	}
	switch {
	case errors.Is(err, largeentity.ErrMismatch) || errors.Is(err, storeadapter.ErrNotFound):
		return out, jobs.Permanentf("archive: %s %s/%s: its offloaded properties cannot be moved: %w", m.args.Table, e.PartitionKey, e.RowKey, err)
	case err != nil:
		return out, fmt.Errorf("archive: %s %s/%s: offloaded properties: %w", m.args.Table, e.PartitionKey, e.RowKey, err)
	}
	out.ETag = e.ETag
	return out, nil
}

// reconcile brings the indexes of one key of table (the source or a
// table target) up to date after a step of the move, when the table has
// declared indexes. A conflict or an unindexable value in the target's
// indexes does not fail the move: it is counted for the result (and
// reported by index check).
func (m *mover) reconcile(ctx context.Context, table, rk string) error {
	if !m.w.indexes.Declared(table) {
		return nil
	}
	out, err := m.w.indexes.Reconcile(ctx, table, m.pk, rk)
	if err != nil {
		return fmt.Errorf("archive: indexes of %s %s/%s: %w", table, m.pk, rk, err)
	}
	m.indexed.Conflicts += min(len(out.Conflicts), 1)
	m.indexed.Unindexable += min(len(out.Unindexable), 1)
	return nil
}

// sync brings the indexes of a span of table up to date (see
// indexes.Set.Sync) when the table has declared indexes.
func (m *mover) sync(ctx context.Context, table string, sp indexes.Span) error {
	if !m.w.indexes.Declared(table) {
		return nil
	}
	res, err := m.w.indexes.Sync(ctx, table, sp)
	m.indexed.Conflicts += res.Conflicts
	m.indexed.Unindexable += res.Unindexable
	if err != nil {
		return fmt.Errorf("archive: indexes of %s: %w", table, err)
	}
	return nil
}

// batchSpan is the span of a batch's keys (one partition, key order).
func batchSpan(es []storeadapter.Entity) indexes.Span {
	pk := es[0].PartitionKey
	return indexes.Span{PK: &pk, From: &indexes.Key{PK: pk, RK: es[0].RowKey}, Through: &indexes.Key{PK: pk, RK: es[len(es)-1].RowKey}}
}

// afterMove brings the indexes of a moved key up to date: the target's
// (a table target), then the source's.
func (m *mover) afterMove(ctx context.Context, rk string) error {
	if m.args.To != "" {
		if err := m.reconcile(ctx, m.args.To, rk); err != nil {
			return err
		}
	}
	return m.reconcile(ctx, m.args.Table, rk)
}

// result says what a finished move did, for the runner's "job done" line.
func (m *mover) result() string {
	switch {
	case m.manifest != nil && m.manifest.Name == "":
		return "no entity left in the range"
	case m.manifest != nil:
		return fmt.Sprintf("archived %d entities in %d parts to %s/%s (%d deleted by this run)",
			m.manifest.Entities, len(m.manifest.Parts), m.manifest.Container, m.manifest.Name, m.moved)
	case m.moved == 0 && m.args.RK != nil:
		return "already done: the source is gone and " + m.target.String() + " holds the copy"
	case m.moved == 0:
		return "no entity left in the range"
	case m.moved == 1:
		return "moved 1 entity to " + m.target.String() + m.notes()
	}
	return fmt.Sprintf("moved %d entities to %s", m.moved, m.target) + m.notes()
}

// notes are what the result adds about blobs and indexes: the offloaded
// blobs carried, and conflicts or unindexable values in the target's
// indexes.
func (m *mover) notes() string {
	var s string
	if m.carried > 0 {
		s += fmt.Sprintf("; %d offloaded blobs carried", m.carried)
	}
	if n := m.indexed.Conflicts + m.indexed.Unindexable; n > 0 {
		s += fmt.Sprintf("; %d entities not in every index (%d conflicts, %d unindexable: see index check)", n, m.indexed.Conflicts, m.indexed.Unindexable)
	}
	return s
}

// mover carries one job's move.
type mover struct {
	w      *Worker
	args   Args
	pk     string
	rounds int
	target archiveTarget
	// moved counts the source entities this run deleted after copying.
	moved int
	// manifest is the export of a range to blobs, once done.
	manifest *tableexport.Manifest
	// carried counts the offloaded blobs put under the target's keys.
	carried int
	// indexed counts keys left out of the target's indexes.
	indexed indexes.SyncResult
}

func (w *Worker) mover(args Args) *mover {
	m := &mover{w: w, args: args, pk: *args.PK, rounds: w.cfg.MaxConflicts}
	if args.To != "" {
		m.target = tableTarget{t: w.store.Tables(), table: args.To, rounds: m.rounds}
	} else {
		container, prefix, _ := args.blobTarget() // validated
		m.target = blobTarget{b: w.store.Container(container), prefix: prefix, table: args.Table, rounds: m.rounds}
	}
	return m
}

// one moves one entity (steps 1–3), starting from the version e when it
// is known (nil: read it first).
func (m *mover) one(ctx context.Context, rk string, e *storeadapter.Entity) error {
	t := m.w.store.Tables()
	for range m.rounds {
		if e == nil {
			got, err := t.GetEntity(ctx, m.args.Table, m.pk, rk)
			if errors.Is(err, storeadapter.ErrNotFound) {
				moved, err := m.target.has(ctx, m.pk, rk)
				switch {
				case err != nil:
					return fmt.Errorf("archive: check target for %s/%s: %w", m.pk, rk, err)
				case moved: // done before: its indexes may not be
					return m.afterMove(ctx, rk)
				}
				return jobs.Permanentf("archive: %s %s/%s does not exist and %s holds no copy", m.args.Table, m.pk, rk, m.target)
			}
			if err != nil {
				return fmt.Errorf("archive: read %s %s/%s: %w", m.args.Table, m.pk, rk, err)
			}
			e = &got
		}
		v, err := m.prepare(ctx, *e)
		if err != nil {
			return err
		}
		out, err := m.target.write(ctx, []storeadapter.Entity{v}, m.sources)
		if err != nil {
			return fmt.Errorf("archive: write %s/%s to %s: %w", m.pk, rk, m.target, err)
		}
		switch out[0].fate {
		case gone:
			return m.afterMove(ctx, rk)
		case contested:
			return fmt.Errorf("archive: the copy of %s/%s at %s %w", m.pk, rk, m.target, errKeptChanging)
		case superseded:
			e = &out[0].next
			continue
		}
		if m.args.To != "" {
			if err := m.reconcile(ctx, m.args.To, rk); err != nil { // the copy is indexed before the source goes
				return err
			}
		}
		err = idempotent.DeleteIfMatch(ctx, t, m.args.Table, m.pk, rk, e.ETag)
		if !errors.Is(err, storeadapter.ErrPreconditionFailed) {
			if err != nil {
				return fmt.Errorf("archive: delete %s %s/%s: %w", m.args.Table, m.pk, rk, err)
			}
			m.moved++
			return m.reconcile(ctx, m.args.Table, rk)
		}
		e = nil // the source changed since it was read: move the new version
	}
	return fmt.Errorf("archive: %s %s/%s %w", m.args.Table, m.pk, rk, errKeptChanging)
}

// sources reads the current versions of source entities of one partition
// (see rowsOf).
func (m *mover) sources(ctx context.Context, es []storeadapter.Entity) (map[string]storeadapter.Entity, error) {
	return rowsOf(ctx, m.w.store.Tables(), m.args.Table, es)
}

// checkpointStep names the range checkpoint of an operation.
const checkpointStep = "archive"

// rangeMove moves a RowKey range page by page, resuming from a checkpoint.
func (m *mover) rangeMove(ctx context.Context, opID string) error {
	t := m.w.store.Tables()
	tok, err := m.w.checkpoints.Load(ctx, opID, checkpointStep)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	from, to := m.args.rowRange()
	q := storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.RowRange(m.pk, from, to))}
	var unsettled []string
	for {
		q.Continuation = tok
		page, err := t.Query(ctx, m.args.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return jobs.Permanentf("archive: source table %s does not exist", m.args.Table)
		}
		if err != nil {
			return fmt.Errorf("archive: query %s: %w", m.args.Table, err)
		}
		u, err := m.movePage(ctx, page.Entities)
		if err != nil {
			return err
		}
		unsettled = append(unsettled, u...)
		if page.Next == "" {
			break
		}
		tok = page.Next
		if len(unsettled) > 0 {
			continue // a checkpoint past a row left behind would skip it
		}
		if err := m.w.checkpoints.Save(ctx, opID, checkpointStep, tok); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
	if len(unsettled) > 0 {
		return fmt.Errorf("archive: %s partition %q: every other row of the range moved, but %d %w: %s",
			m.args.Table, m.pk, len(unsettled), errKeptChanging, quoteKeys(unsettled, 10))
	}
	if err := m.syncRange(ctx); err != nil {
		return err
	}
	return m.w.checkpoints.Clear(ctx, opID, checkpointStep)
}

// syncRange brings the indexes of the whole range up to date in the
// source and a table target, before the move ends: rows an earlier,
// crashed delivery moved after the pages it saved were never synced by
// the batches (their sources are gone, so no page holds them again), but
// their membership records are in the range.
func (m *mover) syncRange(ctx context.Context) error {
	from, to := m.args.rowRange()
	if err := m.sync(ctx, m.args.Table, indexes.Partition(m.pk, from, to)); err != nil {
		return err
	}
	return m.sync(ctx, m.args.To, indexes.Partition(m.pk, from, to))
}

// quoteKeys lists up to max keys, quoted, and how many more there are.
func quoteKeys(keys []string, max int) string {
	var b strings.Builder
	for i, k := range keys {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(keys)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "RowKey %q", k)
	}
	return b.String()
}

// movePage moves one page of source entities in transactions of at most
// 100 (one partition: the range lies in one). It returns the RowKeys of
// rows that kept changing and were left in the source.
func (m *mover) movePage(ctx context.Context, entities []storeadapter.Entity) (unsettled []string, err error) {
	ops := make([]storeadapter.TableOp, len(entities))
	for i, e := range entities {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e} // sized as written
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		es := slices.Clone(entities[:len(batch)]) // Batches keeps one partition's order
		entities = entities[len(batch):]
		for i := range es {
			if es[i], err = m.prepare(ctx, es[i]); err != nil {
				return nil, err
			}
		}
		out, err := m.target.write(ctx, es, m.sources)
		if err != nil {
			return nil, fmt.Errorf("archive: write %d entities to %s: %w", len(es), m.target, err)
		}
		if err := m.sync(ctx, m.args.To, batchSpan(es)); err != nil { // the copies are indexed before the sources go
			return nil, err
		}
		var written, changed []storeadapter.Entity
		for i, o := range out {
			switch o.fate {
			case copied:
				written = append(written, es[i])
			case superseded:
				changed = append(changed, o.next)
			case contested:
				unsettled = append(unsettled, es[i].RowKey)
			}
		}
		updated, err := m.deleteMoved(ctx, written)
		if err != nil {
			return nil, fmt.Errorf("archive: delete %d moved entities from %s: %w", len(written), m.args.Table, err)
		}
		if err := m.sync(ctx, m.args.Table, batchSpan(es)); err != nil {
			return nil, err
		}
		for _, e := range append(changed, updated...) {
			err := m.one(ctx, e.RowKey, &e)
			switch {
			case errors.Is(err, errKeptChanging):
				unsettled = append(unsettled, e.RowKey)
			case err != nil && !jobs.IsPermanent(err):
				return nil, err
			}
		}
	}
	return unsettled, nil
}

// deleteMoved deletes moved entities from the source, each with the ETag
// it was read with, in transactions. When rows changed or vanished since
// they were read (the transaction rolled back), one query reads the rows'
// current versions: a vanished row was moved by another mover, a changed
// row's new version is returned to be moved on its own, and the unchanged
// rows are deleted in a new transaction. Each round drops at least the row
// that failed, so it ends.
func (m *mover) deleteMoved(ctx context.Context, es []storeadapter.Entity) (changed []storeadapter.Entity, err error) {
	t := m.w.store.Tables()
	for len(es) > 0 {
		deletes := make([]storeadapter.TableOp, len(es))
		for i, e := range es {
			deletes[i] = storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: e, IfMatch: e.ETag}
		}
		txErr := t.Transact(ctx, m.args.Table, deletes)
		if !raced(txErr) {
			if txErr == nil {
				m.moved += len(es)
			}
			return changed, txErr
		}
		current, err := rowsOf(ctx, t, m.args.Table, es)
		if err != nil {
			return changed, err
		}
		var kept []storeadapter.Entity
		for _, e := range es {
			switch cur, ok := current[e.RowKey]; {
			case !ok: // moved by another mover
			case cur.ETag != e.ETag:
				changed = append(changed, cur)
			default:
				kept = append(kept, e)
			}
		}
		if len(kept) == len(es) {
			return changed, txErr // a conflict the read does not show: retry the job later
		}
		es = kept
	}
	return changed, nil
}

// raced reports whether a conditional write lost to another writer: the
// entity or blob existed, changed or vanished since it was read (not its
// table or container).
func raced(err error) bool {
	return errors.Is(err, storeadapter.ErrAlreadyExists) || errors.Is(err, storeadapter.ErrPreconditionFailed) ||
		errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err)
}

// rowsOf reads, with one query (paged), the entities of a table whose keys
// lie in the span of es's RowKeys (one partition), by RowKey.
func rowsOf(ctx context.Context, t storeadapter.Tables, table string, es []storeadapter.Entity) (map[string]storeadapter.Entity, error) {
	lo, hi := es[0].RowKey, es[0].RowKey
	for _, e := range es[1:] {
		if storeadapter.LessUTF16(e.RowKey, lo) {
			lo = e.RowKey
		}
		if storeadapter.LessUTF16(hi, e.RowKey) {
			hi = e.RowKey
		}
	}
	q := storeadapter.Query{Filter: storeadapter.And(storeadapter.PartitionEquals(es[0].PartitionKey),
		storeadapter.Compare("RowKey", storeadapter.Ge, lo), storeadapter.Compare("RowKey", storeadapter.Le, hi))}
	rows := make(map[string]storeadapter.Entity, len(es))
	for {
		page, err := t.Query(ctx, table, q)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		for _, e := range page.Entities {
			rows[e.RowKey] = e
		}
		if q.Continuation = page.Next; q.Continuation == "" {
			return rows, nil
		}
	}
}

// holds reports whether a copy's properties are exactly those of the
// source version e: the same names, EDM types and values.
func holds(props map[string]any, e storeadapter.Entity) bool {
	if len(props) != len(e.Properties) {
		return false
	}
	for name, v := range e.Properties {
		if c, ok := props[name]; !ok || !storeadapter.Equal(v, c) {
			return false
		}
	}
	return true
}

// fate is what writing the copy of one source version came to.
type fate uint8

const (
	// copied: the copy holds the version's content, written by this mover
	// after it read the version; delete the source with If-Match.
	copied fate = iota
	// superseded: the copy held other content and the source holds another
	// version now (placement.next); move that one.
	superseded
	// gone: the copy held other content and the source is gone; the copy
	// stays as it is and nothing is left to do.
	gone
	// contested: other movers changed the copy in every round.
	contested
)

// placement is the fate of one source version's copy.
type placement struct {
	fate fate
	next storeadapter.Entity // the source's current version when superseded
}

// confirm decides, by the source's current versions, what happens to a
// version e whose copy holds other content: ok when the source still has
// e's ETag (replace the copy), else its placement.
func confirm(e storeadapter.Entity, current map[string]storeadapter.Entity) (o placement, ok bool) {
	cur, found := current[e.RowKey]
	switch {
	case !found:
		return placement{fate: gone}, false
	case cur.ETag != e.ETag:
		return placement{fate: superseded, next: cur}, false
	}
	return placement{}, true
}

// sourceReader reads the current versions of source entities by RowKey
// (missing: gone).
type sourceReader func(ctx context.Context, es []storeadapter.Entity) (map[string]storeadapter.Entity, error)

// archiveTarget is where moved entities go.
type archiveTarget interface {
	// write makes the copies of source versions of one partition (at most
	// 100) hold their content, fenced as the Worker describes (step 2),
	// reading the source with src when a copy holds other content. It
	// returns each version's placement, in the order of es.
	write(ctx context.Context, es []storeadapter.Entity, src sourceReader) ([]placement, error)
	// has reports whether the target holds the entity.
	has(ctx context.Context, pk, rk string) (bool, error)
	String() string
}

type tableTarget struct {
	t      storeadapter.Tables
	table  string
	rounds int
}

func (tt tableTarget) String() string { return "table " + tt.table }

// write inserts the copies in one transaction (creating the table on first
// use). When some exist, or a write lost a race, it reads the copies of the
// rows still pending with one query and, when some hold other content, the
// sources of those with one more; then it writes in one transaction the
// missing copies (insert) and, If-Match each copy's ETag, the copies that
// hold their row's content and the confirmed ones, until that transaction
// succeeds or is empty.
func (tt tableTarget) write(ctx context.Context, es []storeadapter.Entity, src sourceReader) ([]placement, error) {
	out := make([]placement, len(es))
	ops := make([]storeadapter.TableOp, len(es))
	pending := make([]int, len(es)) // the index in es of each op
	for i, e := range es {
		ops[i], pending[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e}, i
	}
	err := idempotent.Transact(ctx, tt.t, tt.table, ops)
	for round := 0; raced(err); round++ {
		if round == tt.rounds {
			for _, i := range pending {
				out[i].fate = contested
			}
			return out, nil
		}
		copies, rerr := rowsOf(ctx, tt.t, tt.table, pick(es, pending))
		if rerr != nil {
			return nil, rerr
		}
		var next, differ []int
		ops = ops[:0]
		for _, i := range pending {
			switch c, ok := copies[es[i].RowKey]; {
			case !ok:
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: es[i]})
				next = append(next, i)
			case holds(c.Properties, es[i]):
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: es[i], IfMatch: c.ETag})
				next = append(next, i)
			default:
				differ = append(differ, i)
			}
		}
		if len(differ) > 0 {
			current, serr := src(ctx, pick(es, differ))
			if serr != nil {
				return nil, serr
			}
			for _, i := range differ {
				o, ok := confirm(es[i], current)
				if !ok {
					out[i] = o
					continue
				}
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: es[i], IfMatch: copies[es[i].RowKey].ETag})
				next = append(next, i)
			}
		}
		if len(ops) == 0 {
			return out, nil
		}
		pending = next
		err = tt.t.Transact(ctx, tt.table, ops)
	}
	return out, err
}

// pick returns the entities of es at the indexes idx.
func pick(es []storeadapter.Entity, idx []int) []storeadapter.Entity {
	out := make([]storeadapter.Entity, len(idx))
	for j, i := range idx {
		out[j] = es[i]
	}
	return out
}

func (tt tableTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := tt.t.GetEntity(ctx, tt.table, pk, rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// blobTarget writes each entity as annotated JSON to its blobName.
type blobTarget struct {
	b             storeadapter.Blobs
	prefix, table string
	rounds        int
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
	blobs := m.w.store.Container(container)
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
	man, err := tableexport.Export(ctx, m.w.store.Tables(), storeadapter.Range{Table: m.args.Table, PK: m.args.PK, RKFrom: m.args.RKFrom, RKTo: m.args.RKTo},
		tableexport.Options{
			Blobs: blobs, Prefix: prefix, MaxPartBytes: m.w.cfg.MaxPartBytes, OpID: exportID,
			Checkpoints: m.w.checkpoints, Step: step, Passes: m.rounds, CreateContainer: true, SkipEmptyManifest: true,
			AfterPart: func(ctx context.Context, p tableexport.Part) error { return m.deletePart(ctx, blobs, p) },
			Transform: m.prepare,
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
	page, err := m.w.store.Tables().Query(ctx, m.args.Table, storeadapter.Query{Filter: storeadapter.ApplicationRows(storeadapter.RowRange(m.pk, from, to)), Top: 11, Select: []string{"RowKey"}})
	if err != nil {
		return fmt.Errorf("archive: query %s: %w", m.args.Table, err)
	}
	if len(page.Entities) == 0 {
		return nil
	}
	// Rows that changed in every pass: the next delivery starts a new
	// generation of the export for them (this one is done and stays so).
	if err := m.w.checkpoints.Save(ctx, opID, generationStep, strconv.Itoa(gen+1)); err != nil {
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
	tok, err := m.w.checkpoints.Load(ctx, opID, generationStep)
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
