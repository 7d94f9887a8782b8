package azurite

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStartStop starts the emulator, checks that its table endpoint
// answers, and that Stop frees the port.
func TestStartStop(t *testing.T) {
	if Skipped() {
		t.Skip(EnvSkip + "=1: Azurite-backed tests skipped on request")
	}
	in, err := Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.cmd == nil {
		t.Skip("using the external emulator named by " + EnvConnectionString)
	}
	_, rest, _ := strings.Cut(in.ConnectionString, "TableEndpoint=http://")
	addr, _, _ := strings.Cut(rest, "/")
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("table endpoint %s not answering: %v", addr, err)
	}
	c.Close()
	start := time.Now()
	in.Stop()
	t.Logf("stopped in %v", time.Since(start))
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("table endpoint %s still answering after Stop", addr)
	}
}
