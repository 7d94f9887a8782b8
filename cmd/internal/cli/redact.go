package cli

import (
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Redacted is what a Redactor writes in place of a credential.
const Redacted = "[REDACTED]"

// minSecret is the shortest value a Redactor replaces: shorter ones would
// match ordinary text (no real key, signature or secret is this short).
const minSecret = 6

// credentialPatterns find credentials a Redactor was not told about: a SAS
// signature in a URL or query string (also after JSON's "\u0026" or a
// URL-encoded "%26"), and the key and SAS of a connection string.
var credentialPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)((?:^|[?&\s"';,(]|\\u0026|%26)sig=)[^&\s"'\\;<>,)]{6,}`),
	regexp.MustCompile(`(?i)(AccountKey=)[^;\s"'\\]{6,}`),
	regexp.MustCompile(`(?i)(SharedAccessSignature=)[^;\s"'\\]{6,}`),
}

// Redactor removes credentials from text on its way out: the values it is
// given (and how they look JSON-escaped and URL-encoded or decoded), and
// anything that looks like a SAS signature, an account key or a SAS in a
// connection string. It is safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string // longest first
}

// Add adds credential values to replace; empty and very short ones are
// ignored.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		for _, v := range variants(s) {
			if len(v) >= minSecret && !slices.Contains(r.secrets, v) {
				r.secrets = append(r.secrets, v)
			}
		}
	}
	// Longest first, so a secret inside another is not replaced first.
	slices.SortStableFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
}

// variants returns s as it may appear in output: itself, JSON-escaped (as
// the JSON log handler writes it), URL-encoded and URL-decoded.
func variants(s string) []string {
	s = strings.TrimSpace(s)
	out := []string{s, url.QueryEscape(s)}
	if j, err := json.Marshal(s); err == nil {
		out = append(out, string(j[1:len(j)-1]))
	}
	if d, err := url.QueryUnescape(s); err == nil {
		out = append(out, d)
	}
	return out
}

// String returns s with every credential replaced by Redacted.
func (r *Redactor) String(s string) string {
	if r != nil {
		r.mu.RLock()
		for _, secret := range r.secrets {
			s = strings.ReplaceAll(s, secret, Redacted)
		}
		r.mu.RUnlock()
	}
	for _, re := range credentialPatterns {
		s = re.ReplaceAllString(s, "${1}"+Redacted)
	}
	return s
}

// Writer returns a writer that redacts what it writes to w. Each Write is
// redacted on its own, so a credential split across two writes would pass:
// slog handlers and fmt.Fprint write a line at once.
func (r *Redactor) Writer(w io.Writer) io.Writer {
	if rw, ok := w.(*redactingWriter); ok && rw.r == r {
		return w // already redacted by r
	}
	return &redactingWriter{r: r, w: w}
}

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

// Unwrap returns the writer written to (IsTerminal looks through it).
func (rw *redactingWriter) Unwrap() io.Writer { return rw.w }

// Write writes p redacted and reports len(p) when all of it was written,
// as the caller's bytes are what it counts.
func (rw *redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(rw.w, rw.r.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
