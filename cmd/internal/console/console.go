package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/internal/text"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// templates are the pages; static holds what the browser fetches besides
// them (the style sheet), served without the token.
var (
	//go:embed assets/*.html
	templates embed.FS
	//go:embed static/style.css
	static []byte
)

// Config is what a Console shows and may do.
type Config struct {
	// Store is the storage account. Required.
	Store storeadapter.Store
	// Queues are the work queues shown; the first is the default. At least
	// one is required.
	Queues []string
	// Inspector returns the poison inspector of a work queue (the
	// commands' cli.PoisonInspector). Required.
	Inspector func(queue string) (*poison.Inspector, error)
	// Indexes declares the indexes the Indexes page checks; nil when no
	// worker config was given.
	Indexes *indexes.Config
	// CheckpointTables are where the kinds keep their checkpoints (see
	// catalog.Config.CheckpointTables); nil means
	// jobs.DefaultCheckpointTable.
	CheckpointTables []string
	// RangeCheckpointTable is where the archive keeps the positions of
	// range moves (its checkpointTable): a purge removes the checkpoints
	// of the operations whose records it removes. "" means
	// jobs.DefaultCheckpointTable.
	RangeCheckpointTable string
	// Exports are "container/prefix" targets whose export manifests the
	// Exports page lists by default; any other can be asked for.
	Exports []string
	// Metrics are the workers whose counters make the Overview's charts.
	Metrics []Source
	// SampleEvery is how often Run reads Metrics; 0 means 30 s.
	SampleEvery time.Duration
	// AllowActions offers requeue, delete and purge. Off, the console
	// changes nothing.
	AllowActions bool
	// Token, when not "", is required of every request: as
	// "Authorization: Bearer <token>" or through the login form's cookie.
	Token string
	// Base is the path the console is mounted at, ending in "/"; ""
	// means "/". The mounter strips it from requests (http.StripPrefix
	// with Base minus its last slash).
	Base string
	// Operator names who runs the console (user@host): it is logged with
	// every action.
	Operator string
	// Log receives one line per action; nil discards them.
	Log *slog.Logger
	// Redact scrubs credentials from every error text shown; nil leaves
	// texts alone.
	Redact func(string) string
	// Clock tells the time; nil is the wall clock.
	Clock clock.Clock
}

// Console serves the pages. Create it with New; it is an http.Handler.
type Console struct {
	cfg     Config
	ins     map[string]*poison.Inspector
	tmpl    *template.Template
	mux     *http.ServeMux
	key     []byte // signs the CSRF token and the session cookie
	csrf    string
	session string // the cookie value a login sets
	tasks   *tasks
	charts  *history
	indexes *indexes.Set // nil without Config.Indexes
	cross   *http.CrossOriginProtection
}

// sessionCookie is the login cookie's name; it lasts sessionAge.
const (
	sessionCookie = "tablekeeper_console"
	sessionAge    = 12 * time.Hour
)

// MinTokenLength is the shortest token New accepts.
const MinTokenLength = 16

// New checks cfg and returns its Console.
func New(cfg Config) (*Console, error) {
	if cfg.Store == nil {
		return nil, errors.New("console: Store is required")
	}
	if len(cfg.Queues) == 0 || cfg.Inspector == nil {
		return nil, errors.New("console: Queues and Inspector are required")
	}
	if cfg.Base == "" {
		cfg.Base = "/"
	}
	if !strings.HasPrefix(cfg.Base, "/") || !strings.HasSuffix(cfg.Base, "/") {
		return nil, fmt.Errorf("console: Base %q must start and end with /", cfg.Base)
	}
	if cfg.Token != "" && len(cfg.Token) < MinTokenLength {
		return nil, fmt.Errorf("console: the token must be at least %d characters", MinTokenLength)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	if len(cfg.CheckpointTables) == 0 {
		cfg.CheckpointTables = []string{jobs.DefaultCheckpointTable}
	}
	if cfg.RangeCheckpointTable == "" {
		cfg.RangeCheckpointTable = jobs.DefaultCheckpointTable
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 30 * time.Second
	}
	c := &Console{cfg: cfg, ins: map[string]*poison.Inspector{}, tasks: newTasks(cfg.Clock, cfg.Redact), charts: newHistory()}
	if cfg.Indexes != nil {
		x, err := indexes.Open(cfg.Store, cfg.Clock, *cfg.Indexes)
		if err != nil {
			return nil, fmt.Errorf("console: indexes: %w", err)
		}
		c.indexes = x
	}
	for _, q := range cfg.Queues {
		if err := storeadapter.ValidateQueueName(q); err != nil {
			return nil, fmt.Errorf("console: queue %q: %w", q, err)
		}
		in, err := cfg.Inspector(q)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		c.ins[q] = in
	}
	c.key = make([]byte, 32)
	if _, err := rand.Read(c.key); err != nil {
		return nil, err
	}
	c.csrf = c.sign("csrf")
	c.cross = http.NewCrossOriginProtection()
	c.session = c.sign("session:" + cfg.Token)
	tmpl, err := template.New("").Funcs(c.funcs()).ParseFS(templates, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c.tmpl = tmpl
	c.routes()
	return c, nil
}

// sign returns the hex HMAC of s under the console's key.
func (c *Console) sign(s string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Console) routes() {
	c.mux = http.NewServeMux()
	c.mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(static)
	})
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /poison", c.poisonGroups)
	c.mux.HandleFunc("GET /poison/group", c.poisonGroup)
	c.mux.HandleFunc("GET /poison/record", c.poisonRecord)
	c.mux.HandleFunc("POST /actions/preview", c.actionPreview)
	c.mux.HandleFunc("POST /actions/run", c.actionRun)
	c.mux.HandleFunc("GET /operations", c.operations)
	c.mux.HandleFunc("GET /indexes", c.indexesPage)
	c.mux.HandleFunc("POST /indexes/check", c.indexCheck)
	c.mux.HandleFunc("GET /exports", c.exportsPage)
	c.mux.HandleFunc("POST /exports/verify", c.exportVerify)
	c.mux.HandleFunc("GET /tasks/{id}", c.taskPage)
	c.mux.HandleFunc("GET /login", c.loginPage)
	c.mux.HandleFunc("POST /login", c.login)
}

