package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func blobCases() []testCase {
	return []testCase{
		{"CreateIdempotent", testBlobCreate},
		{"PutGetProperties", testBlobPutGet},
		{"Overwrite", testBlobOverwrite},
		{"IfNoneMatchAny", testBlobIfNoneMatch},
		{"IfMatch", testBlobIfMatch},
		{"Delete", testBlobDelete},
		{"MissingBlob", testBlobMissing},
		{"DeleteMissingWithIfMatch", testBlobDeleteMissingIfMatch},
		{"ListNoncharacterNames", testBlobListNoncharacterNames},
		{"List", testBlobList},
		{"MissingContainer", testBlobMissingContainer},
		{"InvalidNames", testBlobInvalidNames},
		{"BackslashAndSegments", testBlobBackslashAndSegments},
		{"OneCondition", testBlobOneCondition},
		{"UnquotedETag", testBlobUnquotedETag},
		{"StageCommit", testBlockStageCommit},
		{"CrashedWriter", testBlockCrashedWriter},
		{"RecommitIdempotent", testBlockRecommit},
		{"CommitConditions", testBlockCommitConditions},
		{"CommitUnknownBlock", testBlockCommitUnknown},
		{"BlockIDLength", testBlockIDLength},
		{"PutDiscardsStaged", testBlockPutDiscardsStaged},
		{"BlockLimits", testBlockLimits},
		{"Open", testBlobOpen},
		{"Writer", testBlobWriter},
		{"WriterRerun", testBlobWriterRerun},
		{"WritersDoNotMix", testBlobWritersDoNotMix},
		{"MetadataPut", testMetadataPut},
		{"MetadataCommit", testMetadataCommit},
		{"MetadataReplaced", testMetadataReplaced},
		{"MetadataEmpty", testMetadataEmpty},
		{"MetadataNotListed", testMetadataNotListed},
		{"MetadataInvalid", testMetadataInvalid},
		{"MetadataSizeLimit", testMetadataSizeLimit},
	}
}

// put writes a blob and fails the test on error.
func (e *env) put(t *testing.T, c storeadapter.Blobs, name string, data []byte, o storeadapter.PutOptions) string {
	t.Helper()
	etag, err := c.Put(e.ctx, name, data, o)
	if err != nil {
		t.Fatalf("Put(%s): %v", name, err)
	}
	if etag == "" {
		t.Errorf("Put(%s) returned an empty ETag", name)
	}
	return etag
}

// checkBlob reads a blob with Get and Properties and compares its data,
// size, ETag and content type (checkMetadata compares metadata).
func (e *env) checkBlob(t *testing.T, c storeadapter.Blobs, name string, data []byte, etag, contentType string) storeadapter.BlobProps {
	t.Helper()
	got, p, err := c.Get(e.ctx, name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("Get(%s) = %d bytes %.40q, want %d bytes %.40q", name, len(got), got, len(data), data)
	}
	want := storeadapter.BlobProps{Name: name, ETag: etag, Size: int64(len(data)), ContentType: contentType, LastModified: p.LastModified, Metadata: p.Metadata}
	if !p.Equal(want) {
		t.Errorf("Get(%s) properties = %+v, want %+v", name, p, want)
	}
	p2, err := c.Properties(e.ctx, name)
	if err != nil {
		t.Fatalf("Properties(%s): %v", name, err)
	}
	if !p2.Equal(p) {
		t.Errorf("Properties(%s) = %+v, Get said %+v", name, p2, p)
	}
	return p
}

func testBlobCreate(t *testing.T, e *env) {
	name := uniqueName("c")
	c := e.h.Store.Container(name)
	if c.Name() != name {
		t.Errorf("Name() = %q, want %q", c.Name(), name)
	}
	checkNoErr(t, "Create", c.Create(e.ctx))
	etag := e.put(t, c, "kept", []byte("data"), storeadapter.PutOptions{})
	checkNoErr(t, "Create of an existing container", c.Create(e.ctx))
	e.checkBlob(t, c, "kept", []byte("data"), etag, "application/octet-stream")
	// A second handle on the same name sees the same container.
	e.checkBlob(t, e.h.Store.Container(name), "kept", []byte("data"), etag, "application/octet-stream")
}

