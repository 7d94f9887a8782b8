// Package version says which build of tablekeeper is running: the release
// version, the commit and the commit's time, stamped by the linker
// (deploy/Dockerfile and `make build` pass -ldflags "-X …") or, when they
// are not stamped, read from the Go toolchain's build information (module
// version and the vcs.* settings `go build` records inside a git checkout).
// `worker -version` and `enqueue -version` print String.
//
// It must not import anything but the standard library, and holds no
// other state.
package version
