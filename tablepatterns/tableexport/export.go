package tableexport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Limits and defaults of Options.MaxPartBytes.
const (
	DefaultMaxPartBytes int64 = 64 << 20
	MinMaxPartBytes     int64 = 1 << 10
	MaxMaxPartBytes     int64 = 4 << 30
)

// DefaultStep is the checkpoint step of an export when Options.Step is "".
const DefaultStep = "export"

// Content types of the parts.
const (
	ContentTypeLines = "application/x-ndjson"
	ContentTypeGzip  = "application/gzip"
)

// Options configure an export.
type Options struct {
	// Blobs is the container the parts and the manifest go to.
	Blobs storeadapter.Blobs
	// Prefix is the folder under which <table>/YYYY/MM/DD/HHMM/ lies; ""
	// for none. It must not hold "." or ".." segments (see ParseTarget).
	Prefix string
	// MaxPartBytes caps the uncompressed line bytes of one part: a part
	// ends before the line that would take it over the cap, and a line
	// longer than the cap gets a part of its own. Default
	// DefaultMaxPartBytes (64 MiB), MinMaxPartBytes (1 KiB) to
	// MaxMaxPartBytes (4 GiB).
	MaxPartBytes int64
	// Gzip compresses each part (.jsonl.gz, application/gzip).
	Gzip bool
	// OpID is the operation id: the checkpoint's key and the "op"
	// metadata of every part, by which a redelivery finds its own parts.
	OpID string
	// Checkpoints keep the export's progress under OpID and Step.
	Checkpoints idempotent.Checkpoints
	// Step names the checkpoint; "" means DefaultStep.
	Step string
	// Clock tells the time (the folder's minute, the manifest's times);
	// nil is the wall clock.
	Clock clock.Clock
	// AfterPart, when set, is called once a part is committed and
	// registered in the checkpoint (never for a part whose registration
	// lost to another run), and again for that part by any run that finds
	// it pending in the checkpoint: after a crash, or beside the run that
	// registered it (so it must be idempotent and may run twice at once). An error ends the export with that error; the
	// redelivery calls it again. The archive deletes the part's rows here.
	AfterPart func(ctx context.Context, p Part) error
	// Transform, when set, turns each row into what its line holds (keys
	// and ETag kept): the archive reads offloaded properties back inline.
	// It must give the same line for the same row, since a part's lines
	// depend only on its start key and the rows.
	Transform func(ctx context.Context, e storeadapter.Entity) (storeadapter.Entity, error)
	// Passes is how many times the source is scanned: after a pass that
	// exported rows, another starts from the source's start (new parts,
	// numbers continue), up to Passes. 0 means 1. The archive uses it to
	// pick up rows its deletes had to leave or that were inserted behind
	// the scan.
	Passes int
	// CreateContainer creates a missing container; without it a missing
	// container is an error wrapping storeadapter.ErrContainerNotFound,
	// found with one call before anything is written.
	CreateContainer bool
	// SkipEmptyManifest writes no manifest when the export wrote no part
	// (the archive, when nothing moved); Manifest.Name is then "".
	SkipEmptyManifest bool
	// PageSize is the query page size, 1-1,000; 0 means 1,000.
	PageSize int
	// BlockSize is the BlobWriter's block size (the memory a part
	// holds); 0 means storeadapter.DefaultBlockSize.
	BlockSize int
	// Since, when not zero, makes the export an increment: only rows
	// whose Timestamp is at or after it are exported (a filter on
	// Timestamp the service applies). Recorded in the checkpoint at the
	// first delivery and in the manifest. At most one of Since and After.
	Since time.Time
	// After, when set, makes the export an increment whose lower bound is
	// the Mark of that manifest (an earlier export of the same source),
	// read at the first delivery only. A manifest that is missing, of
	// another source or without a mark is an *AfterError.
	After *ManifestRef
	// AfterLatest is After with the newest export (by start) of the same
	// source under Blobs and Prefix that records a mark; none is an
	// *AfterError. For schedules, which do not know the last manifest.
	AfterLatest bool
	// Mark records in the checkpoint and the manifest the lower bound the
	// next increment must use (Manifest.Mark; see "The mark" in Export).
	// It costs one read of the checkpoint and one more query of the first
	// page (two: the page after it was being read ahead, and is read
	// again too). The export kind sets it; the archive does not.
	Mark bool
	// MarkMargin is how far before the export's start, as the service
	// saw it, the mark lies: the allowance for the clocks of the service's
	// servers and for writes in flight. 0 means DefaultMarkMargin (5 min),
	// at most MaxMarkMargin; negative means none (tests on one clock).
	MarkMargin time.Duration
	// Stop, when set, is asked after each part is registered in the
	// checkpoint and its AfterPart has run — only then, when the progress
	// is saved. When it returns true, Export stops and returns a *Stopped
	// error (errors.Is ErrStopped) without marking the checkpoint done; a
	// later call with the same OpID and Step goes on from the next row.
	// Every call that does not stop first writes at least one part, so an
	// export stopped as often as possible still finishes. Nil never
	// stops. The kinds pass a jobs.Budget's Spent.
	Stop func() bool
}

