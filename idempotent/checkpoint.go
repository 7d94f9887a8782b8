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
