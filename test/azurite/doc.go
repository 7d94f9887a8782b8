// Package azurite starts and stops the Azurite storage emulator for tests.
//
// Azurite comes from npm, pinned by package.json and package-lock.json in
// this folder and installed with `npm ci` (`make azurite` does it). Start
// runs it on free loopback ports with a temporary --location directory
// (in-memory mode freezes after heavy queue churn) and --skipApiVersionCheck
// (azblob v1.8.3 sends an API version Azurite 3.37 does not know).
//
// Tests that need Azurite fail when it is not installed. Setting
// TABLEKEEPER_SKIP_AZURITE=1 turns that failure into an explicit skip, and
// TABLEKEEPER_AZURITE_CONNECTION_STRING points the tests at an emulator
// that is already running instead of starting one.
//
// It must not import anything of the module: the tests of every layer use
// it.
package azurite
