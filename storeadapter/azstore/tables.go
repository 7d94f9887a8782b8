package azstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Tables implements storeadapter.Tables over aztables.
type Tables struct {
	svc *aztables.ServiceClient
	callTimeout
}

var _ storeadapter.Tables = (*Tables)(nil)

// fullMetadata makes the service annotate every property's type on reads,
// so an integral Double is not mistaken for an Int32.
var fullMetadata = to.Ptr(aztables.MetadataFormatFull)

func (t *Tables) client(name string) (*aztables.Client, error) {
	if err := storeadapter.ValidateTableName(name); err != nil {
		return nil, err
	}
	return t.svc.NewClient(name), nil
}

// CreateTable creates a table.
func (t *Tables) CreateTable(ctx context.Context, name string) error {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateTableName(name); err != nil {
		return err
	}
	_, err := t.svc.CreateTable(ctx, name, nil)
	return interpretError("create table "+name, err)
}

// DeleteTable deletes a table.
func (t *Tables) DeleteTable(ctx context.Context, name string) error {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateTableName(name); err != nil {
		return err
	}
	_, err := t.svc.DeleteTable(ctx, name, nil)
	return interpretErrorOn("delete table "+name, err, storeadapter.ErrTableNotFound)
}

// ListTables returns one page of table names starting with prefix.
func (t *Tables) ListTables(ctx context.Context, prefix, continuation string) ([]string, string, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	o := &aztables.ListTablesOptions{Top: to.Ptr(int32(storeadapter.MaxPageSize))}
	if prefix != "" {
		// Table names are letters and digits, so every name with the
		// prefix sorts below prefix + "{".
		f := storeadapter.And(storeadapter.Compare("TableName", storeadapter.Ge, prefix),
			storeadapter.Compare("TableName", storeadapter.Lt, prefix+"{"))
		if err := f.Err(); err != nil {
			return nil, "", err
		}
		o.Filter = to.Ptr(f.String())
	}
	if continuation != "" {
		o.NextTableName = &continuation
	}
	page, err := t.svc.NewListTablesPager(o).NextPage(ctx)
	if err != nil {
		return nil, "", interpretError("list tables", err)
	}
	names := make([]string, 0, len(page.Tables))
	for _, tp := range page.Tables {
		if tp.Name != nil && strings.HasPrefix(*tp.Name, prefix) {
			names = append(names, *tp.Name)
		}
	}
	return names, deref(page.NextTableName), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// GetEntity reads one entity.
func (t *Tables) GetEntity(ctx context.Context, table, pk, rk string) (storeadapter.Entity, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := validateKeys(pk, rk); err != nil {
		return storeadapter.Entity{}, err
	}
	c, err := t.client(table)
	if err != nil {
		return storeadapter.Entity{}, err
	}
	var raw *http.Response
	resp, err := c.GetEntity(policy.WithCaptureResponse(ctx, &raw), pk, rk, &aztables.GetEntityOptions{Format: fullMetadata})
	if err != nil {
		return storeadapter.Entity{}, interpretError(entityOp("get entity", table, pk, rk), err)
	}
	var body json.RawMessage
	if err := decodeRaw(raw, &body); err != nil {
		return storeadapter.Entity{}, interpretError(entityOp("get entity", table, pk, rk), err)
	}
	e, err := storeadapter.UnmarshalEntityJSON(body, string(resp.ETag))
	if err != nil {
		return storeadapter.Entity{}, fmt.Errorf("azstore: %s: %w", entityOp("get entity", table, pk, rk), err)
	}
	return e, nil
}

// The SDK decodes entities into map[string]any and encodes them again,
// which turns the service's 2.0 into 2 and so an integral Double into what
// looks like an Int32. Reads therefore capture the raw response and decode
// the service's own text (see decodeEntity).
func decodeRaw(raw *http.Response, v any) error {
	body, err := runtime.Payload(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

func entityOp(op, table, pk, rk string) string { return op + " " + table + " " + pk + "/" + rk }

func validateKeys(pk, rk string) error {
	if err := storeadapter.ValidateKey("PartitionKey", pk); err != nil {
		return err
	}
	return storeadapter.ValidateKey("RowKey", rk)
}

// prepare validates an entity and its table and encodes the entity.
func (t *Tables) prepare(table string, e storeadapter.Entity) (*aztables.Client, []byte, error) {
	if err := storeadapter.ValidateEntity(e); err != nil {
		return nil, nil, err
	}
	c, err := t.client(table)
	if err != nil {
		return nil, nil, err
	}
	body, err := storeadapter.MarshalEntityJSON(e)
	return c, body, err
}

// InsertEntity adds an entity.
func (t *Tables) InsertEntity(ctx context.Context, table string, e storeadapter.Entity) (string, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	c, body, err := t.prepare(table, e)
	if err != nil {
		return "", err
	}
	resp, err := c.AddEntity(ctx, body, &aztables.AddEntityOptions{Format: to.Ptr(aztables.MetadataFormatNone)})
	if err != nil {
		return "", interpretError(entityOp("insert entity", table, e.PartitionKey, e.RowKey), err)
	}
	return string(resp.ETag), nil
}

func sdkMode(m storeadapter.UpdateMode) aztables.UpdateMode {
	if m == storeadapter.Merge {
		return aztables.UpdateModeMerge
	}
	return aztables.UpdateModeReplace
}

// UpsertEntity inserts or replaces/merges an entity.
func (t *Tables) UpsertEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode) (string, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateMode(mode); err != nil {
		return "", err
	}
	c, body, err := t.prepare(table, e)
	if err != nil {
		return "", err
	}
	resp, err := c.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: sdkMode(mode)})
	if err != nil {
		return "", interpretError(entityOp("upsert entity", table, e.PartitionKey, e.RowKey), err)
	}
	return string(resp.ETag), nil
}