// CheckPartBytes checks a part size cap: MinMaxPartBytes (1 KiB) to
// MaxMaxPartBytes (4 GiB). The error names the rule, not the field: the
// caller prefixes it.
func CheckPartBytes(n int64) error {
	if n < MinMaxPartBytes || n > MaxMaxPartBytes {
		return fmt.Errorf("must be %d-%d bytes (1 KiB-4 GiB), got %d", MinMaxPartBytes, MaxMaxPartBytes, n)
	}
	return nil
}

// ErrStopped is what a *Stopped error is (errors.Is): Options.Stop ended
// the export before it was done, its progress saved in the checkpoint.
var ErrStopped = errors.New("tableexport: stopped before the end, progress saved")

// Stopped is the error Export returns when Options.Stop stopped it: the
// totals of the parts registered so far, by every run of the operation.
type Stopped struct {
	Entities int64
	Parts    int
	Bytes    int64
}

func (s *Stopped) Error() string {
	return fmt.Sprintf("%v: %d entities in %d parts so far", ErrStopped, s.Entities, s.Parts)
}

// Unwrap returns ErrStopped.
func (s *Stopped) Unwrap() error { return ErrStopped }

func (o *Options) validate() error {
	o.MaxPartBytes = cmp.Or(o.MaxPartBytes, DefaultMaxPartBytes)
	o.Step = cmp.Or(o.Step, DefaultStep)
	o.Passes = cmp.Or(o.Passes, 1)
	o.MarkMargin = max(cmp.Or(o.MarkMargin, DefaultMarkMargin), 0)
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	switch {
	case o.Blobs == nil:
		return errors.New("tableexport: Options.Blobs: is required")
	case o.OpID == "":
		return errors.New("tableexport: Options.OpID: is required")
	case o.Checkpoints.Tables == nil:
		return errors.New("tableexport: Options.Checkpoints: is required")
	case o.MaxPartBytes < MinMaxPartBytes || o.MaxPartBytes > MaxMaxPartBytes:
		return fmt.Errorf("tableexport: maxPartBytes: must be %d-%d, got %d", MinMaxPartBytes, MaxMaxPartBytes, o.MaxPartBytes)
	case o.Passes < 1:
		return fmt.Errorf("tableexport: Options.Passes: must be at least 1, got %d", o.Passes)
	case o.MarkMargin > MaxMarkMargin:
		return fmt.Errorf("tableexport: Options.MarkMargin: must be at most %v, got %v", MaxMarkMargin, o.MarkMargin)
	case btoi(!o.Since.IsZero())+btoi(o.After != nil)+btoi(o.AfterLatest) > 1:
		return errors.New("tableexport: Options.Since, After and AfterLatest: give one at most")
	case o.After != nil && (o.After.Blobs == nil || o.After.Name == ""):
		return errors.New("tableexport: Options.After: needs Blobs and Name")
	case o.PageSize < 0 || o.PageSize > 1000:
		return fmt.Errorf("tableexport: Options.PageSize: must be 0-1000, got %d", o.PageSize)
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return fmt.Errorf("tableexport: prefix: %w", err)
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	return nil
}

// Part is one committed part as Export wrote or adopted it.
type Part struct {
	// Number is the part's number in its folder (1 for 000001).
	Number int
	// Name is the blob's name.
	Name string
	// Entities is the number of lines.
	Entities int64
	// Bytes is the blob's size as stored (compressed with gzip).
	Bytes int64
	// SHA256 is the hex SHA-256 of the blob's bytes as stored.
	SHA256 string
	// StartTime and EndTime are the earliest and latest entity Timestamps.
	StartTime, EndTime time.Time
	// First and Last are the keys of the first and last lines.
	First, Last storeadapter.Key
	// Adopted is set when an earlier run of the operation committed the
	// part and this run read it back instead of writing it.
	Adopted bool
}

// stateVersion is the "v" of the checkpoints this package writes.
const stateVersion = 2

// state is the checkpoint of an export, stored as JSON in the token. Its
// size does not grow with the number of parts: the parts form a chain
// (each part's "prev" metadata names the part registered before it), and
// the checkpoint holds its last link.
type state struct {
	V int `json:"v"`
	// Minute is the folder's time: the export's start, to the minute.
	Minute time.Time `json:"minute"`
	// Started and Finished are the export's start and end.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Pass is the scan of the source in progress (from 1), PassRows the
	// entities it exported.
	Pass     int   `json:"pass"`
	PassRows int64 `json:"passRows"`
	// Last is the key of the last exported line of this pass (nil: none).
	Last *storeadapter.Key `json:"last,omitempty"`
	// Next is the part number to try next.
	Next int `json:"next"`
	// LastPart is the number of the last part registered (0: none yet);
	// PartCount counts the parts of the chain that ends there.
	LastPart  int `json:"lastPart"`
	PartCount int `json:"partCount"`
	// Pending is the part whose AfterPart may not have run yet.
	Pending int `json:"pending,omitempty"`
	// Entities and Bytes total the parts.
	Entities int64 `json:"entities"`
	Bytes    int64 `json:"bytes"`
	// Done is set before the manifest is written: a redelivery then only
	// makes sure the manifest exists.
	Done bool `json:"done,omitempty"`
	// Since is an increment's lower bound, After the manifest it came
	// from ("container/name"), fixed at the first delivery.
	Since time.Time `json:"since,omitzero"`
	After string    `json:"after,omitempty"`
	// Mark is the next increment's lower bound (Options.Mark). MarkPending
	// says it is still to be derived from this checkpoint's creation
	// Timestamp: no save has happened since the create, since every run
	// derives it before its first save (see ensureMark).
	Mark        time.Time `json:"mark,omitzero"`
	MarkPending bool      `json:"markPending,omitempty"`
}

// exporter carries one Export call.
type exporter struct {
	t   storeadapter.Tables
	src storeadapter.Range
	o   Options
	st  state
	// etag is the checkpoint's ETag as this run last read or wrote it; ""
	// until the checkpoint exists.
	etag string
}

// Export writes the source's entities to parts and a manifest, resuming
// from its checkpoint, and returns the manifest (see the package doc for
// the names and Manifest for its content).
//
// The checkpoint (OpID, Step) is the single register of the operation's
// parts and is only ever written by compare-and-swap: created with an
// insert (never overwritten), then saved If-Match the ETag this run last
// read or wrote. A save that loses (another delivery of the operation
// saved first) writes nothing: the run reloads the checkpoint, takes it as
// it stands and goes on from there. The registered parts form a chain:
// each part's metadata names its predecessor ("prev", 0 for the first)
// and the pass it belongs to ("pass"), and the checkpoint holds the last
// link (number, count, last key, totals), so it stays a few hundred bytes
// however many parts there are. The steps:
//
//  1. Load the checkpoint. Done: make sure the manifest is written and
//     return it; nothing else is written. None: pick the folder (the
//     current minute, UTC), check the container with one call, read the
//     first page (a missing table fails here, before any write) and create
//     the checkpoint. When another delivery created it first, take its
//     checkpoint (its minute, its progress) instead. An increment reads
//     its lower bound first (After's manifest); with Options.Mark the mark
//     is then derived from the checkpoint's creation Timestamp and the
//     scan starts again after it (see incremental.go and ensureMark).
//  2. When the checkpoint names a pending part, call AfterPart for it.
//  3. Scan the source in key order from just after the last exported key,
//     a page at a time. For part n (from the checkpoint's next number):
//     read its blob's properties. It exists with our op and the
//     checkpoint's last part and pass as prev and pass: an earlier run
//     from this very checkpoint committed it; adopt it (stream it back for
//     its count, hash and last key; it is never rewritten). Any other
//     existing blob (another export in the same minute folder, or a stray
//     part of ours from a superseded checkpoint) is skipped: try n+1. No
//     blob: stream lines into it until the next line would pass
//     MaxPartBytes, set its metadata and commit it with If-None-Match *;
//     when another writer committed n first, read the source again from
//     the part's start and look at n again (a bounded number of times).
//  4. Register the part: save the checkpoint (last part n, last key, next
//     number, count, totals, pending n) If-Match. Won: call AfterPart,
//     then ask Options.Stop; when it says stop, return a *Stopped error
//     (the checkpoint holds everything the next call needs). Lost: reload
//     (step 6); the part was not registered by this run and AfterPart is
//     not called for it.
//  5. At the end of a pass, save (If-Match) the start of another pass from
//     the source's start while the pass exported rows and Passes allow;
//     else save the done mark (If-Match), then write the manifest, built
//     by walking the chain back from the done checkpoint's last part
//     through the parts' metadata (If-None-Match *: a manifest already
//     there is the one this operation wrote).
//  6. After a lost save: done → stop (the manifest follows); else call
//     AfterPart for the reloaded checkpoint's pending part and go on at
//     step 3 from its last key and next number.
//
// Why nothing is lost. AfterPart (the archive deletes the part's rows)
// runs only for a part that this run registered, or that the checkpoint
// names as pending; a registered part is in the chain, and the manifest
// is the chain of the done checkpoint, which no save can change (every
// save is If-Match, and a run that sees done stops). So every part whose
// AfterPart ran is in the manifest.
//
// Crash positions: before the create nothing was written (a redelivery
// picks a folder again). Between a commit and its registration the part
// exists with our op, prev and pass: the redelivery, resuming from the
// same checkpoint, adopts it at step 3 and registers it. Between a
// registration and the end of AfterPart the checkpoint names the part as
// pending and the redelivery runs AfterPart for it again (it must be
// idempotent). Between the done mark and the manifest, the redelivery
// writes the manifest from the chain, so it is the same bytes. Since a
// part's lines are fixed by its start key and the rows after it
// (deterministic chunking), a rewritten part holds what the lost one would
// have held; a committed part is never rewritten.
//
// Two deliveries of one operation (a redelivery while a stalled run goes
// on): their first saves are inserts, so exactly one picks the minute and
// the other adopts it: one folder. Afterwards each save is If-Match, so of
// two runs at the same checkpoint one registers its part and the other
// reloads and continues from the winner's state; runs from the same
// checkpoint write the same part number from the same key, so one commits
// it and the other adopts it (same blob). A stale run whose checkpoint was
// superseded can still commit a part (a "stray"), but its registration
// fails, so its AfterPart never runs (the archive keeps those rows in the
// source) and no later run adopts it (its prev and pass name a superseded
// checkpoint). Strays are left in the folder, not deleted: proving that no
// other run registered the blob would need a walk of the chain, deleting
// it gains nothing (its rows are still in the source), and committed parts
// stay immutable; Verify reports them as parts of the operation missing
// from the manifest. A run that finds the checkpoint done stops without
// AfterPart. A lost save means another run progressed, so two runs cannot
// keep each other from finishing.
//
// Done checkpoints stay (a few hundred bytes each), so a redelivery after
// the end returns the same manifest instead of exporting again into a new
// folder; "enqueue poison purge" (abandoned checkpoints) or a later
// clean-up may prune them.
//
// Errors: Options.Stop stopping the export is a *Stopped error (errors.Is
// ErrStopped); invalid options or source wrap storeadapter.ErrInvalidInput or
// name the field; a missing container wraps ErrContainerNotFound (unless
// CreateContainer), a missing table ErrTableNotFound.
func Export(ctx context.Context, tables storeadapter.Tables, src storeadapter.Range, o Options) (Manifest, error) {
	if err := src.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("tableexport: %w: %w", storeadapter.ErrInvalidInput, err)
	}
	if err := o.validate(); err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", storeadapter.ErrInvalidInput, err)
	}
	e := &exporter{t: tables, src: src, o: o}
	tok, etag, err := o.Checkpoints.LoadETag(ctx, o.OpID, o.Step)
	if err != nil {
		return Manifest{}, fmt.Errorf("tableexport: %w", err)
	}
	if tok != "" {
		if err := e.adoptState(tok, etag); err != nil {
			return Manifest{}, err
		}
	} else {
		now := storeadapter.DateTime(o.Clock.Now())
		e.st = state{V: stateVersion, Minute: now.Truncate(time.Minute), Started: now, Pass: 1, Next: 1, MarkPending: o.Mark}
		if err := e.lowerBound(ctx); err != nil {
			return Manifest{}, err
		}
		if err := e.checkContainer(ctx); err != nil {
			return Manifest{}, err
		}
	}
	if !e.st.Done {
		if err := e.run(ctx); err != nil {
			return Manifest{}, err
		}
	}
	return e.manifest(ctx)
}