func testBlobPutGet(t *testing.T, e *env) {
	c := e.newContainer(t)
	before := e.now()
	etag := e.put(t, c, "dir/hello.txt", []byte("hello, blob"), storeadapter.PutOptions{ContentType: "text/plain; charset=utf-8"})
	after := e.now()
	p := e.checkBlob(t, c, "dir/hello.txt", []byte("hello, blob"), etag, "text/plain; charset=utf-8")
	e.checkRecent(t, "LastModified", p.LastModified, before, after)

	// The default content type, an empty blob, binary data and an unusual name.
	etag = e.put(t, c, "bin", []byte{0, 1, 2, 0xff}, storeadapter.PutOptions{})
	e.checkBlob(t, c, "bin", []byte{0, 1, 2, 0xff}, etag, "application/octet-stream")
	etag = e.put(t, c, "empty", nil, storeadapter.PutOptions{ContentType: "application/json"})
	e.checkBlob(t, c, "empty", nil, etag, "application/json")
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i*31 + i>>8)
	}
	etag = e.put(t, c, "big", big, storeadapter.PutOptions{})
	e.checkBlob(t, c, "big", big, etag, "application/octet-stream")
	name := "dir/sub dir/ü name 😀 'q' (1) & %20 +.txt"
	etag = e.put(t, c, name, []byte("unicode"), storeadapter.PutOptions{})
	e.checkBlob(t, c, name, []byte("unicode"), etag, "application/octet-stream")
	long := strings.Repeat("n", storeadapter.MaxBlobNameChars)
	etag = e.put(t, c, long, []byte("long name"), storeadapter.PutOptions{})
	e.checkBlob(t, c, long, []byte("long name"), etag, "application/octet-stream")
}

func testBlobOverwrite(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag1 := e.put(t, c, "b", []byte("one"), storeadapter.PutOptions{ContentType: "text/plain"})
	etag2 := e.put(t, c, "b", []byte("two, longer"), storeadapter.PutOptions{})
	if etag1 == etag2 {
		t.Errorf("overwriting a blob kept its ETag %q", etag1)
	}
	// An overwrite replaces the content type too.
	e.checkBlob(t, c, "b", []byte("two, longer"), etag2, "application/octet-stream")
	etag3 := e.put(t, c, "b", []byte("two, longer"), storeadapter.PutOptions{})
	if etag3 == etag2 {
		t.Errorf("rewriting a blob with the same data kept its ETag %q", etag2)
	}
}

func testBlobIfNoneMatch(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag := e.put(t, c, "once", []byte("first"), storeadapter.PutOptions{IfNoneMatchAny: true})
	_, err := c.Put(e.ctx, "once", []byte("second"), storeadapter.PutOptions{IfNoneMatchAny: true})
	checkErr(t, "second Put with IfNoneMatchAny", err, storeadapter.ErrAlreadyExists)
	e.checkBlob(t, c, "once", []byte("first"), etag, "application/octet-stream")
}