// UpdateEntity replaces or merges an existing entity under If-Match.
func (t *Tables) UpdateEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode, ifMatch string) (string, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateMode(mode); err != nil {
		return "", err
	}
	if err := storeadapter.ValidateIfMatch(ifMatch); err != nil {
		return "", err
	}
	c, body, err := t.prepare(table, e)
	if err != nil {
		return "", err
	}
	etag := azcore.ETag(ifMatch)
	resp, err := c.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{UpdateMode: sdkMode(mode), IfMatch: &etag})
	if err != nil {
		return "", interpretError(entityOp("update entity", table, e.PartitionKey, e.RowKey), err)
	}
	return string(resp.ETag), nil
}

// DeleteEntity deletes an entity under If-Match.
func (t *Tables) DeleteEntity(ctx context.Context, table, pk, rk, ifMatch string) error {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := validateKeys(pk, rk); err != nil {
		return err
	}
	if err := storeadapter.ValidateIfMatch(ifMatch); err != nil {
		return err
	}
	c, err := t.client(table)
	if err != nil {
		return err
	}
	etag := azcore.ETag(ifMatch)
	_, err = c.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: &etag})
	return interpretError(entityOp("delete entity", table, pk, rk), err)
}

// Query returns one page of entities.
func (t *Tables) Query(ctx context.Context, table string, q storeadapter.Query) (storeadapter.Page, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateQuery(q); err != nil {
		return storeadapter.Page{}, err
	}
	c, err := t.client(table)
	if err != nil {
		return storeadapter.Page{}, err
	}
	o := &aztables.ListEntitiesOptions{Top: to.Ptr(int32(cmp.Or(q.Top, storeadapter.MaxPageSize))), Format: fullMetadata}
	if !q.Filter.IsZero() {
		o.Filter = to.Ptr(q.Filter.String())
	}
	if q.Select != nil {
		o.Select = to.Ptr(strings.Join(append([]string{"PartitionKey", "RowKey", "Timestamp"}, q.Select...), ","))
	}
	if q.Continuation != "" {
		if o.NextPartitionKey, o.NextRowKey, err = decodeToken(q.Continuation); err != nil {
			return storeadapter.Page{}, err
		}
	}
	var raw *http.Response
	resp, err := c.NewListEntitiesPager(o).NextPage(policy.WithCaptureResponse(ctx, &raw))
	if err != nil {
		return storeadapter.Page{}, interpretError("query "+table, err)
	}
	var body struct {
		Value []json.RawMessage `json:"value"`
	}
	if err := decodeRaw(raw, &body); err != nil {
		return storeadapter.Page{}, interpretError("query "+table, err)
	}
	page := storeadapter.Page{Entities: make([]storeadapter.Entity, 0, len(body.Value))}
	for _, v := range body.Value {
		e, err := storeadapter.UnmarshalEntityJSON(v, "")
		if err != nil {
			return storeadapter.Page{}, fmt.Errorf("azstore: query %s: %w", table, err)
		}
		page.Entities = append(page.Entities, e)
	}
	page.Next = encodeToken(resp.NextPartitionKey, resp.NextRowKey)
	return page, nil
}

