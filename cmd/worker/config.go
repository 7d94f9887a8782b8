package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"io"
	"os"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
)

// fileConfig is the -config file: a runner section and one section per
// job kind (the catalog's). Keys are exact and case-sensitive; an unknown
// key is an error naming it and its line:column. Secrets are not settings:
// the connection string stays in the environment, and so do those of the
// other accounts, whose entries name the variables.
type fileConfig struct {
	Runner runnerSection `json:"runner"`
	// Accounts are the other storage accounts jobs may name.
	Accounts cli.Accounts `json:"accounts"`
	catalog.Config
}

// runnerSection is the "runner" section: the worker's flags of the same
// meaning (which win over it, as the environment does). A zero or missing
// value leaves the flag's default.
type runnerSection struct {
	Queue           string        `json:"queue,omitempty"`
	Concurrency     int           `json:"concurrency,omitempty"`
	Batch           int           `json:"batch,omitempty"`
	Visibility      jobs.Duration `json:"visibility,omitempty"`
	MaxDequeueCount int64         `json:"maxDequeueCount,omitempty"`
	RetryBase       jobs.Duration `json:"retryBase,omitempty"`
	RetryMax        jobs.Duration `json:"retryMax,omitempty"`
	IdleMax         jobs.Duration `json:"idleMax,omitempty"`
	Drain           bool          `json:"drain,omitempty"`
	DrainQuiet      jobs.Duration `json:"drainQuiet,omitempty"`
	MaxMessages     int           `json:"maxMessages,omitempty"`
	MaxDuration     jobs.Duration `json:"maxDuration,omitempty"`
	ShutdownGrace   jobs.Duration `json:"shutdownGrace,omitempty"`
	ReceiveOutage   jobs.Duration `json:"receiveOutage,omitempty"`
	OutboxHold      jobs.Duration `json:"outboxHold,omitempty"`
	// HTTP and MetricsSample are the health and metrics server's address
	// and the queue sampler's interval (-http, -metrics-sample).
	HTTP          string        `json:"http,omitempty"`
	MetricsSample jobs.Duration `json:"metricsSample,omitempty"`
	// Console and ConsoleTokenEnv mount the read-only console on the HTTP
	// server (-console, -console-token-env).
	Console         bool   `json:"console,omitempty"`
	ConsoleTokenEnv string `json:"consoleTokenEnv,omitempty"`
}

// applyConfig reads the -config file strictly and sets every runner
// setting that neither a flag nor the environment set, and the kinds'
// sections (-checkpoint-table, when given, wins over archive.checkpointTable).
func (m *Main) applyConfig() error {
	var f fileConfig
	if err := cli.ReadConfigFile(m.ConfigPath, &f); err != nil {
		return err
	}
	set := map[string]bool{}
	m.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	set["queue"] = set["queue"] || os.Getenv(cli.EnvQueue) != ""
	s, r := f.Runner, &m.Runner
	m.fromFile = map[string]string{}
	fill(m, set, "queue", "runner.queue", &m.Queue, s.Queue)
	fill(m, set, "concurrency", "runner.concurrency", &r.Concurrency, s.Concurrency)
	fill(m, set, "batch", "runner.batch", &r.BatchSize, s.Batch)
	fill(m, set, "visibility", "runner.visibility", &r.Visibility, time.Duration(s.Visibility))
	fill(m, set, "max-dequeue-count", "runner.maxDequeueCount", &r.MaxDequeueCount, s.MaxDequeueCount)
	fill(m, set, "retry-base", "runner.retryBase", &r.RetryBase, time.Duration(s.RetryBase))
	fill(m, set, "retry-max", "runner.retryMax", &r.RetryMax, time.Duration(s.RetryMax))
	fill(m, set, "idle-max", "runner.idleMax", &r.IdleMax, time.Duration(s.IdleMax))
	fill(m, set, "drain", "runner.drain", &r.Drain, s.Drain)
	fill(m, set, "drain-quiet", "runner.drainQuiet", &r.DrainQuiet, time.Duration(s.DrainQuiet))
	fill(m, set, "max-messages", "runner.maxMessages", &r.MaxMessages, s.MaxMessages)
	fill(m, set, "max-duration", "runner.maxDuration", &r.MaxDuration, time.Duration(s.MaxDuration))
	fill(m, set, "shutdown-grace", "runner.shutdownGrace", &r.ShutdownGrace, time.Duration(s.ShutdownGrace))
	fill(m, set, "receive-outage", "runner.receiveOutage", &r.ReceiveOutage, time.Duration(s.ReceiveOutage))
	fill(m, set, "outbox-hold", "runner.outboxHold", &r.OutboxHold, time.Duration(s.OutboxHold))
	fill(m, set, "http", "runner.http", &m.HTTP, s.HTTP)
	fill(m, set, "metrics-sample", "runner.metricsSample", &m.MetricsSample, time.Duration(s.MetricsSample))
	fill(m, set, "console", "runner.console", &m.Console, s.Console)
	fill(m, set, "console-token-env", "runner.consoleTokenEnv", &m.ConsoleTokenEnv, s.ConsoleTokenEnv)
	checkpoints := m.Kinds.Archive.CheckpointTable // the flag's value or default
	m.Kinds, m.Accounts = f.Config, f.Accounts
	if set["checkpoint-table"] || m.Kinds.Archive.CheckpointTable == "" {
		m.Kinds.Archive.CheckpointTable = checkpoints
	}
	return nil
}

