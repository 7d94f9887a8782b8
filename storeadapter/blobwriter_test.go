package storeadapter_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/storetest"
)

// recorder is a Blobs that records the blocks staged and the lists
// committed, and fails the stage call numbered failAt (from 1) if set.
// Methods the writer must not call panic through the nil interface.
type recorder struct {
	storeadapter.Blobs
	staged    []string // IDs, in call order
	sizes     []int
	data      []byte // every staged byte, in call order
	committed [][]string
	options   []storeadapter.PutOptions // of each commit
	failAt    int
}

var errStage = errors.New("stage failed")

func (r *recorder) StageBlock(_ context.Context, _, id string, data []byte) error {
	if err := storeadapter.ValidateStageBlock(id, len(data)); err != nil {
		return err
	}
	if len(r.staged)+1 == r.failAt {
		return errStage
	}
	r.staged = append(r.staged, id)
	r.sizes = append(r.sizes, len(data))
	r.data = append(r.data, data...)
	return nil
}

func (r *recorder) CommitBlocks(_ context.Context, _ string, ids []string, o storeadapter.PutOptions) (string, error) {
	if err := storeadapter.ValidateBlockList(ids); err != nil {
		return "", err
	}
	if err := storeadapter.ValidatePutOptions(o); err != nil {
		return "", err
	}
	r.committed = append(r.committed, slices.Clone(ids))
	o.Metadata = maps.Clone(o.Metadata)
	r.options = append(r.options, o)
	return `"0x1"`, nil
}

// TestBlobWriterBlocks: blocks of exactly the block size but the last,
// IDs that are the same on every run and of one length, the data in
// order, one commit of every block.
func TestBlobWriterBlocks(t *testing.T) {
	const block = 1000
	data := make([]byte, 5*block+123)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for _, chunk := range []int{1, 7, block - 1, block, block + 1, 3 * block, len(data)} {
		t.Run(fmt.Sprint("writes of ", chunk), func(t *testing.T) {
			r := &recorder{}
			w := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{BlockSize: block})
			for rest := data; len(rest) > 0; {
				n := min(chunk, len(rest))
				if k, err := w.Write(rest[:n]); k != n || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
				}
				rest = rest[n:]
			}
			if _, err := w.Commit(); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			// Six IDs of one length: the writer's nonce and the block's number.
			nonce := ""
			for i, id := range r.staged {
				raw, err := base64.StdEncoding.DecodeString(id)
				n, num, ok := strings.Cut(string(raw), "-")
				if err != nil || !ok || num != fmt.Sprintf("%08d", i) || len(id) != len(r.staged[0]) || nonce != "" && n != nonce {
					t.Fatalf("block %d has ID %q (%q); want base64 of <nonce>-%08d, one nonce and one length", i, id, raw, i)
				}
				nonce = n
			}
			if len(r.staged) != 6 || len(r.committed) != 1 || !slices.Equal(r.committed[0], r.staged) {
				t.Errorf("staged %q, committed %q; want 6 staged and the same committed once", r.staged, r.committed)
			}
			if want := []int{block, block, block, block, block, 123}; !slices.Equal(r.sizes, want) {
				t.Errorf("block sizes %v, want %v", r.sizes, want)
			}
			if !bytes.Equal(r.data, data) {
				t.Errorf("staged data differs from the data written")
			}
			if w.Size() != int64(len(data)) {
				t.Errorf("Size() = %d, want %d", w.Size(), len(data))
			}
		})
	}
}

// TestBlobWriterStickyError: after a failed stage, Write and Commit return
// that error and call the store no more.
func TestBlobWriterStickyError(t *testing.T) {
	r := &recorder{failAt: 2}
	w := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{BlockSize: 10})
	n, err := w.Write(make([]byte, 35))
	if n != 10 || !errors.Is(err, errStage) {
		t.Errorf("Write = %d, %v; want 10 bytes taken and the stage error", n, err)
	}
	if _, err := w.Write([]byte("more")); !errors.Is(err, errStage) {
		t.Errorf("Write after the failure: %v, want the stage error", err)
	}
	if _, err := w.Commit(); !errors.Is(err, errStage) {
		t.Errorf("Commit after the failure: %v, want the stage error", err)
	}
	if len(r.staged) != 1 || len(r.committed) != 0 {
		t.Errorf("store saw %d stages and %d commits after the failure, want 1 and 0", len(r.staged), len(r.committed))
	}
}

