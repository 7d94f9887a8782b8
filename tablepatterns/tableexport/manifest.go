package tableexport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ManifestVersion is the "version" of the manifests this package writes.
// Version 2 added the optional since, after and mark of incremental
// exports; version 1 manifests are read as they are (full exports, no
// mark). The rule: a field a reader must understand to use a manifest
// correctly (since: the parts hold only the changed rows) comes with a new
// version, so an older reader refuses the manifest by its version instead
// of misreading it; a reader reads every version up to its own.
const ManifestVersion = 2

// Manifest lists an export's parts. It is stored as JSON (indented, keys
// in the order of the fields) at <folder>/manifest-<op>.json.
type Manifest struct {
	Version int    `json:"version"`
	Op      string `json:"op"`
	Table   string `json:"table"`
	// Source is the range exported: pk, rkFrom, rkTo (absent: open).
	Source ManifestSource `json:"source"`
	Gzip   bool           `json:"gzip"`
	// Container and Folder say where the parts are.
	Container string `json:"container"`
	Folder    string `json:"folder"`
	// Started and Finished are the export's start and end (RFC 3339,
	// seven fractional digits, UTC).
	Started  string `json:"started"`
	Finished string `json:"finished"`
	// Since is an incremental export's lower bound: only rows whose
	// Timestamp is at or after it were exported (RFC 3339, seven
	// fractional digits, UTC). Absent: a full export. After is the
	// manifest ("container/name") whose mark gave it, when the export was
	// asked with after.
	Since string `json:"since,omitempty"`
	After string `json:"after,omitempty"`
	// Mark is the lower bound the next increment must use: the export's
	// start as the service saw it, less a margin (see "Incremental exports
	// and the mark" in the package's incremental.go, and Export). Absent
	// in manifests written without Options.Mark or before version 2.
	Mark string `json:"mark,omitempty"`
	// Entities and Bytes total the parts (Bytes as stored).
	Entities int64          `json:"entities"`
	Bytes    int64          `json:"bytes"`
	Parts    []ManifestPart `json:"parts"`

	// Name is the manifest's blob name in Container; "" when no manifest
	// was written (Options.SkipEmptyManifest). Not part of the JSON.
	Name string `json:"-"`
}

// Incremental reports whether the export holds only the rows changed
// since a lower bound (Since): restoring it alone does not give the
// source; a restore that deletes what an export lacks must refuse it.
func (m Manifest) Incremental() bool { return m.Since != "" }

// Scope names what the export covers: "table T", with "pk P" and the
// RowKey bounds when given. Two exports of one scope form a chain.
func (m Manifest) Scope() string {
	s := "table " + m.Table
	if m.Source.PK != nil {
		s += fmt.Sprintf(" pk %q", *m.Source.PK)
	}
	if m.Source.RKFrom != nil {
		s += fmt.Sprintf(" rkFrom %q", *m.Source.RKFrom)
	}
	if m.Source.RKTo != nil {
		s += fmt.Sprintf(" rkTo %q", *m.Source.RKTo)
	}
	return s
}

// ScopeOf returns the Scope of the exports of src.
func ScopeOf(src storeadapter.Range) string {
	return Manifest{Table: src.Table, Source: sourceOf(src)}.Scope()
}

// sourceOf returns the manifest's source of src: the bounds given and
// not empty.
func sourceOf(s storeadapter.Range) ManifestSource {
	src := ManifestSource{PK: s.PK}
	if from, to := s.Bounds(); s.PK != nil {
		if from != "" {
			src.RKFrom = &from
		}
		if to != "" {
			src.RKTo = &to
		}
	}
	return src
}

// MarkTime returns the parsed Mark, zero when the manifest has none.
func (m Manifest) MarkTime() (time.Time, error) { return parseTime(m.Mark) }

// SinceTime returns the parsed Since, zero for a full export.
func (m Manifest) SinceTime() (time.Time, error) { return parseTime(m.Since) }

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// ManifestSource is the source range of a manifest.
type ManifestSource struct {
	PK     *string `json:"pk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
}

// ManifestPart is one part of a manifest.
type ManifestPart struct {
	Name     string `json:"name"`
	Entities int64  `json:"entities"`
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256"`
	// StartTime and EndTime are the earliest and latest entity
	// Timestamps, as in the part's metadata.
	StartTime string `json:"starttime"`
	EndTime   string `json:"endtime"`
}

