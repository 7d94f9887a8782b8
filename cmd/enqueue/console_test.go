package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/test/syncbuf"
)

// TestConsoleServesUntilInterrupted: enqueue console listens where -listen
// says, says so with its mode, serves the pages with the command's store,
// and ends with status 0 when interrupted.
func TestConsoleServesUntilInterrupted(t *testing.T) {
	b := setup(t)
	if err := b.queue.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.queue.Send(t.Context(), "hello", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSOLE_TOKEN", "tok-123-long-enough")
	ctx, cancel := context.WithCancel(t.Context())
	var errOut syncbuf.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &errOut, Clock: b.clock,
		Connect: func() (storeadapter.Store, error) { return b.store, nil }}
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"console", "-listen", "127.0.0.1:0", "-allow-actions", "-auth-token-env", "CONSOLE_TOKEN"})
	}()

	addr := regexp.MustCompile(`console on http://(127\.0\.0\.1:\d+)/ \(actions enabled; token from \$CONSOLE_TOKEN required; queues work-items\)`)
	deadline := time.Now().Add(10 * time.Second)
	var m1 []string
	for m1 = addr.FindStringSubmatch(errOut.String()); m1 == nil; m1 = addr.FindStringSubmatch(errOut.String()) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no start line after 10s; stderr:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+m1[1]+"/", nil)
	req.Header.Set("Authorization", "Bearer tok-123-long-enough")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`<tr data-queue="work-items">\s*<td>work-items</td>\s*<td class="n">1</td>`).Match(body) {
		t.Errorf("GET /: %d\n%s", resp.StatusCode, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after the interrupt; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("console still running 10s after the interrupt")
	}
	if strings.Contains(errOut.String(), "tok-123-long-enough") {
		t.Error("stderr shows the token")
	}
}

// TestConsoleFlagErrors: a non-loopback address needs a token, the token's
// variable must be set, and -metrics and -queues are checked; each is a
// usage error naming the flag.
func TestConsoleFlagErrors(t *testing.T) {
	b := setup(t)
	os.Unsetenv("UNSET_TOKEN_VAR")
	t.Setenv("SHORT_TOKEN", "short")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "0.0.0.0:0"}, "-listen 0.0.0.0:0: not a loopback address, so requests must carry a token: give -auth-token-env VAR"},
		{[]string{"-listen", ":8080"}, "-listen :8080: not a loopback address"},
		{[]string{"-auth-token-env", "UNSET_TOKEN_VAR"}, "-auth-token-env: $UNSET_TOKEN_VAR is empty or not set"},
		{[]string{"-auth-token-env", "SHORT_TOKEN"}, "-auth-token-env: $SHORT_TOKEN holds 5 characters, fewer than 16"},
		{[]string{"-metrics", "worker:8080/metrics"}, `-metrics: "worker:8080/metrics" is not an http:// or https:// URL`},
		{[]string{"-queues", "ok,Bad_Queue"}, "-queues: "},
		{[]string{"-listen", "nonsense"}, "-listen: "},
		{[]string{"-metrics-every", "100ms"}, "-metrics-every: must be at least 1s, got 100ms"},
	} {
		r := b.run("", append([]string{"console"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("console %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
