package azstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Container implements storeadapter.Blobs over azblob. Put is one Put Blob
// request, so its conditions apply to the whole write.
type Container struct {
	name string
	c    *container.Client
	callTimeout
}

var _ storeadapter.Blobs = (*Container)(nil)

// Name returns the container's name.
func (c *Container) Name() string { return c.name }

func (c *Container) op(verb, blobName string) string {
	return verb + " blob " + c.name + "/" + blobName
}

func (c *Container) validate(blobName string) error {
	if err := storeadapter.ValidateContainerName(c.name); err != nil {
		return err
	}
	return storeadapter.ValidateBlobName(blobName)
}

// Create creates the container; an existing one is not an error.
func (c *Container) Create(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateContainerName(c.name); err != nil {
		return err
	}
	_, err := c.c.Create(ctx, nil)
	err = interpretError("create container "+c.name, err)
	if isAlreadyExists(err) {
		return nil
	}
	return err
}

func isAlreadyExists(err error) bool {
	return err != nil && errors.Is(err, storeadapter.ErrAlreadyExists)
}

// Put writes a whole blob under the given conditions.
func (c *Container) Put(ctx context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return "", err
	}
	if err := storeadapter.ValidatePutOptions(o); err != nil {
		return "", err
	}
	headers, conditions := writeOptions(o)
	resp, err := c.c.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
		HTTPHeaders: headers, AccessConditions: conditions, Metadata: sdkMetadata(o.Metadata),
	})
	if err != nil {
		return "", interpretError(c.op("put", name), err)
	}
	return string(deref((*string)(resp.ETag))), nil
}

// writeOptions translates a write's PutOptions (already validated) into
// the SDK's content headers and access conditions.
func writeOptions(o storeadapter.PutOptions) (*blob.HTTPHeaders, *blob.AccessConditions) {
	mac := &blob.ModifiedAccessConditions{}
	if o.IfMatch != "" {
		mac.IfMatch = to.Ptr(azcore.ETag(o.IfMatch))
	}
	if o.IfNoneMatchAny {
		mac.IfNoneMatch = to.Ptr(azcore.ETagAny)
	}
	return &blob.HTTPHeaders{BlobContentType: to.Ptr(cmp.Or(o.ContentType, "application/octet-stream"))},
		&blob.AccessConditions{ModifiedAccessConditions: mac}
}

// sdkMetadata returns validated metadata in the SDK's form, which sends
// each name as written (x-ms-meta-<name>); nil for none.
func sdkMetadata(md map[string]string) map[string]*string {
	if len(md) == 0 {
		return nil
	}
	out := make(map[string]*string, len(md))
	for name, v := range md {
		out[name] = to.Ptr(v)
	}
	return out
}

// readMetadata returns the metadata the SDK read from a response's headers,
// names in lower case as BlobProps promises: Go's HTTP client has re-cased
// them ("x-ms-meta-firstTs" arrives as "Firstts"), so the case they were
// written in is lost anyway. nil for none.
func readMetadata(md map[string]*string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	out := make(map[string]string, len(md))
	for name, v := range md {
		out[strings.ToLower(name)] = deref(v)
	}
	return out
}

// StageBlock uploads one block (Put Block).
func (c *Container) StageBlock(ctx context.Context, name, blockID string, data []byte) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return err
	}
	if err := storeadapter.ValidateStageBlock(blockID, len(data)); err != nil {
		return err
	}
	_, err := c.c.NewBlockBlobClient(name).StageBlock(ctx, blockID, streaming.NopCloser(bytes.NewReader(data)), nil)
	if bloberror.HasCode(err, bloberror.BlockCountExceedsLimit) {
		// A 409 that is no conflict: the blob holds 100,000 uncommitted blocks.
		return fmt.Errorf("azstore: %s: %w: more than %d uncommitted blocks (HTTP 409 %s)",
			c.op("stage block "+blockID+" of", name), storeadapter.ErrTooLarge, storeadapter.MaxUncommittedBlocks, bloberror.BlockCountExceedsLimit)
	}
	return interpretError(c.op("stage block "+blockID+" of", name), err)
}

// CommitBlocks commits a block list (Put Block List, every ID looked up in
// the "latest" list: staged first, then committed).
func (c *Container) CommitBlocks(ctx context.Context, name string, blockIDs []string, o storeadapter.PutOptions) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return "", err
	}
	if err := storeadapter.ValidateBlockList(blockIDs); err != nil {
		return "", err
	}
	if err := storeadapter.ValidatePutOptions(o); err != nil {
		return "", err
	}
	headers, conditions := writeOptions(o)
	resp, err := c.c.NewBlockBlobClient(name).CommitBlockList(ctx, blockIDs, &blockblob.CommitBlockListOptions{
		HTTPHeaders: headers, AccessConditions: conditions, Metadata: sdkMetadata(o.Metadata),
	})
	if err != nil {
		// An unknown block ID is 400 InvalidBlockList: ErrInvalidInput.
		return "", interpretError(c.op("commit", name), err)
	}
	return string(deref((*string)(resp.ETag))), nil
}