// TestBlobWriterLimits: options, names and sizes Azure would refuse fail
// before any call to the store.
func TestBlobWriterLimits(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		blob string
		o    storeadapter.BlobWriterOptions
		want error
	}{
		{"negative block size", "b", storeadapter.BlobWriterOptions{BlockSize: -1}, storeadapter.ErrInvalidInput},
		{"block over 4000 MiB", "b", storeadapter.BlobWriterOptions{BlockSize: storeadapter.MaxBlockBytes + 1}, storeadapter.ErrInvalidInput},
		{"bad blob name", "a\\b", storeadapter.BlobWriterOptions{}, storeadapter.ErrInvalidInput},
		{"two conditions", "b", storeadapter.BlobWriterOptions{Put: storeadapter.PutOptions{IfMatch: "*", IfNoneMatchAny: true}}, storeadapter.ErrInvalidInput},
	}
	for _, tt := range tests {
		r := &recorder{}
		w := storeadapter.NewBlobWriter(ctx, r, tt.blob, tt.o)
		if _, err := w.Write([]byte("x")); !errors.Is(err, tt.want) {
			t.Errorf("%s: Write: %v, want %v", tt.name, err, tt.want)
		}
		if _, err := w.Commit(); !errors.Is(err, tt.want) {
			t.Errorf("%s: Commit: %v, want %v", tt.name, err, tt.want)
		}
		if len(r.staged)+len(r.committed) != 0 {
			t.Errorf("%s: the store was called", tt.name)
		}
	}

	// One block more than a blob may hold: refused before its stage call.
	r := &recorder{}
	w := storeadapter.NewBlobWriter(ctx, r, "b", storeadapter.BlobWriterOptions{BlockSize: 1})
	n, err := io.Copy(w, bytes.NewReader(make([]byte, storeadapter.MaxBlocks+1)))
	if !errors.Is(err, storeadapter.ErrTooLarge) || n != storeadapter.MaxBlocks || len(r.staged) != storeadapter.MaxBlocks {
		t.Errorf("writing %d one-byte blocks: %d bytes, %d staged, %v; want %d and ErrTooLarge", storeadapter.MaxBlocks+1, n, len(r.staged), err, storeadapter.MaxBlocks)
	}
}

func TestValidateBlocks(t *testing.T) {
	id := storetest.BlockID(0)
	tests := []struct {
		name  string
		err   error
		want  error
		field string
	}{
		{"ID of 64 bytes", storeadapter.ValidateBlockID(base64.StdEncoding.EncodeToString(make([]byte, 64))), nil, ""},
		{"ID of 65 bytes", storeadapter.ValidateBlockID(base64.StdEncoding.EncodeToString(make([]byte, 65))), storeadapter.ErrInvalidInput, "at most 64 bytes"},
		{"empty ID", storeadapter.ValidateBlockID(""), storeadapter.ErrInvalidInput, "block ID"},
		{"unpadded ID", storeadapter.ValidateBlockID("AAAAAA"), storeadapter.ErrInvalidInput, "base64"},
		{"URL-safe ID", storeadapter.ValidateBlockID("AA-_"), storeadapter.ErrInvalidInput, "base64"},
		{"block of 4000 MiB", storeadapter.ValidateStageBlock(id, storeadapter.MaxBlockBytes), nil, ""},
		{"block over 4000 MiB", storeadapter.ValidateStageBlock(id, storeadapter.MaxBlockBytes+1), storeadapter.ErrTooLarge, "4000 MiB"},
		{"empty block", storeadapter.ValidateStageBlock(id, 0), storeadapter.ErrInvalidInput, "at least 1 byte"},
		{"empty list", storeadapter.ValidateBlockList(nil), nil, ""},
		{"two lengths", storeadapter.ValidateBlockList([]string{id, id, "AAAA"}), storeadapter.ErrInvalidInput, "ID 2"},
		{"50,001 blocks", storeadapter.ValidateBlockList(make([]string, storeadapter.MaxBlocks+1)), storeadapter.ErrTooLarge, "at most 50000 blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErr(t, tt.err, tt.want, tt.field) })
	}
}

// TestBlobWritersDoNotShareIDs: two writers of one blob at once (a handler
// left running after its lease was lost, and the delivery that took over)
// stage different IDs, so neither replaces the other's blocks and each
// commit names only its own.
func TestBlobWritersDoNotShareIDs(t *testing.T) {
	r := &recorder{}
	a := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{BlockSize: 4})
	b := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{BlockSize: 4})
	for _, w := range []*storeadapter.BlobWriter{a, b} {
		if _, err := w.Write([]byte("12345678")); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.staged) != 4 || len(slices.Compact(slices.Sorted(slices.Values(r.staged)))) != 4 {
		t.Errorf("two writers staged %q; want four different IDs", r.staged)
	}
}

