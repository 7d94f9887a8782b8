package storeadapter

import "context"

// Tables is Azure Table storage: tables of entities ordered by
// (PartitionKey, RowKey). Every method validates its input first (names,
// keys, properties, sizes; see the Validate functions) and returns
// ErrInvalidInput or ErrTooLarge without calling the service when it breaks
// a rule. A missing table is ErrTableNotFound (which wraps ErrNotFound) for
// every method but CreateTable and ListTables; a missing entity is plain
// ErrNotFound.
// Transient service failures wrap ErrUnavailable (see IsTransient).
type Tables interface {
	// CreateTable creates a table. It returns ErrAlreadyExists if the table
	// exists and ErrTableBeingDeleted if a table of that name was deleted
	// too recently to reuse the name.
	CreateTable(ctx context.Context, table string) error
	// DeleteTable deletes a table and all its entities. It returns
	// ErrTableNotFound if the table does not exist.
	DeleteTable(ctx context.Context, table string) error
	// ListTables returns one page of table names starting with prefix, in
	// name order, and the token for the next page ("" on the last page).
	ListTables(ctx context.Context, prefix, continuation string) (names []string, next string, err error)

	// GetEntity reads one entity with its ETag and Timestamp. It returns
	// ErrNotFound if the entity does not exist (ErrTableNotFound if the
	// table does not).
	GetEntity(ctx context.Context, table, pk, rk string) (Entity, error)
	// InsertEntity adds an entity and returns its ETag. It returns
	// ErrAlreadyExists if an entity with the same keys exists.
	InsertEntity(ctx context.Context, table string, e Entity) (etag string, err error)
	// UpsertEntity inserts the entity or, if it exists, replaces or merges
	// it regardless of its ETag, and returns the new ETag.
	UpsertEntity(ctx context.Context, table string, e Entity, mode UpdateMode) (etag string, err error)
	// UpdateEntity replaces or merges an existing entity if its ETag matches
	// ifMatch (ETagAny matches any) and returns the new ETag. It returns
	// ErrNotFound if the entity does not exist and ErrPreconditionFailed if
	// its ETag differs.
	UpdateEntity(ctx context.Context, table string, e Entity, mode UpdateMode, ifMatch string) (etag string, err error)
	// DeleteEntity deletes an entity if its ETag matches ifMatch (ETagAny
	// deletes unconditionally). It returns ErrNotFound if the entity does
	// not exist and ErrPreconditionFailed if its ETag differs.
	DeleteEntity(ctx context.Context, table, pk, rk, ifMatch string) error
	// Query returns one page of at most q.Top (default and maximum 1,000)
	// entities matching q.Filter in key order, and the continuation token
	// for the next page ("" when there is none). A page may hold fewer
	// entities than asked, even none, while a token is still returned: keep
	// calling until the token is empty. Tokens are opaque strings a caller
	// may store (a checkpoint) and pass back later.
	Query(ctx context.Context, table string, q Query) (Page, error)
	// Transact runs an entity group transaction: 1–100 operations on
	// distinct entities of one partition, at most 4 MiB, all applied or none.
	// When an operation fails it returns a *TransactionError whose Index
	// names the operation and whose cause wraps the sentinel (for example
	// ErrAlreadyExists for an insert, ErrNotFound or ErrPreconditionFailed
	// for an update or delete). A missing table fails operation 0, as on
	// Azure: a *TransactionError with Index 0 wrapping ErrTableNotFound.
	// Rule violations are caught before the call.
	Transact(ctx context.Context, table string, ops []TableOp) error
}

// Query selects entities. The zero Query returns every entity, 1,000 a page.
type Query struct {
	// Filter restricts the entities returned; build it with the functions
	// of this package (see Filter). The zero Filter matches everything.
	Filter Filter
	// Select limits the properties returned (keys, ETag and Timestamp are
	// always returned). Nil returns all properties.
	Select []string
	// Top is the page size, 1–1,000; 0 means 1,000.
	Top int
	// Continuation is a token from a previous page's Next, or "" to start.
	Continuation string
}

// Page is one page of query results.
type Page struct {
	Entities []Entity
	// Next is the continuation token for the following page, or "" when
	// the query is complete.
	Next string
}

// TxAction is the kind of one operation in an entity group transaction.
type TxAction uint8

// Transaction actions.
const (
	TxInsert        TxAction = iota + 1 // insert; fails if the entity exists
	TxUpsertReplace                     // insert or replace
	TxUpsertMerge                       // insert or merge
	TxUpdateReplace                     // replace an existing entity (If-Match)
	TxUpdateMerge                       // merge into an existing entity (If-Match)
	TxDelete                            // delete an existing entity (If-Match)
)

// TableOp is one operation of an entity group transaction.
type TableOp struct {
	Action TxAction
	// Entity is the entity to write; for TxDelete only its keys are used.
	Entity Entity
	// IfMatch is the ETag condition of TxUpdate* and TxDelete: an ETag or
	// ETagAny. It must be empty for the other actions.
	IfMatch string
}

// UpdateMode says whether a write replaces the whole entity or merges the
// given properties into the stored ones.
type UpdateMode uint8

// Update modes.
const (
	Replace UpdateMode = iota + 1
	Merge
)

// ETagAny matches any existing entity or blob in an If-Match condition.
const ETagAny = "*"