// fill sets *dst to the file's value v (at key) unless the flag name was
// set (on the command line or through the environment) or v is zero
// (missing), and remembers that the setting came from the file, so an
// error about it names the key (see setting).
func fill[T comparable](m *Main, set map[string]bool, name, key string, dst *T, v T) {
	var zero T
	if !set[name] && v != zero {
		*dst = v
		m.fromFile[name] = key
	}
}

// setting names where the value of the flag name came from, for an error
// about it: "-batch", or "-config FILE: runner.batch" when the file set it.
func (m *Main) setting(name string) string {
	if key, ok := m.fromFile[name]; ok {
		return "-config " + m.ConfigPath + ": " + key
	}
	return "-" + name
}

// redactedValue stands for a credential in -print-config's output.
const redactedValue = "(set; redacted)"

// printConfig writes the effective configuration as JSON: the runner
// settings after flags, environment and file, with the defaults filled in,
// and every kind's section, and which credential form is in force (or why
// none is). The connection string and SAS token are never printed, only
// whether they are set.
func (m *Main) printConfig(w io.Writer) error {
	r := m.Runner
	out := struct {
		Auth             string        `json:"auth"`
		ConnectionString string        `json:"connectionString,omitempty"`
		Account          string        `json:"account,omitempty"`
		SASToken         string        `json:"sasToken,omitempty"`
		Runner           runnerSection `json:"runner"`
		Accounts         cli.Accounts  `json:"accounts,omitempty"`
		catalog.Config
	}{
		Accounts: m.Accounts,
		Account:  m.Account.DisplayName(),
		Runner: runnerSection{Queue: m.Queue, Concurrency: r.Concurrency, Batch: r.BatchSize, Visibility: jobs.Duration(r.Visibility),
			MaxDequeueCount: r.MaxDequeueCount, RetryBase: jobs.Duration(r.RetryBase), RetryMax: jobs.Duration(r.RetryMax),
			IdleMax: jobs.Duration(r.IdleMax), Drain: r.Drain, DrainQuiet: jobs.Duration(cmp.Or(r.DrainQuiet, 2*r.Visibility)),
			MaxMessages: r.MaxMessages, MaxDuration: jobs.Duration(r.MaxDuration), ShutdownGrace: jobs.Duration(r.ShutdownGrace),
			ReceiveOutage: jobs.Duration(r.ReceiveOutage), OutboxHold: jobs.Duration(r.OutboxHold), HTTP: m.HTTP, MetricsSample: jobs.Duration(m.MetricsSample),
			Console: m.Console, ConsoleTokenEnv: m.ConsoleTokenEnv},
		Config: m.Kinds,
	}
	if cmp.Or(m.Account.ConnectionString, os.Getenv(cli.EnvConnectionString)) != "" {
		out.ConnectionString = redactedValue
	}
	if cmp.Or(m.Account.SASToken, os.Getenv(cli.EnvSASToken)) != "" {
		out.SASToken = redactedValue
	}
	if form, err := m.Account.Auth(); err != nil {
		out.Auth = "error: " + err.Error()
	} else {
		out.Auth = string(form)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
