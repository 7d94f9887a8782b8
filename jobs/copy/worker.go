package copykind

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// checkpointStep names a copy's checkpoint.
const checkpointStep = "copy"

// stateVersion is the "v" of the checkpoints this package writes.
const stateVersion = 1

// state is a copy's checkpoint, stored as JSON in its token.
type state struct {
	V int `json:"v"`
	// Args is idempotent.Digest of the arguments that began the copy.
	Args string `json:"args"`
	// Last is the key of the last row written and flushed (nil before
	// the first page): the next delivery reads the rows after it.
	Last *storeadapter.Key `json:"last,omitempty"`
	// Written, Skipped and Transactions are the writer's counts of the
	// saved pages; Pages counts the pages saved.
	Written      int64 `json:"written"`
	Skipped      int64 `json:"skipped"`
	Transactions int64 `json:"transactions"`
	Pages        int64 `json:"pages"`
	// Blobs counts offloaded values put in blobs of the target's rows,
	// Dangling the references copied as they are because their blob was
	// gone (see copier.write).
	Blobs    int64 `json:"blobs,omitempty"`
	Dangling int64 `json:"dangling,omitempty"`
	// Indexed counts the keys whose index entries the pages' Syncs added
	// or changed, Unindexed the keys they removed from the indexes (rows
	// gone from the target's scope).
	Indexed   int64 `json:"indexed,omitempty"`
	Unindexed int64 `json:"unindexed,omitempty"`
	// Done is set with the last page: a later delivery writes nothing.
	Done bool `json:"done,omitempty"`
}

// Worker copies a table, a partition or a RowKey range to a table of the
// same or another storage account: the handler of the "copy" kind. Its
// steps:
//
//  1. Look up the source and target accounts (kit.Deps.Account: "" is the
//     worker's own, another name is connected on its first use). An
//     account the config does not declare, or whose credential variable
//     is not set, is a permanent error before anything is read.
//  2. Load the checkpoint (operation id, "copy"; in the worker's own
//     account). One of other arguments (the id reused) is permanent.
//     Done: report "already done" and return. None: read the first source
//     page (a missing source table is permanent before anything is
//     written), then create the checkpoint with an insert; a delivery that
//     loses the insert takes the winner's checkpoint and reads from its
//     position.
//  3. Read the next source page, at most PageSize rows in key order, of
//     the application's rows only (storeadapter.Range.Filter, which
//     leaves out tablekeeper's reserved "~tk." rows), after the
//     checkpoint's last key.
//  4. Add each row to the writer (tablepatterns/tablewrite: entity group
//     transactions of up to 100 rows of one partition, Partitions of them
//     at once, the target table created when missing; insert: rows the
//     target holds are left and counted skipped; replace: upserts), then
//     Flush: every row of the page is durable in the target.
//  5. When the target is in the worker's own account and the config
//     declares indexes on it (kit.Deps.Indexes), bring them up to date
//     with indexes.Set.Sync over the span of the target from the saved
//     position (exclusive; the source range's start at first) through the
//     page's last key (inclusive), or through the range's end with the
//     last page: the rows written are indexed, and index entries of keys
//     no longer in the target are removed. The span starts at the saved
//     position, not at the page's first row, so that it also holds the
//     rows a crashed delivery wrote after that position (below). A target
//     in another account is not synced: the declared indexes are opened
//     on the worker's own store (docs/copy.md says what to run).
//  6. Save the checkpoint If-Match its ETag: the page's last key, the
//     counts, done when the source has no next page. A save that loses
//     (another delivery of the operation saved first) writes nothing; the
//     run reloads the checkpoint and goes on from the winner's position.
//  7. Done: report "copied N rows: W written, S skipped …". Budget spent:
//     return jobs.ContinueLater(0, …); the continuation resumes at step 3
//     from the checkpoint. Else go to step 3.
//
// Nothing goes through a blob: memory holds one source page and the
// writer's batches in flight, whatever the table's size.
//
// Crash positions: before the create nothing is written. A crash during
// steps 3-6 leaves the checkpoint at the previous page: the redelivery
// reads that page again and writes it again, which ends the same (insert:
// the rows the crashed run wrote are there and are skipped, and counted
// skipped; replace: the same rows are upserted again). Since the
// checkpoint is saved only after a Flush and the Sync returned, every row
// at or before its last key is in the target and indexed. The rows the
// crashed run wrote after the saved position lie in the redelivery's
// spans, which start there and follow each other to the range's end: they
// are spans of keys, not of a page's rows, so they hold those rows even
// when the redelivery's pages end elsewhere (the source changed).
// After the done save a redelivery only reports. A continuation stops
// only after a save, so it is the crash position "after a save" without
// the crash.
//
// Two deliveries of one operation (a redelivery after a lost lease, or a
// continuation and the redelivery of the message it came from): both may
// write the same rows, which the writer's idempotent writes tolerate
// (insert: the second transaction finds a row present and goes row by
// row, skipping it). Every save is a compare-and-swap from the state the
// writer read, so the position only moves forward; the loser reloads and
// continues from the winner's. Writers of the application: a row changed
// in the source while the copy runs is copied in the version the page
// read; with two deliveries at once, replace may leave the older of two
// versions read. A row added behind the copy's position is not copied.
// Copy again (replace) once the source is quiet to catch both. Indexes:
// each delivery syncs its pages' spans after writing them, so a row both
// wrote is indexed as the table holds it, unless the older version was
// written after the other's Sync by a delivery that then stopped before
// its own: the copy again with replace syncs it too.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the copy worker on d, configured by cfg (its defaults
// filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work runs the copy job.Args names (see Worker).
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	if err := w.checkArgs(a); err != nil {
		return err
	}
	src, err := w.Account(a.From)
	if err != nil {
		return jobs.Permanent(fmt.Errorf("copy: args.from: %w", err))
	}
	dst, err := w.Account(a.To)
	if err != nil {
		return jobs.Permanent(fmt.Errorf("copy: args.to: %w", err))
	}
	mode, _ := a.mode() // validated
	c := &copier{w: w, args: a, opID: job.ID, src: src, dst: dst, budget: w.Budget(w.cfg.TimeBudget)}
	c.writer, err = tablewrite.New(tablewrite.Options{Tables: dst.Tables(), Table: a.target(), Mode: mode,
		Partitions: w.cfg.Partitions, CreateTable: true})
	if err != nil {
		return jobs.Permanent(fmt.Errorf("copy: %w", err))
	}
	err = c.run(ctx)
	var failed *sideError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errOtherArgs):
		return jobs.Permanentf("copy: envelope id: %s was used by a copy of other arguments, whose checkpoint it holds: give this copy a new operation id", job.ID)
	case errors.As(err, &failed) && failed.account != "" && errors.Is(err, storeadapter.ErrAuthentication):
		// Another account's credential is that account's problem: the
		// job fails, the worker (whose own credential is good) goes on.
		return jobs.Permanent(fmt.Errorf("copy: %w (check accounts.%s in the worker's config and the variable it names)", err, failed.account))
	case errors.As(err, &failed) && failed.side == "args.table" && errors.Is(err, storeadapter.ErrTableNotFound):
		return jobs.Permanentf("copy: args.table: table %s does not exist in %s", a.Table, account(a.From))
	case errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge):
		return jobs.Permanent(fmt.Errorf("copy: %w", err))
	}
	if _, ok := jobs.AsContinue(err); ok {
		return err
	}
	return fmt.Errorf("copy: %w", err)
}

