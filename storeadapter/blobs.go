package storeadapter

import (
	"context"
	"time"
)

// Blobs is one Azure blob container of block blobs. Every method validates
// its input first and returns ErrInvalidInput without calling the service.
// A missing container is ErrContainerNotFound (which wraps ErrNotFound)
// for every method but Create; a missing blob is plain ErrNotFound.
// Transient service failures wrap ErrUnavailable (see IsTransient).
type Blobs interface {
	// Name returns the container's name.
	Name() string
	// Create creates the container; it returns nil if it exists already and
	// ErrTableBeingDeleted if it was deleted too recently to reuse the name.
	Create(ctx context.Context) error
	// Put writes a whole blob and returns its new ETag. With
	// o.IfNoneMatchAny it returns ErrAlreadyExists if the blob exists; with
	// o.IfMatch it returns ErrPreconditionFailed if the blob's ETag differs
	// or the blob does not exist.
	Put(ctx context.Context, name string, data []byte, o PutOptions) (etag string, err error)
	// Get reads a whole blob and its properties. It returns ErrNotFound if
	// the blob does not exist.
	Get(ctx context.Context, name string) ([]byte, BlobProps, error)
	// Properties reads a blob's properties. It returns ErrNotFound if the
	// blob does not exist.
	Properties(ctx context.Context, name string) (BlobProps, error)
	// Delete deletes a blob if its ETag matches ifMatch (ETagAny or "" delete
	// unconditionally). It returns ErrNotFound if the blob does not exist and
	// ErrPreconditionFailed if its ETag differs.
	Delete(ctx context.Context, name, ifMatch string) error
	// List returns one page (at most 5,000) of blobs whose names start with
	// prefix, in name order, and the marker of the next page ("" at the end).
	List(ctx context.Context, prefix, marker string) (BlobPage, error)
}

// PutOptions are Put's conditions and content settings. The zero value
// overwrites unconditionally.
type PutOptions struct {
	// ContentType is stored with the blob; "" stores
	// "application/octet-stream".
	ContentType string
	// IfMatch makes the write conditional on the blob's current ETag.
	IfMatch string
	// IfNoneMatchAny makes the write fail if the blob exists.
	IfNoneMatchAny bool
}

// BlobProps are a blob's system properties.
type BlobProps struct {
	Name         string
	ETag         string
	Size         int64
	ContentType  string
	LastModified time.Time
}

// BlobPage is one page of a blob listing.
type BlobPage struct {
	Blobs []BlobProps
	// Next is the marker of the next page, or "" at the end.
	Next string
}

// Store bundles the three services of one storage account.
type Store interface {
	// Tables returns the account's table service.
	Tables() Tables
	// Queue returns a handle on the named queue (which may not exist yet).
	// The name is validated by the handle's methods.
	Queue(name string) Queue
	// Container returns a handle on the named blob container (which may
	// not exist yet). The name is validated by the handle's methods.
	Container(name string) Blobs
}
