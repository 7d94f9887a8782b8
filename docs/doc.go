// Package docs holds tablekeeper's documentation pages (the Markdown files
// beside this one) and the tests that keep them true to the code.
//
// TestLinks reads README.md, BENCHMARKS.md and docs/*.md and checks that
// every relative link names a file or directory that exists, and a link
// to "#anchor" a heading of its target (GitHub's anchors); that every
// `go doc ./path [Symbol[.Member]]` names a package and an exported
// symbol that exist; that every Go identifier written as `pkg.Name` or
// `pkg.Type.Member` in a code span, where pkg is one of the module's
// packages, exists; and that every repository path in a code span
// (`jobs/runner/outcome.go`) exists. It parses the module's Go files
// itself and takes well under a second.
//
// TestCLIReference builds cmd/enqueue and cmd/worker and checks that
// docs/cli.md holds, verbatim, what `enqueue help`, every `enqueue
// <command> -h` and `worker -h` print (in an empty environment, so no
// variable's value shows as a default), each between a
// <!-- help: COMMAND --> and an <!-- end help --> line; and that every
// command enqueue's usage lists has its block. After a change to a usage
// text, regenerate the blocks with
//
//	go test ./docs -run TestCLIReference -update
//
// The package has no code of its own and must not import any package of
// the module: its tests read the sources and run the commands.
package docs
