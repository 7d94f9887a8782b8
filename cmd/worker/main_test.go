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

	"github.com/tablekeeper/tablekeeper/internal/version"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// TestConfigFile fills unset flags from the -config file's runner section
// and the kinds' sections, lets flags and the environment win, and names
// bad keys with their line:column and bad values with their rule.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.json")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{
  "runner": {"concurrency": 3, "visibility": "45s", "drain": true, "queue": "orders"},
  "archive": {"maxConflicts": 9, "checkpointTable": "FileCheckpoints", "maxRunTime": "10m"}
}`)
	t.Setenv("TABLEKEEPER_QUEUE", "")
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path, "-concurrency", "7"}); err != nil {
		t.Fatal(err)
	}
	a := m.Kinds.Archive
	if m.Runner.Concurrency != 7 || m.Runner.Visibility != 45*time.Second || !m.Runner.Drain || m.Queue != "orders" ||
		a.MaxConflicts != 9 || a.CheckpointTable != "FileCheckpoints" || a.MaxRunTime != jobs.Duration(10*time.Minute) {
		t.Fatalf("got concurrency %d, visibility %v, drain %v, queue %q, archive %+v; want 7 (flag), 45s, true, orders, {FileCheckpoints 9 10m} (file)",
			m.Runner.Concurrency, m.Runner.Visibility, m.Runner.Drain, m.Queue, a)
	}
	t.Setenv("TABLEKEEPER_QUEUE", "from-env")
	m = &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path, "-checkpoint-table", "FlagCheckpoints"}); err != nil {
		t.Fatal(err)
	}
	if m.Queue != "from-env" || m.Kinds.Archive.CheckpointTable != "FlagCheckpoints" {
		t.Fatalf("queue %q, checkpoint table %q; want the environment's and the flag's over the file's", m.Queue, m.Kinds.Archive.CheckpointTable)
	}
	t.Setenv("TABLEKEEPER_CONFIG", path) // the file named by the environment
	m = &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if m.Kinds.Archive.MaxConflicts != 9 {
		t.Fatalf("with $TABLEKEEPER_CONFIG, archive.maxConflicts = %d, want the file's 9", m.Kinds.Archive.MaxConflicts)
	}
	t.Setenv("TABLEKEEPER_CONFIG", "")
	// The health server's settings: from the file, the flag winning.
	write(`{"runner": {"http": "127.0.0.1:0", "metricsSample": "5s"}}`)
	m = &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path}); err != nil {
		t.Fatal(err)
	}
	if m.HTTP != "127.0.0.1:0" || m.MetricsSample != 5*time.Second {
		t.Fatalf("http %q, metrics sample %v; want the file's 127.0.0.1:0 and 5s", m.HTTP, m.MetricsSample)
	}
	m = &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path, "-http", ":9090", "-metrics-sample", "7s"}); err != nil {
		t.Fatal(err)
	}
	if m.HTTP != ":9090" || m.MetricsSample != 7*time.Second {
		t.Fatalf("http %q, metrics sample %v; want the flags' :9090 and 7s over the file's", m.HTTP, m.MetricsSample)
	}
	write(`{"runner": {"http": "127.0.0.1:99999"}}`)
	m = &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Connect: func() (storeadapter.Store, error) { return localstore.New(localstore.Options{}), nil }}
	if err := m.ParseFlags([]string{"-config", path}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "-config "+path+": runner.http: listen tcp") {
		t.Fatalf("an address the file gives that cannot be bound: got %v, want an error naming runner.http", err)
	}
	for body, want := range map[string]string{
		`{"runner": {"metricsSample": "500ms"}}`:          `worker.json: runner.metricsSample: must be at least 1s, got 500ms`,
		`{"runner": {"http": 8080}}`:                      `runner.http: must be a string, got number`,
		`{"runner": {"connectionString": "x"}}`:           `worker.json:1:13: runner.connectionString: unknown field`,
		"{\n  \"runner\": {\n    \"concurency\": 1}}":     `worker.json:3:5: runner.concurency: unknown field`,
		`{"runner": {"Concurrency": 1}}`:                  `runner.Concurrency: unknown field (names are case-sensitive: did you mean "concurrency"?)`,
		`{"archive": {"maxConflicts": 1}, "archive": {}}`: `worker.json:1:34: archive: given twice`,
		`{"runner": {"visibility": "soon"}}`:              `runner.visibility: must be a duration with its unit, such as "30s"`,
		`{"runner": {"concurrency": 5000}}`:               `worker.json: runner.concurrency: must be 1-1024, got 5000`,
		`{"runner": {"concurrency": 1e400}}`:              `worker.json:1:28: runner.concurrency: must be an integer from -9223372036854775808 to 9223372036854775807, got 1e400`,
		`{"runner": {"batch": 40}}`:                       `worker.json: runner.batch: must be 1-32`,
		`{"runner": {"retryMax": "-1s"}}`:                 `worker.json: runner.retryMax: must not be negative`,
		`{"archive": {"maxConflicts": 1000}}`:             `archive.maxConflicts: must be 1-100, got 1000`,
		`{"archive": {"checkpointTable": "x"}}`:           `archive.checkpointTable: invalid input: table name`,
		`[1]`:                                             "not a JSON object",
		`{"index": {"tables": {"Employees": [{"name": "email", "property": "Email", "kind": "copy", "store": "partitoin"}]}}}`: `index.tables["Employees"] index "email": store: a copy index is stored in "partition" or "table", got "partitoin"`,
		`{"index": {"tables": {"Employees": [{"name": "x", "property": "P", "kind": "list", "store": "table"}]}}}`:             `index.tables["Employees"] index "x": table: is required`,
		`{"index": {"tables": {"Employees": [{"nme": "x"}]}}}`:                                                                 `worker.json:1:38: index.tables.Employees[].nme: unknown field`,
	} {
		write(body)
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		if err := m.ParseFlags([]string{"-config", path}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: got %v, want an error containing %q", body, err, want)
		}
	}
}

// TestPrintConfig prints the effective configuration, defaults filled in,
// and never the connection string.
func TestPrintConfig(t *testing.T) {
	const secret = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=c2VjcmV0"
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", secret)
	t.Setenv("TABLEKEEPER_QUEUE", "")
	var out bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-print-config", "-queue", "orders", "-visibility", "1m", "-http", ":8080"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ConnectionString string
		Runner           struct {
			Queue         string
			Visibility    string
			DrainQuiet    string
			HTTP          string
			MetricsSample string
		}
		Archive struct {
			CheckpointTable string
			MaxConflicts    int
			MaxRunTime      string
		}
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("-print-config output is not JSON: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "AccountKey") || got.ConnectionString != "(set; redacted)" {
		t.Errorf("-print-config shows the connection string, or not that it is set:\n%s", out.String())
	}
	if r, a := got.Runner, got.Archive; r.Queue != "orders" || r.Visibility != "1m0s" || r.DrainQuiet != "2m0s" || r.HTTP != ":8080" || r.MetricsSample != "30s" ||
		a.CheckpointTable != "TablekeeperCheckpoints" || a.MaxConflicts != 5 || a.MaxRunTime != "30m0s" {
		t.Errorf("-print-config printed %+v; want the flags' values and the defaults filled in", got)
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
		{[]string{"-visibility", "30"}, `-visibility: must be a duration such as 90m, 36h or 7d, got "30" (a unit is needed: 30s, 30m or 30d)`},
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

// TestVersion: -version prints the one-line version on stdout and stops
// parsing before the config file, so a broken configuration does not hide it.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut}
	err := m.ParseFlags([]string{"-version", "-config", filepath.Join(t.TempDir(), "missing.json"), "-concurrency", "0"})
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("-version: %v, want ErrVersion", err)
	}
	if got, want := out.String(), version.String("worker")+"\n"; got != want {
		t.Errorf("-version printed %q, want %q", got, want)
	}
	if errOut.Len() != 0 {
		t.Errorf("-version wrote to stderr: %q", errOut.String())
	}
}

// TestSignals: the first signal logs at once how long the worker waits
// for how many jobs and stops it gracefully; a second one ends the process.
func TestSignals(t *testing.T) {
	ctx := context.Background()
	hang := make(chan struct{}) // the job's first read returns only when the test ends
	t.Cleanup(func() { close(hang) })
	started := make(chan struct{}, 1)
	store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpGetEntity {
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
