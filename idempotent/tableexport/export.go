package tableexport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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

// Source is what an export reads: a table, or one partition of it, or a
// half-open RowKey range [RKFrom, RKTo) of one partition in Azure's key
// order (storeadapter.CompareUTF16). A nil or empty bound is open.
type Source struct {
	Table  string
	PK     *string
	RKFrom *string
	RKTo   *string
}

// Validate checks the source; each error names the field ("table", "pk",
// "rkFrom", "rkTo") and the rule, so a caller can prefix it with its own
// name for the field ("args.").
func (s Source) Validate() error {
	if err := storeadapter.ValidateTableName(s.Table); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if s.PK != nil {
		if err := storeadapter.ValidateKey("pk", *s.PK); err != nil {
			return fmt.Errorf("pk: %w", err)
		}
	}
	from, to := s.bounds()
	if s.PK == nil && (from != "" || to != "") {
		return errors.New("pk: is required with rkFrom or rkTo (a RowKey range lies in one partition)")
	}
	for _, b := range []struct{ field, v string }{{"rkFrom", from}, {"rkTo", to}} {
		if b.v == "" {
			continue
		}
		if err := storeadapter.ValidateKey(b.field, b.v); err != nil {
			return fmt.Errorf("%s: %w", b.field, err)
		}
	}
	if to != "" && storeadapter.CompareUTF16(from, to) >= 0 {
		return fmt.Errorf("rkTo: must be greater than rkFrom in Azure's key order (UTF-16 code units; the range is [rkFrom, rkTo)), got [%q, %q)", from, to)
	}
	return nil
}

func (s Source) bounds() (from, to string) {
	if s.RKFrom != nil {
		from = *s.RKFrom
	}
	if s.RKTo != nil {
		to = *s.RKTo
	}
	return from, to
}

// filter selects the source's rows strictly after the key after (nil:
// from the start), built with storeadapter's filter functions only.
func (s Source) filter(after *Key) storeadapter.Filter {
	var fs []storeadapter.Filter
	from, to := s.bounds()
	if s.PK != nil {
		fs = append(fs, storeadapter.PartitionEquals(*s.PK))
		if from != "" {
			fs = append(fs, storeadapter.Compare("RowKey", storeadapter.Ge, from))
		}
		if to != "" {
			fs = append(fs, storeadapter.Compare("RowKey", storeadapter.Lt, to))
		}
	}
	switch {
	case after == nil:
	case s.PK != nil:
		fs = append(fs, storeadapter.Compare("RowKey", storeadapter.Gt, after.RK))
	default:
		fs = append(fs, storeadapter.Or(storeadapter.Compare("PartitionKey", storeadapter.Gt, after.PK),
			storeadapter.And(storeadapter.PartitionEquals(after.PK), storeadapter.Compare("RowKey", storeadapter.Gt, after.RK))))
	}
	return storeadapter.And(fs...)
}

// Key is an entity's keys.
type Key struct {
	PK string `json:"pk"`
	RK string `json:"rk"`
}

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
	// Now returns the current time (the folder's minute, the manifest's
	// times); nil means time.Now.
	Now func() time.Time
	// AfterPart, when set, is called once a part is committed and
	// checkpointed, and again for that part when a redelivery resumes
	// after a crash before the next checkpoint (so it must be
	// idempotent). An error ends the export with that error; the
	// redelivery calls it again. The archive deletes the part's rows here.
	AfterPart func(ctx context.Context, p Part) error
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
}

func (o *Options) validate() error {
	o.MaxPartBytes = cmp.Or(o.MaxPartBytes, DefaultMaxPartBytes)
	o.Step = cmp.Or(o.Step, DefaultStep)
	o.Passes = cmp.Or(o.Passes, 1)
	if o.Now == nil {
		o.Now = time.Now
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
	case o.PageSize < 0 || o.PageSize > 1000:
		return fmt.Errorf("tableexport: Options.PageSize: must be 0-1000, got %d", o.PageSize)
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return fmt.Errorf("tableexport: prefix: %w", err)
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	return nil
}

// ParseTarget splits a target "container" or "container/prefix" and
// checks it: a valid container name, and no "." or ".." segments in the
// prefix (Azure treats \ as /), which would name blobs outside it. The
// prefix comes back without leading or trailing slashes. Errors name the
// rule, not the field: the caller prefixes its field's name.
func ParseTarget(target string) (container, prefix string, err error) {
	container, prefix, _ = strings.Cut(target, "/")
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", err
	}
	if err := checkPrefix(prefix); err != nil {
		return "", "", fmt.Errorf("%q: %w", target, err)
	}
	return container, strings.Trim(prefix, "/"), nil
}

// ValidateNames checks that the blobs an export of table under prefix
// writes have valid names whatever its operation id: the longest, the
// manifest's with an id of 128 characters, must fit Azure's limits.
func ValidateNames(prefix, table string) error {
	name := table + "/2026/11/21/1030/manifest-" + strings.Repeat("o", 128) + ".json"
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		name = prefix + "/" + name
	}
	if err := storeadapter.ValidateBlobName(name); err != nil {
		return fmt.Errorf("the prefix is too long for the names of the parts and the manifest (%w)", err)
	}
	return nil
}

func checkPrefix(prefix string) error {
	for _, seg := range strings.FieldsFunc(prefix, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return errors.New(`the prefix must not hold "." or ".." path segments`)
		}
	}
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
	First, Last Key
	// Adopted is set when an earlier run of the operation committed the
	// part and this run read it back instead of writing it.
	Adopted bool
}

