// Package index is the "index" job kind: its arguments (Args) and its
// Worker, which reconciles one entity's indexes per message, or rebuilds
// a table's (or a partition's) indexes, with the library
// tablepatterns/indexes. The indexes are declared in the worker's config
// ("index" section, indexes.Config); applications read them through that
// library (Lookup, Check) without this worker.
//
// Like every kind it is written against the storeadapter ports, the jobs
// contract and the tablepatterns libraries only: it must not import the
// Azure SDK, the runner or another kind.
package index