func testBlobIfMatch(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag1 := e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{})
	etag2 := e.put(t, c, "b", []byte("v2"), storeadapter.PutOptions{IfMatch: etag1})
	_, err := c.Put(e.ctx, "b", []byte("v3"), storeadapter.PutOptions{IfMatch: etag1})
	checkErr(t, "Put with a stale IfMatch", err, storeadapter.ErrPreconditionFailed)
	e.checkBlob(t, c, "b", []byte("v2"), etag2, "application/octet-stream")
	etag3 := e.put(t, c, "b", []byte("v3"), storeadapter.PutOptions{IfMatch: storeadapter.ETagAny})
	e.checkBlob(t, c, "b", []byte("v3"), etag3, "application/octet-stream")

	// IfMatch never creates.
	for _, ifMatch := range []string{etag3, storeadapter.ETagAny} {
		_, err := c.Put(e.ctx, "missing", []byte("x"), storeadapter.PutOptions{IfMatch: ifMatch})
		checkErr(t, "Put with IfMatch "+ifMatch+" of a missing blob", err, storeadapter.ErrPreconditionFailed)
	}
	_, _, err = c.Get(e.ctx, "missing")
	checkItemNotFound(t, "Get after conditional Puts of a missing blob", err)
}

func testBlobDelete(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag1 := e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{})
	etag2 := e.put(t, c, "b", []byte("v2"), storeadapter.PutOptions{})
	checkErr(t, "Delete with a stale IfMatch", c.Delete(e.ctx, "b", etag1), storeadapter.ErrPreconditionFailed)
	e.checkBlob(t, c, "b", []byte("v2"), etag2, "application/octet-stream")
	checkNoErr(t, "Delete with the current ETag", c.Delete(e.ctx, "b", etag2))
	_, _, err := c.Get(e.ctx, "b")
	checkItemNotFound(t, "Get of a deleted blob", err)
	checkItemNotFound(t, "Delete of a deleted blob", c.Delete(e.ctx, "b", ""))
	// A conditional delete of a deleted blob: see testBlobDeleteMissingIfMatch.

	for _, ifMatch := range []string{"", storeadapter.ETagAny} {
		e.put(t, c, "b", []byte("again"), storeadapter.PutOptions{})
		e.put(t, c, "other", []byte("other"), storeadapter.PutOptions{})
		checkNoErr(t, fmt.Sprintf("Delete with ifMatch %q", ifMatch), c.Delete(e.ctx, "b", ifMatch))
		_, err := c.Properties(e.ctx, "b")
		checkItemNotFound(t, "Properties of a deleted blob", err)
		if _, err := c.Properties(e.ctx, "other"); err != nil {
			t.Errorf("Properties of the blob beside a deleted one: %v", err)
		}
	}
}

func testBlobMissing(t *testing.T, e *env) {
	c := e.newContainer(t)
	e.put(t, c, "present", []byte("x"), storeadapter.PutOptions{})
	for _, name := range []string{"missing", "Present", "presen", "present/x"} {
		_, _, err := c.Get(e.ctx, name)
		checkItemNotFound(t, "Get of missing blob "+name, err)
		_, err = c.Properties(e.ctx, name)
		checkItemNotFound(t, "Properties of missing blob "+name, err)
		checkItemNotFound(t, "Delete of missing blob "+name, c.Delete(e.ctx, name, ""))
		checkItemNotFound(t, "Delete with ETagAny of missing blob "+name, c.Delete(e.ctx, name, storeadapter.ETagAny))
	}
}

// listAll lists every blob under prefix, page by page.
func (e *env) listAll(t *testing.T, c storeadapter.Blobs, prefix string) []storeadapter.BlobProps {
	t.Helper()
	var all []storeadapter.BlobProps
	marker := ""
	for pages := 1; ; pages++ {
		p, err := c.List(e.ctx, prefix, marker)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		all = append(all, p.Blobs...)
		if p.Next == "" {
			return all
		}
		if pages > 100 {
			t.Fatalf("List(%q) still returns a marker after %d pages", prefix, pages)
		}
		marker = p.Next
	}
}