// Open starts a download. The call timeout bounds the wait for the
// service's answer; the body then streams for as long as the caller
// reads, each HTTP try bounded by the try timeout. A read that fails is
// resumed from where it stopped (a ranged Get under If-Match of the ETag
// Open returned, so a blob replaced meanwhile fails the read with
// ErrPreconditionFailed rather than mixing two versions).
func (c *Container) Open(ctx context.Context, name string) (io.ReadCloser, storeadapter.BlobProps, error) {
	if err := c.validate(name); err != nil {
		return nil, storeadapter.BlobProps{}, err
	}
	// Not c.bound: its deadline would also end the body's transfer.
	ctx, cancel := context.WithCancel(ctx)
	expired := func() bool { return false }
	if c.callTimeout > 0 {
		t := time.AfterFunc(time.Duration(c.callTimeout), cancel)
		expired = func() bool { return !t.Stop() }
	}
	op := c.op("open", name)
	resp, err := c.c.NewBlobClient(name).DownloadStream(ctx, nil)
	if expired() { // the timer cancelled the call, or will end the body
		if err == nil {
			resp.Body.Close()
		}
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, storeadapter.BlobProps{}, interpretError(op, err)
	}
	r := &blobReader{r: resp.NewRetryReader(ctx, nil), cancel: cancel, op: op}
	return r, storeadapter.BlobProps{Name: name, ETag: deref((*string)(resp.ETag)), Size: derefInt(resp.ContentLength),
		ContentType: deref(resp.ContentType), LastModified: tm(resp.LastModified), Metadata: readMetadata(resp.Metadata)}, nil
}

// blobReader is the body Open returns: its errors are translated, and
// Close ends the download's context.
type blobReader struct {
	r      io.ReadCloser
	cancel context.CancelFunc
	op     string
}

func (r *blobReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = interpretError(r.op, err)
	}
	return n, err
}

func (r *blobReader) Close() error {
	defer r.cancel()
	return interpretError(r.op, r.r.Close())
}

// Get reads a whole blob.
func (c *Container) Get(ctx context.Context, name string) ([]byte, storeadapter.BlobProps, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return nil, storeadapter.BlobProps{}, err
	}
	resp, err := c.c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return nil, storeadapter.BlobProps{}, interpretError(c.op("get", name), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, storeadapter.BlobProps{}, interpretError(c.op("get", name), err)
	}
	return data, storeadapter.BlobProps{Name: name, ETag: deref((*string)(resp.ETag)), Size: int64(len(data)),
		ContentType: deref(resp.ContentType), LastModified: tm(resp.LastModified), Metadata: readMetadata(resp.Metadata)}, nil
}

// Properties reads a blob's properties.
func (c *Container) Properties(ctx context.Context, name string) (storeadapter.BlobProps, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return storeadapter.BlobProps{}, err
	}
	resp, err := c.c.NewBlobClient(name).GetProperties(ctx, nil)
	if err != nil {
		return storeadapter.BlobProps{}, interpretError(c.op("get properties of", name), err)
	}
	return storeadapter.BlobProps{Name: name, ETag: deref((*string)(resp.ETag)), Size: derefInt(resp.ContentLength),
		ContentType: deref(resp.ContentType), LastModified: tm(resp.LastModified), Metadata: readMetadata(resp.Metadata)}, nil
}

// Delete deletes a blob under If-Match.
func (c *Container) Delete(ctx context.Context, name, ifMatch string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.validate(name); err != nil {
		return err
	}
	var o *blob.DeleteOptions
	if ifMatch != "" && ifMatch != storeadapter.ETagAny {
		o = &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(azcore.ETag(ifMatch))}}}
	}
	_, err := c.c.NewBlobClient(name).Delete(ctx, o)
	return interpretError(c.op("delete", name), err)
}

// quoted returns a blob ETag in the quoted form Put and Get return: the
// listing gives it bare (0x8D...), the headers quoted ("0x8D...").
func quoted(etag string) string {
	if etag == "" || strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") {
		return etag
	}
	return `"` + etag + `"`
}

// List returns one page of blobs whose names start with prefix. It does
// not ask for metadata (include=metadata), so Metadata stays nil.
func (c *Container) List(ctx context.Context, prefix, marker string) (storeadapter.BlobPage, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateContainerName(c.name); err != nil {
		return storeadapter.BlobPage{}, err
	}
	o := &container.ListBlobsFlatOptions{}
	if prefix != "" {
		o.Prefix = &prefix
	}
	if marker != "" {
		o.Marker = &marker
	}
	resp, err := c.c.NewListBlobsFlatPager(o).NextPage(ctx)
	if err != nil {
		return storeadapter.BlobPage{}, interpretError("list container "+c.name, err)
	}
	var page storeadapter.BlobPage
	if resp.Segment != nil {
		for _, it := range resp.Segment.BlobItems {
			p := storeadapter.BlobProps{Name: deref(it.Name)}
			if pr := it.Properties; pr != nil {
				p.ETag, p.Size, p.ContentType, p.LastModified = quoted(deref((*string)(pr.ETag))), derefInt(pr.ContentLength), deref(pr.ContentType), tm(pr.LastModified)
			}
			page.Blobs = append(page.Blobs, p)
		}
	}
	page.Next = deref(resp.NextMarker)
	return page, nil
}
