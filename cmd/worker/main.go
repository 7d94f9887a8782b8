package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/console"
	"github.com/tablekeeper/tablekeeper/cmd/internal/stopsignal"
	"github.com/tablekeeper/tablekeeper/cmd/internal/telemetry"
	"github.com/tablekeeper/tablekeeper/internal/version"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// Exit statuses.
const (
	exitOK     = 0 // stopped normally (drained, limits reached, or a signal)
	exitFailed = 1 // a broken configuration or storage outage, or forced by a second signal
	exitUsage  = 2 // bad flags
)

func main() {
	m := NewMain()
	// Caught since the process started (stopsignal's init), not from
	// here on: package initialisation takes milliseconds, and a SIGTERM
	// in that window must stop the worker cleanly (exit 0), not kill it.
	m.Signals = stopsignal.C
	os.Exit(m.Exec(context.Background(), os.Args[1:]))
}

// Exec parses args, runs the worker and returns the exit status: 0 when
// it stopped normally (or -h and -version), 2 for a usage error (a bad
// flag or flag value, a -config file that cannot be read or breaks a rule:
// the error and a one-line hint, no flag list), 1 when Run failed.
func (m *Main) Exec(ctx context.Context, args []string) int {
	if err := m.ParseFlags(args); err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, ErrVersion) {
			return exitOK
		}
		fmt.Fprintf(m.Stderr, "worker: %v\nRun 'worker -h' for usage.\n", err)
		return exitUsage
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(m.Stderr, "worker:", err)
		return exitFailed
	}
	return exitOK
}

// Main is the worker program; tests build one and call Run.
type Main struct {
	Account    cli.Account
	Queue      string
	ConfigPath string
	LogFormat  string
	LogLevel   string
	// HTTP is the address of the health and metrics server ("" for none).
	HTTP string
	// MetricsSample is the interval of the queue gauges' sampler.
	MetricsSample time.Duration
	// Console mounts the read-only operators' console at /console/ on the
	// HTTP server; ConsoleTokenEnv names the variable holding the token
	// its requests must carry (required unless HTTP is loopback).
	Console         bool
	ConsoleTokenEnv string
	// PrintConfig prints the effective configuration instead of running.
	PrintConfig bool
	// PrintVersion (-version) prints the build's version and exits 0.
	PrintVersion bool
	Runner       runner.Config
	// Kinds holds each job kind's settings (the config file's sections).
	Kinds catalog.Config
	// Accounts are the other storage accounts jobs may name (the config
	// file's "accounts" section), connected on first use.
	Accounts cli.Accounts

	Stdout, Stderr io.Writer
	// Signals delivers stop requests (SIGINT, SIGTERM): the first stops
	// the worker gracefully, the second ends the process at once through
	// Exit. nil: only Run's context stops it.
	Signals <-chan os.Signal
	// Exit ends the process on a second signal; nil means os.Exit.
	Exit func(code int)
	// Connect returns the store to work on; nil connects to the storage
	// account the flags and environment describe.
	Connect func() (storeadapter.Store, error)
	// ConnectAccount returns the store of another account by its name;
	// nil connects the Accounts section's entries on first use.
	ConnectAccount func(name string) (storeadapter.Store, error)

	fs *flag.FlagSet
	// redactor scrubs the account's credentials from everything written
	// to Stdout and Stderr (see redact).
	redactor *cli.Redactor
	// fromFile maps the flags whose values came from the -config file to
	// the file's keys, for errors (see setting).
	fromFile map[string]string
}

// NewMain returns a Main writing to the process's stdout and stderr.
func NewMain() *Main { return &Main{Stdout: os.Stdout, Stderr: os.Stderr} }