// A continuation token carries the service's NextPartitionKey and
// NextRowKey: base64url(pk) "." base64url(rk).
func encodeToken(pk, rk *string) string {
	if deref(pk) == "" && deref(rk) == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(deref(pk))) + "." + base64.RawURLEncoding.EncodeToString([]byte(deref(rk)))
}

func decodeToken(tok string) (*string, *string, error) {
	p, r, ok := strings.Cut(tok, ".")
	pk, err1 := base64.RawURLEncoding.DecodeString(p)
	rk, err2 := base64.RawURLEncoding.DecodeString(r)
	if !ok || err1 != nil || err2 != nil {
		return nil, nil, fmt.Errorf("%w: continuation token %q is not one this store issued", storeadapter.ErrInvalidInput, tok)
	}
	var rkp *string
	if len(rk) > 0 {
		rkp = to.Ptr(string(rk))
	}
	return to.Ptr(string(pk)), rkp, nil
}

var txActions = map[storeadapter.TxAction]aztables.TransactionType{
	storeadapter.TxInsert:        aztables.TransactionTypeAdd,
	storeadapter.TxUpsertReplace: aztables.TransactionTypeInsertReplace,
	storeadapter.TxUpsertMerge:   aztables.TransactionTypeInsertMerge,
	storeadapter.TxUpdateReplace: aztables.TransactionTypeUpdateReplace,
	storeadapter.TxUpdateMerge:   aztables.TransactionTypeUpdateMerge,
	storeadapter.TxDelete:        aztables.TransactionTypeDelete,
}

// Transact runs an entity group transaction.
func (t *Tables) Transact(ctx context.Context, table string, ops []storeadapter.TableOp) error {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := storeadapter.ValidateTransaction(ops); err != nil {
		return err
	}
	c, err := t.client(table)
	if err != nil {
		return err
	}
	actions := make([]aztables.TransactionAction, len(ops))
	for i, op := range ops {
		e := op.Entity
		if op.Action == storeadapter.TxDelete {
			e = storeadapter.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}
		}
		body, err := storeadapter.MarshalEntityJSON(e)
		if err != nil {
			return &storeadapter.TransactionError{Index: i, Err: err}
		}
		actions[i] = aztables.TransactionAction{ActionType: txActions[op.Action], Entity: body}
		if op.IfMatch != "" {
			// Without If-Match the SDK's update actions are upserts.
			etag := azcore.ETag(op.IfMatch)
			actions[i].IfMatch = &etag
		}
	}
	if _, err := c.SubmitTransaction(ctx, actions, nil); err != nil {
		return interpretTransactionError(fmt.Sprintf("transact %s (%d operations in partition %s)", table, len(ops), ops[0].Entity.PartitionKey), err)
	}
	return nil
}