// manifest returns the operation's manifest, writing it when it is not
// there yet (after the checkpoint was marked done). It is built from the
// done checkpoint and the parts' metadata only, walking the chain of parts
// back from the checkpoint's last part through each part's "prev", so a
// rewrite after a crash gives the same bytes; an existing manifest is
// read, never replaced.
func (e *exporter) manifest(ctx context.Context) (Manifest, error) {
	name := e.manifestName()
	if e.st.PartCount == 0 && e.o.SkipEmptyManifest {
		return e.header(), nil
	}
	if m, err := getManifest(ctx, e.o.Blobs, name); !errors.Is(err, storeadapter.ErrNotFound) || idempotent.Missing(err) {
		return m, err
	}
	m := e.header()
	m.Name = name
	m.Parts = make([]ManifestPart, 0, e.st.PartCount)
	for n := e.st.LastPart; n != 0; {
		pn := e.partName(n)
		props, err := e.o.Blobs.Properties(ctx, pn)
		if err != nil {
			return Manifest{}, fmt.Errorf("tableexport: manifest: part %s: %w", pn, err)
		}
		mp, err := manifestPart(props)
		if err != nil {
			return Manifest{}, err
		}
		prev, err := strconv.Atoi(props.Metadata[MetaPrev])
		if err != nil || prev < 0 || prev >= n || props.Metadata[MetaOp] != e.o.OpID || len(m.Parts) == e.st.PartCount {
			return Manifest{}, fmt.Errorf("tableexport: manifest: part %s: not a link of the chain of %d parts of op %s (op %q, prev %q)",
				pn, e.st.PartCount, e.o.OpID, props.Metadata[MetaOp], props.Metadata[MetaPrev])
		}
		m.Parts = append(m.Parts, mp)
		m.Entities += mp.Entities
		m.Bytes += mp.Bytes
		n = prev
	}
	if len(m.Parts) != e.st.PartCount {
		return Manifest{}, fmt.Errorf("tableexport: manifest: the chain of parts of op %s has %d links, the checkpoint counts %d", e.o.OpID, len(m.Parts), e.st.PartCount)
	}
	slices.Reverse(m.Parts)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	_, err = e.o.Blobs.Put(ctx, name, append(data, '\n'), storeadapter.PutOptions{ContentType: "application/json", IfNoneMatchAny: true})
	if errors.Is(err, storeadapter.ErrAlreadyExists) {
		return getManifest(ctx, e.o.Blobs, name) // written by a run of ours meanwhile
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("tableexport: write manifest %s: %w", name, err)
	}
	return m, nil
}

// header returns the manifest without its parts (and so with no totals).
func (e *exporter) header() Manifest {
	m := Manifest{Version: ManifestVersion, Op: e.o.OpID, Table: e.src.Table, Source: sourceOf(e.src), Gzip: e.o.Gzip,
		Container: e.o.Blobs.Name(), Folder: e.folder(),
		Started: storeadapter.FormatDateTime(e.st.Started), Finished: storeadapter.FormatDateTime(e.st.Finished), After: e.st.After}
	if !e.st.Since.IsZero() {
		m.Since = storeadapter.FormatDateTime(e.st.Since)
	}
	if !e.st.Mark.IsZero() {
		m.Mark = storeadapter.FormatDateTime(e.st.Mark)
	}
	return m
}

// manifestPart reads a part's manifest entry from its properties.
func manifestPart(props storeadapter.BlobProps) (ManifestPart, error) {
	md := props.Metadata
	n, err := strconv.ParseInt(md[MetaEntityCount], 10, 64)
	if err != nil || md[MetaSHA256] == "" {
		return ManifestPart{}, fmt.Errorf("tableexport: part %s: its metadata is not an export part's (entitycount %q, sha256 %q)",
			props.Name, md[MetaEntityCount], md[MetaSHA256])
	}
	return ManifestPart{Name: props.Name, Entities: n, Bytes: props.Size, SHA256: md[MetaSHA256],
		StartTime: md[MetaStartTime], EndTime: md[MetaEndTime]}, nil
}

// ReadManifest reads and parses a manifest; a missing one is
// storeadapter.ErrNotFound.
func ReadManifest(ctx context.Context, b storeadapter.Blobs, name string) (Manifest, error) {
	return getManifest(ctx, b, name)
}

func getManifest(ctx context.Context, b storeadapter.Blobs, name string) (Manifest, error) {
	data, _, err := b.Get(ctx, name)
	if err != nil {
		return Manifest{}, fmt.Errorf("tableexport: read manifest %s: %w", name, err)
	}
	return parseManifest(data, name)
}

// parseManifest parses a manifest's bytes strictly (no unknown field) and
// checks its version and its times.
func parseManifest(data []byte, name string) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("tableexport: manifest %s: %w", name, err)
	}
	if m.Version < 1 || m.Version > ManifestVersion {
		return Manifest{}, fmt.Errorf("tableexport: manifest %s: version %d, this build reads versions 1-%d", name, m.Version, ManifestVersion)
	}
	for _, f := range []struct{ field, v string }{{"since", m.Since}, {"mark", m.Mark}} {
		if _, err := parseTime(f.v); err != nil {
			return Manifest{}, fmt.Errorf("tableexport: manifest %s: %s: %w", name, f.field, err)
		}
	}
	m.Name = name
	return m, nil
}

