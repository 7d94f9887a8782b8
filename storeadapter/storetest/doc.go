// Package storetest is the contract suite every implementation of the
// storeadapter ports must pass: Exercise runs it against the stores a
// factory makes, so localstore (always) and azstore on Azurite or Azure
// (in CI) are held to one behaviour, the one storeadapter's doc comments
// and Azure's documentation describe.
//
// The suite asserts concrete results and sentinel errors (errors.Is, and
// errors.As for *storeadapter.TransactionError), including the validation
// storeadapter requires before any service call: many invalid-input cases
// run against resources that do not exist, so a store that called the
// service first would answer ErrNotFound instead of ErrInvalidInput.
//
// Every case uses fresh, unique table, queue and container names, so the
// cases run in parallel and may share one storage account. Cases that need
// time to pass move a fake clock (Harness.Advance) or, against a real-time
// service, sleep a second or two.
//
// It must not import anything but the standard library and storeadapter: the suite describes the ports, not any one implementation.
package storetest
