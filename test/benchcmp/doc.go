// Command benchcmp runs a package's Go benchmarks at a baseline commit and
// at the working tree in the same run, and prints each figure's median at
// both and their ratio: on a shared machine a rate means little without
// the baseline measured beside it. `make bench` runs it on localstore:
//
//	go run ./test/benchcmp -pkg ./localstore/ -bench 'Entity$' -count 5
//
// The baseline is -base, by default the commit where HEAD left main (the
// branch's base), or HEAD~1 on main itself. It is extracted with git
// archive into a temporary directory (the repository and its worktrees are
// left alone), both test binaries are built first, and the runs alternate
// between them (-count rounds, each side starting every other round), so
// a change in the machine's load falls on both. The load average before
// and after is printed with the figures.
//
// A benchmark that exists on one side only is printed without a ratio.
//
// It must not import anything of the module (it builds the module's
// packages at two commits, and must build the same at both), and nothing
// imports it.
package main
