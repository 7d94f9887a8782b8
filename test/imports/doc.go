// Package imports holds the test of the module's layering: which packages
// may depend on which, checked with `go list -deps` over the whole module
// (docs/architecture.md gives the picture and the reasons), and that
// only the client (and jobs, the contract) builds a jobs.Envelope, read
// with go/parser. It has no code of its own.
//
// It must not import anything of the module: it reads the import graph
// from the go command.
package imports