// usageHead is the start of worker -h; the flags follow.
const usageHead = `worker runs tablekeeper's queue worker: it receives operations from the work queue, keeps each
message hidden while its job runs, and deletes, retries or poisons it (see docs/cli.md, "worker").

usage: worker [flags]

  worker -queue orders                  run until SIGTERM/SIGINT (a second signal forces the exit)
  worker -queue orders -drain           run to completion: exit once the queue is drained (container jobs)

The storage account comes from one of: -connection-string or $AZURE_STORAGE_CONNECTION_STRING (account
key, SAS, or UseDevelopmentStorage=true); -account / $AZURE_STORAGE_ACCOUNT alone, with
DefaultAzureCredential (managed identity, workload identity, az login); or -account with -sas-token /
$AZURE_STORAGE_SAS_TOKEN. Prefer the variables for secrets: a flag shows in ps. Credentials are never printed.
Flags override the environment, which overrides the -config file.

Exit status: 0 stopped normally (drained, a limit reached, or a signal), 1 credentials that are missing,
conflicting or refused, a storage outage (receives failing for -receive-outage), or a second signal,
2 a usage error: a bad flag or flag value, or a -config file that cannot be read or breaks a rule.

flags:
`

// ErrVersion is returned by ParseFlags after -version printed the build's
// version to Stdout: the program exits 0 without running.
var ErrVersion = errors.New("version printed")

// ParseFlags reads flags, then fills what they and the environment left
// unset from the -config file (see fileConfig), and checks the result. -h prints the help to
// Stdout and returns flag.ErrHelp; every other error names the flag and the
// rule, and is a usage error (exit status 2).
func (m *Main) ParseFlags(args []string) error {
	defer m.redact() // the flags may hold credentials
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; -h prints to Stdout below
	m.fs = fs
	m.Account.RegisterFlags(fs)
	fs.StringVar(&m.Queue, "queue", cli.QueueDefault(), "work queue name; the poison queue is <queue>-poison (env "+cli.EnvQueue+")")
	fs.StringVar(&m.Kinds.Archive.CheckpointTable, "checkpoint-table", jobs.DefaultCheckpointTable, "table that keeps range-scan checkpoints")
	fs.StringVar(&m.ConfigPath, "config", os.Getenv(cli.EnvConfig), "JSON config file: a \"runner\" section and one section per job kind (see docs/config.md; flags and environment win; env "+cli.EnvConfig+")")
	fs.BoolVar(&m.PrintConfig, "print-config", false, "print the effective configuration as JSON (secrets redacted) and exit")
	fs.BoolVar(&m.PrintVersion, "version", false, "print the version, commit and build date and exit")
	fs.StringVar(&m.LogFormat, "log-format", "auto", "auto (coloured text on a terminal, JSON otherwise; NO_COLOR turns colour off), text or json")
	fs.StringVar(&m.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&m.HTTP, "http", "", "serve /healthz, /readyz and /metrics on this address, such as :8080 (default: no server)")
	fs.BoolVar(&m.Console, "console", false, "with -http, serve the read-only operators' console at /console/ (see docs/console.md)")
	fs.StringVar(&m.ConsoleTokenEnv, "console-token-env", "", "with -console, the environment variable holding the token its requests must carry; required unless -http is a loopback address")
	durationVar(fs, &m.MetricsSample, "metrics-sample", telemetry.DefaultSampleInterval, "with -http, how often to sample queue depth and the oldest message's age (at least 1s; 3 storage calls each)")
	r := &m.Runner
	fs.IntVar(&r.Concurrency, "concurrency", runner.DefaultConcurrency, fmt.Sprintf("messages handled at once (1-%d)", runner.MaxConcurrency))
	fs.IntVar(&r.BatchSize, "batch", runner.DefaultBatchSize, fmt.Sprintf("messages asked for per receive (1-%d)", storeadapter.MaxReceiveCount))
	durationVar(fs, &r.Visibility, "visibility", runner.DefaultVisibility, "lease per message, renewed at half its length (2s-168h)")
	fs.Int64Var(&r.MaxDequeueCount, "max-dequeue-count", runner.DefaultMaxDequeueCount, fmt.Sprintf("deliveries before a message is poisoned (1-%d)", runner.MaxMaxDequeueCount))
	durationVar(fs, &r.RetryBase, "retry-base", runner.DefaultRetryBase, "retry delay base z: rand(0.8z,1.2z)*(2^x-1) after delivery x")
	durationVar(fs, &r.RetryMax, "retry-max", runner.DefaultRetryMax, "longest retry delay")
	durationVar(fs, &r.IdleMax, "idle-max", runner.DefaultIdleMax, "longest wait between polls of an empty queue")
	fs.BoolVar(&r.Drain, "drain", false, "run to completion: exit 0 once nothing is visible, nothing runs, and the queue's count is 0 or nothing arrived or came back for -drain-quiet")
	durationVar(fs, &r.DrainQuiet, "drain-quiet", 0, "with -drain, how long to wait for invisible messages the count still holds (0: twice -visibility)")
	fs.IntVar(&r.MaxMessages, "max-messages", 0, "exit after this many messages (0: no limit)")
	durationVar(fs, &r.MaxDuration, "max-duration", 0, "exit after this long (0: no limit)")
	durationVar(fs, &r.ShutdownGrace, "shutdown-grace", runner.DefaultShutdownGrace, "time running jobs get to finish after SIGTERM")
	durationVar(fs, &r.OutboxHold, "outbox-hold", runner.DefaultOutboxHold, "how long the fence of a job whose transaction never committed stays after its window (1s-24h)")
	durationVar(fs, &r.ReceiveOutage, "receive-outage", runner.DefaultReceiveOutage, "exit 1 once storage has failed every receive for this long (counted from the start when the work queue could not be created either)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(m.Stdout, usageHead)
			fs.SetOutput(m.Stdout)
			fs.PrintDefaults()
			return err
		}
		return cli.FlagError(err, fs)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	if m.PrintVersion {
		// Before the config file and the checks: -version answers even
		// where the rest of the configuration is broken.
		fmt.Fprintln(m.Stdout, version.String("worker"))
		return ErrVersion
	}
	if m.ConfigPath != "" {
		if err := m.applyConfig(); err != nil {
			return err
		}
	}
	if err := m.checkFlags(); err != nil {
		return err
	}
	if err := m.Accounts.Validate(); err != nil {
		return fmt.Errorf("-config %s: %w", m.ConfigPath, err)
	}
	return m.Kinds.Validate()
}