// sideError is the error of a call on the source or the target: which
// (side, the arg naming the table) and on which account ("" the worker's).
type sideError struct {
	side, account string
	err           error
}

func (e *sideError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.side, account(e.account), e.err)
}
func (e *sideError) Unwrap() error { return e.err }

// Result is the summary of a finished copy, as the worker logs it.
func Result(a Args, st state) string {
	out := fmt.Sprintf("copied %d rows of %s (%s) to %s (%s): %d written, %d skipped, in %d transactions over %d pages",
		st.Written+st.Skipped, a.Table, account(a.From), a.target(), account(a.To), st.Written, st.Skipped, st.Transactions, st.Pages)
	if st.Indexed > 0 || st.Unindexed > 0 {
		out += fmt.Sprintf(", indexes: %d updated, %d removed", st.Indexed, st.Unindexed)
	}
	return out + largeentity.Summary(st.Blobs, st.Dangling)
}

// copier carries one delivery of a copy.
type copier struct {
	w      *Worker
	args   Args
	opID   string
	src    storeadapter.Store
	dst    storeadapter.Store
	writer *tablewrite.Writer
	budget jobs.Budget
	st     state // the checkpoint as last read or written
	cell   *idempotent.Cell[state]
	// token continues the source query from st.Last within this
	// delivery; "" starts it again from st.Last.
	token string
	// counted is the writer's counts already added to st.
	counted tablewrite.Counts
}

func (c *copier) run(ctx context.Context) error {
	c.cell = &idempotent.Cell[state]{Checkpoints: c.w.Checkpoints, Op: c.opID, Step: checkpointStep, Check: c.check}
	st, found, err := c.cell.Load(ctx)
	if err != nil {
		return err
	}
	loaded := c.cell.ETag()
	var first *storeadapter.Page
	if found {
		c.st = st
	} else {
		c.st = state{V: stateVersion, Args: idempotent.Digest(c.args)}
		page, err := c.page(ctx) // a missing source table fails here, before anything is written
		if err != nil {
			return err
		}
		if err := c.save(ctx, c.st); err != nil {
			return err
		}
		if c.st.Last == nil && !c.st.Done { // else another delivery created it and went on
			first = &page
		}
	}
	for !c.st.Done {
		var page storeadapter.Page
		if first != nil {
			page, first = *first, nil
		} else if page, err = c.page(ctx); err != nil {
			return err
		}
		if err := c.write(ctx, page); err != nil {
			return err
		}
		if !c.st.Done && c.budget.Spent() {
			return jobs.ContinueLater(0, fmt.Sprintf("copied %d rows so far: %d written, %d skipped", c.st.Written+c.st.Skipped, c.st.Written, c.st.Skipped))
		}
	}
	text := Result(c.args, c.st)
	if found && c.cell.ETag() == loaded {
		text = "already done: " + text // this delivery changed nothing
	}
	jobs.SetResult(ctx, text)
	return nil
}