// TestBlobWriterMetadata: the commit writes the metadata of the options as
// they were when the writer was made (the writer copies the map), or what
// SetMetadata gave it last; invalid metadata from SetMetadata is a sticky
// error and nothing is committed; after Commit, SetMetadata changes
// nothing.
func TestBlobWriterMetadata(t *testing.T) {
	commit := func(t *testing.T, w *storeadapter.BlobWriter) {
		t.Helper()
		if _, err := w.Write([]byte("data")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if _, err := w.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	t.Run("from the options, copied", func(t *testing.T) {
		r := &recorder{}
		md := map[string]string{"kind": "export"}
		w := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{Put: storeadapter.PutOptions{Metadata: md}})
		md["kind"] = "changed"
		md["bad-name"] = "added after NewBlobWriter"
		commit(t, w)
		if got := r.options[0].Metadata; !maps.Equal(got, map[string]string{"kind": "export"}) {
			t.Errorf("committed metadata %v, want the options' as given to NewBlobWriter", got)
		}
	})
	t.Run("set before Commit", func(t *testing.T) {
		r := &recorder{}
		w := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{
			Put: storeadapter.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"kind": "export"}}})
		md := map[string]string{"count": "2", "last": "2026-11-21T08:00:00Z"}
		if err := w.SetMetadata(md); err != nil {
			t.Fatalf("SetMetadata: %v", err)
		}
		md["count"] = "changed"
		commit(t, w)
		if got := r.options[0]; !maps.Equal(got.Metadata, map[string]string{"count": "2", "last": "2026-11-21T08:00:00Z"}) || got.ContentType != "text/plain" {
			t.Errorf("committed options %+v, want the content type kept and the metadata replaced by SetMetadata's", got)
		}
		err := w.SetMetadata(map[string]string{"count": "3"})
		checkErr(t, err, storeadapter.ErrInvalidInput, "already committed")
		if etag, err := w.Commit(); etag != `"0x1"` || err != nil || len(r.committed) != 1 {
			t.Errorf("Commit after a late SetMetadata = %q, %v with %d commits; want the first result and no new commit", etag, err, len(r.committed))
		}
	})
	for _, tt := range []struct {
		name string
		md   map[string]string
		want error
	}{
		{"invalid", map[string]string{"1st": "x"}, storeadapter.ErrInvalidInput},
		{"too large", map[string]string{"big": strings.Repeat("v", storeadapter.MaxMetadataBytes)}, storeadapter.ErrTooLarge},
	} {
		t.Run("set "+tt.name, func(t *testing.T) {
			r := &recorder{}
			w := storeadapter.NewBlobWriter(context.Background(), r, "b", storeadapter.BlobWriterOptions{})
			if _, err := w.Write([]byte("data")); err != nil {
				t.Fatalf("Write: %v", err)
			}
			err := w.SetMetadata(tt.md)
			checkErr(t, err, tt.want, "metadata")
			_, err2 := w.Commit()
			if err2 != err {
				t.Errorf("Commit after a refused SetMetadata = %v, want the same error %v", err2, err)
			}
			if err := w.SetMetadata(nil); err != err2 {
				t.Errorf("SetMetadata after the error = %v, want the sticky %v", err, err2)
			}
			if len(r.committed) != 0 {
				t.Errorf("committed %d times, want none", len(r.committed))
			}
		})
	}
}
