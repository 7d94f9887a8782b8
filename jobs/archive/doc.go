// Package archive is the "archive" job kind: its arguments (Args, with
// their strict validation), its section of the config file (Config) and
// its Worker, which moves one entity or a RowKey range from a table to
// another table or to blobs following the eventually consistent
// transactions pattern; below, the steps and why every crash position and
// every race of two movers converges.
//
// It is written against the storeadapter ports, the jobs contract and the
// tablepatterns libraries only: it must not import the Azure SDK, the
// runner or another kind, and it knows nothing of queues, leases or
// poisoning.
//
// # The move
//
// The Worker moves entities from one table to another table or to blobs,
// as the eventually consistent transactions pattern describes. A copy
// holds exactly the source's
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
//     missing or not matching its reference is read as an offload that
//     replaced it since the source was read (the application wrote the
//     property, and blobsync moved it to a new blob and deleted the old):
//     the source is read again, and when it changed (or went) the move
//     goes on with that version, as a lost delete in step 3 does. Only a
//     blob gone from an unchanged source is a permanent error: the move
//     would lose the property. The grace must outlast the move's run
//     (jobs/catalog checks blobsync's grace against archive's
//     maxRunTime).
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
package archive
