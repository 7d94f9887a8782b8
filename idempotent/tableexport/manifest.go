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
const ManifestVersion = 1

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
	// Entities and Bytes total the parts (Bytes as stored).
	Entities int64          `json:"entities"`
	Bytes    int64          `json:"bytes"`
	Parts    []ManifestPart `json:"parts"`

	// Name is the manifest's blob name in Container; "" when no manifest
	// was written (Options.SkipEmptyManifest). Not part of the JSON.
	Name string `json:"-"`
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
// checkpoint and the parts' metadata only, so a rewrite after a crash
// gives the same bytes; an existing manifest is read, never replaced.
func (e *exporter) manifest(ctx context.Context) (Manifest, error) {
	name := e.manifestName()
	if e.st.Parts.empty() && e.o.SkipEmptyManifest {
		return e.header(), nil
	}
	if m, err := getManifest(ctx, e.o.Blobs, name); !errors.Is(err, storeadapter.ErrNotFound) || idempotent.Missing(err) {
		return m, err
	}
	m := e.header()
	m.Name = name
	m.Parts = []ManifestPart{}
	for n := range e.st.Parts.all() {
		pn := e.partName(n)
		props, err := e.o.Blobs.Properties(ctx, pn)
		if err != nil {
			return Manifest{}, fmt.Errorf("tableexport: manifest: part %s: %w", pn, err)
		}
		mp, err := manifestPart(props)
		if err != nil {
			return Manifest{}, err
		}
		m.Parts = append(m.Parts, mp)
		m.Entities += mp.Entities
		m.Bytes += mp.Bytes
	}
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
	src := ManifestSource{PK: e.src.PK}
	if from, to := e.src.bounds(); e.src.PK != nil {
		if from != "" {
			src.RKFrom = &from
		}
		if to != "" {
			src.RKTo = &to
		}
	}
	return Manifest{Version: ManifestVersion, Op: e.o.OpID, Table: e.src.Table, Source: src, Gzip: e.o.Gzip,
		Container: e.o.Blobs.Name(), Folder: e.folder(),
		Started: storeadapter.FormatDateTime(e.st.Started), Finished: storeadapter.FormatDateTime(e.st.Finished)}
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
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("tableexport: manifest %s: %w", name, err)
	}
	if m.Version != ManifestVersion {
		return Manifest{}, fmt.Errorf("tableexport: manifest %s: version %d, want %d", name, m.Version, ManifestVersion)
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
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

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
	for _, mp := range m.Parts {
		listed[mp.Name] = true
		entities += mp.Entities
		bytes += mp.Bytes
		if err := verifyPart(ctx, b, m, mp, &r, problem); err != nil {
			return r, err
		}
	}
	if entities != m.Entities || bytes != m.Bytes {
		problem("manifest totals %d entities and %d bytes, but its parts add up to %d and %d", m.Entities, m.Bytes, entities, bytes)
	}
	for marker := ""; ; {
		page, err := b.List(ctx, m.Folder+"/", marker)
		if err != nil {
			return r, fmt.Errorf("tableexport: verify: list %s: %w", m.Folder, err)
		}
		for _, bp := range page.Blobs {
			if listed[bp.Name] || !partFile.MatchString(path.Base(bp.Name)) || path.Dir(bp.Name) != m.Folder {
				continue
			}
			props, err := b.Properties(ctx, bp.Name)
			if errors.Is(err, storeadapter.ErrNotFound) {
				continue
			}
			if err != nil {
				return r, fmt.Errorf("tableexport: verify: %s: %w", bp.Name, err)
			}
			if props.Metadata[MetaOp] == m.Op {
				problem("part %s: of this export (op %s) but not in the manifest", bp.Name, m.Op)
			}
		}
		if marker = page.Next; marker == "" {
			break
		}
	}
	return r, nil
}

// verifyPart checks one part against its manifest entry and metadata.
func verifyPart(ctx context.Context, b storeadapter.Blobs, m Manifest, mp ManifestPart, r *Report, problem func(string, ...any)) error {
	props, err := b.Properties(ctx, mp.Name)
	if errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err) {
		problem("part %s: missing", mp.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("tableexport: verify: part %s: %w", mp.Name, err)
	}
	md := props.Metadata
	for _, c := range []struct{ key, want string }{
		{MetaOp, m.Op}, {MetaTable, m.Table}, {MetaEntityCount, strconv.FormatInt(mp.Entities, 10)},
		{MetaSHA256, mp.SHA256}, {MetaStartTime, mp.StartTime}, {MetaEndTime, mp.EndTime},
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
			return fmt.Errorf("tableexport: verify: part %s: %w", mp.Name, err)
		}
		problem("part %s: unreadable after %d good lines: %v", mp.Name, lines, err)
		return nil
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
	if lines > 0 {
		if s := storeadapter.FormatDateTime(first); s != mp.StartTime {
			problem("part %s: earliest Timestamp %s, the manifest says %s", mp.Name, s, mp.StartTime)
		}
		if s := storeadapter.FormatDateTime(last); s != mp.EndTime {
			problem("part %s: latest Timestamp %s, the manifest says %s", mp.Name, s, mp.EndTime)
		}
	}
	return nil
}

// partSet is a set of part numbers, stored compactly as ranges
// ("1-57,60").
type partSet string

func (s partSet) empty() bool { return s == "" }

// ranges parses the set; it was written by add, so it is well formed.
func (s partSet) ranges() [][2]int {
	var out [][2]int
	if s == "" {
		return nil
	}
	for r := range strings.SplitSeq(string(s), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, _ := strconv.Atoi(lo)
		b := a
		if isRange {
			b, _ = strconv.Atoi(hi)
		}
		out = append(out, [2]int{a, b})
	}
	return out
}

// all yields the numbers in increasing order.
func (s partSet) all() func(func(int) bool) {
	return func(yield func(int) bool) {
		for _, r := range s.ranges() {
			for n := r[0]; n <= r[1]; n++ {
				if !yield(n) {
					return
				}
			}
		}
	}
}

// add returns the set with n.
func (s partSet) add(n int) partSet {
	rs := s.ranges()
	i := slices.IndexFunc(rs, func(r [2]int) bool { return n <= r[1]+1 })
	switch {
	case i < 0:
		rs = append(rs, [2]int{n, n})
	case n >= rs[i][0] && n <= rs[i][1]:
		return s
	case n == rs[i][1]+1:
		rs[i][1] = n
		if i+1 < len(rs) && rs[i+1][0] == n+1 {
			rs[i][1] = rs[i+1][1]
			rs = slices.Delete(rs, i+1, i+2)
		}
	case n == rs[i][0]-1:
		rs[i][0] = n
	default:
		rs = slices.Insert(rs, i, [2]int{n, n})
	}
	var b []byte
	for j, r := range rs {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r[0]), 10)
		if r[1] != r[0] {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(r[1]), 10)
		}
	}
	return partSet(b)
}
