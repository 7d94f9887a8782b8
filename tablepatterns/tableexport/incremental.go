package tableexport

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Incremental exports and the mark.
//
// An increment exports only the rows whose Timestamp is at or after its
// lower bound (Options.Since, or the Mark of the manifest Options.After
// names). Every export with Options.Mark records in its manifest the mark:
// the lower bound the next increment must use. The chain full export,
// increment, increment, … restores every row written before the last
// increment's scan, each in its latest version, provided each increment's
// lower bound is at or before its predecessor's mark.
//
// The mark is not the largest Timestamp exported. The scan reads the source
// in key order over minutes or hours; a row written while it runs behind
// the scan (at a key already read) is not in this export, and its
// Timestamp, from the service's clock at the write, may well be before the
// largest Timestamp exported (a row ahead of the scan written later).
// A mark taken from the rows would skip it in both exports.
//
// The mark is derived from when the scan started, as the service saw it:
// the Timestamp of the export's checkpoint, which the service sets when
// the first delivery creates it, minus Options.MarkMargin. The scan reads
// every page after the create (the page read before it, to find a missing
// table before any write, is read again). Take a write W of the source
// and its Timestamp T:
//
//   - W committed before the scan read W's key: the scan sees W (a query
//     returns every committed write), so W is in this export, as long as
//     T is at or after its lower bound — which holds for every write made
//     after the previous export's scan started, by the same argument one
//     step earlier.
//   - W committed after the scan read W's key: that read came after the
//     create, so T, taken by the service after the create's Timestamp C,
//     is at or after C, and so at or after the mark C − margin: W is in
//     the next increment.
//
// So every write is in this export or the next, never in neither. The
// margin covers what "after" needs in the real service: the source's
// partitions and the checkpoint's may be on different servers whose clocks
// differ slightly, and a write is stamped before it commits (a write
// stamped just before C may commit after the scan passed its key). Five
// minutes is far above both (a table operation's server timeout is 30 s).
// The rows written in the margin are exported twice, in this export and
// the next; a restore of the chain writes them twice, harmlessly (the
// later copy wins, and it is the same or newer).
//
// Deletions leave no row, so no Timestamp: an increment cannot see them.
// A chain restores deleted rows; a periodic full export (a new chain)
// bounds how long they linger. An increment's filter on Timestamp is not
// served by an index: the service reads the whole source to find the
// changed rows (one page of up to 1,000 rows read per query, often
// returning fewer), so an increment costs the reads of a full export and
// the writes of the changed rows only.

// DefaultMarkMargin and MaxMarkMargin bound Options.MarkMargin.
const (
	DefaultMarkMargin = 5 * time.Minute
	MaxMarkMargin     = 24 * time.Hour
)

// ManifestRef names a manifest: its container and blob name.
type ManifestRef struct {
	Blobs storeadapter.Blobs
	Name  string
}

// String returns "container/name".
func (r ManifestRef) String() string { return r.Blobs.Name() + "/" + r.Name }

// AfterError is the error of an Options.After that cannot give the lower
// bound: the manifest is missing, unreadable, of another source or without
// a mark. It is permanent: the same manifest never becomes right. It wraps
// storeadapter.ErrNotFound (missing) or ErrInvalidInput.
type AfterError struct {
	// Manifest is "container/name".
	Manifest string
	// Reason says what is wrong, as a sentence's end.
	Reason string
	err    error
}

func (e *AfterError) Error() string {
	return fmt.Sprintf("tableexport: after: manifest %s %s", e.Manifest, e.Reason)
}

// Unwrap returns storeadapter.ErrNotFound or ErrInvalidInput.
func (e *AfterError) Unwrap() error { return e.err }

// ParseManifestRef splits "container/path/manifest-<op>.json" and checks
// it: a valid container and blob name whose last segment is a manifest's.
// Errors name the rule, not the field.
func ParseManifestRef(s string) (container, name string, err error) {
	container, name, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return "", "", fmt.Errorf("%q is not container/path/manifest-<op>.json", s)
	}
	if err := storeadapter.ValidateContainerName(container); err != nil {
		return "", "", err
	}
	if err := storeadapter.ValidateBlobName(name); err != nil {
		return "", "", err
	}
	if base := path.Base(name); !strings.HasPrefix(base, "manifest-") || !strings.HasSuffix(base, ".json") {
		return "", "", fmt.Errorf("%q does not name a manifest (its last segment is manifest-<op>.json)", s)
	}
	return container, name, nil
}

