package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ArchiveKind is the envelope kind of archive moves.
const ArchiveKind = "archive"

// ArchiveArgs are the arguments of an archive move (the README documents
// them). Exactly one of To and ToBlob names the target; RK selects one
// entity, RKFrom/RKTo the half-open RowKey range [RKFrom, RKTo) of the
// partition (a missing RKFrom starts at the first row, a missing RKTo runs
// to the last).
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
	ranged := a.RKFrom != nil || a.RKTo != nil
	switch {
	case a.RK != nil && ranged:
		return errors.New("args.rk: give rk for one entity or rkFrom/rkTo for a range, not both")
	case a.RK != nil:
		return fieldErr("rk", storeadapter.ValidateKey("rk", *a.RK))
	case !ranged:
		return errors.New("args.rk: is required (or args.rkFrom/args.rkTo for a range)")
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
	if to != "" && from >= to {
		return fmt.Errorf("args.rkTo: must be greater than rkFrom (the range is [rkFrom, rkTo)), got [%q, %q)", from, to)
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

// blobTarget splits ToBlob, "container" or "container/prefix".
func (a *ArchiveArgs) blobTarget() (container, prefix string, err error) {
	container, prefix, _ = strings.Cut(a.ToBlob, "/")
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", fieldErr("toBlob", err)
	}
	return container, strings.Trim(prefix, "/"), nil
}

// Archiver moves entities from one table to another table or to blobs, as
// the eventually consistent transactions pattern describes. It is the
// handler of the "archive" kind.
//
// One entity, in this order:
//
//  1. Read the source entity and its ETag.
//  2. Insert-or-replace it at the target (every EDM type kept).
//  3. Delete the source with If-Match of the ETag read in 1.
//  4. (The runner) delete the message.
//
// Crash positions: before 2 nothing changed. After 2 the target holds a copy
// and the source is intact: a redelivery reads the source again (maybe a
// newer version), overwrites the copy and deletes the source. After 3 the
// source is gone and the target holds it: a redelivery finds no source and
// a present target, which means done. If the source changed between 1 and 3,
// the delete fails with 412 and the move starts again from 1, so a
// concurrent update is never lost; a source deleted by a competing worker
// (404 at 3) is done. A source missing with no copy at the target was never
// there: a permanent error.
//
// A RowKey range runs the same steps per page of the query, in entity group
// transactions of up to 100 entities: upsert the batch at the target, then
// delete it from the source with each entity's ETag. When that delete batch
// fails because one entity changed or vanished, the batch falls back to the
// single-entity steps above. After each page the continuation token is
// checkpointed under the operation id, so a redelivered range resumes there;
// rows before the token were moved already, and any step re-run on a moved
// row is a no-op. The checkpoint is cleared when the range is done; a crash
// after that rescans the range and finds nothing left to move.
type Archiver struct {
	Store storeadapter.Store
	// Checkpoints keep range positions across redeliveries.
	Checkpoints idempotent.Checkpoints
	// MaxConflicts bounds how often one entity is re-read after a
	// concurrent update before the job is retried later. Default 5.
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
	if args.RK != nil {
		return mv.one(ctx, *args.RK)
	}
	return mv.rangeMove(ctx, job.ID)
}

// mover carries one job's move.
type mover struct {
	a      *Archiver
	args   ArchiveArgs
	pk     string
	target archiveTarget
}

func (a *Archiver) mover(args ArchiveArgs) *mover {
	m := &mover{a: a, args: args, pk: *args.PK}
	if args.To != "" {
		m.target = tableTarget{t: a.Store.Tables(), table: args.To}
	} else {
		container, prefix, _ := args.blobTarget() // validated
		m.target = blobTarget{b: a.Store.Container(container), prefix: prefix, table: args.Table}
	}
	return m
}

// one moves one entity (steps 1–3).
func (m *mover) one(ctx context.Context, rk string) error {
	t := m.a.Store.Tables()
	for range cmp.Or(m.a.MaxConflicts, 5) {
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
			return nil
		}
		// The source changed since it was read: copy the new version.
	}
	return fmt.Errorf("archive: %s %s/%s kept changing while being moved; retrying later", m.args.Table, m.pk, rk)
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
	for {
		q.Continuation = tok
		page, err := t.Query(ctx, m.args.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return Permanentf("archive: source table %s does not exist", m.args.Table)
		}
		if err != nil {
			return fmt.Errorf("archive: query %s: %w", m.args.Table, err)
		}
		if err := m.movePage(ctx, page.Entities); err != nil {
			return err
		}
		if page.Next == "" {
			return m.a.Checkpoints.Clear(ctx, opID, checkpointStep)
		}
		tok = page.Next
		if err := m.a.Checkpoints.Save(ctx, opID, checkpointStep, tok); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
}

// movePage moves one page of source entities in transactions of at most
// 100 (one partition: the range lies in one).
func (m *mover) movePage(ctx context.Context, entities []storeadapter.Entity) error {
	ops := make([]storeadapter.TableOp, len(entities))
	for i, e := range entities {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: e}
	}
	t := m.a.Store.Tables()
	for _, batch := range idempotent.Batches(ops) {
		if err := ctx.Err(); err != nil {
			return err
		}
		batchEntities := make([]storeadapter.Entity, len(batch))
		deletes := make([]storeadapter.TableOp, len(batch))
		for i, op := range batch {
			batchEntities[i] = op.Entity
			deletes[i] = storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: op.Entity, IfMatch: op.Entity.ETag}
		}
		if err := m.target.put(ctx, batchEntities); err != nil {
			return fmt.Errorf("archive: write %d entities to %s: %w", len(batch), m.target, err)
		}
		err := t.Transact(ctx, m.args.Table, deletes)
		if errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound) {
			// One entity changed or vanished since the page was read (or
			// the table did): the whole batch rolled back, so move each
			// entity on its own.
			for _, e := range batchEntities {
				if err := m.one(ctx, e.RowKey); err != nil && !IsPermanent(err) {
					return err
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("archive: delete %d moved entities from %s: %w", len(batch), m.args.Table, err)
		}
	}
	return nil
}

