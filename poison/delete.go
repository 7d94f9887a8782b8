package poison

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// DeleteOptions select the records DeleteMany removes.
type DeleteOptions struct {
	// IDs are original message ids, of records in any state.
	IDs []string
	// Concurrency is how many records are read and removed at once; 0
	// means DefaultConcurrency.
	Concurrency int
	// Progress, when set, hears how far each phase has got (see
	// Progress): PhaseRead, PhaseDeletePoison, PhaseSweep and
	// PhaseDeleteRecords.
	Progress func(Progress)
}

// DeleteResult is what DeleteMany did.
type DeleteResult struct {
	// Deleted are the ids whose records were removed, in the order given.
	Deleted []string
	// NotFound are the ids that have no record, in the order given.
	NotFound []string
}

// Delete removes the record of one original message id, in any state,
// with its blob and its poison-queue messages: DeleteMany of that id. It
// returns an error wrapping storeadapter.ErrNotFound when there is no
// record.
func (in *Inspector) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("poison: delete: %w", err)
	}
	res, err := in.DeleteMany(ctx, DeleteOptions{IDs: []string{id}})
	if err == nil && len(res.NotFound) > 0 {
		err = fmt.Errorf("poison: delete %s: %w", id, storeadapter.ErrNotFound)
	}
	return err
}

// DeleteMany removes the records of original message ids, in any state,
// with their blobs and their poison-queue messages. An id without a record
// is listed in the result's NotFound, not an error; one that cannot be a
// message id is an error wrapping storeadapter.ErrInvalidInput, and the
// other ids are still deleted.
//
// It reads the records, removes their poison messages (those the records
// note by id, the others in one pass for all; see the package
// documentation; a record still failing has none, nor has a requeued one
// whose requeue removed them), then deletes each record (unconditionally) and then its
// blob, conditional on the ETag the record names: a redelivered original
// poisoned again meanwhile has rewritten the blob before its record, and
// that record keeps its blob. Each phase works on up to Concurrency
// records at once; records are independent, and each record's steps keep
// this order. After the first storage error a phase starts no more
// records and DeleteMany returns once the started ones are done.
//
// A crash before a record's delete leaves the record in place, and
// running DeleteMany again finishes the job; a crash after it leaves a
// blob nothing refers to, which the next Move of that message id
// overwrites. A poison message hidden by the pass of a concurrent Requeue,
// Delete or Purge is missed and outlives the record: run operator commands
// one at a time.
func (in *Inspector) DeleteMany(ctx context.Context, o DeleteOptions) (DeleteResult, error) {
	var res DeleteResult
	rep := &reporter{fn: o.Progress}
	found, err := in.getMany(ctx, o.IDs, o.Concurrency, rep)
	if err != nil {
		return res, fmt.Errorf("poison: delete: %w", err)
	}
	var (
		es   []entry
		errs []error
	)
	for _, l := range found {
		switch {
		case errors.Is(l.err, storeadapter.ErrNotFound):
			res.NotFound = append(res.NotFound, l.id)
		case l.err != nil:
			errs = append(errs, fmt.Errorf("poison: delete: %w", l.err))
		default:
			es = append(es, l.e)
		}
	}
	if _, err := in.removePoisonMessages(ctx, es, o.Concurrency, rep); err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("poison: delete: %w", err))...)
	}
	removed, err := in.removeRecords(ctx, es, false, o.Concurrency, rep, nil)
	gone := map[string]bool{}
	for _, e := range removed {
		gone[e.rec.MessageID] = true
	}
	for _, e := range es { // in the order given
		if gone[e.rec.MessageID] {
			res.Deleted = append(res.Deleted, e.rec.MessageID)
		}
	}
	return res, errors.Join(append(errs, err)...)
}

// removeRecords deletes the records es and then each one's blob (see
// deleteBlob), conc at a time, reporting PhaseDeleteRecords, and returns
// the records it removed (in no particular order). With ifMatch each
// delete is conditional on the ETag read, and the records changed or gone
// meanwhile go to kept; without, every record is deleted, and one already
// gone counts as removed.
func (in *Inspector) removeRecords(ctx context.Context, es []entry, ifMatch bool, conc int, rep *reporter, kept func(entry)) ([]entry, error) {
	verb, etag := "delete", func(entry) string { return storeadapter.ETagAny }
	if ifMatch {
		verb, etag = "purge", func(e entry) string { return e.etag }
	}
	var (
		mu      sync.Mutex
		removed []entry
	)
	err := each(ctx, len(es), conc, rep, PhaseDeleteRecords, func(ctx context.Context, i int) error {
		e := es[i]
		id := e.rec.MessageID
		err := in.cfg.Tables.DeleteEntity(ctx, in.cfg.Table, id, recordRowKey, etag(e))
		switch {
		case ifMatch && (errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrNotFound)):
			mu.Lock()
			kept(e) // changed meanwhile: it stays
			mu.Unlock()
			return nil
		case err != nil && !errors.Is(err, storeadapter.ErrNotFound):
			return fmt.Errorf("poison: %s %s: %w", verb, id, err)
		}
		mu.Lock()
		removed = append(removed, e)
		mu.Unlock()
		if err := in.deleteBlob(ctx, e); err != nil {
			return fmt.Errorf("poison: %s %s: %w", verb, id, err)
		}
		return nil
	})
	return removed, err
}
