package poison

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/text"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Drop is a job the runner dropped because the transaction that sent it
// (a transactional enqueue, client.Tx) never committed: its outbox row was
// still missing when the commit window closed. A drop is no failure —
// nothing is parked — but operators count them (enqueue stats), so the
// Recorder keeps one drop record per operation.
type Drop struct {
	// OpID and Kind come from the envelope. OpID keys the record.
	OpID, Kind string
	// MessageID is the message that was dropped (a re-send of the
	// operation's first message when the job waited for its row).
	MessageID string
	// Table, PK and RK name the outbox row that never appeared.
	Table, PK, RK string
	// Window is the commit window; Since is when it opened (the first
	// message's insertion time, by the queue's clock).
	Window time.Duration
	Since  time.Time
	// Time is when the job was dropped; zero means now.
	Time time.Time
	// Host names the worker that dropped it; "" means this host.
	Host string
}

// dropPartitionPrefix starts the PartitionKey of the drop records of a work
// queue: dropPartitionPrefix + the queue's name. A failure record's
// PartitionKey is a queue message id, which never starts with the
// reserved prefix; scan and get leave such partitions alone, and drop
// records have no Queue property, so no query of failure records (List,
// Show, Requeue, Purge) returns one.
const dropPartitionPrefix = storeadapter.ReservedPrefix + "dropped."

// Drop record properties (PartitionKey dropPartition(queue), RowKey the
// operation id).
const (
	dropKind      = "Kind"
	dropMessageID = "MessageID"
	dropTable     = "OutboxTable"
	dropPK        = "OutboxPK"
	dropRK        = "OutboxRK"
	dropWindow    = "WindowSeconds"
	dropSince     = "Since"
	dropTime      = "DroppedAt"
	dropHost      = "Host"
)

// dropPartition returns the partition of the drop records of work queue q.
// Queues whose names map to the same records table (see TableName) keep
// theirs apart.
func dropPartition(q string) string { return dropPartitionPrefix + q }

// reservedPartition reports whether pk is a partition tablekeeper keeps
// for itself in the records table (drop records), not a failure record's
// message id.
func reservedPartition(pk string) bool { return storeadapter.IsReserved(pk) }

// RecordDropped records a dropped job: an upsert (replace) of the row
// keyed by its operation id in the drop partition of this work queue, in
// the records table (created on first use). Recording the same drop again
// lands on the same row, so a redelivery that drops a job twice counts it
// once. The runner calls it best effort: a failure is logged, never fails
// the message.
func (r *Recorder) RecordDropped(ctx context.Context, d Drop) error {
	if err := storeadapter.ValidateKey("op id", d.OpID); err != nil {
		return fmt.Errorf("poison: record drop: %w", err)
	}
	when := d.Time
	if y := when.UTC().Year(); y < 1601 || y > 9999 {
		when = r.now()
	}
	props := map[string]any{
		dropKind:      text.Truncate(d.Kind, maxNameChars),
		dropMessageID: text.Truncate(d.MessageID, maxNameChars),
		dropTable:     d.Table, // keys: at most 1 KiB each
		dropPK:        d.PK,
		dropRK:        d.RK,
		dropWindow:    int64(d.Window / time.Second),
		dropTime:      storeadapter.DateTime(when),
		dropHost:      text.Truncate(cmp.Or(d.Host, r.cfg.Host), maxNameChars),
	}
	if !d.Since.IsZero() {
		props[dropSince] = storeadapter.DateTime(d.Since)
	}
	e := storeadapter.Entity{PartitionKey: dropPartition(r.cfg.Source.Name()), RowKey: d.OpID, Properties: props}
	err := idempotent.CreateOnMissing(ctx, r.createTable, func(ctx context.Context) error {
		_, err := r.cfg.Tables.UpsertEntity(ctx, r.cfg.Table, e, storeadapter.Replace)
		return err
	})
	if err != nil {
		return fmt.Errorf("poison: record drop of %s: %w", d.OpID, err)
	}
	return nil
}

// CountDrops counts the drop records of this work queue, reading their
// keys and one short property (one query per 1,000 records). It stops at
// the first page that brings the count to limit or more (limit <= 0: no
// limit); more reports that it stopped before the last page, so that
// there are more than n. A missing table holds none.
func (in *Inspector) CountDrops(ctx context.Context, limit int) (n int, more bool, err error) {
	complete, err := in.scanDrops(ctx, storeadapter.Filter{}, []string{dropKind}, func(page []storeadapter.Entity) (bool, error) {
		n += len(page)
		return limit <= 0 || n < limit, nil
	})
	if err != nil {
		return n, false, fmt.Errorf("poison: count drops: %w", err)
	}
	return n, !complete, nil
}

// scanDrops calls fn with each page of this work queue's drop records that
// match f, selecting sel, until fn returns false or an error, and reports
// whether it read the last page. A missing table holds none.
func (in *Inspector) scanDrops(ctx context.Context, f storeadapter.Filter, sel []string, fn func(page []storeadapter.Entity) (bool, error)) (complete bool, err error) {
	q := storeadapter.Query{Filter: storeadapter.And(storeadapter.Compare("PartitionKey", storeadapter.Eq, dropPartition(in.cfg.Source.Name())), f), Select: sel}
	for {
		page, err := in.cfg.Tables.Query(ctx, in.cfg.Table, q)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		goOn, err := fn(page.Entities)
		switch {
		case err != nil:
			return false, err
		case page.Next == "":
			return true, nil
		case !goOn:
			return false, nil
		}
		q.Continuation = page.Next
	}
}

// purgeDrops deletes (with dryRun, counts) the drop records of this work
// queue dropped before cut (all of them when cut is zero), of kind unless
// it is "", page by page, conc at a time, reporting PhaseDrops (Total 0
// until the end).
// Each delete is If-Match the ETag read: a record written again meanwhile
// (the same operation dropped again) stays and is not counted, as is one
// already gone.
func (in *Inspector) purgeDrops(ctx context.Context, cut time.Time, kind string, dryRun bool, conc int, rep *reporter) (int, error) {
	var f storeadapter.Filter
	if !cut.IsZero() {
		f = storeadapter.Compare(dropTime, storeadapter.Lt, cut)
	}
	if kind != "" {
		f = storeadapter.And(f, storeadapter.Compare(dropKind, storeadapter.Eq, kind))
	}
	var (
		mu sync.Mutex
		n  int
	)
	_, err := in.scanDrops(ctx, f, []string{dropKind}, func(page []storeadapter.Entity) (bool, error) {
		if dryRun {
			n += len(page)
			return true, nil
		}
		err := each(ctx, len(page), conc, nil, "", func(ctx context.Context, i int) error {
			e := page[i]
			err := in.cfg.Tables.DeleteEntity(ctx, in.cfg.Table, e.PartitionKey, e.RowKey, e.ETag)
			switch {
			case err == nil:
				mu.Lock()
				n++
				mu.Unlock()
			case errors.Is(err, storeadapter.ErrNotFound), errors.Is(err, storeadapter.ErrPreconditionFailed):
			default:
				return fmt.Errorf("delete drop record %s: %w", e.RowKey, err)
			}
			return nil
		})
		if len(page) > 0 {
			rep.report(PhaseDrops, n, 0)
		}
		return err == nil, err
	})
	if err == nil && n > 0 && !dryRun {
		rep.report(PhaseDrops, n, n)
	}
	if err != nil {
		return n, fmt.Errorf("poison: purge drops: %w", err)
	}
	return n, nil
}