// checkFlags refuses values the runner would reject or silently replace
// (it reads 0 as "the default"), naming the flag and its rule, and values
// that are not valid UTF-8.
func (m *Main) checkFlags() error {
	var bad error
	m.fs.VisitAll(func(f *flag.Flag) {
		if bad == nil && !utf8.ValidString(f.Value.String()) {
			bad = fmt.Errorf("-%s: the value is not valid UTF-8", f.Name)
		}
	})
	r := &m.Runner
	switch {
	case bad != nil:
		return bad
	case r.Concurrency < 1 || r.Concurrency > runner.MaxConcurrency:
		return fmt.Errorf("%s: must be 1-%d, got %d", m.setting("concurrency"), runner.MaxConcurrency, r.Concurrency)
	case r.BatchSize < 1 || r.BatchSize > storeadapter.MaxReceiveCount:
		return fmt.Errorf("%s: must be 1-%d (Azure's most per receive), got %d", m.setting("batch"), storeadapter.MaxReceiveCount, r.BatchSize)
	case r.Visibility < runner.MinVisibility || r.Visibility > storeadapter.MaxVisibility:
		return fmt.Errorf("%s: must be %v-%v, got %v", m.setting("visibility"), runner.MinVisibility, storeadapter.MaxVisibility, r.Visibility)
	case r.MaxDequeueCount < 1 || r.MaxDequeueCount > runner.MaxMaxDequeueCount:
		return fmt.Errorf("%s: must be 1-%d, got %d", m.setting("max-dequeue-count"), runner.MaxMaxDequeueCount, r.MaxDequeueCount)
	case r.MaxMessages < 0:
		return fmt.Errorf("%s: must be 0 (no limit) or more, got %d", m.setting("max-messages"), r.MaxMessages)
	case m.MetricsSample < time.Second:
		return fmt.Errorf("%s: must be at least 1s, got %v", m.setting("metrics-sample"), m.MetricsSample)
	case r.OutboxHold != 0 && (r.OutboxHold < time.Second || r.OutboxHold > 24*time.Hour):
		return fmt.Errorf("%s: must be 1s-24h, got %v", m.setting("outbox-hold"), r.OutboxHold)
	}
	if err := m.checkConsole(); err != nil {
		return err
	}
	if err := m.Account.CheckFlags(); err != nil {
		return err
	}
	if err := storeadapter.ValidateQueueName(m.Queue); err != nil {
		return fmt.Errorf("%s: %w", m.setting("queue"), err)
	}
	if _, err := cli.NewLogger(io.Discard, m.LogFormat, m.LogLevel); err != nil {
		return err
	}
	var err error
	m.fs.VisitAll(func(f *flag.Flag) {
		if d, ok := f.Value.(cli.Duration); ok && err == nil && *d.D < 0 {
			err = fmt.Errorf("%s: must not be negative, got %v", m.setting(f.Name), *d.D)
		}
	})
	return err
}

