package storetest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// pattern returns n bytes that differ from block to block and run, so a
// block out of place or left over from another run shows in a comparison.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>9) ^ seed
	}
	return b
}

// stage stages one block and fails the test on error.
func (e *env) stage(t *testing.T, c storeadapter.Blobs, name, id string, data []byte) {
	t.Helper()
	if err := c.StageBlock(e.ctx, name, id, data); err != nil {
		t.Fatalf("StageBlock(%s, %s): %v", name, id, err)
	}
}

// commit commits blocks and fails the test on error.
func (e *env) commit(t *testing.T, c storeadapter.Blobs, name string, ids []string, o storeadapter.PutOptions) string {
	t.Helper()
	etag, err := c.CommitBlocks(e.ctx, name, ids, o)
	if err != nil {
		t.Fatalf("CommitBlocks(%s, %d blocks): %v", name, len(ids), err)
	}
	if etag == "" {
		t.Errorf("CommitBlocks(%s) returned an empty ETag", name)
	}
	return etag
}

// checkInvisible reports an error unless Get, Properties and List all say
// the blob does not exist.
func (e *env) checkInvisible(t *testing.T, c storeadapter.Blobs, name, when string) {
	t.Helper()
	_, _, err := c.Get(e.ctx, name)
	checkItemNotFound(t, "Get "+when, err)
	_, err = c.Properties(e.ctx, name)
	checkItemNotFound(t, "Properties "+when, err)
	for _, p := range e.listAll(t, c, name) {
		if p.Name == name {
			t.Errorf("List %s shows %+v", when, p)
		}
	}
}

func testBlockStageCommit(t *testing.T, e *env) {
	c := e.newContainer(t)
	blocks := [][]byte{[]byte("first, "), pattern(100<<10, 1), []byte(", last")}
	ids := []string{BlockID(0), BlockID(1), BlockID(2)}
	for _, i := range []int{2, 0, 1} { // staged in any order, committed in list order
		e.stage(t, c, "b", ids[i], blocks[i])
		e.checkInvisible(t, c, "b", fmt.Sprintf("after staging block %d, before the commit", i))
	}
	before := e.now()
	etag := e.commit(t, c, "b", ids, storeadapter.PutOptions{ContentType: "application/x-ndjson"})
	p := e.checkBlob(t, c, "b", bytes.Join(blocks, nil), etag, "application/x-ndjson")
	e.checkRecent(t, "LastModified", p.LastModified, before, e.now())

	// A list may repeat and reorder blocks, and an empty list makes an
	// empty blob.
	etag = e.commit(t, c, "b", []string{ids[2], ids[0], ids[2]}, storeadapter.PutOptions{})
	e.checkBlob(t, c, "b", []byte(", lastfirst, , last"), etag, "application/octet-stream")
	etag = e.commit(t, c, "empty", nil, storeadapter.PutOptions{})
	e.checkBlob(t, c, "empty", nil, etag, "application/octet-stream")
}

// testBlockCrashedWriter: blocks staged and never committed change
// nothing visible, whether the blob is new or already exists.
func testBlockCrashedWriter(t *testing.T, e *env) {
	c := e.newContainer(t)
	for i := range 3 {
		e.stage(t, c, "new", BlockID(i), pattern(10<<10, byte(i)))
	}
	e.checkInvisible(t, c, "new", "after a writer staged blocks and stopped")

	etag := e.put(t, c, "old", []byte("version 1"), storeadapter.PutOptions{ContentType: "text/plain"})
	for i := range 3 {
		e.stage(t, c, "old", BlockID(i), pattern(10<<10, byte(i)))
	}
	e.checkBlob(t, c, "old", []byte("version 1"), etag, "text/plain")
	for _, p := range e.listAll(t, c, "") {
		if p.Name != "old" || p.ETag != etag || p.Size != 9 {
			t.Errorf("List after a crashed writer shows %+v, want only old (9 bytes, %s)", p, etag)
		}
	}
}

