// Package e2e runs tablekeeper's real binaries, cmd/worker and cmd/enqueue,
// against one Azurite emulator and checks what they did directly in
// storage.
//
// TestMain builds both binaries, and the producer application of the
// transactional enqueue test (test/e2e/producer), once into a temporary
// directory and starts one emulator for the whole package. Each test works on its own queue,
// tables and containers (names with a random suffix), so tests that do not
// measure timing run in parallel. Children get the connection string
// through AZURE_STORAGE_CONNECTION_STRING, never on their command line, and
// the tests never log it.
//
// The tests fail when Azurite is not installed (run `make azurite`), unless
// TABLEKEEPER_SKIP_AZURITE=1 asks to skip them.
//
// Its tests run the binaries and read storage through the Azure SDK; the
// package must not import the module's packages beyond the test harnesses
// (test/azurite): what it checks is what the binaries do.
package e2e
