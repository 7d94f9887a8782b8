package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestConsoleOnTheWorkersServer: -console serves the console at /console/
// beside the health endpoints, read-only (no action offered, a posted one
// refused), behind the token when one is given.
func TestConsoleOnTheWorkersServer(t *testing.T) {
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvAccount, "")
	t.Setenv("WORKER_CONSOLE_TOKEN", "console-tok-42-long")
	store := localstore.New(localstore.Options{})
	logs := &releaseOnDrained{release: make(chan struct{})}
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: logs, Connect: func() (storeadapter.Store, error) { return store, nil }}
	if err := m.ParseFlags([]string{"-queue", "orders", "-log-format", "json", "-http", "127.0.0.1:0", "-console", "-console-token-env", "WORKER_CONSOLE_TOKEN", "-idle-max", "100ms"}); err != nil {
		t.Fatal(err)
	}
	addr, stop := serveWorker(t, m, logs)
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/console/", ""); code != http.StatusSeeOther {
		t.Errorf("GET /console/ without the token: %d, want a redirect to the login", code)
	}
	code, body := get("/console/", "console-tok-42-long")
	if code != http.StatusOK || !strings.Contains(body, `<tr data-queue="orders">`) || !strings.Contains(body, `href="/console/poison?queue=orders"`) ||
		!strings.Contains(body, "<li>this worker</li>") || !strings.Contains(body, "read-only") {
		t.Errorf("GET /console/: %d\n%s", code, body)
	}
	if code, body = get("/console/poison?queue=orders", "console-tok-42-long"); code != http.StatusOK || strings.Contains(body, "actions/preview") {
		t.Errorf("GET /console/poison: %d\n%s", code, body)
	}
	// The login form's cookie, through the mount.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp0, err := hc.PostForm("http://"+addr+"/console/login", url.Values{"token": {"console-tok-42-long"}, "next": {"/poison?queue=orders"}})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := io.ReadAll(resp0.Body)
	resp0.Body.Close()
	if resp0.StatusCode != http.StatusOK || resp0.Request.URL.Path != "/console/poison" || !strings.Contains(string(after), "Poison: orders") {
		t.Errorf("login through /console/: %d at %s\n%s", resp0.StatusCode, resp0.Request.URL, after)
	}
	if code, _ = get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz beside the console: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/console/actions/run", strings.NewReader(url.Values{"action": {"purge"}, "queue": {"orders"}}.Encode()))
	req.Header.Set("Authorization", "Bearer console-tok-42-long")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	refusal, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(refusal), "this console is read-only") {
		t.Errorf("POST an action to the worker's console: %d %s, want 403: read-only", resp.StatusCode, refusal)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "console-tok-42-long") {
		t.Error("the worker's log shows the console token")
	}
}

// TestConsoleFlags: -console needs -http, and a token unless -http is
// loopback; the token's variable must be set.
func TestConsoleFlags(t *testing.T) {
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv("EMPTY_TOKEN", "")
	t.Setenv("SHORT_TOKEN", "short")
	for args, want := range map[string]string{
		"-console":             "-console: needs -http",
		"-console -http :8080": "-console: -http :8080 is not a loopback address, so console requests must carry a token: give -console-token-env VAR",
		"-console -http 127.0.0.1:0 -console-token-env EMPTY_TOKEN": "-console-token-env: $EMPTY_TOKEN is empty or not set",
		"-console-token-env EMPTY_TOKEN":                            "-console-token-env: needs -console",
	} {
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		if err := m.ParseFlags(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", args, err, want)
		}
	}
}