// testBlockRecommit: a rerun stages the same IDs again (with the same or
// other data) and commits; a commit repeated after a lost answer finds the
// blocks in the blob. Either way the blob ends as the last run wrote it.
func testBlockRecommit(t *testing.T, e *env) {
	c := e.newContainer(t)
	ids := []string{BlockID(0), BlockID(1)}
	write := func(seed byte) []byte {
		var all []byte
		for i, id := range ids {
			data := pattern(20<<10+i, seed+byte(i))
			e.stage(t, c, "b", id, data)
			all = append(all, data...)
		}
		return all
	}
	first := write(1)
	etag := e.commit(t, c, "b", ids, storeadapter.PutOptions{})
	e.checkBlob(t, c, "b", first, etag, "application/octet-stream")

	again := write(1) // the same run once more: same blocks, same blob
	etag = e.commit(t, c, "b", ids, storeadapter.PutOptions{})
	e.checkBlob(t, c, "b", again, etag, "application/octet-stream")

	etag = e.commit(t, c, "b", ids, storeadapter.PutOptions{}) // nothing staged: the blob's own blocks
	e.checkBlob(t, c, "b", again, etag, "application/octet-stream")

	e.stage(t, c, "b", ids[0], pattern(5, 9)) // a later run replaces block 0 only
	etag = e.commit(t, c, "b", ids, storeadapter.PutOptions{})
	e.checkBlob(t, c, "b", append(pattern(5, 9), again[20<<10:]...), etag, "application/octet-stream")
}

func testBlockCommitConditions(t *testing.T, e *env) {
	c := e.newContainer(t)
	id := BlockID(0)
	e.stage(t, c, "b", id, []byte("v1"))
	etag1 := e.commit(t, c, "b", []string{id}, storeadapter.PutOptions{IfNoneMatchAny: true})

	e.stage(t, c, "b", id, []byte("v2"))
	_, err := c.CommitBlocks(e.ctx, "b", []string{id}, storeadapter.PutOptions{IfNoneMatchAny: true})
	checkErr(t, "CommitBlocks with IfNoneMatchAny of an existing blob", err, storeadapter.ErrAlreadyExists)
	e.checkBlob(t, c, "b", []byte("v1"), etag1, "application/octet-stream")

	etag2 := e.put(t, c, "b", []byte("put"), storeadapter.PutOptions{})
	e.stage(t, c, "b", id, []byte("v3"))
	_, err = c.CommitBlocks(e.ctx, "b", []string{id}, storeadapter.PutOptions{IfMatch: etag1})
	checkErr(t, "CommitBlocks with a stale IfMatch", err, storeadapter.ErrPreconditionFailed)
	e.checkBlob(t, c, "b", []byte("put"), etag2, "application/octet-stream")

	// A failed commit keeps the staged blocks for the next one.
	etag3 := e.commit(t, c, "b", []string{id}, storeadapter.PutOptions{IfMatch: strings.Trim(etag2, `"`), ContentType: "text/plain"})
	e.checkBlob(t, c, "b", []byte("v3"), etag3, "text/plain")

	e.stage(t, c, "missing", id, []byte("x"))
	for _, ifMatch := range []string{etag3, storeadapter.ETagAny} {
		_, err := c.CommitBlocks(e.ctx, "missing", []string{id}, storeadapter.PutOptions{IfMatch: ifMatch})
		checkErr(t, "CommitBlocks with IfMatch "+ifMatch+" of a missing blob", err, storeadapter.ErrPreconditionFailed)
	}
	e.checkInvisible(t, c, "missing", "after conditional commits of a missing blob")
	_, err = c.CommitBlocks(e.ctx, "b", []string{id}, storeadapter.PutOptions{IfMatch: etag3, IfNoneMatchAny: true})
	checkErr(t, "CommitBlocks with IfMatch and IfNoneMatchAny", err, storeadapter.ErrInvalidInput)
}

