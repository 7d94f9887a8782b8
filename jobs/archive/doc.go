// Package archive is the "archive" job kind: its arguments (Args, with
// their strict validation), its section of the config file (Config) and
// its Worker, which moves one entity or a RowKey range from a table to
// another table or to blobs following the eventually consistent
// transactions pattern (see Worker for the steps and why every crash
// position converges).
//
// It is written against the storeadapter ports and the jobs contract only:
// it must not import the Azure SDK, the runner or another kind, and it
// knows nothing of queues, leases or poisoning.
package archive