// Report is what Verify found.
type Report struct {
	// Manifest is the manifest verified.
	Manifest Manifest
	// Parts, Entities and Bytes count what was read back.
	Parts    int
	Entities int64
	Bytes    int64
	// Problems lists every mismatch, one sentence each; none means the
	// parts are exactly what the manifest says.
	Problems []string
	// Strays names the parts of the same operation that lie in the folder
	// but are not in the manifest (each also has its sentence in
	// Problems): parts a superseded run committed after another run had
	// registered the same rows (see Export).
	Strays []string
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Complete reports whether the manifest's parts are all present and
// exactly as listed and the totals add up: every problem Verify found, if
// any, is a stray. A stray's rows are also in the listed parts (the chain
// of registered parts covers the whole source), so a complete export is
// one whose source may be deleted.
func (r Report) Complete() bool { return len(r.Problems) == len(r.Strays) }

// partFile matches the name of a part in its folder.
var partFile = regexp.MustCompile(`^[0-9]{6,}\.jsonl(\.gz)?$`)

// Verify reads the manifest name of container b and checks every part it
// lists: the part exists; its bytes hash to the manifest's SHA-256; its
// size, line count and first and last Timestamps match the manifest;
// every line parses (UnmarshalEntityJSON); its metadata (op, table,
// entitycount, sha256, starttime, endtime) agrees; the totals add up; and
// no part of the same operation lies in the folder unlisted. It streams
// each part (memory holds one line) and reports every mismatch in
// Report.Problems. The error is for a manifest that cannot be read or
// parsed, or a storage failure.
func Verify(ctx context.Context, b storeadapter.Blobs, name string) (Report, error) {
	m, err := getManifest(ctx, b, name)
	if err != nil {
		return Report{}, err
	}
	r := Report{Manifest: m}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	listed := map[string]bool{}
	var entities, bytes int64
	prev := 0
	for _, mp := range m.Parts {
		if listed[mp.Name] {
			problem("part %s: listed twice in the manifest", mp.Name)
			continue
		}
		listed[mp.Name] = true
		entities += mp.Entities
		bytes += mp.Bytes
		n, err := verifyPart(ctx, b, m, mp, prev, &r, problem)
		if err != nil {
			return r, err
		}
		prev = n
	}
	if entities != m.Entities || bytes != m.Bytes {
		problem("manifest totals %d entities and %d bytes, but its parts add up to %d and %d", m.Entities, m.Bytes, entities, bytes)
	}
	err = opParts(ctx, b, m, listed, func(name string) error {
		r.Strays = append(r.Strays, name)
		problem("part %s: of this export (op %s) but not in the manifest (a stray of a superseded run, whose rows it did not delete, or a part the manifest lost)", name, m.Op)
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("tableexport: verify: %w", err)
	}
	return r, nil
}

// opParts calls fn for each part in the manifest's folder that belongs to
// its operation (its op metadata) and is not in skip, listing the folder
// page by page and reading the properties of each part file there.
func opParts(ctx context.Context, b storeadapter.Blobs, m Manifest, skip map[string]bool, fn func(name string) error) error {
	for marker := ""; ; {
		page, err := b.List(ctx, m.Folder+"/", marker)
		if err != nil {
			return fmt.Errorf("list %s: %w", m.Folder, err)
		}
		for _, bp := range page.Blobs {
			if skip[bp.Name] || !partFile.MatchString(path.Base(bp.Name)) || path.Dir(bp.Name) != m.Folder {
				continue
			}
			props, err := b.Properties(ctx, bp.Name)
			if errors.Is(err, storeadapter.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %w", bp.Name, err)
			}
			if props.Metadata[MetaOp] == m.Op {
				if err := fn(bp.Name); err != nil {
					return err
				}
			}
		}
		if marker = page.Next; marker == "" {
			return nil
		}
	}
}

// verifyPart checks one part against its manifest entry and metadata,
// and returns its number (from its name; 0 when it has none). prev is
// the number of the part listed before it (0 for the first).
func verifyPart(ctx context.Context, b storeadapter.Blobs, m Manifest, mp ManifestPart, prev int, r *Report, problem func(string, ...any)) (int, error) {
	num := 0
	if base := path.Base(mp.Name); partFile.MatchString(base) {
		num, _ = strconv.Atoi(base[:strings.IndexByte(base, '.')])
	} else {
		problem("part %s: not a part's name (NNNNNN.jsonl or .jsonl.gz)", mp.Name)
	}
	if path.Dir(mp.Name) != m.Folder {
		problem("part %s: not in the manifest's folder %s", mp.Name, m.Folder)
	}
	props, err := b.Properties(ctx, mp.Name)
	if errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err) {
		problem("part %s: missing", mp.Name)
		return num, nil
	}
	if err != nil {
		return num, fmt.Errorf("tableexport: verify: part %s: %w", mp.Name, err)
	}
	md := props.Metadata
	for _, c := range []struct{ key, want string }{
		{MetaOp, m.Op}, {MetaTable, m.Table}, {MetaEntityCount, strconv.FormatInt(mp.Entities, 10)},
		{MetaSHA256, mp.SHA256}, {MetaStartTime, mp.StartTime}, {MetaEndTime, mp.EndTime},
		{MetaPart, strconv.Itoa(num)}, {MetaPrev, strconv.Itoa(prev)},
	} {
		if md[c.key] != c.want {
			problem("part %s: metadata %s is %q, the manifest says %q", mp.Name, c.key, md[c.key], c.want)
		}
	}
	var lines int64
	var first, last time.Time
	st, err := scanPart(ctx, b, mp.Name, func(_ []byte, e storeadapter.Entity) error {
		ts := storeadapter.DateTime(e.Timestamp)
		if lines == 0 || ts.Before(first) {
			first = ts
		}
		if lines == 0 || ts.After(last) {
			last = ts
		}
		lines++
		return nil
	})
	if err != nil {
		if storeadapter.IsTransient(err) {
			return num, fmt.Errorf("tableexport: verify: part %s: %w", mp.Name, err)
		}
		problem("part %s: unreadable after %d good lines: %v", mp.Name, lines, err)
		return num, nil
	}
	r.Parts++
	r.Entities += lines
	r.Bytes += st.bytes
	if st.sha256 != mp.SHA256 {
		problem("part %s: SHA-256 is %s, the manifest says %s", mp.Name, st.sha256, mp.SHA256)
	}
	if st.bytes != mp.Bytes {
		problem("part %s: %d bytes, the manifest says %d", mp.Name, st.bytes, mp.Bytes)
	}
	if lines != mp.Entities {
		problem("part %s: %d lines, the manifest says %d entities", mp.Name, lines, mp.Entities)
	}
	if since, _ := m.SinceTime(); lines > 0 && first.Before(since) {
		problem("part %s: holds a row of Timestamp %s, before the increment's since %s", mp.Name, storeadapter.FormatDateTime(first), m.Since)
	}
	if lines > 0 {
		if s := storeadapter.FormatDateTime(first); s != mp.StartTime {
			problem("part %s: earliest Timestamp %s, the manifest says %s", mp.Name, s, mp.StartTime)
		}
		if s := storeadapter.FormatDateTime(last); s != mp.EndTime {
			problem("part %s: latest Timestamp %s, the manifest says %s", mp.Name, s, mp.EndTime)
		}
	}
	return num, nil
}

// Cleaned is what CleanStrays found and deleted.
type Cleaned struct {
	// Strays are the stray parts of the export, as Verify names them.
	Strays []string
	// Deleted counts those deleted (0 in a dry run); Raced those found
	// changed or gone since they were listed (left alone).
	Deleted, Raced int
}

// CleanStrays deletes the stray parts of a finished export: parts of its
// operation in its folder that its manifest does not list (see Report,
// Export). Once the manifest is written its list is final — no run of the
// operation registers a part after the done mark — so an unlisted part of
// the operation can never become part of the export, and its rows are in
// the listed parts (or, for an archive, still in the source). Each delete
// is If-Match the ETag the stray has just before, so a blob written
// again meanwhile is left. With dryRun nothing is deleted. Verify then
// finds no stray.
func CleanStrays(ctx context.Context, b storeadapter.Blobs, manifest string, dryRun bool) (Cleaned, error) {
	rep, err := Verify(ctx, b, manifest)
	if err != nil {
		return Cleaned{}, err
	}
	c := Cleaned{Strays: rep.Strays}
	if dryRun {
		return c, nil
	}
	for _, name := range rep.Strays {
		props, err := b.Properties(ctx, name)
		if err == nil {
			err = b.Delete(ctx, name, props.ETag)
		}
		switch {
		case err == nil:
			c.Deleted++
		case errors.Is(err, storeadapter.ErrNotFound), errors.Is(err, storeadapter.ErrPreconditionFailed):
			c.Raced++
		default:
			return c, fmt.Errorf("tableexport: delete stray part %s: %w", name, err)
		}
	}
	return c, nil
}
