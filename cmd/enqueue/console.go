package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/console"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// runConsole serves the operators' web console until interrupted.
func (m *Main) runConsole(ctx context.Context, args []string) error {
	var (
		c                common
		listen, tokenEnv string
		queues, cfgPath  string
		allow            bool
		every            time.Duration
		metrics, exports listFlag
	)
	fs := m.newFlagSet("console", "console [-listen 127.0.0.1:8080] [-allow-actions] [-auth-token-env VAR] [-metrics URL]... [flags]",
		"Serves the operators' web console with this command's credentials until interrupted: the queues with their\n"+
			"counts and oldest message, the poisoned messages by group with each record's envelope, attempts and\n"+
			"requeue history, the checkpoints of long jobs, the declared indexes (checked on demand) and the export\n"+
			"manifests (verified on demand). It changes nothing unless -allow-actions, which offers requeue, delete\n"+
			"and purge, each shown as a dry run first and logged on stderr with who asked. It listens on loopback;\n"+
			"any other address needs -auth-token-env, the variable holding the token every request must carry\n"+
			"(a bearer header, or the login form's cookie). docs/console.md shows the pages.", &c)
	fs.StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fs.BoolVar(&allow, "allow-actions", false, "offer requeue, delete and purge (default: read-only)")
	fs.StringVar(&tokenEnv, "auth-token-env", "", "environment variable holding the token requests must carry; required unless -listen is loopback")
	fs.StringVar(&queues, "queues", "", "work queues to show, comma-separated (default: -queue)")
	fs.Var(&metrics, "metrics", "a worker's metrics URL (http://host:8080/metrics) for the throughput charts; repeat for each worker")
	cli.DurationVar(fs, &every, "metrics-every", 30*time.Second, "how often to read -metrics (at least 1s)")
	fs.Var(&exports, "exports", "container/prefix of exports the exports page lists first; repeatable")
	fs.StringVar(&cfgPath, "config", os.Getenv(cli.EnvConfig), "the worker's config file: its declared indexes and checkpoint tables (env "+cli.EnvConfig+"); optional")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	cfg := console.Config{Queues: []string{c.queue}, AllowActions: allow, Redact: m.redact, Clock: m.Clock, Operator: operator()}
	if queues != "" {
		cfg.Queues = strings.Split(queues, ",")
	}
	for _, q := range cfg.Queues {
		if err := storeadapter.ValidateQueueName(q); err != nil {
			return usagef("-queues: %v", err)
		}
	}
	for _, u := range metrics {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return usagef("-metrics: %q is not an http:// or https:// URL", u)
		}
		cfg.Metrics = append(cfg.Metrics, console.URLSource(u, nil))
	}
	if every < time.Second {
		return usagef("-metrics-every: must be at least 1s, got %v", every)
	}
	cfg.Exports, cfg.SampleEvery = exports, every
	if cfgPath != "" {
		var f configFile
		if err := cli.ReadConfigFile(cfgPath, &f); err != nil {
			return &usageError{err: err}
		}
		if err := f.Validate(); err != nil {
			return usagef("-config %s: %v", cfgPath, err)
		}
		cfg.CheckpointTables, cfg.RangeCheckpointTable = f.CheckpointTables(), f.Archive.CheckpointTable
		if len(f.Index.Tables) > 0 {
			cfg.Indexes = &f.Index
		}
	}
	loopback, err := cli.Loopback(listen)
	if err != nil {
		return usagef("-listen: %v", err)
	}
	if tokenEnv != "" {
		if cfg.Token = os.Getenv(tokenEnv); cfg.Token == "" {
			return usagef("-auth-token-env: $%s is empty or not set", tokenEnv)
		}
		if len(cfg.Token) < console.MinTokenLength {
			return usagef("-auth-token-env: $%s holds %d characters, fewer than %d: use a long random token", tokenEnv, len(cfg.Token), console.MinTokenLength)
		}
		m.redactor.Add(cfg.Token)
	} else if !loopback {
		return usagef("-listen %s: not a loopback address, so requests must carry a token: give -auth-token-env VAR", listen)
	}
	log, err := cli.NewLogger(m.Stderr, "text", "info")
	if err != nil {
		return err
	}
	cfg.Log = log
	if cfg.Store, err = m.connect(&c); err != nil {
		return err
	}
	cfg.Inspector = func(q string) (*poison.Inspector, error) { return cli.PoisonInspector(cfg.Store, q, m.Clock) }
	con, err := console.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usagef("-listen: %v", err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	mode := "read-only"
	if allow {
		mode = "actions enabled"
	}
	auth := "no token (loopback)"
	if cfg.Token != "" {
		auth = "token from $" + tokenEnv + " required"
	}
	fmt.Fprintf(m.Stderr, "console on http://%s/ (%s; %s; queues %s); Ctrl-C stops it\n", ln.Addr(), mode, auth, strings.Join(cfg.Queues, ", "))
	go func() { _ = con.Run(ctx) }()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	con.Close(taskGrace)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// taskGrace is how long a stopping console lets a running action finish
// before it cancels it: a requeue or purge of thousands ends within it.
const taskGrace = 30 * time.Second

// operator names who runs the console for the action log: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return name + "@" + cli.Host()
}
