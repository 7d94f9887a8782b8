// Package clitest gives the commands' tests every credential form of
// cli.Account, each with the secrets that must never appear in anything a
// command writes, pointed at a storage endpoint that fails (a closed
// port, a malformed URL, an unreachable token authority) or at a running
// emulator. Only tests import it.
//
// It may import the Azurite harness (test/azurite) and the testing
// package; it must not import localstore (the commands' tests run on the
// real emulator), and nothing but tests may import it.
package clitest