// adoptState takes a checkpoint as read.
func (e *exporter) adoptState(tok, etag string) error {
	var st state
	if err := json.Unmarshal([]byte(tok), &st); err != nil || st.V != stateVersion {
		return fmt.Errorf("tableexport: checkpoint %s/%s: not an export checkpoint of version %d (%v)", e.o.OpID, e.o.Step, stateVersion, err)
	}
	e.st, e.etag = st, etag
	return nil
}

// reload reads the checkpoint after a lost save and takes it.
func (e *exporter) reload(ctx context.Context) error {
	tok, etag, err := e.o.Checkpoints.LoadETag(ctx, e.o.OpID, e.o.Step)
	if err != nil {
		return fmt.Errorf("tableexport: %w", err)
	}
	if tok == "" {
		return fmt.Errorf("tableexport: checkpoint %s/%s vanished while the export ran (cleared by another process); the redelivery starts again", e.o.OpID, e.o.Step)
	}
	return e.adoptState(tok, etag)
}

// checkContainer makes sure the container exists with one call (creating
// it when the options say so).
func (e *exporter) checkContainer(ctx context.Context) error {
	_, err := e.o.Blobs.Properties(ctx, e.manifestName())
	switch {
	case err == nil, errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err):
		return nil
	case idempotent.Missing(err) && e.o.CreateContainer:
		if err := e.o.Blobs.Create(ctx); err != nil {
			return fmt.Errorf("tableexport: create container %s: %w", e.o.Blobs.Name(), err)
		}
		return nil
	}
	return fmt.Errorf("tableexport: container %s: %w", e.o.Blobs.Name(), err)
}

