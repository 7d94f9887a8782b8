// Package copykind is the "copy" job kind: its arguments (Args, with
// their strict validation), its section of the config file (Config) and
// its Worker, which copies a table, a partition or a RowKey range to a
// table of the same or another storage account, page by page, through the
// shared batch writer (tablepatterns/tablewrite), checkpointed, with no
// blob in between (see Worker for the steps and why every crash position
// converges). Other accounts are reached by name through kit.Deps.Account;
// the kind never sees a credential.
//
// The package is named copykind, not copy, so that its importers keep
// Go's builtin copy; its directory, jobs/copy, is the kind's name.
//
// It is written against the storeadapter ports, the idempotent packages
// and the jobs contract only: it must not import the Azure SDK, the
// runner or another kind.
package copykind
