// Package syncbuf is the tests' output buffer that a running command, a
// logger or a child process's output goroutine writes while the test
// reads it.
//
// It must not import anything of the module: the tests of any package may
// use it.
package syncbuf
