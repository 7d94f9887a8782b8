package storeadapter

import (
	"context"
	"io"
	"maps"
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
	// Listed blobs have no Metadata (it stays nil): Azure's List Blobs sends
	// metadata only when asked (include=metadata), which would enlarge every
	// page by up to 8 KiB a blob; read it with Properties.
	List(ctx context.Context, prefix, marker string) (BlobPage, error)

	// StageBlock uploads one block of a blob for a later CommitBlocks;
	// nothing about the blob changes until then. blockID is base64 of at
	// most 64 bytes (see ValidateBlockID), and every block staged for one
	// blob must have an ID of the same length: a different length is
	// ErrInvalidInput, and so is an ID or an empty block refused by
	// validation; more than MaxBlockBytes is ErrTooLarge. Staging an ID
	// again replaces that block. A blob holds at most MaxUncommittedBlocks
	// staged blocks (ErrTooLarge beyond). data is not kept after the call
	// returns. Uncommitted blocks expire after a week on Azure.
	StageBlock(ctx context.Context, name, blockID string, data []byte) error
	// CommitBlocks makes the blob consist of the named blocks, in order,
	// and returns its new ETag: the commit is what makes the blob (or its
	// new content) visible, so a writer that stops before it leaves
	// nothing half-written. Each ID names the block most recently staged
	// under it, or else the block of that ID the blob already holds, so a
	// commit repeated after a lost answer, or a run that stages the same
	// IDs again and commits, gives the same blob. Staged blocks the list
	// leaves out are discarded. An ID neither staged nor in the blob, IDs
	// of different lengths, or more than MaxBlocks IDs are ErrInvalidInput
	// or ErrTooLarge; no IDs make an empty blob. o works as in Put:
	// ErrAlreadyExists with IfNoneMatchAny on an existing blob,
	// ErrPreconditionFailed with an IfMatch that does not hold; a failed
	// commit keeps the staged blocks. Like Put Block List on Azure, a
	// commit sets the blob's content type and metadata from o, replacing
	// what the blob had: o.Metadata nil leaves it with none.
	CommitBlocks(ctx context.Context, name string, blockIDs []string, o PutOptions) (etag string, err error)
	// Open starts reading a blob: its properties come at once, its content
	// streams from the returned reader, which the caller must close. It
	// returns ErrNotFound if the blob does not exist. A read error after
	// Open wraps ErrUnavailable when the transfer failed and can be retried
	// by opening again.
	Open(ctx context.Context, name string) (io.ReadCloser, BlobProps, error)
}

// PutOptions are the conditions and content settings of Put and
// CommitBlocks. The zero value overwrites unconditionally.
type PutOptions struct {
	// ContentType is stored with the blob; "" stores
	// "application/octet-stream".
	ContentType string
	// Metadata is the blob's user-defined metadata (x-ms-meta-* headers).
	// A write replaces the blob's metadata as a whole, never merges it: nil
	// or empty leaves the blob with none. ValidateMetadata gives the rules
	// (Azure's, and a little stricter so that what is written reads back
	// the same): names are C# identifiers of ASCII letters, digits and
	// underscores, unique ignoring case; values are printable ASCII without
	// leading or trailing spaces; names and values total at most 8 KiB.
	// Names are case-insensitive and read back in lower case (see
	// BlobProps.Metadata). The map is not kept after the call returns.
	Metadata map[string]string
	// IfMatch makes the write conditional on the blob's current ETag.
	IfMatch string
	// IfNoneMatchAny makes the write fail if the blob exists.
	IfNoneMatchAny bool
}

// BlobProps are a blob's system properties and user-defined metadata.
// It holds a map, so compare values with Equal, not ==.
type BlobProps struct {
	Name         string
	ETag         string
	Size         int64
	ContentType  string
	LastModified time.Time
	// Metadata is the blob's user-defined metadata as the last Put or
	// CommitBlocks wrote it, with every name in lower case; nil when the
	// blob has none, and always nil in a List page. Azure keeps the case a
	// name was written in but matches names ignoring case, and the Azure
	// SDK for Go does not hand the case back: Get Blob Properties answers
	// with HTTP headers, whose names Go's HTTP client re-cases
	// ("x-ms-meta-firstTs" arrives as "X-Ms-Meta-Firstts"), and the SDK
	// lowercases the names of a listing. Lower case is the one form every
	// implementation can promise, so look names up in lower case.
	Metadata map[string]string
}

// Equal reports whether p and q are the same properties, metadata
// included (a nil and an empty map are equal), and the same LastModified
// instant.
func (p BlobProps) Equal(q BlobProps) bool {
	return p.Name == q.Name && p.ETag == q.ETag && p.Size == q.Size && p.ContentType == q.ContentType &&
		p.LastModified.Equal(q.LastModified) && maps.Equal(p.Metadata, q.Metadata)
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
