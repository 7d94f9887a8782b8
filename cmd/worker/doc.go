// Command worker runs tablekeeper's queue worker: it polls the work queue,
// keeps each message hidden while its job runs, and deletes, retries or
// poisons it. With -drain it runs to completion (for container jobs).
// The demo on the in-process store is its own command, cmd/demo.
//
// Settings come from flags, which override environment variables
// (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT, TABLEKEEPER_QUEUE),
// which override the -config file. docs/cli.md has every flag and what
// the worker does with it; docs/config.md the config file.
//
// It must not import localstore or any test helper: the image links only
// the Azure store (test/imports holds this).
package main
