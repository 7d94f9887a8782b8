package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// envConnectionString is the variable the binaries read the connection
// string from.
const envConnectionString = "AZURE_STORAGE_CONNECTION_STRING"

// Package state set up by TestMain and read by every test through setup.
var (
	// workerBin and enqueueBin are the built binaries; producerBin is
	// the application of the transactional enqueue test (test/e2e/producer).
	workerBin, enqueueBin, producerBin string
	// childEnv is the environment of every child process: the test's own
	// minus the variables that would change what the children connect to,
	// plus the emulator's connection string.
	childEnv []string
	// emulatorConnectionString reaches the emulator; tests derive broken
	// variants from it. Never log it: it holds the account key.
	emulatorConnectionString string
	// store reaches the emulator; tests check outcomes through it.
	store *azstore.Store
	// blobService reaches the emulator's blobs with the SDK itself, for
	// what storeadapter does not offer (leases, deleting containers).
	blobService *azblob.Client
	// skipReason, when set, makes every test skip.
	skipReason string
	// setupErr, when set, makes every test fail.
	setupErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run prepares the package state, runs the tests and tears the state down.
// A setup failure does not stop the run: every test reports it, so `go
// test` shows it as a failure rather than as a crash of the test binary.
func run(m *testing.M) int {
	if azurite.Skipped() {
		skipReason = "Azurite-backed tests skipped: " + azurite.EnvSkip + "=1"
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "tablekeeper-e2e-")
	if err != nil {
		setupErr = err
		return m.Run()
	}
	defer os.RemoveAll(dir)
	if setupErr = buildBinaries(dir); setupErr != nil {
		return m.Run()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	in, err := azurite.Start(ctx)
	cancel()
	if err != nil {
		setupErr = fmt.Errorf("start Azurite: %w", err)
		return m.Run()
	}
	defer in.Stop()
	cs := in.ConnectionString
	if store, err = azstore.NewFromConnectionString(cs, nil); err != nil {
		setupErr = err
		return m.Run()
	}
	if blobService, err = azblob.NewClientFromConnectionString(cs, nil); err != nil {
		// The SDK's error may quote the connection string: do not keep it.
		setupErr = errors.New("azblob: the emulator's connection string was refused")
		return m.Run()
	}
	childEnv, emulatorConnectionString = childEnvironment(cs), cs
	return m.Run()
}

// buildBinaries builds cmd/worker, cmd/enqueue and test/e2e/producer into
// dir.
func buildBinaries(dir string) error {
	root, err := azurite.ModuleRoot()
	if err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build the binaries: %w", err)
	}
	workerBin = filepath.Join(dir, "worker")
	enqueueBin = filepath.Join(dir, "enqueue")
	producerBin = filepath.Join(dir, "producer")
	for bin, pkg := range map[string]string{workerBin: "./cmd/worker", enqueueBin: "./cmd/enqueue", producerBin: "./test/e2e/producer"} {
		cmd := exec.Command(goBin, "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// childEnvironment returns the environment of the child processes: this
// process's, without the variables that select an account or a queue, with
// the connection string added.
func childEnvironment(connectionString string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envConnectionString, "AZURE_STORAGE_ACCOUNT", "TABLEKEEPER_QUEUE":
			continue
		}
		env = append(env, kv)
	}
	return append(env, envConnectionString+"="+connectionString)
}
