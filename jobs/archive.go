package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ArchiveKind is the envelope kind of archive moves.
const ArchiveKind = "archive"

// ArchiveArgs are the arguments of an archive move (the README documents
// them). Exactly one of To and ToBlob names the target; RK selects one
// entity, RKFrom/RKTo the half-open RowKey range [RKFrom, RKTo) of the
// partition in Azure's key order (storeadapter.CompareUTF16). A missing or
// empty RKFrom starts at the first row, a missing or empty RKTo runs to the
// last, but at least one of them must be present: args naming no row are
// refused, never taken for the whole partition.
type ArchiveArgs struct {
	Table  string  `json:"table"`
	To     string  `json:"to,omitempty"`
	ToBlob string  `json:"toBlob,omitempty"`
	PK     *string `json:"pk"`
	RK     *string `json:"rk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
}

func (a *ArchiveArgs) validate() error {
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
	// The blob names must fit Azure's limits; the keys of a range's rows
	// are not known yet, so its first bound stands in for them.
	_, prefix, _ := a.blobTarget() // validated above
	rk := "r"
	if from, _ := a.rowRange(); a.RK != nil {
		rk = *a.RK
	} else if from != "" {
		rk = from
	}
	name := blobName(prefix, a.Table, *a.PK, rk)
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
func (a *ArchiveArgs) validateRows() error {
	ranged := a.RKFrom != nil || a.RKTo != nil
	switch {
	case a.RK != nil && ranged:
		return errors.New("args.rk: give rk for one entity or rkFrom/rkTo for a range, not both")
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

func (a *ArchiveArgs) rowRange() (from, to string) {
	if a.RKFrom != nil {
		from = *a.RKFrom
	}
	if a.RKTo != nil {
		to = *a.RKTo
	}
	return from, to
}

// blobTarget splits ToBlob, "container" or "container/prefix". The prefix
// must not hold "." or ".." segments (Azure treats \ as /), which would
// name blobs outside it.
func (a *ArchiveArgs) blobTarget() (container, prefix string, err error) {
	container, prefix, _ = strings.Cut(a.ToBlob, "/")
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", fieldErr("toBlob", err)
	}
	for _, seg := range strings.FieldsFunc(prefix, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return "", "", fmt.Errorf(`args.toBlob: %q: the prefix must not hold "." or ".." path segments`, a.ToBlob)
		}
	}
	return container, strings.Trim(prefix, "/"), nil
}

// blobName is the blob an entity is archived to:
// <prefix>/<table>/<pk>/<rk>.json, keys path-escaped.
func blobName(prefix, table, pk, rk string) string {
	name := table + "/" + url.PathEscape(pk) + "/" + url.PathEscape(rk) + ".json"
	if prefix != "" {
		name = prefix + "/" + name
	}
	return name
}

// SourceTimestampProperty is the property (Edm.DateTime) every archived
// copy carries besides the source's own: the Timestamp of the source
// version it copies. Azure sets an entity's Timestamp on every write (its
// ETag derives from it), so it grows with each version and orders them.
// The archive uses it to fence its target writes; an application reading
// the archive sees it as one extra property (in a blob copy's JSON too).
// A copy without it (written by hand or by an older tablekeeper) counts as
// older than any version.
const SourceTimestampProperty = "TablekeeperSourceTimestamp"

// errKeptChanging marks an entity (or a target copy) that other writers
// changed in every round of a move: the move is retried later.
var errKeptChanging = errors.New("kept changing while being moved; retrying later")

// Archiver moves entities from one table to another table or to blobs, as
// the eventually consistent transactions pattern describes. It is the
// handler of the "archive" kind.
//
// One entity, in this order:
//
//  1. Read the source entity, its ETag and its Timestamp (its version).
//  2. Write the copy at the target, fenced by version: the copy carries
//     SourceTimestampProperty. Insert it (If-None-Match for a blob); if a
//     copy exists, read it and compare: a copy of the same or a newer
//     version stays as it is (we hold a stale or an equal version); an
//     older one is replaced with If-Match of its ETag (a lost race re-reads
//     it, a bounded number of times).
//  3. Delete the source with If-Match of the ETag read in 1.
//  4. (The runner) delete the message.
//
// Two rules make every interleaving converge. A copy's version never goes
// down: it is only inserted where none exists or replaced, conditionally,
// by a newer one. And a source is only deleted (step 3) by a mover holding
// its current version, after that mover saw a copy of at least that
// version at the target. So when the source is gone, the copy holds the
// last version the source had.
//
// Crash positions: before 2 nothing changed. After 2 the target holds a copy
// and the source is intact: a redelivery reads the source again (the same
// version: its copy is there, step 2 writes nothing; or a newer one: step 2
// replaces the copy) and deletes the source. After 3 the source is gone and
// the target holds it: a redelivery finds no source and a present target,
// which means done. If the source changed between 1 and 3, the delete fails
// with 412 and the move starts again from 1, so a concurrent update is
// never lost. A source missing with no copy at the target was never there:
// a permanent error.
//
// Two movers of one entity (a duplicate message, overlapping ranges, a
// redelivery after a lost lease): if A read version 1 and stalls while the
// application writes version 2 and B moves version 2 and deletes the
// source, A then finds B's newer copy in step 2 and leaves it, and its
// delete finds the source gone (404): done, version 2 archived. If A and B
// hold the same version, the second finds the copy and writes nothing, and
// one delete wins while the other gets 404. A mover whose delete gets 412
// re-reads and moves the newer version, replacing the older copy.
//
// A RowKey range runs the same steps per page of the query, in entity group
// transactions of up to 100 entities: one transaction inserts the batch's
// copies (when some exist, their versions are read with one query over the
// batch's keys and one transaction inserts the missing copies and replaces
// the older ones, If-Match); another deletes the batch from the source with
// each entity's ETag. When that delete fails because rows changed or
// vanished (the whole transaction rolled back), one query reads the batch's
// current ETags: vanished rows were moved by another mover, unchanged rows
// are deleted again in one transaction, and each changed row is moved on
// its own as above. A row that keeps changing does not hold the range back:
// the range moves every other row, then the job fails (transient) naming
// the rows that would not settle, and its redelivery finds only those left.
// After each page the continuation token is checkpointed under the
// operation id, so a redelivered range resumes there; rows before the
// token were moved already, and any step re-run on a moved row is a no-op.
// No checkpoint is saved past a row that would not settle, so a redelivery
// rescans it. The checkpoint is cleared when the range is done; a crash
// after that rescans the range and finds nothing left to move.
type Archiver struct {
	Store storeadapter.Store
	// Checkpoints keep range positions across redeliveries.
	Checkpoints idempotent.Checkpoints
	// MaxConflicts bounds how often one entity is re-read after a
	// concurrent update, and how often one target write is retried after
	// losing a race to another mover, before the entity is reported as
	// changing and the job is retried later. Default 5.
	MaxConflicts int
}

// Kind returns the "archive" kind with this handler.
func (a *Archiver) Kind() Kind {
	return Kind{Name: ArchiveKind, ParseArgs: parseArgs[ArchiveArgs], Handler: a}
}

// Handle moves the entity or range job.Args (ArchiveArgs) names.
func (a *Archiver) Handle(ctx context.Context, job Job) error {
	args, ok := job.Args.(ArchiveArgs)
	if !ok {
		return Permanentf("archive: args of type %T, want ArchiveArgs", job.Args)
	}
	mv := a.mover(args)
	var err error
	if args.RK != nil {
		err = mv.one(ctx, *args.RK)
	} else {
		err = mv.rangeMove(ctx, job.ID)
	}
	if err == nil {
		SetResult(ctx, mv.result())
	}
	return err
}

// result says what a finished move did, for the runner's "job done" line.
func (m *mover) result() string {
	switch {
	case m.moved == 0 && m.args.RK != nil:
		return "already done: the source is gone and " + m.target.String() + " holds the copy"
	case m.moved == 0:
		return "no entity left in the range"
	case m.moved == 1:
		return "moved 1 entity to " + m.target.String()
	}
	return fmt.Sprintf("moved %d entities to %s", m.moved, m.target)
}

// mover carries one job's move.
type mover struct {
	a      *Archiver
	args   ArchiveArgs
	pk     string
	rounds int
	target archiveTarget
	// moved counts the source entities this run deleted after copying.
	moved int
}

func (a *Archiver) mover(args ArchiveArgs) *mover {
	m := &mover{a: a, args: args, pk: *args.PK, rounds: cmp.Or(a.MaxConflicts, 5)}
	if args.To != "" {
		m.target = tableTarget{t: a.Store.Tables(), table: args.To, rounds: m.rounds}
	} else {
		container, prefix, _ := args.blobTarget() // validated
		m.target = blobTarget{b: a.Store.Container(container), prefix: prefix, table: args.Table, rounds: m.rounds}
	}
	return m
}

// one moves one entity (steps 1–3).
func (m *mover) one(ctx context.Context, rk string) error {
	t := m.a.Store.Tables()
	for range m.rounds {
		e, err := t.GetEntity(ctx, m.args.Table, m.pk, rk)
		if errors.Is(err, storeadapter.ErrNotFound) {
			moved, err := m.target.has(ctx, m.pk, rk)
			switch {
			case err != nil:
				return fmt.Errorf("archive: check target for %s/%s: %w", m.pk, rk, err)
			case moved:
				return nil
			}
			return Permanentf("archive: %s %s/%s does not exist and %s holds no copy", m.args.Table, m.pk, rk, m.target)
		}
		if err != nil {
			return fmt.Errorf("archive: read %s %s/%s: %w", m.args.Table, m.pk, rk, err)
		}
		if err := m.target.put(ctx, []storeadapter.Entity{e}); err != nil {
			return fmt.Errorf("archive: write %s/%s to %s: %w", m.pk, rk, m.target, err)
		}
		err = idempotent.DeleteIfMatch(ctx, t, m.args.Table, m.pk, rk, e.ETag)
		if !errors.Is(err, storeadapter.ErrPreconditionFailed) {
			if err != nil {
				return fmt.Errorf("archive: delete %s %s/%s: %w", m.args.Table, m.pk, rk, err)
			}
			m.moved++
			return nil
		}
		// The source changed since it was read: copy the new version.
	}
	return fmt.Errorf("archive: %s %s/%s %w", m.args.Table, m.pk, rk, errKeptChanging)
}

// checkpointStep names the range checkpoint of an operation.
const checkpointStep = "archive"

// rangeMove moves a RowKey range page by page, resuming from a checkpoint.
func (m *mover) rangeMove(ctx context.Context, opID string) error {
	t := m.a.Store.Tables()
	tok, err := m.a.Checkpoints.Load(ctx, opID, checkpointStep)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	from, to := m.args.rowRange()
	q := storeadapter.Query{Filter: storeadapter.RowRange(m.pk, from, to)}
	var unsettled []string
	for {
		q.Continuation = tok
		page, err := t.Query(ctx, m.args.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return Permanentf("archive: source table %s does not exist", m.args.Table)
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
		if err := m.a.Checkpoints.Save(ctx, opID, checkpointStep, tok); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
	if len(unsettled) > 0 {
		return fmt.Errorf("archive: %s partition %q: every other row of the range moved, but %d %w: %s",
			m.args.Table, m.pk, len(unsettled), errKeptChanging, quoteKeys(unsettled, 10))
	}
	return m.a.Checkpoints.Clear(ctx, opID, checkpointStep)
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
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: archived(e)} // sized as written
	}
	for _, batch := range idempotent.Batches(ops) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		es := entities[:len(batch)] // Batches keeps one partition's order
		entities = entities[len(batch):]
		if err := m.target.put(ctx, es); err != nil {
			return nil, fmt.Errorf("archive: write %d entities to %s: %w", len(es), m.target, err)
		}
		changed, err := m.deleteMoved(ctx, es)
		if err != nil {
			return nil, fmt.Errorf("archive: delete %d moved entities from %s: %w", len(es), m.args.Table, err)
		}
		for _, rk := range changed {
			err := m.one(ctx, rk)
			switch {
			case errors.Is(err, errKeptChanging):
				unsettled = append(unsettled, rk)
			case err != nil && !IsPermanent(err):
				return nil, err
			}
		}
	}
	return unsettled, nil
}

// deleteMoved deletes a batch of moved entities from the source, each with
// the ETag it was read with, in transactions. When rows changed or vanished
// since they were read (the transaction rolled back), one query reads the
// batch's current ETags: a vanished row was moved by another mover (whose
// copy is at least as new), a changed row is returned to be moved again on
// its own, and the unchanged rows are deleted in a new transaction. Each
// round drops at least the row that failed, so it ends.
func (m *mover) deleteMoved(ctx context.Context, es []storeadapter.Entity) (changed []string, err error) {
	t := m.a.Store.Tables()
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
		current, err := rowsOf(ctx, t, m.args.Table, es, []string{})
		if err != nil {
			return changed, err
		}
		var kept []storeadapter.Entity
		for _, e := range es {
			switch cur, ok := current[e.RowKey]; {
			case !ok: // moved by another mover
			case cur.ETag != e.ETag:
				changed = append(changed, e.RowKey)
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
// lie in the span of es's RowKeys (one partition), by RowKey, with the
// properties sel (none when empty).
func rowsOf(ctx context.Context, t storeadapter.Tables, table string, es []storeadapter.Entity, sel []string) (map[string]storeadapter.Entity, error) {
	lo, hi := es[0].RowKey, es[0].RowKey
	for _, e := range es[1:] {
		if storeadapter.LessUTF16(e.RowKey, lo) {
			lo = e.RowKey
		}
		if storeadapter.LessUTF16(hi, e.RowKey) {
			hi = e.RowKey
		}
	}
	q := storeadapter.Query{Select: sel, Filter: storeadapter.And(storeadapter.PartitionEquals(es[0].PartitionKey),
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

// archived returns the copy of a source entity to write at the target: its
// properties plus SourceTimestampProperty, its version.
func archived(e storeadapter.Entity) storeadapter.Entity {
	c := e.Clone()
	if c.Properties == nil {
		c.Properties = make(map[string]any, 1)
	}
	c.Properties[SourceTimestampProperty] = e.Timestamp
	return c
}

// newer reports whether the source entity e is a newer version than the
// one a target copy with properties props records (a copy without a
// version is older than any).
func newer(e storeadapter.Entity, props map[string]any) bool {
	v, _ := props[SourceTimestampProperty].(time.Time)
	return v.Before(e.Timestamp)
}

// archiveTarget is where moved entities go.
type archiveTarget interface {
	// put writes the copies (see archived) of source entities of one
	// partition (at most 100), fenced by version: it inserts missing copies
	// and replaces older ones conditionally, and leaves a copy of the same
	// or a newer version alone. It returns an error wrapping
	// errKeptChanging when other movers won every round.
	put(ctx context.Context, es []storeadapter.Entity) error
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

// put inserts the copies in one transaction (creating the table on first
// use). When some exist, or a copy changed or vanished since read, it
// reads the copies' versions with one query and writes, in one
// transaction, the missing copies (insert) and the older ones (replace,
// If-Match), until that transaction succeeds or is empty.
func (tt tableTarget) put(ctx context.Context, es []storeadapter.Entity) error {
	ops := make([]storeadapter.TableOp, len(es))
	for i, e := range es {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: archived(e)}
	}
	err := idempotent.Transact(ctx, tt.t, tt.table, ops)
	for round := 0; raced(err); round++ {
		if round == tt.rounds {
			return fmt.Errorf("copies %w", errKeptChanging)
		}
		copies, rerr := rowsOf(ctx, tt.t, tt.table, es, []string{SourceTimestampProperty})
		if rerr != nil {
			return rerr
		}
		ops = ops[:0]
		for _, e := range es {
			switch c, ok := copies[e.RowKey]; {
			case !ok:
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: archived(e)})
			case newer(e, c.Properties):
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: archived(e), IfMatch: c.ETag})
			}
		}
		if len(ops) == 0 {
			return nil // every copy holds this version or a newer one
		}
		err = tt.t.Transact(ctx, tt.table, ops)
	}
	return err
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

func (bt blobTarget) put(ctx context.Context, es []storeadapter.Entity) error {
	for _, e := range es {
		if err := bt.putOne(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// putOne writes one copy with If-None-Match (creating the container on
// first use). When a blob exists, it reads it: a copy of the same or a
// newer version stays; an older one is replaced with If-Match of its ETag.
func (bt blobTarget) putOne(ctx context.Context, e storeadapter.Entity) error {
	name := bt.name(e.PartitionKey, e.RowKey)
	data, err := storeadapter.MarshalEntityJSON(archived(e))
	if err != nil {
		return err
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
			return fmt.Errorf("blob %s %w", name, errKeptChanging)
		}
		old, props, gerr := bt.b.Get(ctx, name)
		switch {
		case errors.Is(gerr, storeadapter.ErrNotFound) && !idempotent.Missing(gerr):
			err = insert(ctx) // deleted since
		case gerr != nil:
			return gerr
		case !newer(e, blobProperties(old)):
			return nil // the copy holds this version or a newer one
		default:
			err = put(ctx, storeadapter.PutOptions{IfMatch: props.ETag})
		}
	}
	return err
}

// blobProperties returns the properties of a blob copy, or none when it is
// not an entity's JSON (such a blob counts as the oldest copy).
func blobProperties(data []byte) map[string]any {
	e, err := storeadapter.UnmarshalEntityJSON(data, "")
	if err != nil {
		return nil
	}
	return e.Properties
}

func (bt blobTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := bt.b.Properties(ctx, bt.name(pk, rk))
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
