package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli/clitest"
	"github.com/tablekeeper/tablekeeper/test/netfault"
)

// TestSilentStorage points commands at an endpoint that accepts
// connections and never answers: each says on stderr what it is waiting
// for (the service and the host) long before it gives up, gives up within
// -storage-timeout with status 1 and an error naming the call, and prints
// no secret.
func TestSilentStorage(t *testing.T) {
	host := netfault.Silent(t)
	f := clitest.Form{Name: "silent", Env: map[string]string{cli.EnvConnectionString: clitest.SilentConnectionString(host)}}
	for _, args := range [][]string{{"poison", "list"}, {"stats"}, {"purgeday", "-prefix", "Logins", "-keep-days", "3"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			setup(t)
			f.Apply(t)
			start := time.Now()
			r := runRealWithin(t, f, 15*time.Second, append(args, "-storage-timeout", "1s")...)
			took := time.Since(start)
			if r.code != 1 || !strings.Contains(r.stderr, "no answer in time") {
				t.Errorf("exit %d after %v; want 1 and the call's error\nstderr:\n%s", r.code, took.Round(time.Millisecond), r.stderr)
			}
			if want := "waiting for queue service at " + host + " (250ms)"; !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
			if took > 4*time.Second {
				t.Errorf("gave up after %v; want about the 1s -storage-timeout", took.Round(time.Millisecond))
			}
			f.Secrets = []string{clitest.SilentConnectionString(host)}
			f.CheckNoSecret(t, r.stdout, r.stderr)
		})
	}
	setup(t)
	f.Apply(t)
	r := runRealWithin(t, f, 15*time.Second, "stats", "-storage-timeout", "500ms")
	if r.code != 2 || !strings.Contains(r.stderr, "-storage-timeout: must be 1s-1h0m0s, got 500ms") {
		t.Errorf("-storage-timeout 500ms: exit %d, stderr %q; want 2 and the flag's rule", r.code, r.stderr)
	}
}
