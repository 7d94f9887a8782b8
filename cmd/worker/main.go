// Command worker runs tablekeeper's queue worker: it polls the work queue,
// keeps each message hidden while its job runs, and deletes, retries or
// poisons it. With -drain it runs to completion (for container jobs);
// with -demo it runs a whole sample job on the in-process store.
//
// Settings come from flags, which override environment variables
// (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT, TABLEKEEPER_QUEUE),
// which override the -config file. See the README for every flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// DefaultCheckpointTable holds range-scan checkpoints.
const DefaultCheckpointTable = "TablekeeperCheckpoints"

// Main is the worker program; tests build one and call Run.
type Main struct {
	Account         cli.Account
	Queue           string
	CheckpointTable string
	ConfigPath      string
	LogFormat       string
	LogLevel        string
	Demo            bool
	Runner          jobs.Config

	Stdout, Stderr io.Writer
	fs             *flag.FlagSet
}

// NewMain returns a Main writing to the process's stdout and stderr.
func NewMain() *Main { return &Main{Stdout: os.Stdout, Stderr: os.Stderr} }

// ParseFlags reads flags, then fills what they left unset from the -config
// file (a JSON object whose keys are flag names).
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	m.fs = fs
	m.Account.RegisterFlags(fs)
	fs.StringVar(&m.Queue, "queue", cli.QueueDefault(), "work queue name; the poison queue is <queue>-poison (env "+cli.EnvQueue+")")
	fs.StringVar(&m.CheckpointTable, "checkpoint-table", DefaultCheckpointTable, "table that keeps range-scan checkpoints")
	fs.StringVar(&m.ConfigPath, "config", "", "JSON file of settings: an object whose keys are these flags' names (flags and environment win)")
	fs.StringVar(&m.LogFormat, "log-format", "auto", "auto (coloured text on a terminal, JSON otherwise), text or json")
	fs.StringVar(&m.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&m.Demo, "demo", false, "run a sample archive job on the in-process store (no Azure) and print a summary")
	r := &m.Runner
	fs.IntVar(&r.Concurrency, "concurrency", jobs.DefaultConcurrency, "messages handled at once (1-1024)")
	fs.IntVar(&r.BatchSize, "batch", jobs.DefaultBatchSize, "messages asked for per receive (1-32)")
	fs.DurationVar(&r.Visibility, "visibility", jobs.DefaultVisibility, "lease per message, renewed at half its length (2s-168h)")
	fs.Int64Var(&r.MaxDequeueCount, "max-dequeue-count", jobs.DefaultMaxDequeueCount, "deliveries before a message is poisoned")
	fs.DurationVar(&r.RetryBase, "retry-base", jobs.DefaultRetryBase, "retry delay base z: rand(0.8z,1.2z)*(2^x-1) after delivery x")
	fs.DurationVar(&r.RetryMax, "retry-max", jobs.DefaultRetryMax, "longest retry delay")
	fs.DurationVar(&r.IdleMax, "idle-max", jobs.DefaultIdleMax, "longest wait between polls of an empty queue")
	fs.BoolVar(&r.Drain, "drain", false, "run to completion: exit 0 once the queue is empty (container jobs)")
	fs.IntVar(&r.MaxMessages, "max-messages", 0, "exit after this many messages (0: no limit)")
	fs.DurationVar(&r.MaxDuration, "max-duration", 0, "exit after this long (0: no limit)")
	fs.DurationVar(&r.ShutdownGrace, "shutdown-grace", jobs.DefaultShutdownGrace, "time running jobs get to finish after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	if m.ConfigPath != "" {
		return m.applyConfig()
	}
	return nil
}

// applyConfig sets every flag the command line did not set from the file.
func (m *Main) applyConfig() error {
	data, err := os.ReadFile(m.ConfigPath)
	if err != nil {
		return fmt.Errorf("-config: %w", err)
	}
	var settings map[string]any
	if err := json.Unmarshal(data, &settings); err != nil {
		return fmt.Errorf("-config %s: not a JSON object: %w", m.ConfigPath, err)
	}
	set := map[string]bool{}
	m.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range settings {
		f := m.fs.Lookup(name)
		if f == nil || name == "config" || name == "connection-string" {
			return fmt.Errorf("-config %s: %q is not a setting (keys are flag names; secrets stay in the environment)", m.ConfigPath, name)
		}
		if set[name] || (name == "queue" && os.Getenv(cli.EnvQueue) != "") || (name == "account" && os.Getenv(cli.EnvAccount) != "") {
			continue
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case float64:
			s = strconv.FormatFloat(x, 'f', -1, 64)
		case bool:
			s = strconv.FormatBool(x)
		default:
			return fmt.Errorf("-config %s: %q: must be a string, number or boolean", m.ConfigPath, name)
		}
		if err := f.Value.Set(s); err != nil {
			return fmt.Errorf("-config %s: %q: %w", m.ConfigPath, name, err)
		}
	}
	return nil
}

// Run runs the worker (or the demo) until ctx ends or, with -drain, the
// queue is empty.
func (m *Main) Run(ctx context.Context) error {
	log, err := cli.NewLogger(m.Stderr, m.LogFormat, m.LogLevel)
	if err != nil {
		return err
	}
	if m.Demo {
		return runDemo(ctx, m.Stdout, log, m.Runner)
	}
	store, err := m.Account.Connect()
	if err != nil {
		return err
	}
	r, err := newRunner(store, m.Queue, m.CheckpointTable, m.Runner, log)
	if err != nil {
		return err
	}
	if err := store.Queue(m.Queue).Create(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("queue %s: %w", m.Queue, err)
	}
	log.InfoContext(ctx, "worker starting", "queue", m.Queue, "concurrency", m.Runner.Concurrency, "visibility", m.Runner.Visibility, "drain", m.Runner.Drain)
	err = r.Run(ctx)
	s := r.Stats()
	log.InfoContext(context.WithoutCancel(ctx), "worker stopped", "received", s.Received, "succeeded", s.Succeeded, "retried", s.Retried,
		"poisoned", s.Poisoned, "lease_lost", s.LeaseLost, "released", s.Released)
	return err
}

// newRunner wires the job kinds, the poison mover and the runner to a store.
func newRunner(store storeadapter.Store, queue, checkpointTable string, cfg jobs.Config, log *slog.Logger) (*jobs.Runner, error) {
	if err := storeadapter.ValidateQueueName(queue); err != nil {
		return nil, fmt.Errorf("-queue: %w", err)
	}
	if err := storeadapter.ValidateTableName(checkpointTable); err != nil {
		return nil, fmt.Errorf("-checkpoint-table: %w", err)
	}
	archiver := &jobs.Archiver{Store: store, Checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: checkpointTable}}
	cfg.Queue = store.Queue(queue)
	cfg.Registry = jobs.NewRegistry(store.Container, archiver.Kind())
	cfg.Poison = cli.Poison(store, queue, nil)
	cfg.Logger = log
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	return jobs.NewRunner(cfg)
}
