package azurite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment variables the tests read.
const (
	EnvSkip             = "TABLEKEEPER_SKIP_AZURITE"
	EnvConnectionString = "TABLEKEEPER_AZURITE_CONNECTION_STRING"
)

// Azurite's well-known development account. The key is public (it is in
// Microsoft's documentation) and only ever valid for the emulator.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// ErrNotInstalled means the Azurite package has not been installed.
var ErrNotInstalled = errors.New("azurite is not installed: run `make azurite` (npm ci in test/azurite), or set " + EnvSkip + "=1 to skip the tests that need it")

// Instance is a running emulator.
type Instance struct {
	// ConnectionString reaches the emulator's three services.
	ConnectionString string
	cmd              *exec.Cmd
	done             chan struct{}
	dir              string
	log              *os.File
}

// Skipped reports whether the caller asked to skip Azurite-backed tests.
func Skipped() bool { return os.Getenv(EnvSkip) == "1" }

// Start starts an emulator, or returns the external one named by
// EnvConnectionString. It fails with ErrNotInstalled when Azurite is missing.
func Start(ctx context.Context) (*Instance, error) {
	if cs := os.Getenv(EnvConnectionString); cs != "" {
		return &Instance{ConnectionString: cs}, nil
	}
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tablekeeper-azurite-")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "azurite.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "--silent", "--disableTelemetry", "--skipApiVersionCheck",
		"--location", filepath.Join(dir, "data"),
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(ports[0]),
		"--queueHost", "127.0.0.1", "--queuePort", strconv.Itoa(ports[1]),
		"--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(ports[2]))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so Stop reaches node's children too
	if err := cmd.Start(); err != nil {
		log.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("azurite: start: %w", err)
	}
	in := &Instance{cmd: cmd, done: make(chan struct{}), dir: dir, log: log}
	go func() { cmd.Wait(); close(in.done) }()
	in.ConnectionString = ConnectionString(ports[0], ports[1], ports[2])
	if err := in.waitReady(ctx, ports); err != nil {
		in.Stop()
		return nil, err
	}
	return in, nil
}

// ConnectionString returns the connection string of an emulator listening
// on 127.0.0.1 with the given ports.
func ConnectionString(blobPort, queuePort, tablePort int) string {
	ep := func(p int) string { return "http://127.0.0.1:" + strconv.Itoa(p) + "/" + Account }
	return "DefaultEndpointsProtocol=http;AccountName=" + Account + ";AccountKey=" + Key +
		";BlobEndpoint=" + ep(blobPort) + ";QueueEndpoint=" + ep(queuePort) + ";TableEndpoint=" + ep(tablePort) + ";"
}

func (in *Instance) waitReady(ctx context.Context, ports []int) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, p := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-in.done:
				return fmt.Errorf("azurite: exited before listening on %s: %s", addr, in.logTail())
			case <-ctx.Done():
				return fmt.Errorf("azurite: not listening on %s: %w: %s", addr, ctx.Err(), in.logTail())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (in *Instance) logTail() string {
	b, _ := os.ReadFile(in.log.Name())
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// Stop stops the emulator: SIGTERM, then SIGKILL if it lingers (Azurite can
// take half a minute to exit after closing its ports), and removes its data.
// It is a no-op for an external emulator.
func (in *Instance) Stop() {
	if in.cmd == nil {
		return
	}
	pgid := -in.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(3 * time.Second):
		syscall.Kill(pgid, syscall.SIGKILL)
		<-in.done
	}
	syscall.Kill(pgid, syscall.SIGKILL) // any child left behind
	in.log.Close()
	os.RemoveAll(in.dir)
}

// binary finds the installed azurite launcher beside this package.
func binary() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "test", "azurite", "node_modules", ".bin", "azurite")
	if _, err := os.Stat(bin); err != nil {
		return "", ErrNotInstalled
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("%w (node is not on PATH)", ErrNotInstalled)
	}
	return bin, nil
}

// ModuleRoot walks up from the working directory to the folder of go.mod:
// tests run in their package's folder, and the emulator and the binaries
// they build live relative to the module.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("azurite: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("azurite: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ForTest starts an emulator for test t (or takes the external one, as
// Start does), stops it when t ends, and fails t when Azurite is missing;
// it skips t only when the caller asked to skip Azurite-backed tests
// (EnvSkip=1).
func ForTest(t testing.TB) *Instance {
	t.Helper()
	if Skipped() {
		t.Skip("Azurite-backed test skipped: " + EnvSkip + "=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Stop)
	return in
}
