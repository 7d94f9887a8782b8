package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ReadyCache is how long a readiness result is reused: probes and scrapes
// from several places cost at most one check per ReadyCache.
const ReadyCache = 2 * time.Second

// readyTimeout bounds one readiness check.
const readyTimeout = 5 * time.Second

// Server serves /healthz, /readyz and /metrics. Create it with Listen.
type Server struct {
	// Alive returns when the worker's receive loop last showed it is alive
	// (runner.Runner.LastLoop); zero before it started.
	Alive func() time.Time
	// AliveWindow is how old Alive may be for /healthz to answer 200: longer
	// than the loop's longest wait (IdleMax) plus a receive's bound.
	AliveWindow time.Duration
	// Ready checks that storage is reachable and the work queue exists (see
	// QueueReady); its result is cached for ReadyCache.
	Ready func(ctx context.Context) error
	// Clock is the clock Alive's times are on; nil is the wall clock.
	Clock clock.Clock
	// Redact, if set, scrubs credentials from every text a response
	// carries that did not come from the server itself (the /readyz
	// body quotes the readiness check's error).
	Redact func(string) string
	// ErrorLog, if set, receives net/http's own errors (a handler's panic,
	// a failed accept) and the metrics handler's; nil is the log package's
	// default logger, which writes to the process's stderr directly, past
	// any redaction. Set it before Serve.
	ErrorLog *log.Logger

	metrics *Metrics
	mux     *http.ServeMux
	ln      net.Listener
	srv     *http.Server
	started time.Time

	mu        sync.Mutex // held during a readiness check: one at a time
	readyAt   time.Time
	readyErr  error
	readyDone bool
}

// Listen binds addr (":8080", "127.0.0.1:0", …) for m's endpoints. Set
// Alive, AliveWindow and Ready, then call Serve. Its error is net.Listen's.
func Listen(addr string, m *Metrics) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err // the caller names the setting
	}
	mux := http.NewServeMux()
	s := &Server{metrics: m, ln: ln, mux: mux}
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, ErrorLog: errorLog{s}}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// Handle serves h under pattern beside the health and metrics endpoints
// (the worker mounts the read-only console at /console/). Call it before
// Serve.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Addr is the bound address (the port chosen for ":0").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil then.
func (s *Server) Serve() error {
	s.started = s.now()
	s.srv.ErrorLog = s.ErrorLog
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting requests and waits up to 5 s for those in
// flight (a scrape, a probe): the worker calls it after its runner
// returned, so the last scrape sees the final counters.
func (s *Server) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

func (s *Server) now() time.Time { return clock.Or(s.Clock).Now() }

// healthz answers 200 while the receive loop is alive: it completed a
// receive or a wait within AliveWindow (counted from the server's start
// until the loop first runs, so a slow start-up is not a failure), 503
// naming how long ago otherwise.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	last := s.Alive()
	since := "the receive loop last ran"
	if last.IsZero() {
		last, since = s.started, "the server started and the receive loop has not run yet"
	}
	if age := s.now().Sub(last); age > s.AliveWindow {
		http.Error(w, fmt.Sprintf("unhealthy: %s %v ago (more than %v)", since, age.Round(time.Millisecond), s.AliveWindow), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 when the last readiness check (at most ReadyCache
// old) passed, 503 with its error otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.ready(r.Context()); err != nil {
		msg := err.Error()
		if s.Redact != nil {
			msg = s.Redact(msg)
		}
		http.Error(w, "not ready: "+msg, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// ready returns the cached readiness, checking again when it is older than
// ReadyCache; concurrent requests wait for one check.
func (s *Server) ready(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readyDone && s.now().Sub(s.readyAt) < ReadyCache {
		return s.readyErr
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	s.readyErr = s.Ready(cctx)
	s.readyAt, s.readyDone = s.now(), true
	return s.readyErr
}

// QueueReady returns a readiness check of the work queue: one approximate
// count, which needs storage reachable, the credential accepted and the
// queue present. The poison queue is not checked: the worker creates it
// on first use, so its absence is normal.
func QueueReady(work storeadapter.Queue) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := work.ApproximateCount(ctx)
		switch {
		case errors.Is(err, storeadapter.ErrNotFound):
			return fmt.Errorf("queue %s does not exist", work.Name())
		case err != nil:
			return fmt.Errorf("queue %s: %w", work.Name(), err)
		}
		return nil
	}
}

// LogListening logs the bound address, which tests and operators read
// when the port was chosen by the system.
func (s *Server) LogListening(log *slog.Logger) {
	log.Info("serving health and metrics", "addr", s.Addr(), "paths", "/healthz /readyz /metrics")
}

// errorLog is the metrics handler's promhttp.Logger: the server's
// ErrorLog, or nothing while it is unset.
type errorLog struct{ s *Server }

func (l errorLog) Println(v ...any) {
	if l.s.ErrorLog != nil {
		l.s.ErrorLog.Println(v...)
	}
}
