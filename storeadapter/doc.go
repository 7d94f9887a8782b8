// Package storeadapter holds tablekeeper's storage ports: the small Tables,
// Queue and Blobs interfaces every job is written against (tables.go,
// queue.go, blobs.go), the entity model that keeps every EDM type exactly
// (entity.go, json.go), the sentinel errors callers test with errors.Is
// (errors.go), each service's limits and the validation rules both
// implementations share (limits_tables.go, limits_queue.go,
// limits_blobs.go), the one OData filter builder (filter.go), Azure's key
// order (order.go), the reserved rows and the table ranges every scan of
// application data shares (reserved.go, range.go).
//
// It imports the standard library and internal/text only: it must not
// import the Azure SDK, localstore or anything of the jobs. The Azure implementation lives in
// storeadapter/azstore, the in-process one in localstore, and the contract
// suite both must pass in storeadapter/storetest. Validation lives here,
// not in either implementation, so that both reject what Azure documents
// as invalid even where the emulator is looser (see docs/azure-behaviour.md,
// "Where Azurite is looser than Azure").
package storeadapter