// durationVar defines a duration flag in the commands' one syntax (Go's,
// or days: see cli.ParseDuration).
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	cli.DurationVar(fs, p, name, value, usage)
}

// Run runs the worker until ctx ends, a signal arrives on
// Signals, or, with -drain, the queue is drained. A failure is logged
// through the logger (JSON in containers) before Run returns it.
func (m *Main) Run(ctx context.Context) error {
	m.redact()
	log, err := cli.NewLogger(m.Stderr, m.LogFormat, m.LogLevel)
	if err != nil {
		return err
	}
	if err := m.run(ctx, log); err != nil {
		if m.Connect == nil {
			// A refused credential: say which form was in force and
			// what to check for it.
			err = m.Account.Explain(err)
		}
		log.ErrorContext(context.WithoutCancel(ctx), "worker failed", "err", err)
		return err
	}
	return nil
}

func (m *Main) run(ctx context.Context, log *slog.Logger) (err error) {
	if m.PrintConfig {
		return m.printConfig(m.Stdout)
	}
	var store storeadapter.Store
	if m.Connect != nil {
		store, err = m.Connect()
	} else {
		m.Account.Log = log
		store, err = m.Account.Connect()
	}
	if err != nil {
		return err
	}
	// Every storage call is counted twice, by the instrument's Counts and
	// by the metrics: the exit summary prints both, which must agree.
	met := telemetry.New(catalog.ArgsRegistry(nil).Kinds(), m.Runner.MaxDequeueCount)
	calls := &instrument.Counts{}
	store = instrument.Wrap(store, instrument.Options{Observers: []instrument.Observer{calls, met.Storage()}})
	cfg := m.Runner
	cfg.Observers = append(slices.Clip(cfg.Observers), met)
	accounts := m.ConnectAccount
	if accounts == nil && len(m.Accounts) > 0 {
		// Another account's calls are this worker's calls: counted alike.
		accounts = m.Accounts.Opener(&m.Account, func(s storeadapter.Store) storeadapter.Store {
			return instrument.Wrap(s, instrument.Options{Observers: []instrument.Observer{calls, met.Storage()}})
		})
	}
	r, err := cli.NewRunner(store, m.Queue, cfg, m.Kinds, log, catalog.WithAccounts(accounts))
	if err != nil {
		return err
	}
	stopServer := func() {}
	created := make(chan struct{}) // the work queue's creation was tried
	if m.HTTP != "" {
		stop, err := m.serve(ctx, log, met, r, store, created)
		if err != nil {
			return err
		}
		stopServer = sync.OnceFunc(stop)
		defer stopServer()
	}
	log.InfoContext(ctx, "worker starting", "version", version.Get().Version, "commit", version.Get().Commit, "queue", m.Queue, "concurrency", m.Runner.Concurrency, "visibility", m.Runner.Visibility, "drain", m.Runner.Drain)
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go m.watchSignals(log, r, cancel, stopped)

	// The creation gets at most half of -receive-outage, so that receives
	// get the rest: the outage is counted from here (see below).
	cctx, cancelCreate := context.WithTimeout(ctx, min(createTimeout, cmp.Or(m.Runner.ReceiveOutage, runner.DefaultReceiveOutage)/2))
	err = store.Queue(m.Queue).Create(cctx)
	cancelCreate()
	close(created)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// A signal during start-up: Run sees the cancelled context and
		// returns at once, so the summary says "shutdown" and the exit is 0.
	case storeadapter.IsTransient(err):
		// An outage from the start: the receive loop logs it, retries, and
		// gives up once -receive-outage has passed since start, not since
		// its own first failure.
		log.WarnContext(ctx, "could not create the work queue; receiving anyway", "queue", m.Queue, "err", err)
		r.StorageFailingSince(start)
	default:
		return fmt.Errorf("queue %s: %w", m.Queue, err)
	}
	err = r.Run(ctx)
	// The sampler and /readyz call storage too: stopped first, the
	// summary's metric totals and the instrument's are of the same calls.
	stopServer()
	s := r.Stats()
	attrs := []any{"reason", s.StopReason, "elapsed", time.Since(start).Round(time.Millisecond),
		"received", s.Received, "succeeded", s.Succeeded, "continued", s.Continued, "retried", s.Retried, "poisoned", s.Poisoned,
		"lease_lost", s.LeaseLost, "released", s.Released, "ack_failed", s.AckFailed, "abandoned", s.Abandoned, "receive_failures", s.ReceiveFailures}
	if s.StopReason == "drained" || s.StopReason == "drain incomplete" {
		attrs = append(attrs, "left_invisible", s.Left)
	}
	if t, gerr := met.Totals(); gerr == nil {
		attrs = append(attrs, t.Attrs()...)
	}
	tot := calls.Snapshot().Total()
	attrs = append(attrs, "instrument_calls", tot.Calls, "instrument_errors", tot.Errors-tot.Expected, "instrument_expected", tot.Expected)
	log.InfoContext(context.WithoutCancel(ctx), "worker stopped", attrs...)
	return err
}

