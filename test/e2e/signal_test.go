package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerSigtermWhileStarting stops workers with SIGTERM while the Go
// runtime still initialises their packages (milliseconds after exec, before
// main runs): each stops cleanly with exit 0 and its "worker stopped" line,
// as a container job cancelled at once must, rather than dying of the
// signal. GODEBUG=inittrace=1 makes the child print each package's
// initialisation as it happens; the signal goes when the second of the
// module's own packages is reported: the SDKs and most of the module are
// still to be initialised then, milliseconds before main. The workers do
// not drain: one that drained an empty queue could stop on its own before
// the signal arrives on a busy machine, so only the signal stops them.
func TestWorkerSigtermWhileStarting(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	e.environ = append(append([]string(nil), childEnv...), "GODEBUG=inittrace=1")
	q := e.queue("sigstart")
	const marker = "init github.com/tablekeeper/tablekeeper/"
	for i := range 3 {
		w := e.startWorker(q)
		e.poll(10*time.Second, 100*time.Microsecond, "the worker's package initialisation to be traced", func() bool {
			return strings.Count(w.stderr.String(), marker) >= 2
		})
		w.signal(syscall.SIGTERM)
		if code := w.wait(e.ctx, 20*time.Second); code != 0 {
			t.Fatalf("run %d: %s exited with %d after a SIGTERM during start-up, want 0", i, w, code)
		}
		if s := w.logLines("worker stopped"); len(s) != 1 || s[0]["reason"] != "shutdown" {
			t.Fatalf("run %d: want one \"worker stopped\" line with reason shutdown, got %v", i, s)
		}
	}
}
