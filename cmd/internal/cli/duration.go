package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxDays bounds the days of a duration: time.Duration holds about 292
// years.
const maxDays = 100 * 365

// ParseDuration reads a duration the one way every flag and argument of
// the commands takes it: Go's syntax ("90m", "1h30m", "36h", "-1h"), or
// whole days, alone or before Go's ("7d", "1d12h"). Its error says what a
// duration looks like and, for a bare number, that a unit is needed.
func ParseDuration(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		hint := ""
		if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
			hint = fmt.Sprintf(" (a unit is needed: %ss, %sm or %sd)", s, s, s)
		}
		return 0, fmt.Errorf("must be a duration such as 90m, 36h or 7d, got %q%s", s, hint)
	}
	body, neg := strings.CutPrefix(s, "-")
	if !neg {
		body = strings.TrimPrefix(body, "+")
	}
	var d time.Duration
	if days, rest, ok := strings.Cut(body, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > maxDays || strings.HasPrefix(days, "+") {
			return bad()
		}
		d = time.Duration(n) * 24 * time.Hour
		body = rest
		if body == "" {
			body = "0"
		}
	}
	v, err := time.ParseDuration(body)
	if err != nil || strings.HasPrefix(body, "-") || strings.HasPrefix(body, "+") {
		return bad()
	}
	d += v
	if neg {
		d = -d
	}
	return d, nil
}

// Duration is a flag.Value of a duration in ParseDuration's syntax.
type Duration struct{ D *time.Duration }

// DurationVar defines a duration flag in ParseDuration's syntax.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(Duration{p}, name, usage)
}

func (v Duration) String() string {
	if v.D == nil {
		return "0s"
	}
	return v.D.String()
}

// Set parses s with ParseDuration.
func (v Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// Get returns the duration (flag.Getter).
func (v Duration) Get() any { return *v.D }
