package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the README's first command in-process and checks the
// summary reports what the demo is meant to show.
func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut}
	if err := m.ParseFlags([]string{"-demo"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("demo: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"processed 3", "retried 4", "poisoned 2",
		"op-demo-bad    delivery 1  permanent: args.to: is required",
		"op-demo-stuck  delivery 5  dequeue count 5 reached the maximum 5",
		"table is being deleted",
		"table Employees  ", "78 entities", "11 entities",
		"blob archive/2026/Employees/Engineering/000003.json",
		"storage calls by the worker",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestConfigFile fills unset flags from -config and lets flags win; bad
// keys and values are named.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.json")
	if err := os.WriteFile(path, []byte(`{"concurrency": 3, "visibility": "45s", "drain": true, "queue": "orders"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TABLEKEEPER_QUEUE", "")
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path, "-concurrency", "7"}); err != nil {
		t.Fatal(err)
	}
	if m.Runner.Concurrency != 7 || m.Runner.Visibility != 45*time.Second || !m.Runner.Drain || m.Queue != "orders" {
		t.Fatalf("got concurrency %d, visibility %v, drain %v, queue %q; want 7 (flag), 45s, true, orders (file)",
			m.Runner.Concurrency, m.Runner.Visibility, m.Runner.Drain, m.Queue)
	}
	for body, want := range map[string]string{
		`{"connection-string": "x"}`: `"connection-string" is not a setting`,
		`{"nope": 1}`:                `"nope" is not a setting`,
		`{"visibility": "soon"}`:     `"visibility": parse error`,
		`[1]`:                        "not a JSON object",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		if err := m.ParseFlags([]string{"-config", path}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: got %v, want an error containing %q", body, err, want)
		}
	}
}
