// Package cli holds what tablekeeper's commands share: connecting to a
// storage account from flags and environment variables, and logging
// through slog (tint on a terminal, JSON otherwise). Secrets never reach a
// log line or an error from here.
//
// Only the commands import it (it is internal to cmd/). It must not import
// localstore, a kind or a test helper: the worker binary links it.
package cli
