// Package storeadapter holds tablekeeper's storage ports: the small Tables,
// Queue and Blobs interfaces every job is written against, the entity model
// that keeps every EDM type exactly, the sentinel errors callers test with
// errors.Is, the validation rules both implementations share, and the one
// OData filter builder.
//
// It imports the standard library only. The Azure implementation lives in
// storeadapter/azstore, the in-process one in localstore, and the contract
// suite both must pass in storeadapter/storetest. Validation lives here,
// not in either implementation, so that both reject what Azure documents
// as invalid even where the emulator is looser (see docs/azure-behaviour.md,
// "Where Azurite is looser than Azure").
package storeadapter