// run exports pass after pass until the checkpoint is done (see Export's
// steps).
func (e *exporter) run(ctx context.Context) error {
	cur := newCursor(e.t, e.src.Table, e.filter, e.selected, e.st.Last, e.o.PageSize, e.o.Transform)
	defer cur.close()
	if e.etag == "" {
		// The first page, read before the create, finds a missing table
		// before anything is written.
		if _, _, _, err := cur.peek(ctx); err != nil {
			return err
		}
		adopted, err := e.create(ctx)
		if err != nil {
			return err
		}
		if adopted {
			cur.reset(e.st.Last)
		}
	}
	if e.st.MarkPending {
		if err := e.ensureMark(ctx); err != nil {
			return err
		}
		// The scan starts after the mark's instant: a page read before it
		// (the first one, above) is read again.
		cur.reset(e.st.Last)
	}
	if err := e.pending(ctx); err != nil {
		return err
	}
	for !e.st.Done {
		p, ok, err := e.nextPart(ctx, cur)
		if err != nil {
			return err
		}
		next := e.st
		switch {
		case ok:
			last := p.Last
			next.Last, next.Next, next.Pending = &last, p.Number+1, p.Number
			next.LastPart, next.PartCount = p.Number, next.PartCount+1
			next.PassRows += p.Entities
			next.Entities += p.Entities
			next.Bytes += p.Bytes
		case next.PassRows == 0 || next.Pass >= e.o.Passes:
			next.Done, next.Pending, next.Finished = true, 0, storeadapter.DateTime(e.o.Clock.Now())
		default:
			next.Pass, next.PassRows, next.Last, next.Pending = next.Pass+1, 0, nil, 0
		}
		won, err := e.save(ctx, next)
		if err != nil {
			return err
		}
		if !won {
			// Another run saved first: go on from its checkpoint.
			cur.reset(e.st.Last)
			if err := e.pending(ctx); err != nil {
				return err
			}
			continue
		}
		switch {
		case ok:
			if err := e.afterPart(ctx, p); err != nil {
				return err
			}
			if e.o.Stop != nil && e.o.Stop() {
				return &Stopped{Entities: e.st.Entities, Parts: e.st.PartCount, Bytes: e.st.Bytes}
			}
		case !next.Done:
			cur.reset(nil) // the new pass starts at the source's start
		}
	}
	return nil
}