// ServeHTTP serves the console: without a token, only to requests that
// name a loopback host (a page elsewhere that rebinds its name to
// 127.0.0.1 names its own host); with one, after the token check. Posts
// must come from the console's own pages (http.CrossOriginProtection, and
// the CSRF token every form carries).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if c.cfg.Token == "" && !loopbackHost(r.Host) {
		http.Error(w, "this console has no token, so it answers only requests to localhost, 127.0.0.1 or [::1]; start it with -auth-token-env to serve other names", http.StatusForbidden)
		return
	}
	if err := c.cross.Check(r); err != nil {
		http.Error(w, "cross-origin request refused: "+err.Error(), http.StatusForbidden)
		return
	}
	if c.cfg.Token != "" && !c.authorized(r) && r.URL.Path != "/login" && r.URL.Path != "/static/style.css" {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, c.cfg.Base+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		http.Error(w, "the console needs its token (Authorization: Bearer, or log in)", http.StatusUnauthorized)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether a request's Host (name[:port]) is a
// loopback name: localhost or a loopback IP.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorized reports whether r carries the token or the login cookie.
func (c *Console) authorized(r *http.Request) bool {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(t), []byte(c.cfg.Token)) == 1
	}
	ck, err := r.Cookie(sessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.session)) == 1
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: safeNext(r.FormValue("next"))}})
}

type loginData struct {
	Next, Error string
}

// login checks the posted token and sets the session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if c.cfg.Token == "" {
		http.Redirect(w, r, c.cfg.Base, http.StatusSeeOther)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(c.cfg.Token)) != 1 {
		c.cfg.Log.Warn("console login refused", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Data: loginData{Next: next, Error: "That is not the console's token."}})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: c.session, Path: c.cfg.Base, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
		MaxAge: int(sessionAge / time.Second)})
	http.Redirect(w, r, c.cfg.Base+strings.TrimPrefix(next, "/"), http.StatusSeeOther)
}

// safeNext keeps a login's return path inside the console: a path with no
// scheme, host, backslash or control character ("/\t/evil" is "//evil" to
// a browser), else "/".
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}

// checkForm checks a POST's CSRF token (ServeHTTP checked its origin); it
// writes the refusal and returns false when it does not hold.
func (c *Console) checkForm(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.csrf)) != 1 {
		http.Error(w, "the form's CSRF token is missing or wrong: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

// who describes the requester for the action log: the address, and how it
// was let in.
func (c *Console) who(r *http.Request) string {
	how := "no token (loopback)"
	if c.cfg.Token != "" {
		how = "token"
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return fmt.Sprintf("%s via %s, console of %s", host, how, orDash(c.cfg.Operator))
}

// inspector returns the inspector of the request's queue (the first queue
// when none is asked for), or writes a 404.
func (c *Console) inspector(w http.ResponseWriter, r *http.Request) (string, *poison.Inspector, bool) {
	q := r.FormValue("queue")
	if q == "" {
		q = c.cfg.Queues[0]
	}
	in, ok := c.ins[q]
	if !ok {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("queue %q is not one this console shows (%s)", q, strings.Join(c.cfg.Queues, ", ")))
		return "", nil, false
	}
	return q, in, true
}

// page is what every template gets.
type page struct {
	Title string
	Nav   string
	Queue string
	// Refresh, when > 0, reloads the page after that many seconds.
	Refresh int
	Data    any
}

// render executes the named page template inside the layout.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if p.Queue == "" {
		p.Queue = r.FormValue("queue")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := c.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		c.cfg.Log.Error("console template", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: "+c.cfg.Redact(err.Error()), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows an error page; the text goes through Redact.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	c.render(w, r, status, "error", page{Title: "Error", Data: c.cfg.Redact(err.Error())})
}

// ctx bounds the storage work of one page.
func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), pageTimeout)
}

// pageTimeout bounds the storage reads of one page.
const pageTimeout = 60 * time.Second

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// funcs are the templates' helpers.
func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"base":    func() string { return c.cfg.Base },
		"r":       func(s string) string { return c.cfg.Redact(s) },
		"csrf":    func() string { return c.csrf },
		"actions": func() bool { return c.cfg.AllowActions },
		"queues":  func() []string { return c.cfg.Queues },
		"olders":  func() any { return olderChoices },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return age(c.cfg.Clock.Now().Sub(t)) + " ago"
		},
		"age": func(d time.Duration) string {
			if d <= 0 {
				return "-"
			}
			return age(d)
		},
		"prev":  func(n int) int { return n - 1 },
		"next":  func(n int) int { return n + 1 },
		"dur":   func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		"trunc": func(n int, s string) string { return text.Truncate(s, n) },
		"pct": func(done, total int) int {
			if total <= 0 {
				return 0
			}
			return min(100, done*100/total)
		},
	}
}

// age rounds a duration for reading: seconds under a minute, minutes
// under an hour, then hours and days.
func age(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}
