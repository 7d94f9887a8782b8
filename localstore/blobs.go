package localstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// blobPageSize is the most blobs one List call returns, as on the service.
const blobPageSize = 5000

// Container is a handle on one blob container of a Store; it implements
// storeadapter.Blobs.
type Container struct {
	s    *Store
	name string
}

type containerState struct {
	blobs *btree.BTreeG[*blob] // by name
	// staged holds each blob's uncommitted blocks by ID, apart from its
	// content, as on Azure: CommitBlocks, Put and Delete discard them.
	staged map[string]map[string][]byte
}

// blob is a committed blob. Its blocks are never changed in place (a write
// makes a new blob), so readers may share them.
type blob struct {
	name        string
	blocks      []block // the content, in order; Put makes one block without an ID
	size        int64
	etag        string
	contentType string
	metadata    map[string]string // names in lower case; nil when none
	modified    time.Time
}

type block struct {
	id   string
	data []byte
}

// props returns the blob's properties with a copy of its metadata, as
// Get, Properties and Open report them.
func (b *blob) props() storeadapter.BlobProps {
	p := b.listed()
	p.Metadata = maps.Clone(b.metadata)
	return p
}

// listed returns the blob's properties as List reports them: without
// metadata, which Azure lists only on request.
func (b *blob) listed() storeadapter.BlobProps {
	return storeadapter.BlobProps{Name: b.name, ETag: b.etag, Size: b.size, ContentType: b.contentType, LastModified: b.modified}
}

// content returns a copy of the blob's bytes.
func (b *blob) content() []byte {
	data := make([]byte, 0, b.size)
	for _, bl := range b.blocks {
		data = append(data, bl.data...)
	}
	return data
}

// matches reports whether an If-Match condition holds for b: ETagAny, or
// b's ETag with or without its quotes, as the service compares them.
func (b *blob) matches(ifMatch string) bool {
	return ifMatch == storeadapter.ETagAny || strings.Trim(ifMatch, `"`) == strings.Trim(b.etag, `"`)
}

// Name returns the container's name.
func (c *Container) Name() string { return c.name }

// with runs fn on the container under the blobs lock, after counting the call
// and validating the names; a missing container is ErrContainerNotFound.
func (c *Container) with(ctx context.Context, op, blobName string, fn func(st *containerState) error) error {
	if err := c.s.begin(ctx, op); err != nil {
		return err
	}
	if err := storeadapter.ValidateContainerName(c.name); err != nil {
		return err
	}
	if blobName != "" || op != "ListBlobs" {
		if err := storeadapter.ValidateBlobName(blobName); err != nil {
			return err
		}
	}
	c.s.blobsMu.Lock()
	defer c.s.blobsMu.Unlock()
	st := c.s.containers[c.name]
	if st == nil {
		return fmt.Errorf("localstore: %s: container %s: %w", op, c.name, storeadapter.ErrContainerNotFound)
	}
	return fn(st)
}

// Create creates the container; an existing one is left as it is.
func (c *Container) Create(ctx context.Context) error {
	if err := c.s.begin(ctx, "CreateContainer"); err != nil {
		return err
	}
	if err := storeadapter.ValidateContainerName(c.name); err != nil {
		return err
	}
	c.s.blobsMu.Lock()
	defer c.s.blobsMu.Unlock()
	if c.s.containers[c.name] == nil {
		c.s.containers[c.name] = &containerState{
			blobs:  btree.NewG(16, func(a, b *blob) bool { return storeadapter.LessUTF16(a.name, b.name) }),
			staged: make(map[string]map[string][]byte),
		}
	}
	return nil
}

// Put writes a whole blob, honouring If-Match and If-None-Match "*".
func (c *Container) Put(ctx context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	if err := storeadapter.ValidatePutOptions(o); err != nil {
		return "", err
	}
	var etag string
	err := c.with(ctx, "PutBlob", name, func(st *containerState) error {
		if err := precondition("put", st, name, o); err != nil {
			return err
		}
		var blocks []block
		if len(data) > 0 {
			blocks = []block{{data: bytes.Clone(data)}}
		}
		etag = c.store(st, name, blocks, o)
		return nil
	})
	return etag, err
}

// precondition checks a write's condition against the blob's current state.
func precondition(verb string, st *containerState, name string, o storeadapter.PutOptions) error {
	old, exists := st.blobs.Get(&blob{name: name})
	switch {
	case o.IfNoneMatchAny && exists:
		return fmt.Errorf("localstore: %s blob %s: %w", verb, name, storeadapter.ErrAlreadyExists)
	case o.IfMatch != "" && (!exists || !old.matches(o.IfMatch)):
		return fmt.Errorf("localstore: %s blob %s: %w", verb, name, storeadapter.ErrPreconditionFailed)
	}
	return nil
}

// store makes blocks the blob's content under a new ETag, with the content
// type and metadata of o (validated) replacing the old ones, discards the
// blob's staged blocks, and returns the ETag. The metadata is copied, names
// in lower case as Azure reads back through the SDK, so the caller's map
// is not kept.
func (c *Container) store(st *containerState, name string, blocks []block, o storeadapter.PutOptions) string {
	b := &blob{name: name, blocks: blocks, etag: `"0x` + strings.ToUpper(c.s.next()) + `"`,
		contentType: cmp.Or(o.ContentType, "application/octet-stream"), metadata: storeadapter.LowerMetadata(o.Metadata),
		modified: c.s.time().Truncate(time.Second)}
	for _, bl := range blocks {
		b.size += int64(len(bl.data))
	}
	st.blobs.ReplaceOrInsert(b)
	delete(st.staged, name)
	return b.etag
}