// redact makes Stdout and Stderr scrub the account's credentials, those
// known (flags and environment) and those that look like one, from
// everything written to them: logs, errors, the summary. It may be called
// again once the flags are parsed, to learn their credentials.
func (m *Main) redact() {
	if m.redactor == nil {
		m.redactor = &cli.Redactor{}
	}
	m.redactor.Add(m.Account.Secrets()...)
	m.redactor.Add(m.Accounts.Secrets()...) // the other accounts' variables, read now
	if m.Stdout != nil {
		m.Stdout = m.redactor.Writer(m.Stdout)
	}
	if m.Stderr != nil {
		m.Stderr = m.redactor.Writer(m.Stderr)
	}
}

// serve starts the health and metrics server, and the queue sampler once
// created is closed (the work queue's creation was tried: a first sample
// before it would count a failure on every fresh deployment); the function
// returned stops both. The worker stops them when the runner has returned,
// before its summary line, which carries the final counters.
func (m *Main) serve(ctx context.Context, log *slog.Logger, met *telemetry.Metrics, r *runner.Runner, store storeadapter.Store, created <-chan struct{}) (func(), error) {
	srv, err := telemetry.Listen(m.HTTP, met)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.setting("http"), err)
	}
	work := store.Queue(m.Queue)
	srv.Alive = r.LastLoop
	// The loop's longest wait is IdleMax, its longest bounded call 30 s
	// (the work queue's creation at start, a drain's count; a receive is
	// bounded at 10 s): twice the one plus the other and a margin is a live
	// loop that is merely idle or waiting on storage.
	srv.AliveWindow = 2*cmp.Or(m.Runner.IdleMax, runner.DefaultIdleMax) + 40*time.Second
	srv.Ready = telemetry.QueueReady(work)
	// What the server writes on its own goes through the redactor too:
	// /readyz quotes a storage error, and net/http logs a handler's panic
	// (its value may quote anything) to the log package's default logger,
	// straight to the process's stderr, unless told otherwise.
	srv.Redact = m.redactor.String
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelError)
	// The sampler and the console's reading of the metrics run until the
	// server stops, after the runner.
	sctx, stopSampler := context.WithCancel(context.WithoutCancel(ctx))
	var con *console.Console
	if m.Console {
		if con, err = m.mountConsole(sctx, srv, met, store); err != nil {
			stopSampler()
			return nil, err
		}
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(); err != nil {
			log.Error("health and metrics server failed", "err", err)
		}
	}()
	srv.LogListening(log)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		select {
		case <-created:
		case <-sctx.Done():
			return
		}
		(&telemetry.Sampler{Metrics: met, Work: work, Poison: store.Queue(poison.QueueName(m.Queue)), Interval: m.MetricsSample, Log: log}).Run(sctx)
	}()
	return func() {
		stopSampler()
		<-sampled
		if err := srv.Shutdown(); err != nil {
			log.Warn("health and metrics server did not shut down cleanly", "err", err)
		}
		<-served
		if con != nil {
			con.Close(0) // its checks read storage: they end before the exit line counts the calls
		}
	}, nil
}