func testBlobList(t *testing.T, e *env) {
	c := e.newContainer(t)
	if got := e.listAll(t, c, ""); len(got) != 0 {
		t.Errorf("List of an empty container returned %d blobs", len(got))
	}
	etags := map[string]string{}
	for _, name := range []string{"b/2", "a", "b/1", "b/10", "c", "b/1/x", "B", "b"} {
		etags[name] = e.put(t, c, name, []byte(name), storeadapter.PutOptions{ContentType: "text/plain"})
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"B", "a", "b", "b/1", "b/1/x", "b/10", "b/2", "c"}},
		{"b/", []string{"b/1", "b/1/x", "b/10", "b/2"}},
		{"b/1", []string{"b/1", "b/1/x", "b/10"}},
		{"c", []string{"c"}},
		{"z", nil},
		{"A", nil},
	}
	for _, tt := range tests {
		got := e.listAll(t, c, tt.prefix)
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
			want := storeadapter.BlobProps{Name: p.Name, ETag: etags[p.Name], Size: int64(len(p.Name)), ContentType: "text/plain", LastModified: p.LastModified}
			if !p.Equal(want) {
				t.Errorf("List(%q) entry %+v, want %+v", tt.prefix, p, want)
			}
			if p.LastModified.IsZero() {
				t.Errorf("List(%q) entry %s has no LastModified", tt.prefix, p.Name)
			}
		}
		if d := diffLines(tt.want, names); d != "" {
			t.Errorf("List(%q) (-want +got):\n%s", tt.prefix, d)
		}
	}
}

func testBlobMissingContainer(t *testing.T, e *env) {
	c := e.h.Store.Container(uniqueName("c")) // never created
	calls := []struct {
		op  string
		err error
	}{
		{"Put", second(c.Put(e.ctx, "b", []byte("x"), storeadapter.PutOptions{}))},
		{"Put with IfNoneMatchAny", second(c.Put(e.ctx, "b", []byte("x"), storeadapter.PutOptions{IfNoneMatchAny: true}))},
		{"Get", func() error { _, _, err := c.Get(e.ctx, "b"); return err }()},
		{"Properties", second(c.Properties(e.ctx, "b"))},
		{"Delete", c.Delete(e.ctx, "b", "")},
		{"List", second(c.List(e.ctx, "", ""))},
		{"StageBlock", c.StageBlock(e.ctx, "b", BlockID(0), []byte("x"))},
		{"CommitBlocks", second(c.CommitBlocks(e.ctx, "b", nil, storeadapter.PutOptions{}))},
		{"Open", openErr(e, c, "b")},
	}
	for _, call := range calls {
		checkErr(t, call.op+" in a missing container", call.err, storeadapter.ErrContainerNotFound)
	}
}

func testBlobInvalidNames(t *testing.T, e *env) {
	for _, name := range []string{"", "ab", "Abc", "a_b", "a--b", "-ab", "ab-", "a b", strings.Repeat("c", 64)} {
		c := e.h.Store.Container(name)
		calls := []struct {
			op  string
			err error
		}{
			{"Create", c.Create(e.ctx)},
			{"Put", second(c.Put(e.ctx, "b", []byte("x"), storeadapter.PutOptions{}))},
			{"Get", func() error { _, _, err := c.Get(e.ctx, "b"); return err }()},
			{"Properties", second(c.Properties(e.ctx, "b"))},
			{"Delete", c.Delete(e.ctx, "b", "")},
			{"List", second(c.List(e.ctx, "", ""))},
			{"StageBlock", c.StageBlock(e.ctx, "b", BlockID(0), []byte("x"))},
			{"CommitBlocks", second(c.CommitBlocks(e.ctx, "b", nil, storeadapter.PutOptions{}))},
			{"Open", openErr(e, c, "b")},
		}
		for _, call := range calls {
			checkErr(t, fmt.Sprintf("%s in container %q", call.op, name), call.err, storeadapter.ErrInvalidInput)
		}
	}

	c := e.h.Store.Container(uniqueName("c")) // missing: validation answers first
	badBlobs := []string{"", "a.", "dir/", "a\x00b", "a\nb", "a\x7fb", "a\u0085b", "a\xffb", strings.Repeat("n", storeadapter.MaxBlobNameChars+1)}
	for _, name := range badBlobs {
		calls := []struct {
			op  string
			err error
		}{
			{"Put", second(c.Put(e.ctx, name, []byte("x"), storeadapter.PutOptions{}))},
			{"Get", func() error { _, _, err := c.Get(e.ctx, name); return err }()},
			{"Properties", second(c.Properties(e.ctx, name))},
			{"Delete", c.Delete(e.ctx, name, "")},
			{"StageBlock", c.StageBlock(e.ctx, name, BlockID(0), []byte("x"))},
			{"CommitBlocks", second(c.CommitBlocks(e.ctx, name, nil, storeadapter.PutOptions{}))},
			{"Open", openErr(e, c, name)},
		}
		for _, call := range calls {
			checkErr(t, fmt.Sprintf("%s of blob %q", call.op, name), call.err, storeadapter.ErrInvalidInput)
		}
	}
}

