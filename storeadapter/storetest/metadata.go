package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// checkMetadata reads a blob with Get, Properties and Open and reports
// any of them whose metadata differs from want (nil for none: a blob
// without metadata reads back nil, not an empty map).
func (e *env) checkMetadata(t *testing.T, c storeadapter.Blobs, name string, want map[string]string) {
	t.Helper()
	_, p, err := c.Get(e.ctx, name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	p2, err := c.Properties(e.ctx, name)
	if err != nil {
		t.Fatalf("Properties(%s): %v", name, err)
	}
	_, p3 := e.readAll(t, c, name)
	for _, got := range []struct {
		op string
		md map[string]string
	}{{"Get", p.Metadata}, {"Properties", p2.Metadata}, {"Open", p3.Metadata}} {
		if d := diffMetadata(want, got.md); d != "" {
			t.Errorf("%s(%s) metadata differs (-want +got):\n%s", got.op, name, d)
		}
		if want == nil && got.md != nil {
			t.Errorf("%s(%s) metadata = %#v, want nil for a blob without metadata", got.op, name, got.md)
		}
	}
}

// diffMetadata returns a (-want +got) listing of two metadata maps, one
// name per line; "" when they are equal.
func diffMetadata(want, got map[string]string) string {
	line := func(m map[string]string) []string {
		var l []string
		for _, n := range slices.Sorted(maps.Keys(m)) {
			l = append(l, fmt.Sprintf("%s=%q", n, m[n]))
		}
		return l
	}
	return diffLines(line(want), line(got))
}

// exportMetadata is metadata as the table-to-blob exporter writes it,
// names in mixed case.
func exportMetadata() map[string]string {
	return map[string]string{
		"firstTimestamp": "2026-11-21T00:00:00.0000000Z",
		"LastTimestamp":  "2026-11-21T23:59:59.9990000Z",
		"ENTITY_COUNT":   "1234",
		"_v":             "1",
		"note":           `spaces  inside, and !"#$%&'()*+,-./:;<=>?@[\]^_` + "`{|}~",
		"empty":          "",
	}
}

// lowered is md with its names in lower case, as the stores read it back.
func lowered(md map[string]string) map[string]string {
	out := make(map[string]string, len(md))
	for n, v := range md {
		out[strings.ToLower(n)] = v
	}
	return out
}

// testMetadataPut: metadata written by Put comes back from Get,
// Properties and Open with the same values and the names in lower case
// (Azure matches names ignoring case; the Go SDK reads them back re-cased,
// so lower case is what the port promises). Neither the caller's map nor
// a returned one is tied to the stored metadata.
func testMetadataPut(t *testing.T, e *env) {
	c := e.newContainer(t)
	md := exportMetadata()
	etag := e.put(t, c, "export/day.jsonl", []byte("{}\n"), storeadapter.PutOptions{ContentType: "application/x-ndjson", Metadata: md})
	md["firstTimestamp"] = "changed after the Put"
	md["added"] = "after the Put"
	want := lowered(exportMetadata())
	e.checkMetadata(t, c, "export/day.jsonl", want)

	p, err := c.Properties(e.ctx, "export/day.jsonl")
	if err != nil {
		t.Fatalf("Properties: %v", err)
	}
	wantProps := storeadapter.BlobProps{Name: "export/day.jsonl", ETag: etag, Size: 3, ContentType: "application/x-ndjson", LastModified: p.LastModified, Metadata: want}
	if !p.Equal(wantProps) {
		t.Errorf("Properties = %+v, want %+v", p, wantProps)
	}
	p.Metadata["entity_count"] = "changed by the caller"
	e.checkMetadata(t, c, "export/day.jsonl", want)
}

// testMetadataCommit: CommitBlocks sets the metadata as Put Block List
// does, and so does a BlobWriter, from its Put options or, for metadata
// known once the content is written, from SetMetadata.
func testMetadataCommit(t *testing.T, e *env) {
	c := e.newContainer(t)
	ids := []string{BlockID(0), BlockID(1)}
	e.stage(t, c, "b", ids[0], []byte("first "))
	e.stage(t, c, "b", ids[1], []byte("second"))
	e.commit(t, c, "b", ids, storeadapter.PutOptions{Metadata: exportMetadata()})
	e.checkMetadata(t, c, "b", lowered(exportMetadata()))

	w := storeadapter.NewBlobWriter(e.ctx, c, "w", storeadapter.BlobWriterOptions{BlockSize: 64 << 10,
		Put: storeadapter.PutOptions{ContentType: "application/x-ndjson", Metadata: map[string]string{"EntityCount": "3"}}})
	if _, err := w.Write(pattern(100<<10, 7)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	e.checkMetadata(t, c, "w", map[string]string{"entitycount": "3"})

	w = storeadapter.NewBlobWriter(e.ctx, c, "w", storeadapter.BlobWriterOptions{BlockSize: 64 << 10,
		Put: storeadapter.PutOptions{Metadata: map[string]string{"EntityCount": "0"}}})
	if _, err := w.Write(pattern(100<<10, 8)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	checkNoErr(t, "SetMetadata", w.SetMetadata(exportMetadata()))
	if _, err := w.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	e.checkMetadata(t, c, "w", lowered(exportMetadata()))
}

// testMetadataReplaced: every write replaces the blob's metadata as a
// whole: names it leaves out are gone (no merge), and a write without
// metadata leaves none, whether it is a Put or a commit, and whether the
// commit names new blocks or the blob's own. A refused conditional write
// changes nothing.
func testMetadataReplaced(t *testing.T, e *env) {
	c := e.newContainer(t)
	e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{Metadata: map[string]string{"a": "1", "b": "2"}})
	e.checkMetadata(t, c, "b", map[string]string{"a": "1", "b": "2"})
	etag := e.put(t, c, "b", []byte("v2"), storeadapter.PutOptions{Metadata: map[string]string{"B": "two", "c": "3"}})
	e.checkMetadata(t, c, "b", map[string]string{"b": "two", "c": "3"})

	_, err := c.Put(e.ctx, "b", []byte("v3"), storeadapter.PutOptions{IfNoneMatchAny: true, Metadata: map[string]string{"d": "4"}})
	checkErr(t, "Put with IfNoneMatchAny over an existing blob", err, storeadapter.ErrAlreadyExists)
	e.checkMetadata(t, c, "b", map[string]string{"b": "two", "c": "3"})
	_, err = c.Put(e.ctx, "b", []byte("v3"), storeadapter.PutOptions{IfMatch: `"0x0"`, Metadata: map[string]string{"d": "4"}})
	checkErr(t, "Put with a stale IfMatch", err, storeadapter.ErrPreconditionFailed)
	e.checkMetadata(t, c, "b", map[string]string{"b": "two", "c": "3"})

	e.put(t, c, "b", []byte("v3"), storeadapter.PutOptions{IfMatch: etag})
	e.checkMetadata(t, c, "b", nil)

	id := BlockID(0)
	e.stage(t, c, "b", id, []byte("block"))
	e.commit(t, c, "b", []string{id}, storeadapter.PutOptions{Metadata: map[string]string{"e": "5"}})
	e.checkMetadata(t, c, "b", map[string]string{"e": "5"})
	// Committing the blob's own block again, with other metadata, keeps
	// the content and replaces the metadata.
	e.commit(t, c, "b", []string{id}, storeadapter.PutOptions{Metadata: map[string]string{"f": "6"}})
	e.checkMetadata(t, c, "b", map[string]string{"f": "6"})
	e.commit(t, c, "b", []string{id}, storeadapter.PutOptions{})
	e.checkMetadata(t, c, "b", nil)
	if got, _ := e.readAll(t, c, "b"); string(got) != "block" {
		t.Errorf("after the recommits the blob holds %q, want %q", got, "block")
	}
	e.put(t, c, "b", []byte("v4"), storeadapter.PutOptions{Metadata: map[string]string{"g": "7"}})
	e.checkMetadata(t, c, "b", map[string]string{"g": "7"})
}

// testMetadataEmpty: nil and empty metadata both leave the blob with none,
// read back as nil.
func testMetadataEmpty(t *testing.T, e *env) {
	c := e.newContainer(t)
	for i, md := range []map[string]string{nil, {}} {
		name := fmt.Sprintf("put%d", i)
		e.put(t, c, name, []byte("x"), storeadapter.PutOptions{Metadata: md})
		e.checkMetadata(t, c, name, nil)
		name = fmt.Sprintf("commit%d", i)
		e.stage(t, c, name, BlockID(0), []byte("x"))
		e.commit(t, c, name, []string{BlockID(0)}, storeadapter.PutOptions{Metadata: md})
		e.checkMetadata(t, c, name, nil)
	}
}

// testMetadataNotListed: List does not return metadata (Azure lists it
// only with include=metadata, which the port does not ask for).
func testMetadataNotListed(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag := e.put(t, c, "b", []byte("x"), storeadapter.PutOptions{Metadata: map[string]string{"count": "1"}})
	got := e.listAll(t, c, "")
	if len(got) != 1 || got[0].Name != "b" || got[0].ETag != etag {
		t.Fatalf("List = %+v, want blob b with ETag %s", got, etag)
	}
	if got[0].Metadata != nil {
		t.Errorf("List returned metadata %v, want nil", got[0].Metadata)
	}
}

// testMetadataInvalid: metadata Azure refuses, or that could not read back
// as written, is refused by Put, CommitBlocks and a BlobWriter before any
// call, with an error that names the metadata name at fault; in an
// existing container the blob stays as it was.
func testMetadataInvalid(t *testing.T, e *env) {
	tests := []struct {
		what string
		md   map[string]string
		name string // the error must mention it
	}{
		{"a name starting with a digit", map[string]string{"ok": "1", "1st": "x"}, "1st"},
		{"a hyphen in a name", map[string]string{"first-ts": "x"}, "first-ts"},
		{"an empty name", map[string]string{"": "x"}, `""`},
		{"a non-ASCII name", map[string]string{"zählung": "x"}, "zählung"},
		{"names equal ignoring case", map[string]string{"Count": "1", "count": "2"}, "ount"},
		{"a non-ASCII value", map[string]string{"city": "Zürich"}, "city"},
		{"a newline in a value", map[string]string{"lines": "a\nb"}, "lines"},
		{"a tab in a value", map[string]string{"tabbed": "a\tb"}, "tabbed"},
		{"a leading space", map[string]string{"lead": " a"}, "lead"},
		{"a trailing space", map[string]string{"trail": "a "}, "trail"},
	}
	missing := e.h.Store.Container(uniqueName("c")) // never created: validation answers first
	c := e.newContainer(t)
	etag := e.put(t, c, "b", []byte("kept"), storeadapter.PutOptions{Metadata: map[string]string{"kept": "yes"}})
	e.stage(t, c, "b", BlockID(0), []byte("staged"))
	for _, tt := range tests {
		for _, ct := range []storeadapter.Blobs{missing, c} {
			o := storeadapter.PutOptions{Metadata: tt.md}
			_, err := ct.Put(e.ctx, "b", []byte("new"), o)
			checkMetadataErr(t, "Put with "+tt.what, err, storeadapter.ErrInvalidInput, tt.name)
			_, err = ct.CommitBlocks(e.ctx, "b", []string{BlockID(0)}, o)
			checkMetadataErr(t, "CommitBlocks with "+tt.what, err, storeadapter.ErrInvalidInput, tt.name)
			w := storeadapter.NewBlobWriter(e.ctx, ct, "b", storeadapter.BlobWriterOptions{Put: o})
			_, err = w.Write([]byte("new"))
			checkMetadataErr(t, "BlobWriter with "+tt.what, err, storeadapter.ErrInvalidInput, tt.name)
		}
	}
	e.checkBlob(t, c, "b", []byte("kept"), etag, "application/octet-stream")
	e.checkMetadata(t, c, "b", map[string]string{"kept": "yes"})
}

// checkMetadataErr reports an error unless err wraps target and names the
// metadata name at fault.
func checkMetadataErr(t *testing.T, what string, err, target error, name string) {
	t.Helper()
	checkErr(t, what, err, target)
	if err != nil && !strings.Contains(err.Error(), name) {
		t.Errorf("%s: error %q does not name %s", what, err, name)
	}
}

// testMetadataSizeLimit: names and values may total 8 KiB (Azure's limit,
// without the x-ms-meta- prefixes); a byte more is ErrTooLarge, before any
// call. Azurite does not enforce the limit: this checks our validation.
func testMetadataSizeLimit(t *testing.T, e *env) {
	c := e.newContainer(t)
	full := map[string]string{
		"first":  strings.Repeat("a", 4000),
		"Second": strings.Repeat("b", storeadapter.MaxMetadataBytes-4000-len("first")-len("Second")),
	}
	e.put(t, c, "b", []byte("x"), storeadapter.PutOptions{Metadata: full})
	e.checkMetadata(t, c, "b", lowered(full))

	full["Second"] += "b"
	_, err := c.Put(e.ctx, "b", []byte("y"), storeadapter.PutOptions{Metadata: full})
	checkMetadataErr(t, "Put with 8 KiB + 1 byte of metadata", err, storeadapter.ErrTooLarge, "Second")
	e.stage(t, c, "b", BlockID(0), []byte("y"))
	_, err = c.CommitBlocks(e.ctx, "b", []string{BlockID(0)}, storeadapter.PutOptions{Metadata: full})
	checkMetadataErr(t, "CommitBlocks with 8 KiB + 1 byte of metadata", err, storeadapter.ErrTooLarge, "Second")
	e.checkMetadata(t, c, "b", lowered(map[string]string{"first": full["first"], "Second": full["Second"][1:]}))
}