// state is the checkpoint of an export, stored as JSON in the token.
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
	Last *Key `json:"last,omitempty"`
	// Next is the part number to try next.
	Next int `json:"next"`
	// Parts are this operation's part numbers.
	Parts partSet `json:"parts"`
	// Pending is the part whose AfterPart may not have run yet.
	Pending int `json:"pending,omitempty"`
	// Entities and Bytes total the parts.
	Entities int64 `json:"entities"`
	Bytes    int64 `json:"bytes"`
	// Done is set before the manifest is written: a redelivery then only
	// makes sure the manifest exists.
	Done bool `json:"done,omitempty"`
}

// exporter carries one Export call.
type exporter struct {
	t   storeadapter.Tables
	src Source
	o   Options
	st  state
	// saved is set once the checkpoint exists.
	saved bool
}

// Export writes the source's entities to parts and a manifest, resuming
// from its checkpoint, and returns the manifest (see the package doc for
// the names and Manifest for its content). The steps:
//
//  1. Load the checkpoint of (OpID, Step). Done: make sure the manifest is
//     written and return it; nothing else is written. None: pick the folder
//     (the current minute, UTC) and check the container with one call.
//  2. Scan the source in key order from just after the last exported key,
//     a page at a time. For part n (from the checkpoint's next number):
//     read its blob's properties. It exists with our op in its metadata:
//     an earlier run committed it; adopt it (stream it back for its
//     count, hash and last key; it is never rewritten). It exists with
//     another op (another export in the same minute folder): try n+1.
//     It does not exist: stream lines into it until the next line would
//     pass MaxPartBytes, set its metadata and commit it with
//     If-None-Match *; when another writer committed n first, read the
//     source again from the part's start and try n again (ours: adopt;
//     another's: n+1).
//  3. Save the checkpoint (last key, next number, our parts, totals; the
//     checkpoint is saved before the first part too), then call AfterPart.
//  4. At the end of a pass, start another from the source's start while
//     the pass exported rows and Passes allow.
//  5. Mark the checkpoint done, then write the manifest (If-None-Match *:
//     a manifest already there is the one this operation wrote).
//
// Crash positions: before the first save nothing was written (a
// redelivery picks a folder again). Between a commit and its checkpoint
// the part exists with our op: the redelivery adopts it at step 2 and runs
// AfterPart for it. Between a checkpoint and the end of AfterPart, the
// checkpoint names the part as pending, and the redelivery runs AfterPart
// for it again. Between the done mark and the manifest, the redelivery
// writes the manifest, built from the checkpoint and the parts' metadata,
// so it is the same bytes. Since a part's lines are fixed by its start key
// and the rows after it (deterministic chunking), a rewritten part holds
// what the lost one would have held; a committed one is never rewritten.
//
// Done checkpoints stay (a few hundred bytes each), so a redelivery after
// the end returns the same manifest instead of exporting again into a new
// folder; "enqueue poison purge" (abandoned checkpoints) or a later
// clean-up may prune them.
//
// Errors: invalid options or source wrap storeadapter.ErrInvalidInput or
// name the field; a missing container wraps ErrContainerNotFound (unless
// CreateContainer), a missing table ErrTableNotFound.
func Export(ctx context.Context, tables storeadapter.Tables, src Source, o Options) (Manifest, error) {
	if err := src.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("tableexport: %w: %w", storeadapter.ErrInvalidInput, err)
	}
	if err := o.validate(); err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", storeadapter.ErrInvalidInput, err)
	}
	e := &exporter{t: tables, src: src, o: o}
	tok, err := o.Checkpoints.Load(ctx, o.OpID, o.Step)
	if err != nil {
		return Manifest{}, fmt.Errorf("tableexport: %w", err)
	}
	if tok != "" {
		if err := json.Unmarshal([]byte(tok), &e.st); err != nil || e.st.V != 1 {
			return Manifest{}, fmt.Errorf("tableexport: checkpoint %s/%s: not an export checkpoint (%v)", o.OpID, o.Step, err)
		}
		e.saved = true
	} else {
		now := storeadapter.DateTime(o.Now())
		e.st = state{V: 1, Minute: now.Truncate(time.Minute), Started: now, Pass: 1, Next: 1}
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

// run exports pass after pass until the last, then marks the checkpoint
// done.
func (e *exporter) run(ctx context.Context) error {
	if e.st.Pending != 0 {
		p, err := e.partOf(ctx, e.st.Pending)
		if err != nil {
			return err
		}
		if err := e.afterPart(ctx, p); err != nil {
			return err
		}
	}
	for {
		cur := newCursor(e.t, e.src, e.st.Last, e.o.PageSize)
		for {
			p, ok, err := e.nextPart(ctx, cur)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			last := p.Last
			e.st.Last, e.st.Next, e.st.Pending = &last, p.Number+1, p.Number
			e.st.Parts = e.st.Parts.add(p.Number)
			e.st.PassRows += p.Entities
			e.st.Entities += p.Entities
			e.st.Bytes += p.Bytes
			if err := e.save(ctx); err != nil {
				return err
			}
			if err := e.afterPart(ctx, p); err != nil {
				return err
			}
		}
		if e.st.PassRows == 0 || e.st.Pass >= e.o.Passes {
			break
		}
		e.st.Pass, e.st.PassRows, e.st.Last, e.st.Pending = e.st.Pass+1, 0, nil, 0
		if err := e.save(ctx); err != nil {
			return err
		}
	}
	e.st.Done, e.st.Pending, e.st.Finished = true, 0, storeadapter.DateTime(e.o.Now())
	return e.save(ctx)
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

// save writes the checkpoint.
func (e *exporter) save(ctx context.Context) error {
	tok, err := json.Marshal(e.st)
	if err != nil {
		return err
	}
	if err := e.o.Checkpoints.Save(ctx, e.o.OpID, e.o.Step, string(tok)); err != nil {
		return fmt.Errorf("tableexport: %w", err)
	}
	e.saved = true
	return nil
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
