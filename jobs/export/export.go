package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Kind is the envelope kind of exports.
const Kind = "export"

// checkpointStep names an export's checkpoint.
const checkpointStep = "export"

// Args are the arguments of an export (docs/export.md documents them). Table
// alone exports the whole table; PK one partition; PK with RKFrom and/or
// RKTo the half-open RowKey range [RKFrom, RKTo) in Azure's key order. To
// is "container" or "container/prefix"; the parts go to
// <prefix>/<table>/YYYY/MM/DD/HHMM/.
type Args struct {
	Table  string  `json:"table"`
	PK     *string `json:"pk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
	To     string  `json:"to"`
	// Gzip compresses the parts (.jsonl.gz).
	Gzip bool `json:"gzip,omitempty"`
	// MaxPartBytes caps a part's uncompressed line bytes, 1 KiB-4 GiB;
	// absent: the config's export.maxPartBytes.
	MaxPartBytes *int64 `json:"maxPartBytes,omitempty"`
	// Since makes the export an increment: only rows whose Timestamp is
	// at or after this RFC 3339 time are exported.
	Since *string `json:"since,omitempty"`
	// After makes the export an increment from the mark of an earlier
	// export of the same scope: its manifest,
	// "container/path/manifest-<op>.json". At most one of Since and After.
	After string `json:"after,omitempty"`
	// AfterLatest is After with the newest export of the same scope under
	// To that records a mark, found at the first delivery: what a schedule
	// sends, not knowing the last manifest. At most one of the three.
	AfterLatest bool `json:"afterLatest,omitempty"`
}

// Kind returns "export".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := a.source().Validate(); err != nil {
		return fmt.Errorf("args.%w", err)
	}
	if a.To == "" {
		return errors.New(`args.to: is required ("container" or "container/prefix")`)
	}
	_, prefix, err := tableexport.ParseTarget(a.To)
	if err != nil {
		return fmt.Errorf("args.to: %w", err)
	}
	if a.MaxPartBytes != nil {
		if err := tableexport.CheckPartBytes(*a.MaxPartBytes); err != nil {
			return fmt.Errorf("args.maxPartBytes: %w", err)
		}
	}
	if err := tableexport.ValidateNames(prefix, a.Table); err != nil {
		return fmt.Errorf("args.to: %w", err)
	}
	if _, err := a.SinceTime(); err != nil {
		return fmt.Errorf("args.since: %w", err)
	}
	if a.AfterLatest && (a.Since != nil || a.After != "") {
		return errors.New("args.afterLatest: give one of since, after and afterLatest")
	}
	if a.After != "" {
		if a.Since != nil {
			return errors.New("args.since: give since or after, not both")
		}
		if _, _, err := tableexport.ParseManifestRef(a.After); err != nil {
			return fmt.Errorf("args.after: %w", err)
		}
	}
	return nil
}

// SinceTime returns Since parsed (zero when absent); an error names the
// rule: RFC 3339 with a zone, in Edm.DateTime's range.
func (a Args) SinceTime() (time.Time, error) {
	if a.Since == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *a.Since)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time such as 2026-11-21T00:00:00Z", *a.Since)
	}
	if _, err := storeadapter.Literal(t); err != nil {
		return time.Time{}, fmt.Errorf("%q: %w", *a.Since, err)
	}
	return t, nil
}

func (a Args) source() storeadapter.Range {
	return storeadapter.Range{Table: a.Table, PK: a.PK, RKFrom: a.RKFrom, RKTo: a.RKTo}
}

// Worker exports a table, a partition or a RowKey range to blobs: the
// handler of the "export" kind. It is tableexport.Export with the
// operation id as the export's identity, so its steps are the exporter's:
//
//  1. Load the checkpoint (operation id, "export"). Done: return the
//     manifest it names (written now if a crash came between the done
//     mark and the manifest); nothing else is written. None: check the
//     container (one call; missing: permanent), read the first page
//     (missing table: permanent), pick the folder (this minute, UTC) and
//     create the checkpoint (insert only: a delivery that loses the insert
//     takes the winner's folder and progress).
//  2. For each part: claim the next number (Properties: free, ours from an
//     earlier run, or another export's in the same folder), stream the
//     lines into it up to the size cap, commit it If-None-Match *, then
//     register it in the checkpoint (If-Match its ETag: the last key, the
//     number and the totals; each part's metadata names the op's previous
//     part, so the checkpoint stays small).
//     After each registered part, when the delivery's time budget
//     (Config.TimeBudget, from the delivery's start by the worker's
//     clock) is spent, stop and return jobs.ContinueLater(0, "exported N
//     entities in K parts so far"): the runner re-sends the operation as
//     a new message and deletes this one; the next delivery loads the
//     checkpoint and goes on from the next row, with a fresh budget.
//  3. Mark the checkpoint done (If-Match), then write the manifest
//     If-None-Match *, built from the done checkpoint's chain of parts.
//  4. (The runner) delete the message.
//
// Offloaded properties (blobsync): each line holds the value of every
// property offloaded to a blob beside its reference (largeentity.Embed:
// one read of the blob, checked against the reference), so the export
// holds all a row needs even after the blobs are collected (a deleted
// table's are). restore puts the values back in blobs
// (largeentity.Place). References of mode attach — blobs the application
// owns — are exported as references only.
//
// Increments (Args.Since, After or AfterLatest): the lower bound is fixed at the
// first delivery (After's manifest is read then, and a missing one, one of
// another scope or one without a mark is permanent, naming args.after) and
// kept in the checkpoint, so continuations and redeliveries export the
// same rows whatever happens to that manifest meanwhile. Every export,
// full or not, records in its manifest the mark of the next increment:
// the checkpoint's creation Timestamp (the service's clock at the scan's
// start) less Config.MarkMargin, so a row written while the export runs
// is in this export or the next increment (tableexport's incremental.go
// has the argument).
//
// Crash positions: before the first checkpoint nothing is written. A
// continuation stops only after a registration, so it is the crash
// position "after a checkpoint" without the crash; when the runner's send
// of the continuation and its delete of this message are separated by a
// crash, two messages of the operation resume from the same checkpoint:
// two workers of one export, below. After
// a commit and before its checkpoint, the redelivery finds the part with
// its op in the metadata and adopts it (reads it back for its count, hash
// and last key; never rewrites it). After a checkpoint it resumes with
// the next row, and since a part's lines depend only on its start key and
// the rows (deterministic chunking), it writes what the lost run would
// have. After the done mark it writes the manifest, whose bytes depend
// only on the checkpoint and the parts' metadata. After step 3 the
// redelivery returns the manifest and writes nothing. A done checkpoint
// stays so that a late redelivery does not export again into a new
// folder.
//
// Two workers of one export (a redelivery after a lost lease): each part
// number is committed by one of them (If-None-Match *); the other's
// commit fails, it looks at the number again, finds its own op and adopts
// the part. Every checkpoint write is a compare-and-swap, so a worker
// whose write loses reloads the checkpoint and goes on from it (or stops
// when it is done): only registered parts are in the manifest, which is
// written once and read by the other. tableexport.Export has the full
// argument. Two
// exports sharing a minute folder (many ranges of one table at once)
// skip each other's parts by their op metadata, and one that loses a
// number to the other reads its rows again into the next number. A
// committed part is never rewritten.
type Worker struct {
	kit.Base
	cfg Config
}

// New returns the export worker on store, configured by cfg (its
// defaults filled in); an invalid cfg is an error naming the field.
func New(d kit.Deps, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{Base: kit.NewBase(d, cfg.CheckpointTable, cfg.MaxRunTime), cfg: cfg}, nil
}

// Work runs the export job.Args names.
func (w *Worker) Work(ctx context.Context, job *jobs.Job[Args]) error {
	a := job.Args
	container, prefix, _ := tableexport.ParseTarget(a.To) // validated
	budget := w.Budget(w.cfg.TimeBudget)
	o := tableexport.Options{
		Blobs: w.Store.Container(container), Prefix: prefix, MaxPartBytes: w.cfg.MaxPartBytes, Gzip: a.Gzip,
		OpID: job.ID, Checkpoints: w.Checkpoints, Step: checkpointStep, Clock: w.Clock, Stop: budget.Spent,
		Transform: largeentity.Embedding(w.Store),
	}
	if a.MaxPartBytes != nil {
		o.MaxPartBytes = *a.MaxPartBytes
	}
	o.Mark, o.MarkMargin = true, time.Duration(w.cfg.MarkMargin)
	o.Since, _ = a.SinceTime() // validated
	o.AfterLatest = a.AfterLatest
	if a.After != "" {
		ac, an, _ := tableexport.ParseManifestRef(a.After) // validated
		o.After = &tableexport.ManifestRef{Blobs: w.Store.Container(ac), Name: an}
	}
	m, err := tableexport.Export(ctx, w.Store.Tables(), a.source(), o)
	var stopped *tableexport.Stopped
	var after *tableexport.AfterError
	switch {
	case errors.As(err, &after):
		return jobs.Permanentf("export: args.after: manifest %s %s", after.Manifest, after.Reason)
	case errors.As(err, &stopped):
		return jobs.ContinueLater(0, fmt.Sprintf("exported %d entities in %d parts so far", stopped.Entities, stopped.Parts))
	case errors.Is(err, storeadapter.ErrContainerNotFound):
		return jobs.Permanentf("export: args.to: container %s does not exist", container)
	case errors.Is(err, storeadapter.ErrTableNotFound):
		return jobs.Permanentf("export: args.table: table %s does not exist", a.Table)
	case errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge):
		return jobs.Permanent(fmt.Errorf("export: %w", err))
	case err != nil:
		return fmt.Errorf("export: %w", err)
	}
	jobs.SetResult(ctx, Result(m))
	return nil
}

// Result is the summary of a finished export, as the worker logs it.
func Result(m tableexport.Manifest) string {
	return fmt.Sprintf("exported %d entities in %d parts to %s/%s", m.Entities, len(m.Parts), m.Container, m.Name)
}