// lowerBound sets the state's lower bound from the options, at the first
// delivery: Since as given, or the mark of the manifest After names.
func (e *exporter) lowerBound(ctx context.Context) error {
	if e.o.AfterLatest {
		if err := e.latest(ctx); err != nil {
			return err
		}
	}
	if e.o.After == nil {
		if !e.o.Since.IsZero() {
			e.st.Since = storeadapter.DateTime(e.o.Since)
		}
		return nil
	}
	ref := e.o.After.String()
	data, _, err := e.o.After.Blobs.Get(ctx, e.o.After.Name)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return &AfterError{Manifest: ref, Reason: "does not exist", err: err}
	}
	if err != nil {
		return fmt.Errorf("tableexport: after: read manifest %s: %w", ref, err)
	}
	m, err := parseManifest(data, e.o.After.Name)
	if err != nil {
		return &AfterError{Manifest: ref, Reason: "is not readable: " + err.Error(), err: storeadapter.ErrInvalidInput}
	}
	if want := e.header(); m.Scope() != want.Scope() {
		return &AfterError{Manifest: ref, Reason: fmt.Sprintf("is an export of %s, not of %s", m.Scope(), want.Scope()), err: storeadapter.ErrInvalidInput}
	}
	mark, err := m.MarkTime()
	if err != nil || mark.IsZero() {
		return &AfterError{Manifest: ref, Reason: "records no mark (an export written before increments, or not by the export kind): give since instead", err: storeadapter.ErrInvalidInput}
	}
	e.st.Since, e.st.After = mark, ref
	return nil
}

// filter selects the source's rows after the key after, and with a lower
// bound only those whose Timestamp is at or after it: through the filter
// builder, never as text.
func (e *exporter) filter(after *storeadapter.Key) storeadapter.Filter {
	f := e.src.Filter(after)
	if !e.st.Since.IsZero() {
		f = storeadapter.And(f, storeadapter.Compare("Timestamp", storeadapter.Ge, e.st.Since))
	}
	return f
}

// selected reports whether a row the filter returned is the export's: an
// increment skips one whose Timestamp is before its lower bound, which
// Azurite returns, comparing DateTimes to the millisecond
// (docs/azure-behaviour.md, "DateTime to the 100 ns tick"); Azure
// compares ticks.
func (e *exporter) selected(row storeadapter.Entity) bool {
	return e.st.Since.IsZero() || !row.Timestamp.Before(e.st.Since)
}

// ensureMark derives the mark from the checkpoint's creation Timestamp:
// it reads the checkpoint, and while its ETag is still the one of the
// create (no save since), takes its Timestamp minus the margin. The mark
// is written with the run's next save. When the ETag differs, another run
// saved meanwhile, and every run derives the mark before its first save:
// the reloaded checkpoint holds it.
func (e *exporter) ensureMark(ctx context.Context) error {
	for e.st.MarkPending {
		at, changed, err := e.o.Checkpoints.WrittenAt(ctx, e.o.OpID, e.o.Step, e.etag)
		if err != nil {
			return fmt.Errorf("tableexport: the mark: %w", err)
		}
		if changed {
			if err := e.reload(ctx); err != nil {
				return err
			}
			continue
		}
		e.st.Mark = storeadapter.DateTime(at.Add(-e.o.MarkMargin))
		e.st.MarkPending = false
	}
	return nil
}

// latest sets Options.After to the newest export of the source under the
// prefix that records a mark.
func (e *exporter) latest(ctx context.Context) error {
	under := path.Join(e.o.Prefix, e.src.Table)
	entries, err := List(ctx, e.o.Blobs, under)
	if err != nil {
		return err
	}
	scope := e.header().Scope()
	var newest *Entry
	for i, en := range entries {
		if en.Problem == "" && en.Manifest.Mark != "" && en.Manifest.Scope() == scope && (newest == nil || en.started().After(newest.started())) {
			newest = &entries[i]
		}
	}
	if newest == nil {
		return &AfterError{Manifest: "(the latest under " + e.o.Blobs.Name() + "/" + under + ")",
			Reason: "does not exist: no export of " + scope + " there records a mark; run a full export first", err: storeadapter.ErrNotFound}
	}
	e.o.After = &ManifestRef{Blobs: e.o.Blobs, Name: newest.Name}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