// StageBlock keeps a copy of one block for a later CommitBlocks.
func (c *Container) StageBlock(ctx context.Context, name, blockID string, data []byte) error {
	if err := storeadapter.ValidateStageBlock(blockID, len(data)); err != nil {
		return err
	}
	return c.with(ctx, "PutBlock", name, func(st *containerState) error {
		staged := st.staged[name]
		for id := range staged {
			if len(id) != len(blockID) {
				// Azure answers 400 InvalidBlobOrBlock.
				return fmt.Errorf("localstore: stage block %q of blob %s: %w: the blob has staged blocks with IDs of %d characters, this one has %d",
					blockID, name, storeadapter.ErrInvalidInput, len(id), len(blockID))
			}
			break
		}
		if _, again := staged[blockID]; !again && len(staged) == storeadapter.MaxUncommittedBlocks {
			return fmt.Errorf("localstore: stage block %q of blob %s: %w: the blob already has %d uncommitted blocks",
				blockID, name, storeadapter.ErrTooLarge, storeadapter.MaxUncommittedBlocks)
		}
		if staged == nil {
			staged = make(map[string][]byte)
			st.staged[name] = staged
		}
		staged[blockID] = bytes.Clone(data)
		return nil
	})
}

// CommitBlocks makes the blob consist of the named blocks: each the one
// most recently staged under its ID, or else the blob's own block of that
// ID, as Put Block List's "latest" list does.
func (c *Container) CommitBlocks(ctx context.Context, name string, blockIDs []string, o storeadapter.PutOptions) (string, error) {
	if err := storeadapter.ValidateBlockList(blockIDs); err != nil {
		return "", err
	}
	if err := storeadapter.ValidatePutOptions(o); err != nil {
		return "", err
	}
	var etag string
	err := c.with(ctx, "PutBlockList", name, func(st *containerState) error {
		if err := precondition("commit", st, name, o); err != nil {
			return err
		}
		staged := st.staged[name]
		var committed map[string][]byte // the blob's own blocks, made when needed
		blocks := make([]block, len(blockIDs))
		for i, id := range blockIDs {
			data, ok := staged[id]
			if !ok && committed == nil {
				committed = make(map[string][]byte)
				if old, exists := st.blobs.Get(&blob{name: name}); exists {
					for _, bl := range old.blocks {
						committed[bl.id] = bl.data
					}
				}
			}
			if !ok {
				data, ok = committed[id]
			}
			if !ok {
				// Azure answers 400 InvalidBlockList.
				return fmt.Errorf("localstore: commit blob %s: %w: block %d (%q) was never staged", name, storeadapter.ErrInvalidInput, i, id)
			}
			blocks[i] = block{id: id, data: data}
		}
		etag = c.store(st, name, blocks, o)
		return nil
	})
	return etag, err
}

// Get reads a whole blob.
func (c *Container) Get(ctx context.Context, name string) ([]byte, storeadapter.BlobProps, error) {
	var data []byte
	var p storeadapter.BlobProps
	err := c.with(ctx, "GetBlob", name, func(st *containerState) error {
		b, err := getBlob(st, name)
		if err == nil {
			data, p = b.content(), b.props()
		}
		return err
	})
	return data, p, err
}

// Open returns a reader over the blob's blocks as they are now: a later
// write makes a new blob and does not disturb the reader.
func (c *Container) Open(ctx context.Context, name string) (io.ReadCloser, storeadapter.BlobProps, error) {
	var readers []io.Reader
	var p storeadapter.BlobProps
	err := c.with(ctx, "GetBlob", name, func(st *containerState) error {
		b, err := getBlob(st, name)
		if err != nil {
			return err
		}
		for _, bl := range b.blocks {
			readers = append(readers, bytes.NewReader(bl.data))
		}
		p = b.props()
		return nil
	})
	if err != nil {
		return nil, storeadapter.BlobProps{}, err
	}
	return io.NopCloser(io.MultiReader(readers...)), p, nil
}

func getBlob(st *containerState, name string) (*blob, error) {
	b, ok := st.blobs.Get(&blob{name: name})
	if !ok {
		return nil, fmt.Errorf("localstore: blob %s: %w", name, storeadapter.ErrNotFound)
	}
	return b, nil
}

// Properties reads a blob's properties.
func (c *Container) Properties(ctx context.Context, name string) (storeadapter.BlobProps, error) {
	var p storeadapter.BlobProps
	err := c.with(ctx, "GetBlobProperties", name, func(st *containerState) error {
		b, err := getBlob(st, name)
		if err == nil {
			p = b.props()
		}
		return err
	})
	return p, err
}

// Delete deletes a blob, honouring If-Match.
func (c *Container) Delete(ctx context.Context, name, ifMatch string) error {
	return c.with(ctx, "DeleteBlob", name, func(st *containerState) error {
		b, err := getBlob(st, name)
		if err != nil {
			return err
		}
		if ifMatch != "" && !b.matches(ifMatch) {
			return fmt.Errorf("localstore: delete blob %s: %w", name, storeadapter.ErrPreconditionFailed)
		}
		st.blobs.Delete(b)
		delete(st.staged, name)
		return nil
	})
}

// List returns one page of blobs whose names start with prefix.
func (c *Container) List(ctx context.Context, prefix, marker string) (storeadapter.BlobPage, error) {
	var page storeadapter.BlobPage
	err := c.with(ctx, "ListBlobs", "", func(st *containerState) error {
		st.blobs.AscendGreaterOrEqual(&blob{name: maxUTF16(prefix, marker)}, func(b *blob) bool {
			if !strings.HasPrefix(b.name, prefix) {
				return false
			}
			if len(page.Blobs) == blobPageSize {
				page.Next = b.name
				return false
			}
			page.Blobs = append(page.Blobs, b.listed())
			return true
		})
		return nil
	})
	return page, err
}