// testBlockCommitUnknown: a list naming a block that was never staged (or
// that an earlier commit left out, which discards it) is refused: Azure
// answers 400 InvalidBlockList.
func testBlockCommitUnknown(t *testing.T, e *env) {
	c := e.newContainer(t)
	ids := []string{BlockID(0), BlockID(1), BlockID(2)}
	e.stage(t, c, "b", ids[0], []byte("zero"))
	e.stage(t, c, "b", ids[1], []byte("one"))
	_, err := c.CommitBlocks(e.ctx, "b", ids, storeadapter.PutOptions{})
	checkErr(t, "CommitBlocks naming a block never staged", err, storeadapter.ErrInvalidInput)
	e.checkInvisible(t, c, "b", "after a refused commit")

	etag := e.commit(t, c, "b", ids[:1], storeadapter.PutOptions{})
	_, err = c.CommitBlocks(e.ctx, "b", ids[:2], storeadapter.PutOptions{})
	checkErr(t, "CommitBlocks naming a block the last commit discarded", err, storeadapter.ErrInvalidInput)
	e.checkBlob(t, c, "b", []byte("zero"), etag, "application/octet-stream")
}

// testBlockIDLength: the blocks staged for one blob must have IDs of one
// length (Azure answers 400 InvalidBlobOrBlock; Azurite too).
func testBlockIDLength(t *testing.T, e *env) {
	c := e.newContainer(t)
	short := base64.StdEncoding.EncodeToString([]byte("0001"))
	e.stage(t, c, "b", short, []byte("x"))
	err := c.StageBlock(e.ctx, "b", BlockID(1), []byte("y"))
	checkErr(t, "StageBlock with an ID longer than the staged ones", err, storeadapter.ErrInvalidInput)
	etag := e.commit(t, c, "b", []string{short}, storeadapter.PutOptions{})
	e.checkBlob(t, c, "b", []byte("x"), etag, "application/octet-stream")
	// After the commit nothing is staged: another length may start.
	e.stage(t, c, "b", BlockID(1), []byte("y"))
}

// testBlockPutDiscardsStaged: on Azure a Put Blob discards the blob's
// uncommitted blocks (Put Block List documentation). Azurite keeps them;
// tablekeeper never relies on either, and localstore follows Azure.
func testBlockPutDiscardsStaged(t *testing.T, e *env) {
	if e.h.Azurite {
		t.Skip("Azurite keeps uncommitted blocks across Put Blob; Azure discards them")
	}
	c := e.newContainer(t)
	id := BlockID(0)
	e.stage(t, c, "b", id, []byte("staged"))
	etag := e.put(t, c, "b", []byte("put"), storeadapter.PutOptions{})
	_, err := c.CommitBlocks(e.ctx, "b", []string{id}, storeadapter.PutOptions{})
	checkErr(t, "CommitBlocks of a block staged before a Put", err, storeadapter.ErrInvalidInput)
	e.checkBlob(t, c, "b", []byte("put"), etag, "application/octet-stream")
}

// testBlockLimits: block IDs, sizes and lists that Azure refuses are
// refused before any call: in a container that does not exist, the answer
// is the validation's, not ErrContainerNotFound. Azurite refuses bad IDs
// itself but takes more than 50,000 IDs to a list it can resolve.
func testBlockLimits(t *testing.T, e *env) {
	c := e.h.Store.Container(uniqueName("c")) // never created
	long := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'a'}, storeadapter.MaxBlockIDBytes+1))
	for _, id := range []string{"", "not base64!", "AAA", "AA-_", long} {
		checkErr(t, fmt.Sprintf("StageBlock with ID %q", id), c.StageBlock(e.ctx, "b", id, []byte("x")), storeadapter.ErrInvalidInput)
		_, err := c.CommitBlocks(e.ctx, "b", []string{id}, storeadapter.PutOptions{})
		checkErr(t, fmt.Sprintf("CommitBlocks with ID %q", id), err, storeadapter.ErrInvalidInput)
	}
	checkErr(t, "StageBlock of an empty block", c.StageBlock(e.ctx, "b", BlockID(0), nil), storeadapter.ErrInvalidInput)
	mixed := []string{BlockID(0), base64.StdEncoding.EncodeToString([]byte("1"))}
	_, err := c.CommitBlocks(e.ctx, "b", mixed, storeadapter.PutOptions{})
	checkErr(t, "CommitBlocks with IDs of two lengths", err, storeadapter.ErrInvalidInput)
	tooMany := make([]string, storeadapter.MaxBlocks+1)
	for i := range tooMany {
		tooMany[i] = BlockID(i)
	}
	_, err = c.CommitBlocks(e.ctx, "b", tooMany, storeadapter.PutOptions{})
	checkErr(t, fmt.Sprintf("CommitBlocks of %d blocks", len(tooMany)), err, storeadapter.ErrTooLarge)
	for _, size := range []int{-1, storeadapter.MaxBlockBytes + 1} {
		w := storeadapter.NewBlobWriter(e.ctx, c, "b", storeadapter.BlobWriterOptions{BlockSize: size})
		_, err := w.Write([]byte("x"))
		checkErr(t, fmt.Sprintf("BlobWriter with block size %d", size), err, storeadapter.ErrInvalidInput)
		_, err = w.Commit()
		checkErr(t, fmt.Sprintf("BlobWriter with block size %d: Commit", size), err, storeadapter.ErrInvalidInput)
	}
}

