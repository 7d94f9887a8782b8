package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// releaseOnDrained is a log writer that, when the runner logs "queue
// drained", lets a held storage call return delay later.
type releaseOnDrained struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	delay   time.Duration
	release chan struct{}
	once    sync.Once
}

func (w *releaseOnDrained) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	if strings.Contains(string(p), `"msg":"queue drained"`) {
		w.once.Do(func() {
			go func() {
				end := time.Now().Add(w.delay)
				for time.Now().Before(end) {
				}
				close(w.release)
			}()
		})
	}
	return len(p), nil
}

func (w *releaseOnDrained) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestExitSummaryStorageCallsEqualInstrument: the "worker stopped"
// line's storage_calls (the metrics) and instrument_calls (the
// instrument's Counts) agree: the sampler and the server, which call
// storage too, are stopped before the line is computed. A sampler call
// (the poison queue's count, which only the sampler makes) is held and
// released at varying moments after the drain ends.
func TestExitSummaryStorageCallsEqualInstrument(t *testing.T) {
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvAccount, "")
	t.Setenv(cli.EnvSASToken, "")
	mismatches := 0
	var example string
	for i := range 40 {
		delay := time.Duration(i) * 40 * time.Microsecond
		release := make(chan struct{})
		held := make(chan struct{}, 1)
		store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
			if c.Op == instrument.OpApproximateCount && c.Name == "rev-poison" {
				select {
				case held <- struct{}{}:
					<-release
				default:
				}
			}
			return nil
		}})
		if err := store.Queue("rev").Create(context.Background()); err != nil {
			t.Fatal(err)
		}
		logs := &releaseOnDrained{delay: delay, release: release}
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: logs, Connect: func() (storeadapter.Store, error) { return store, nil }}
		if err := m.ParseFlags([]string{"-queue", "rev", "-drain", "-log-format", "json", "-http", "127.0.0.1:0", "-idle-max", "100ms"}); err != nil {
			t.Fatal(err)
		}
		if err := m.Run(context.Background()); err != nil {
			t.Fatalf("run: %v\n%s", err, logs.String())
		}
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if !strings.Contains(line, `"msg":"worker stopped"`) {
				continue
			}
			var v struct {
				StorageCalls    int64 `json:"storage_calls"`
				InstrumentCalls int64 `json:"instrument_calls"`
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatal(err)
			}
			if v.StorageCalls != v.InstrumentCalls {
				mismatches++
				example = line
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of 40 runs logged storage_calls != instrument_calls; e.g.:\n%s", mismatches, example)
	}
}

// TestSamplerWaitsForQueueCreation: the sampler's first sample waits for
// the work queue's creation, so a fresh deployment does not start with a
// sample failure (a warning, and a sample-failure alert). The creation is
// merely slow here (held until the sampler has called, or 2 s).
func TestSamplerWaitsForQueueCreation(t *testing.T) {
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvAccount, "")
	t.Setenv(cli.EnvSASToken, "")
	sampled := make(chan struct{})
	var once sync.Once
	store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		switch {
		case c.Op == instrument.OpApproximateCount && c.Name == "fresh":
			once.Do(func() { close(sampled) })
		case c.Op == instrument.OpCreateQueue && c.Name == "fresh":
			select { // a create that takes a moment, as over the network
			case <-sampled:
			case <-time.After(2 * time.Second):
			}
		}
		return nil
	}})
	logs := &releaseOnDrained{release: make(chan struct{})}
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: logs, Connect: func() (storeadapter.Store, error) { return store, nil }}
	if err := m.ParseFlags([]string{"-queue", "fresh", "-drain", "-log-format", "json", "-http", "127.0.0.1:0", "-idle-max", "100ms"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "could not sample the queues") {
		t.Errorf("the first sample ran before the work queue was created and failed:\n%s", logs.String())
	}
}

// TestPrintConfigAccountNotRepeated: a key pasted into
// AZURE_STORAGE_ACCOUNT by mistake is not repeated by -print-config, as
// Connect does not repeat it.
func TestPrintConfigAccountNotRepeated(t *testing.T) {
	const pastedKey = "RkFLRS1BQ0NPVU5ULUtFWS0wMTIzNDU2Nzg5LWRvLW5vdC1wcmludA=="
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvSASToken, "")
	t.Setenv(cli.EnvAccount, pastedKey)
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut}
	if err := m.ParseFlags([]string{"-print-config"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "RkFLRS1BQ0NPVU5U") {
		t.Errorf("-print-config repeats the value of AZURE_STORAGE_ACCOUNT, which is no account name:\n%s", out.String())
	}
}

// TestHTTPServerOutputRedacted: what the health server writes that comes
// from elsewhere goes through the worker's redactor: the /readyz body,
// which quotes the readiness check's storage error, and net/http's own
// error log (here a readiness check that panics), which would otherwise go
// to the log package's default logger, straight to the process's stderr.
func TestHTTPServerOutputRedacted(t *testing.T) {
	const sig = "KNOWNSIGNATURE0123456789abcdef"
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvAccount, "acct")
	t.Setenv(cli.EnvSASToken, "sv=2020-08-04&ss=bqt&sig="+sig)
	secretErr := errors.New("GET https://acct.queue.core.windows.net/ready?sv=1&sig=" + sig + " AccountKey=UNKNOWNKEY0123456789")
	var mode atomic.Int32 // 0: pass, 1: fail with secretErr, 2: panic with it
	store := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if c.Op != instrument.OpApproximateCount || c.Name != "ready" {
			return nil
		}
		switch mode.Load() {
		case 1:
			return secretErr
		case 2:
			panic(secretErr.Error())
		}
		return nil
	}})
	logs := &releaseOnDrained{release: make(chan struct{})}
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: logs, Connect: func() (storeadapter.Store, error) { return store, nil }}
	if err := m.ParseFlags([]string{"-queue", "ready", "-log-format", "json", "-http", "127.0.0.1:0", "-idle-max", "100ms", "-metrics-sample", "1h"}); err != nil {
		t.Fatal(err)
	}
	addr, stop := serveWorker(t, m, logs)
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error() // the panic closes the connection
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	mode.Store(2) // a panic leaves nothing cached: the next request checks again
	get()
	mode.Store(1)
	code, body := get()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, cli.Redacted) || strings.Contains(body, sig) || strings.Contains(body, "UNKNOWNKEY") {
		t.Errorf("/readyz: %d %q; want 503 with the error's credentials shown as %s", code, body, cli.Redacted)
	}
	out := logs.String()
	if !strings.Contains(out, "http: panic serving") {
		t.Errorf("net/http's error log did not reach the worker's log:\n%s", out)
	}
	if strings.Contains(out, sig) || strings.Contains(out, "UNKNOWNKEY") {
		t.Errorf("the worker's log holds a credential:\n%s", out)
	}
}

// serveWorker runs m (its flags parsed, with -http and -log-format json)
// until stop, and returns the address its server logged (10 s deadline)
// and stop, which ends the run and returns its error.
func serveWorker(t *testing.T, m *Main, logs interface{ String() string }) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the worker logged no listening address:\n%s", logs.String())
		}
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var v struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &v) == nil && v.Msg == "serving health and metrics" {
				addr = v.Addr
			}
		}
	}
	return addr, func() error {
		cancel()
		return <-ran
	}
}