// pending calls AfterPart for the checkpoint's pending part, unless the
// export is done.
func (e *exporter) pending(ctx context.Context) error {
	if e.st.Done || e.st.Pending == 0 {
		return nil
	}
	p, err := e.partOf(ctx, e.st.Pending)
	if err != nil {
		return err
	}
	return e.afterPart(ctx, p)
}

func (e *exporter) afterPart(ctx context.Context, p Part) error {
	if e.o.AfterPart == nil {
		return nil
	}
	if err := e.o.AfterPart(ctx, p); err != nil {
		return fmt.Errorf("tableexport: after part %s: %w", p.Name, err)
	}
	return nil
}

// create writes the first checkpoint with an insert. When another run
// created it first, its checkpoint is taken instead (adopted true).
func (e *exporter) create(ctx context.Context) (adopted bool, err error) {
	tok, err := json.Marshal(e.st)
	if err != nil {
		return false, err
	}
	etag, err := e.o.Checkpoints.Create(ctx, e.o.OpID, e.o.Step, string(tok))
	switch {
	case err == nil:
		e.etag = etag
		return false, nil
	case errors.Is(err, storeadapter.ErrAlreadyExists):
		return true, e.reload(ctx)
	}
	return false, fmt.Errorf("tableexport: %w", err)
}

