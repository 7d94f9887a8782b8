package e2e

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/test/azurite"
	"github.com/tablekeeper/tablekeeper/test/netfault"
)

// deadEndpoints returns cs with every service endpoint on a loopback port
// where nothing listens.
func deadEndpoints(t *testing.T, cs string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/" + azurite.Account
	l.Close()
	parts := strings.Split(cs, ";")
	for i, p := range parts {
		for _, svc := range []string{"BlobEndpoint=", "QueueEndpoint=", "TableEndpoint="} {
			if strings.HasPrefix(p, svc) {
				parts[i] = svc + dead
			}
		}
	}
	return strings.Join(parts, ";")
}

// silentEndpoints returns cs with every service endpoint on a loopback
// listener that accepts connections and never answers (a black-holed
// network, a broken proxy), and the listener's host:port.
func silentEndpoints(t *testing.T, cs string) (string, string) {
	t.Helper()
	host := netfault.Silent(t)
	parts := strings.Split(cs, ";")
	for i, p := range parts {
		for _, svc := range []string{"BlobEndpoint=", "QueueEndpoint=", "TableEndpoint="} {
			if strings.HasPrefix(p, svc) {
				parts[i] = svc + "http://" + host + "/" + azurite.Account
			}
		}
	}
	return strings.Join(parts, ";"), host
}

// TestWorkerSilentStorageExitsWithinOutage points a draining worker at an
// endpoint that accepts connections and never answers: it says what it is
// waiting for within a second (a quarter of -storage-timeout), and exits 1
// within -receive-outage counted from its start — the work queue's creation
// at start, which fails too, is part of the outage — with the failure
// logged, and no secret.
func TestWorkerSilentStorageExitsWithinOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	cs, host := silentEndpoints(t, emulatorConnectionString)
	e.environ = childEnvironment(cs)
	start := time.Now()
	w := e.startWorker("silent", "-drain", "-receive-outage", "3s", "-storage-timeout", "4s")
	e.poll(2*time.Second, 20*time.Millisecond, "the worker to say what it waits for", func() bool {
		return strings.Contains(w.stderr.String(), `"msg":"waiting for queue service at `+host+` (1s)"`)
	})
	if code := w.wait(e.ctx, 10*time.Second); code != 1 {
		t.Fatalf("%s exited with %d, want 1", w, code)
	}
	took := time.Since(start)
	t.Logf("exited 1 after %v", took.Round(time.Millisecond))
	if took > 4500*time.Millisecond {
		t.Errorf("the worker exited %v after its start; want within the 3s -receive-outage (and a margin for the process)", took.Round(time.Millisecond))
	}
	out := w.stderr.String()
	for _, want := range []string{`"msg":"could not create the work queue; receiving anyway"`, `"reason":"receive failing"`,
		`"level":"ERROR","msg":"worker failed"`, "\nworker: runner: receive from silent failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, azurite.Key) {
		t.Error("the account key appears in the worker's output")
	}
}

// TestWorkerStorageDownExitsOne points a draining worker at a port where
// nothing listens: it logs the first failed receive promptly, every one
// after it with its backoff, and exits 1 once receives have failed for
// -receive-outage, with the failure logged as JSON before the plain line
// and no secret anywhere.
func TestWorkerStorageDownExitsOne(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	e.environ = childEnvironment(deadEndpoints(t, emulatorConnectionString))
	start := time.Now()
	w := e.startWorker("down", "-drain", "-receive-outage", "4s", "-storage-retries", "0")
	e.poll(3*time.Second, 20*time.Millisecond, "the first failed receive to be logged", func() bool {
		return strings.Contains(w.stderr.String(), `"msg":"receive failed; backing off"`)
	})
	if code := w.wait(e.ctx, 20*time.Second); code != 1 {
		t.Fatalf("%s exited with %d, want 1", w, code)
	}
	took := time.Since(start)
	out := w.stderr.String()
	t.Logf("exited 1 after %v", took.Round(time.Millisecond))
	for _, want := range []string{`"msg":"receive failed; backing off"`, `"retry_in":"`, `"msg":"worker stopped"`, `"reason":"receive failing"`,
		`"level":"ERROR","msg":"worker failed"`, "\nworker: runner: receive from down failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, `"msg":"worker failed"`) > strings.LastIndex(out, "\nworker: ") {
		t.Errorf("the plain error line comes before the logged one:\n%s", out)
	}
	if strings.Contains(out, azurite.Key) {
		t.Error("the account key appears in the worker's output")
	}
}

// TestWorkerSaysAtOnceStorageIsDown: with the SDK's default retries, a
// failed call (the work queue's creation at start) takes 8–10 s to come
// back; the worker still says within 2 s that storage is not answering, and
// stops on SIGTERM.
func TestWorkerSaysAtOnceStorageIsDown(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	e.environ = childEnvironment(deadEndpoints(t, emulatorConnectionString))
	w := e.startWorker("down", "-drain")
	e.poll(2*time.Second, 20*time.Millisecond, "the first failed try to be logged", func() bool {
		return strings.Contains(w.stderr.String(), `"msg":"storage is not answering; retrying"`)
	})
	w.signal(syscall.SIGTERM)
	if code := w.wait(e.ctx, 20*time.Second); code != 0 {
		t.Errorf("%s exited with %d after SIGTERM, want 0", w, code)
	}
	if out := w.stderr.String(); strings.Contains(out, azurite.Key) || strings.Count(out, "storage is not answering") != 1 {
		t.Errorf("want one 'not answering' line and no secret:\n%s", out)
	}
}

// TestWorkerFlagsAndHelp: a bad flag exits 2 naming it; -h exits 0 with the
// help on stdout.
func TestWorkerFlagsAndHelp(t *testing.T) {
	t.Parallel()
	e := setup(t, 30*time.Second)
	bad := e.start(workerBin, "-batch", "64")
	if code := bad.wait(e.ctx, 10*time.Second); code != 2 || !strings.Contains(bad.stderr.String(), "-batch: must be 1-32") {
		t.Errorf("worker -batch 64: exit %d, stderr %q; want 2 and the flag named", code, bad.stderr.String())
	}
	help := e.start(workerBin, "-h")
	if code := help.wait(e.ctx, 10*time.Second); code != 0 || !strings.Contains(help.stdout.String(), "usage: worker [flags]") || help.stderr.String() != "" {
		t.Errorf("worker -h: exit %d, stdout %d bytes, stderr %q; want 0 and the help on stdout only", code, len(help.stdout.String()), help.stderr.String())
	}
}