// page reads the next source page: from the query's token, or after the
// checkpoint's last key.
func (c *copier) page(ctx context.Context) (storeadapter.Page, error) {
	page, err := c.src.Tables().Query(ctx, c.args.Table, storeadapter.Query{
		Filter: c.args.source().Filter(c.st.Last), Top: c.w.cfg.PageSize, Continuation: c.token})
	if err != nil {
		return page, &sideError{side: "args.table", account: c.args.From, err: fmt.Errorf("read %s: %w", c.args.Table, err)}
	}
	c.token = page.Next
	return page, nil
}

// write writes a page to the target, flushes, and saves the checkpoint
// after it (steps 4 and 5 of Worker). A row with offloaded properties
// (blobsync) is written with blobs of its own under the target's key
// (largeentity.Place, as archive carries them): each value is read from
// the source account's blob, checked, and put in the target account —
// in the container the worker's blobsync layout declares for the target
// table's name, or else the reference's — before the row is handed to
// the writer, so a reference never names a blob that is not there. The
// puts are content-addressed and unconditional, so a page written again
// puts the same bytes. A reference whose blob is gone is copied as it is
// (counted Dangling).
func (c *copier) write(ctx context.Context, page storeadapter.Page) error {
	var placed largeentity.Placed
	for _, e := range page.Entities {
		e, n, err := largeentity.Place(ctx, c.src, c.dst, c.w.Layout, e, c.args.target())
		if err != nil {
			return c.targetErr(fmt.Errorf("row %s/%s: %w", e.PartitionKey, e.RowKey, err))
		}
		placed.Add(n)
		if err := c.writer.Add(ctx, e); err != nil {
			return c.targetErr(err)
		}
	}
	if err := c.writer.Flush(ctx); err != nil {
		return c.targetErr(err)
	}
	now := c.writer.Counts()
	next := c.st
	next.Written += now.Written - c.counted.Written
	next.Skipped += now.Skipped - c.counted.Skipped
	next.Transactions += now.Transactions - c.counted.Transactions
	c.counted = now
	next.Blobs += int64(placed.Blobs)
	next.Dangling += int64(placed.Dangling)
	next.Pages++
	next.Done = page.Next == ""
	if n := len(page.Entities); n > 0 {
		next.Last = &storeadapter.Key{PK: page.Entities[n-1].PartitionKey, RK: page.Entities[n-1].RowKey}
	} else if !next.Done {
		return nil // an empty page with a token: nothing to save yet
	}
	if err := c.syncIndexes(ctx, &next); err != nil {
		return err
	}
	return c.save(ctx, next)
}

// syncIndexes brings the target's declared indexes up to date for the
// keys from the saved position through next's (step 5 of Worker), and
// adds what Sync did to next's counts. A target in another account, or
// without declared indexes, costs nothing.
func (c *copier) syncIndexes(ctx context.Context, next *state) error {
	if c.args.To != "" || !c.w.Indexes.Declared(c.args.target()) {
		return nil
	}
	through := next.Last
	if next.Done {
		through = nil
	}
	target := c.args.source()
	target.Table = c.args.target()
	res, err := c.w.Indexes.Sync(ctx, target.Table, indexes.Within(target, c.st.Last, through))
	if err != nil {
		return c.targetErr(fmt.Errorf("reconcile the indexes: %w", err))
	}
	next.Indexed += int64(res.Registered - res.Removed)
	next.Unindexed += int64(res.Removed)
	return nil
}

func (c *copier) targetErr(err error) error {
	return &sideError{side: "args.target", account: c.args.To, err: fmt.Errorf("write %s: %w", c.args.target(), err)}
}

// errOtherArgs marks a checkpoint of the operation id written by a copy
// of other arguments.
var errOtherArgs = errors.New("the operation id belongs to a copy of other arguments")

// check refuses a checkpoint of another version, or one written for other
// arguments (errOtherArgs).
func (c *copier) check(st state) error {
	if st.V != stateVersion {
		return fmt.Errorf("checkpoint %s/%s: not a copy checkpoint of version %d (version %d)", c.opID, checkpointStep, stateVersion, st.V)
	}
	if st.Args != idempotent.Digest(c.args) {
		return errOtherArgs
	}
	return nil
}

// save writes next (the first time an insert, then If-Match the
// checkpoint's ETag) and takes it; when another delivery wrote first,
// nothing is written and that delivery's checkpoint is taken, the source
// query starting again from its position.
func (c *copier) save(ctx context.Context, next state) error {
	st, won, err := c.cell.Put(ctx, next)
	if err != nil {
		return err
	}
	c.st = st
	if !won {
		c.token = ""
	}
	return nil
}
