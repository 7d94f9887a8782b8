package idempotent

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Checkpoints store scan positions (continuation tokens) by operation id,
// so a redelivered message resumes a long scan where a crashed run left
// it. Each checkpoint is one entity: PartitionKey = operation id, RowKey =
// the step's name, property Token.
type Checkpoints struct {
	Tables storeadapter.Tables
	// Table holds the checkpoints; it is created on first save.
	Table string
}

const tokenProperty = "Token"

// Load returns the saved token of an operation's step, or "" when there is
// none (the scan starts from the beginning).
func (c Checkpoints) Load(ctx context.Context, opID, step string) (string, error) {
	e, err := c.Tables.GetEntity(ctx, c.Table, opID, step)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load checkpoint %s/%s: %w", opID, step, err)
	}
	tok, _ := e.Properties[tokenProperty].(string)
	return tok, nil
}

// Save records a token. Saving the same token twice is harmless.
func (c Checkpoints) Save(ctx context.Context, opID, step, token string) error {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	if err := Upsert(ctx, c.Tables, c.Table, e); err != nil {
		return fmt.Errorf("save checkpoint %s/%s: %w", opID, step, err)
	}
	return nil
}

// Clear removes a step's checkpoint once the scan has finished; a missing
// checkpoint (or table) is success.
func (c Checkpoints) Clear(ctx context.Context, opID, step string) error {
	if err := DeleteIfMatch(ctx, c.Tables, c.Table, opID, step, storeadapter.ETagAny); err != nil {
		return fmt.Errorf("clear checkpoint %s/%s: %w", opID, step, err)
	}
	return nil
}

// The conditional forms below serve a caller whose checkpoint is the
// register of an operation that several deliveries may run at once (see
// tableexport.Export): the first save is create-only and every later one
// is If-Match the ETag the caller last read or wrote, so two deliveries
// never overwrite each other's progress unseen. A lost race is an error
// wrapping storeadapter.ErrAlreadyExists (Create) or
// ErrPreconditionFailed (SaveIfMatch; ErrNotFound when the checkpoint was
// cleared): the caller reloads with LoadETag and decides.

// LoadETag returns the saved token of an operation's step and the
// checkpoint's ETag, or "" and "" when there is none.
func (c Checkpoints) LoadETag(ctx context.Context, opID, step string) (token, etag string, err error) {
	e, err := c.Tables.GetEntity(ctx, c.Table, opID, step)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("load checkpoint %s/%s: %w", opID, step, err)
	}
	tok, _ := e.Properties[tokenProperty].(string)
	return tok, e.ETag, nil
}

// Create saves the first token of a step only when the step has no
// checkpoint yet (creating the table when it is missing), and returns the
// new checkpoint's ETag. An existing checkpoint is left as it is and the
// error wraps storeadapter.ErrAlreadyExists.
func (c Checkpoints) Create(ctx context.Context, opID, step, token string) (etag string, err error) {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	err = CreateOnMissing(ctx, TableCreator(c.Tables, c.Table), func(ctx context.Context) error {
		var err error
		etag, err = c.Tables.InsertEntity(ctx, c.Table, e)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create checkpoint %s/%s: %w", opID, step, err)
	}
	return etag, nil
}

// SaveIfMatch replaces a step's token only while the checkpoint still has
// the ETag etag, and returns its new ETag. A checkpoint changed meanwhile
// is left as it is and the error wraps storeadapter.ErrPreconditionFailed
// (ErrNotFound when it is gone).
func (c Checkpoints) SaveIfMatch(ctx context.Context, opID, step, token, etag string) (string, error) {
	e := storeadapter.Entity{PartitionKey: opID, RowKey: step, Properties: map[string]any{tokenProperty: token}}
	newETag, err := c.Tables.UpdateEntity(ctx, c.Table, e, storeadapter.Replace, etag)
	if err != nil {
		return "", fmt.Errorf("save checkpoint %s/%s: %w", opID, step, err)
	}
	return newETag, nil
}
