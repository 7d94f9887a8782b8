package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
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
		`{"visibility": "soon"}`:     `"visibility": must be a duration such as 30s`,
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

// TestFlagErrors: values the help does not allow are refused with the
// flag's name and its rule (main exits 2 for them).
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-concurrency", "0"}, "-concurrency: must be 1-1024, got 0"},
		{[]string{"-concurrency", "1025"}, "-concurrency: must be 1-1024, got 1025"},
		{[]string{"-batch", "0"}, "-batch: must be 1-32"},
		{[]string{"-batch", "64"}, "-batch: must be 1-32"},
		{[]string{"-visibility", "30"}, `must be a duration such as 30s, 1m30s or 2h, got "30" (a unit is needed: 30s or 30m)`},
		{[]string{"-visibility", "1s"}, "-visibility: must be 2s-168h0m0s, got 1s"},
		{[]string{"-max-dequeue-count", "0"}, "-max-dequeue-count: must be 1-1000, got 0"},
		{[]string{"-drain-quiet", "-1s"}, "-drain-quiet: must not be negative"},
		{[]string{"-queue", "caf\xe9"}, "-queue: the value is not valid UTF-8"},
	} {
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		err := m.ParseFlags(c.args)
		if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("worker %q: got %v, want an error containing %q", c.args, err, c.want)
		}
		if strings.Contains(fmt.Sprint(err), "\xe9") {
			t.Errorf("worker %q: the error repeats the invalid bytes: %v", c.args, err)
		}
	}
}

// TestHelp: -h prints the whole help on stdout, nothing on stderr.
func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut}
	if err := m.ParseFlags([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: worker [flags]", "worker -queue orders -drain", "Exit status: 0", "AZURE_STORAGE_CONNECTION_STRING",
		"-drain-quiet", "-receive-outage", "-concurrency int", "messages handled at once (1-1024)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("help wrote to stderr: %q", errOut.String())
	}
}

// TestSignals: the first signal logs at once how long the worker waits
// for how many jobs and stops it gracefully; a second one ends the process.
func TestSignals(t *testing.T) {
	ctx := context.Background()
	hang := make(chan struct{}) // the job's first read returns only when the test ends
	t.Cleanup(func() { close(hang) })
	started := make(chan struct{}, 1)
	store := localstore.New(localstore.Options{Fault: func(op string) error {
		if op == "GetEntity" {
			started <- struct{}{}
			<-hang
		}
		return nil
	}})
	q := store.Queue("sig")
	if err := q.Create(ctx); err != nil {
		t.Fatal(err)
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: "op-1", Kind: archive.Kind,
		Args: json.RawMessage(`{"table":"Src","to":"Dst","pk":"p","rk":"r"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := make(lineWriter, 100)
	sigs := make(chan os.Signal, 2)
	exited := make(chan int, 1)
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: logs, Signals: sigs, Exit: func(code int) { exited <- code },
		Connect: func() (storeadapter.Store, error) { return store, nil }}
	if err := m.ParseFlags([]string{"-queue", "sig", "-log-format", "json", "-shutdown-grace", "1h"}); err != nil {
		t.Fatal(err)
	}
	go m.Run(ctx) // returns only once the test ends: the job ignores cancellation
	receive(t, "the job to start", started)
	sigs <- syscall.SIGTERM
	logs.await(t, `"msg":"stopping; waiting up to 1h0m0s for 1 jobs; press Ctrl-C again to force","signal":"terminated","running":1,"grace":"1h0m0s"`)
	select {
	case code := <-exited:
		t.Fatalf("exited with %d after one signal", code)
	default:
	}
	sigs <- os.Interrupt
	if code := receive(t, "the exit after the second signal", exited); code != 1 {
		t.Errorf("second signal: exit %d, want 1", code)
	}
	logs.await(t, `"msg":"second signal; exiting now`)
}

// lineWriter hands each write (one log line) to the test.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// await reads lines until one contains want, for up to 5 s.
func (w lineWriter) await(t *testing.T, want string) {
	t.Helper()
	for {
		if line := receive(t, "a log line containing "+want, w); strings.Contains(line, want) {
			return
		}
	}
}

// receive returns the next value from ch, failing the test after 5 s.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not within 5 s", what)
		panic("unreachable")
	}
}
