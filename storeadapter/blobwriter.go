package storeadapter

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
)

// DefaultBlockSize is the block size of a BlobWriter whose options leave it
// zero: large enough that a blob of 50,000 blocks may hold 195 GiB, small
// enough to keep in memory.
const DefaultBlockSize = 4 << 20

// BlobWriterOptions configure a BlobWriter.
type BlobWriterOptions struct {
	// BlockSize is the size of every staged block but the last, and the
	// memory the writer holds: 1 byte to MaxBlockBytes, 0 meaning
	// DefaultBlockSize. The blob can hold MaxBlocks blocks of it.
	BlockSize int
	// Put holds the content type, metadata and condition of the commit,
	// as in Blobs.Put: with IfNoneMatchAny, Commit fails with
	// ErrAlreadyExists if the blob exists by then. The writer copies the
	// metadata map; metadata known only once the content is written (a
	// count, the last timestamp) is given to SetMetadata before Commit.
	Put PutOptions
}

// BlobWriter writes a blob of any size through Blobs.StageBlock and
// Blobs.CommitBlocks, holding at most one block in memory. Nothing is
// visible until Commit: a writer that fails or is abandoned leaves the
// blob as it was (its staged blocks expire on their own).
//
// Block IDs are base64 of a random nonce of the writer and the block's
// zero-padded sequence number: every ID of one writer has one length, as
// Azure requires, and no two writers share one. The uncommitted blocks of
// a blob are one list shared by every writer of it, so with IDs that were
// the same for every run, two writers of one blob at once (a handler left
// running after its lease was lost, and the delivery that took over) would
// replace each other's blocks and a commit could make a blob of both. With
// a nonce each commit names only its own blocks: the blob is one writer's
// whole content. A commit discards every other uncommitted block of the
// blob, so of two writers at once the second to commit fails with
// ErrPreconditionFailed (a lost race, to retry), never a mix. Blocks a
// crashed writer staged are never committed and expire on their own.
//
// Errors are sticky: after a failed Write or Commit every call returns the
// same error; start again with a new writer. A BlobWriter is not safe for
// concurrent use.
type BlobWriter struct {
	ctx   context.Context
	b     Blobs
	name  string
	o     BlobWriterOptions
	buf   []byte   // the block being filled; cap is the block size once allocated
	ids   []string // staged so far, in order
	size  int64
	err   error
	etag  string
	block int
	nonce string // this writer's part of every block ID
}

// NewBlobWriter returns a writer of the named blob. Invalid options or an
// invalid name surface as ErrInvalidInput from the first Write or Commit,
// before any call to b.
func NewBlobWriter(ctx context.Context, b Blobs, name string, o BlobWriterOptions) *BlobWriter {
	o.Put.Metadata = maps.Clone(o.Put.Metadata) // not the caller's: it is read at Commit
	w := &BlobWriter{ctx: ctx, b: b, name: name, o: o, block: o.BlockSize, nonce: rand.Text()[:16]}
	if w.block == 0 {
		w.block = DefaultBlockSize
	}
	switch {
	case o.BlockSize < 0 || int64(o.BlockSize) > MaxBlockBytes:
		w.err = invalid("block size", "must be 1-%d bytes (0 means %d), got %d", MaxBlockBytes, DefaultBlockSize, o.BlockSize)
	default:
		if err := ValidateBlobName(name); err != nil {
			w.err = err
		} else if err := ValidatePutOptions(o.Put); err != nil {
			w.err = err
		}
	}
	return w
}

// Write buffers p, staging each block as it fills. It returns len(p), or
// the bytes taken before the error that stopped it (from validation or
// StageBlock).
func (w *BlobWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && w.err == nil {
		if len(w.buf) == 0 && len(p) >= w.block {
			// A whole block straight from the caller's slice: no copy.
			w.stage(p[:w.block])
			if w.err == nil {
				n, p = n+w.block, p[w.block:]
			}
			continue
		}
		if w.buf == nil {
			w.buf = make([]byte, 0, w.block)
		}
		c := min(len(p), w.block-len(w.buf))
		w.buf = append(w.buf, p[:c]...)
		n, p = n+c, p[c:]
		if len(w.buf) == w.block {
			w.stage(w.buf)
			w.buf = w.buf[:0]
		}
	}
	return n, w.err
}

// stage stages one block under the next ID, recording any error.
func (w *BlobWriter) stage(data []byte) {
	if len(w.ids) == MaxBlocks {
		w.err = tooLarge("blob "+w.name, "more than %d blocks of %d bytes; use a larger BlockSize", MaxBlocks, w.block)
		return
	}
	id := blockID(w.nonce, len(w.ids))
	if err := w.b.StageBlock(w.ctx, w.name, id, data); err != nil {
		w.err = fmt.Errorf("write blob %s: block %d: %w", w.name, len(w.ids), err)
		return
	}
	w.ids = append(w.ids, id)
	w.size += int64(len(data))
}

// SetMetadata replaces the metadata the commit will write (the options'
// Put.Metadata) with a copy of md, for metadata known only once the
// content is written. Invalid metadata (see ValidateMetadata) is a sticky
// error, so the blob is never committed without the metadata meant for
// it. After Commit it changes nothing and returns ErrInvalidInput.
func (w *BlobWriter) SetMetadata(md map[string]string) error {
	switch {
	case w.err != nil:
		return w.err
	case w.etag != "":
		return invalid("blob writer", "blob %s is already committed: set its metadata before Commit", w.name)
	}
	if err := ValidateMetadata(md); err != nil {
		w.err = fmt.Errorf("write blob %s: %w", w.name, err)
		return w.err
	}
	w.o.Put.Metadata = maps.Clone(md)
	return nil
}

// Commit stages what is buffered and commits every block, making the blob
// visible, and returns its ETag. Calling it again returns the same result.
func (w *BlobWriter) Commit() (etag string, err error) {
	if w.etag != "" || w.err != nil {
		return w.etag, w.err
	}
	if len(w.buf) > 0 {
		w.stage(w.buf)
	}
	w.buf = nil // the memory goes back now, whatever happens next
	if w.err != nil {
		return "", w.err
	}
	w.etag, err = w.b.CommitBlocks(w.ctx, w.name, w.ids, w.o.Put)
	switch {
	case errors.Is(err, ErrInvalidInput):
		// The IDs are this writer's own, valid and staged: the service
		// no longer has them because another writer's commit of the blob
		// discarded every uncommitted block. That writer won the race.
		w.err = fmt.Errorf("write blob %s: commit %d blocks: %w: another writer committed the blob meanwhile, discarding this writer's blocks (%w)",
			w.name, len(w.ids), ErrPreconditionFailed, err)
	case err != nil:
		w.err = fmt.Errorf("write blob %s: commit %d blocks: %w", w.name, len(w.ids), err)
	}
	return w.etag, w.err
}

// Size returns the bytes written so far: the blob's size once committed.
func (w *BlobWriter) Size() int64 { return w.size + int64(len(w.buf)) }

// blockID returns the ID a writer with nonce gives its n-th block (from 0):
// base64 of the nonce and n as eight decimal digits (25 bytes, within
// Azure's 64).
func blockID(nonce string, n int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%08d", nonce, n))
}