func testBlobOpen(t *testing.T, e *env) {
	c := e.newContainer(t)
	data := pattern(700<<10, 3)
	etag := e.put(t, c, "b", data, storeadapter.PutOptions{ContentType: "text/csv"})
	r, p, err := c.Open(e.ctx, "b")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	want := storeadapter.BlobProps{Name: "b", ETag: etag, Size: int64(len(data)), ContentType: "text/csv", LastModified: p.LastModified}
	if !p.Equal(want) {
		t.Errorf("Open properties = %+v, want %+v", p, want)
	}
	// Read in small pieces: the body streams.
	var got []byte
	buf := make([]byte, 10000)
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
	}
	checkNoErr(t, "Close", r.Close())
	if !bytes.Equal(got, data) {
		t.Errorf("Open read %d bytes, want the %d put (equal: %v)", len(got), len(data), bytes.Equal(got, data))
	}
	p2, err := c.Properties(e.ctx, "b")
	if err != nil || !p2.Equal(p) {
		t.Errorf("Properties = %+v, %v; Open said %+v", p2, err, p)
	}
	checkItemNotFound(t, "Open of a missing blob", openErr(e, c, "missing"))

	// A reader closed early is fine, and so is an empty blob.
	r, _, err = c.Open(e.ctx, "b")
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	checkNoErr(t, "Close before reading", r.Close())
	e.put(t, c, "empty", nil, storeadapter.PutOptions{})
	r, p, err = c.Open(e.ctx, "empty")
	if err != nil {
		t.Fatalf("Open of an empty blob: %v", err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil || len(b) != 0 || p.Size != 0 {
		t.Errorf("Open of an empty blob read %d bytes, size %d, %v; want none", len(b), p.Size, err)
	}
}

// readAll opens a blob and reads it through.
func (e *env) readAll(t *testing.T, c storeadapter.Blobs, name string) ([]byte, storeadapter.BlobProps) {
	t.Helper()
	r, p, err := c.Open(e.ctx, name)
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return data, p
}

// testBlobWriter writes a few MiB in 64 KiB blocks, in writes of every
// size around the block size, and reads it back.
func testBlobWriter(t *testing.T, e *env) {
	c := e.newContainer(t)
	const block = 64 << 10
	data := pattern(3<<20+12345, 4)
	w := storeadapter.NewBlobWriter(e.ctx, c, "export/day.jsonl", storeadapter.BlobWriterOptions{
		BlockSize: block, Put: storeadapter.PutOptions{ContentType: "application/x-ndjson", IfNoneMatchAny: true}})
	rest := data
	for i, n := 0, 0; len(rest) > 0; i++ {
		n = min(len(rest), []int{1000, block, 3*block + 17, block - 1, 1, 200 << 10}[i%6])
		if k, err := w.Write(rest[:n]); k != n || err != nil {
			t.Fatalf("Write of %d bytes = %d, %v", n, k, err)
		}
		rest = rest[n:]
	}
	e.checkInvisible(t, c, "export/day.jsonl", "before Commit")
	etag, err := w.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if w.Size() != int64(len(data)) {
		t.Errorf("Size() = %d, want %d", w.Size(), len(data))
	}
	if again, err := w.Commit(); again != etag || err != nil {
		t.Errorf("second Commit = %q, %v; want %q, nil", again, err, etag)
	}
	got, p := e.readAll(t, c, "export/day.jsonl")
	if !bytes.Equal(got, data) {
		t.Errorf("blob read back differs: %d bytes, want %d", len(got), len(data))
	}
	want := storeadapter.BlobProps{Name: "export/day.jsonl", ETag: etag, Size: int64(len(data)), ContentType: "application/x-ndjson", LastModified: p.LastModified}
	if !p.Equal(want) {
		t.Errorf("properties = %+v, want %+v", p, want)
	}

	// The commit's condition holds: a second writer may not replace it.
	w2 := storeadapter.NewBlobWriter(e.ctx, c, "export/day.jsonl", storeadapter.BlobWriterOptions{
		BlockSize: block, Put: storeadapter.PutOptions{IfNoneMatchAny: true}})
	if _, err := w2.Write([]byte("other")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	_, err = w2.Commit()
	checkErr(t, "Commit with IfNoneMatchAny over an existing blob", err, storeadapter.ErrAlreadyExists)
	if got, _ := e.readAll(t, c, "export/day.jsonl"); !bytes.Equal(got, data) {
		t.Errorf("a refused commit changed the blob")
	}

	// A writer given nothing commits an empty blob.
	w3 := storeadapter.NewBlobWriter(e.ctx, c, "empty", storeadapter.BlobWriterOptions{})
	etag, err = w3.Commit()
	if err != nil {
		t.Fatalf("Commit of an empty writer: %v", err)
	}
	e.checkBlob(t, c, "empty", nil, etag, "application/octet-stream")
}

// testBlobWriterRerun: a writer that stopped after staging part of a blob
// (a crash), then a rerun of the whole write: the blob is the rerun's, with
// no block of the first run in it.
func testBlobWriterRerun(t *testing.T, e *env) {
	c := e.newContainer(t)
	const block = 64 << 10
	crashed := storeadapter.NewBlobWriter(e.ctx, c, "b", storeadapter.BlobWriterOptions{BlockSize: block})
	if _, err := crashed.Write(pattern(5*block+100, 5)); err != nil { // five blocks staged, 100 bytes buffered
		t.Fatalf("Write: %v", err)
	}
	e.checkInvisible(t, c, "b", "after a writer stopped before Commit")

	data := pattern(2*block+7, 6) // the rerun writes less: three blocks
	w := storeadapter.NewBlobWriter(e.ctx, c, "b", storeadapter.BlobWriterOptions{BlockSize: block})
	if _, err := w.Write(data); err != nil {
		t.Fatalf("Write: %v", err)
	}
	etag, err := w.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	e.checkBlob(t, c, "b", data, etag, "application/octet-stream")
}

// testBlobWritersDoNotMix: two writers of one blob at once, their blocks
// staged in turns. The first commit makes the blob that writer's whole
// content and, as Azure does, discards every other uncommitted block of
// the blob, so the second writer's commit fails with ErrPreconditionFailed
// (another writer won) and the blob stays the first's: never a mix.
func testBlobWritersDoNotMix(t *testing.T, e *env) {
	c := e.newContainer(t)
	const block = 64 << 10
	a := storeadapter.NewBlobWriter(e.ctx, c, "b", storeadapter.BlobWriterOptions{BlockSize: block})
	b := storeadapter.NewBlobWriter(e.ctx, c, "b", storeadapter.BlobWriterOptions{BlockSize: block})
	da, db := pattern(3*block, 1), pattern(3*block, 2)
	for i := range 3 {
		if _, err := a.Write(da[i*block : (i+1)*block]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if _, err := b.Write(db[i*block : (i+1)*block]); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	etag, err := a.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := b.Commit(); !errors.Is(err, storeadapter.ErrPreconditionFailed) {
		t.Errorf("the second writer's Commit = %v, want ErrPreconditionFailed", err)
	}
	e.checkBlob(t, c, "b", da, etag, "application/octet-stream")
}

// BlockID returns a valid block ID for the n-th block of a test's blob:
// base64 of n as eight digits, so the IDs of one blob have one length.
func BlockID(n int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%08d", n))
}