// archiveTarget is where moved entities go.
type archiveTarget interface {
	// put writes entities of one partition (at most 100), replacing copies.
	put(ctx context.Context, es []storeadapter.Entity) error
	// has reports whether the target holds the entity.
	has(ctx context.Context, pk, rk string) (bool, error)
	String() string
}

type tableTarget struct {
	t     storeadapter.Tables
	table string
}

func (tt tableTarget) String() string { return "table " + tt.table }

func (tt tableTarget) put(ctx context.Context, es []storeadapter.Entity) error {
	if len(es) == 1 {
		return idempotent.Upsert(ctx, tt.t, tt.table, es[0])
	}
	ops := make([]storeadapter.TableOp, len(es))
	for i, e := range es {
		ops[i] = storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: e}
	}
	return idempotent.Transact(ctx, tt.t, tt.table, ops)
}

func (tt tableTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := tt.t.GetEntity(ctx, tt.table, pk, rk)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// blobTarget writes each entity as annotated JSON to
// <prefix>/<table>/<pk>/<rk>.json, keys path-escaped.
type blobTarget struct {
	b             storeadapter.Blobs
	prefix, table string
}

func (bt blobTarget) String() string { return "container " + bt.b.Name() }

func (bt blobTarget) name(pk, rk string) string {
	name := bt.table + "/" + url.PathEscape(pk) + "/" + url.PathEscape(rk) + ".json"
	if bt.prefix != "" {
		name = bt.prefix + "/" + name
	}
	return name
}

func (bt blobTarget) put(ctx context.Context, es []storeadapter.Entity) error {
	for _, e := range es {
		data, err := storeadapter.MarshalEntityJSON(e)
		if err != nil {
			return err
		}
		_, err = bt.b.Put(ctx, bt.name(e.PartitionKey, e.RowKey), data, storeadapter.PutOptions{ContentType: "application/json"})
		if errors.Is(err, storeadapter.ErrNotFound) { // the container is missing
			if err = bt.b.Create(ctx); err == nil {
				_, err = bt.b.Put(ctx, bt.name(e.PartitionKey, e.RowKey), data, storeadapter.PutOptions{ContentType: "application/json"})
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (bt blobTarget) has(ctx context.Context, pk, rk string) (bool, error) {
	_, err := bt.b.Properties(ctx, bt.name(pk, rk))
	if errors.Is(err, storeadapter.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
