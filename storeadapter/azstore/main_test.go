package azstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// emulator is the Azurite instance this package's tests share; nil when
// TABLEKEEPER_SKIP_AZURITE=1 asked to skip them.
var emulator *azurite.Instance

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !azurite.Skipped() {
		in, err := azurite.Start(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "azstore tests need Azurite:", err)
			return 1
		}
		defer in.Stop()
		emulator = in
	}
	return m.Run()
}

// newStore connects to the shared emulator, or skips the test when Azurite
// was explicitly skipped.
func newStore(t *testing.T) *azstore.Store {
	t.Helper()
	if emulator == nil {
		t.Skip(azurite.EnvSkip + "=1: Azurite-backed test skipped on request")
	}
	s, err := azstore.NewFromConnectionString(emulator.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
