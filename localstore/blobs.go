package localstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
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
}

type blob struct {
	name        string
	data        []byte
	etag        string
	contentType string
	modified    time.Time
}

func (b *blob) props() storeadapter.BlobProps {
	return storeadapter.BlobProps{Name: b.name, ETag: b.etag, Size: int64(len(b.data)), ContentType: b.contentType, LastModified: b.modified}
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
		c.s.containers[c.name] = &containerState{blobs: btree.NewG(16, func(a, b *blob) bool { return storeadapter.LessUTF16(a.name, b.name) })}
	}
	return nil
}

// Put writes a whole blob, honouring If-Match and If-None-Match "*".
func (c *Container) Put(ctx context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	var etag string
	err := c.with(ctx, "PutBlob", name, func(st *containerState) error {
		if err := storeadapter.ValidatePutOptions(o); err != nil {
			return err
		}
		old, exists := st.blobs.Get(&blob{name: name})
		switch {
		case o.IfNoneMatchAny && exists:
			return fmt.Errorf("localstore: put blob %s: %w", name, storeadapter.ErrAlreadyExists)
		case o.IfMatch != "" && (!exists || !old.matches(o.IfMatch)):
			return fmt.Errorf("localstore: put blob %s: %w", name, storeadapter.ErrPreconditionFailed)
		}
		b := &blob{name: name, data: bytes.Clone(data), etag: `"0x` + strings.ToUpper(c.s.next()) + `"`,
			contentType: cmp.Or(o.ContentType, "application/octet-stream"), modified: c.s.time().Truncate(time.Second)}
		st.blobs.ReplaceOrInsert(b)
		etag = b.etag
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
			data, p = bytes.Clone(b.data), b.props()
		}
		return err
	})
	return data, p, err
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
			page.Blobs = append(page.Blobs, b.props())
			return true
		})
		return nil
	})
	return page, err
}