// testBlobBackslashAndSegments: Azure (and Azurite) read \ in a blob name
// as /, so `a\b` and "a/b" would be one blob there and two in a store that
// kept names as given. tablekeeper refuses \ in blob names in both stores,
// so a name always round-trips as written. Azure allows at most 254 path
// segments; Azurite accepts more, so this checks our validation.
func testBlobBackslashAndSegments(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag := e.put(t, c, "a/b", []byte("slash"), storeadapter.PutOptions{})
	for _, name := range []string{"a\\b", "\\a", "dir\\x/y"} {
		_, err := c.Put(e.ctx, name, []byte("backslash"), storeadapter.PutOptions{})
		checkErr(t, fmt.Sprintf("Put of %q", name), err, storeadapter.ErrInvalidInput)
		_, _, err = c.Get(e.ctx, name)
		checkErr(t, fmt.Sprintf("Get of %q", name), err, storeadapter.ErrInvalidInput)
		checkErr(t, fmt.Sprintf("Delete of %q", name), c.Delete(e.ctx, name, ""), storeadapter.ErrInvalidInput)
	}
	e.checkBlob(t, c, "a/b", []byte("slash"), etag, "application/octet-stream")

	deep := strings.Repeat("s/", 253) + "leaf" // 254 segments
	e.put(t, c, deep, []byte("deep"), storeadapter.PutOptions{})
	_, err := c.Put(e.ctx, "s/"+deep, []byte("too deep"), storeadapter.PutOptions{})
	checkErr(t, "Put of a name of 255 segments", err, storeadapter.ErrInvalidInput)
}

// testBlobOneCondition: Azure takes one condition header per write;
// If-Match together with If-None-Match "*" is a 400. Both stores refuse the
// pair before the call.
func testBlobOneCondition(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag := e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{})
	for _, ifMatch := range []string{etag, storeadapter.ETagAny} {
		_, err := c.Put(e.ctx, "b", []byte("v2"), storeadapter.PutOptions{IfMatch: ifMatch, IfNoneMatchAny: true})
		checkErr(t, "Put with IfMatch "+ifMatch+" and IfNoneMatchAny", err, storeadapter.ErrInvalidInput)
	}
	e.checkBlob(t, c, "b", []byte("v1"), etag, "application/octet-stream")
}

// testBlobUnquotedETag: the service matches an ETag with or without its
// quotes, so the bare form a listing may show works as a condition.
func testBlobUnquotedETag(t *testing.T, e *env) {
	c := e.newContainer(t)
	etag := e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{})
	bare := strings.Trim(etag, `"`)
	if bare == etag {
		t.Fatalf("Put returned ETag %s, want it quoted", etag)
	}
	etag2 := e.put(t, c, "b", []byte("v2"), storeadapter.PutOptions{IfMatch: bare})
	_, err := c.Put(e.ctx, "b", []byte("v3"), storeadapter.PutOptions{IfMatch: bare})
	checkErr(t, "Put with the old ETag unquoted", err, storeadapter.ErrPreconditionFailed)
	checkErr(t, "Delete with the old ETag unquoted", c.Delete(e.ctx, "b", bare), storeadapter.ErrPreconditionFailed)
	checkNoErr(t, "Delete with the current ETag unquoted", c.Delete(e.ctx, "b", strings.Trim(etag2, `"`)))
}

