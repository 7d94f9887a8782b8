// Command enqueue is tablekeeper's producer and operator CLI: it puts
// operations on the work queue, inspects, requeues and deletes the
// messages parked on its poison queue, and looks up and checks the indexes
// the index kind keeps.
//
//	enqueue <command> [flags]
//	enqueue help                  the list of commands
//	enqueue <command> -h          a command's flags
//
// Every job it sends goes through package client (send.go): the client
// checks it as the worker will, makes its op id, encodes and sends it; the
// command builds the args from flags or lines and words the client's
// errors as its own.
//
// docs/cli.md is the reference: it holds every command's help verbatim,
// and a test (go test ./docs) keeps it equal to what this program prints.
// The exit status is 0 on success, 1 when an operation failed and 2 for a
// usage error.
//
// It must not import localstore or a test helper: operators run it against
// Azure (test/imports holds this).
package main