// checkConsole refuses a console without the HTTP server, and one
// reachable from other hosts without a token.
func (m *Main) checkConsole() error {
	if !m.Console {
		if m.ConsoleTokenEnv != "" {
			return errors.New("-console-token-env: needs -console")
		}
		return nil
	}
	if m.HTTP == "" {
		return errors.New("-console: needs -http (the console is served on the health and metrics server)")
	}
	loopback, err := cli.Loopback(m.HTTP)
	if err != nil {
		return fmt.Errorf("%s: %w", m.setting("http"), err)
	}
	switch {
	case m.ConsoleTokenEnv != "" && os.Getenv(m.ConsoleTokenEnv) == "":
		return fmt.Errorf("-console-token-env: $%s is empty or not set", m.ConsoleTokenEnv)
	case m.ConsoleTokenEnv != "" && len(os.Getenv(m.ConsoleTokenEnv)) < console.MinTokenLength:
		return fmt.Errorf("-console-token-env: $%s holds fewer than %d characters: use a long random token", m.ConsoleTokenEnv, console.MinTokenLength)
	case m.ConsoleTokenEnv == "" && !loopback:
		return fmt.Errorf("-console: %s %s is not a loopback address, so console requests must carry a token: give -console-token-env VAR", m.setting("http"), m.HTTP)
	}
	return nil
}

// mountConsole serves the read-only console at /console/ on srv: this
// worker's queue, its declared indexes and checkpoint tables, and its own
// metrics for the charts, until ctx ends.
func (m *Main) mountConsole(ctx context.Context, srv *telemetry.Server, met *telemetry.Metrics, store storeadapter.Store) (*console.Console, error) {
	cfg := console.Config{Store: store, Queues: []string{m.Queue}, CheckpointTables: m.Kinds.CheckpointTables(),
		RangeCheckpointTable: m.Kinds.Archive.CheckpointTable,
		Metrics:              []console.Source{{Name: "this worker", Gatherer: met.Registry}}, Base: "/console/",
		Operator: cli.Host(), Redact: m.redactor.String, Clock: m.Runner.Clock,
		Inspector: func(q string) (*poison.Inspector, error) { return cli.PoisonInspector(store, q, m.Runner.Clock) }}
	if m.ConsoleTokenEnv != "" {
		cfg.Token = os.Getenv(m.ConsoleTokenEnv)
		m.redactor.Add(cfg.Token)
	}
	if len(m.Kinds.Index.Tables) > 0 {
		cfg.Indexes = &m.Kinds.Index
	}
	con, err := console.New(cfg)
	if err != nil {
		return nil, err
	}
	srv.Handle("/console/", http.StripPrefix("/console", con))
	go func() { _ = con.Run(ctx) }()
	return con, nil
}

// createTimeout bounds the creation of the work queue at start-up.
const createTimeout = 30 * time.Second

// watchSignals stops the worker on the first signal and ends the process
// on the second, until stopped is closed.
func (m *Main) watchSignals(log *slog.Logger, r *runner.Runner, stop context.CancelFunc, stopped <-chan struct{}) {
	if m.Signals == nil {
		return
	}
	select {
	case sig := <-m.Signals:
		log.Warn(fmt.Sprintf("stopping; waiting up to %v for %d jobs; press Ctrl-C again to force", m.Runner.ShutdownGrace, r.Running()),
			"signal", sig.String(), "running", r.Running(), "grace", m.Runner.ShutdownGrace)
		stop()
	case <-stopped:
		return
	}
	select {
	case sig := <-m.Signals:
		log.Error("second signal; exiting now: running jobs are abandoned and their messages reappear when their leases expire",
			"signal", sig.String(), "running", r.Running())
		exit := m.Exit
		if exit == nil {
			exit = os.Exit
		}
		exit(exitFailed)
	case <-stopped:
	}
}