// openErr opens a blob expected not to open and returns the error,
// closing the reader if it did open.
func openErr(e *env, c storeadapter.Blobs, name string) error {
	r, _, err := c.Open(e.ctx, name)
	if r != nil {
		r.Close()
	}
	return err
}

// testBlobDeleteMissingIfMatch: Azure follows HTTP (RFC 9110 13.2.1), where
// a request that would fail without its conditions fails the same way with
// them: deleting a missing blob is 404 BlobNotFound whatever ETag If-Match
// names (docs/azure-behaviour.md, "Issue 18 decisions").
func testBlobDeleteMissingIfMatch(t *testing.T, e *env) {
	if e.h.Azurite {
		t.Skip("Azurite answers 412 ConditionNotMet to a conditional request on a missing blob where Azure answers " +
			"404 BlobNotFound (https://github.com/Azure/Azurite/issues/2751; docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	c := e.newContainer(t)
	other := e.put(t, c, "other", []byte("x"), storeadapter.PutOptions{})
	old := e.put(t, c, "b", []byte("v1"), storeadapter.PutOptions{})
	checkNoErr(t, "Delete", c.Delete(e.ctx, "b", old))
	checkItemNotFound(t, "Delete of a deleted blob with its old ETag", c.Delete(e.ctx, "b", old))
	checkItemNotFound(t, "Delete of a never-written blob with another blob's ETag", c.Delete(e.ctx, "never", other))
	checkItemNotFound(t, "Delete of a never-written blob with ETagAny", c.Delete(e.ctx, "never", storeadapter.ETagAny))
	if _, err := c.Properties(e.ctx, "other"); err != nil {
		t.Errorf("Properties of the other blob: %v", err)
	}
}

// testBlobListNoncharacterNames: Azure stores blob names holding U+FFFE or
// U+FFFF and lists them, percent-encoded with Encoded="true" because XML
// cannot carry them (service version 2021-02-12 on; the Go SDK decodes
// them); a listing holds every blob, names as written, in UTF-16 order
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testBlobListNoncharacterNames(t *testing.T, e *env) {
	if e.h.Azurite {
		t.Skip("Azurite fails a whole listing (HTTP 500) when a blob name holds U+FFFE or U+FFFF; Azure lists it " +
			"with Encoded=\"true\" (docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	c := e.newContainer(t)
	names := []string{"a\uFFFEb", "a\uFFFF", "a\U0001F600", "ab", "d/\uFFFE"}
	for _, name := range names {
		e.put(t, c, name, []byte(name), storeadapter.PutOptions{})
	}
	want := slices.Clone(names)
	slices.SortFunc(want, storeadapter.CompareUTF16)
	var got []string
	for _, p := range e.listAll(t, c, "") {
		got = append(got, p.Name)
	}
	if d := diffLines(quoteAll(want), quoteAll(got)); d != "" {
		t.Errorf("List (-want +got):\n%s", d)
	}
	got = nil
	for _, p := range e.listAll(t, c, "a\uFFFE") {
		got = append(got, p.Name)
	}
	if d := diffLines(quoteAll([]string{"a\uFFFEb"}), quoteAll(got)); d != "" {
		t.Errorf("List with prefix a\\uFFFE (-want +got):\n%s", d)
	}
	for _, name := range names {
		data, _, err := c.Get(e.ctx, name)
		if err != nil || string(data) != name {
			t.Errorf("Get(%+q) = %q, %v; want its content", name, data, err)
		}
	}
}