// save writes next If-Match the checkpoint's ETag and takes it (won).
// When another run saved first it writes nothing, reloads the checkpoint
// and takes that instead (won false).
func (e *exporter) save(ctx context.Context, next state) (won bool, err error) {
	tok, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	etag, err := e.o.Checkpoints.SaveIfMatch(ctx, e.o.OpID, e.o.Step, string(tok), e.etag)
	switch {
	case err == nil:
		e.st, e.etag = next, etag
		return true, nil
	case idempotent.Lost(err):
		return false, e.reload(ctx)
	}
	return false, fmt.Errorf("tableexport: %w", err)
}

// folder returns the parts' folder: <prefix>/<table>/YYYY/MM/DD/HHMM.
func (e *exporter) folder() string {
	f := e.src.Table + "/" + e.st.Minute.UTC().Format("2006/01/02/1504")
	if e.o.Prefix != "" {
		f = e.o.Prefix + "/" + f
	}
	return f
}

// partName returns the name of part n.
func (e *exporter) partName(n int) string {
	ext := ".jsonl"
	if e.o.Gzip {
		ext += ".gz"
	}
	return fmt.Sprintf("%s/%06d%s", e.folder(), n, ext)
}

// manifestName returns the name of the operation's manifest.
func (e *exporter) manifestName() string {
	return e.folder() + "/manifest-" + e.o.OpID + ".json"
}
