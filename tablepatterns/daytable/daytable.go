package daytable

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/cenkalti/backoff/v4"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// dateLayout is the day suffix of a day table's name: YYYYMMDD, UTC.
const dateLayout = "20060102"

// MaxPrefixLen is the longest prefix: with the 8 digits of the date, a
// day table's name stays within Azure's 63 characters.
const MaxPrefixLen = 63 - len(dateLayout)

var prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,54}$`)

// ValidatePrefix checks a day-table prefix: a letter, then letters and
// digits, 1-55 characters, so that prefix + YYYYMMDD is a valid table name
// (9-63 characters). The error names the rule, not the field: callers
// prefix their field's name.
func ValidatePrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%q is not a day-table prefix: a letter, then letters and digits, 1-%d characters in all (with the 8 digits of the date it must make a valid table name)", prefix, MaxPrefixLen)
	}
	return nil
}

// Name returns the table of the UTC day of t: prefix + YYYYMMDD. It
// fails when the prefix is invalid (ValidatePrefix) or the year is
// outside 0001-9999.
func Name(prefix string, t time.Time) (string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return "", err
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return "", fmt.Errorf("the year of a day table must be 0001-9999, got %d", y)
	}
	return prefix + t.UTC().Format(dateLayout), nil
}

// Parse reports whether table is a day table of prefix and returns its
// day (midnight UTC). It is one only when it is exactly prefix (compared
// case-sensitively, as ListTables' prefix match is) followed by 8 digits
// that are a real date of the years 0001-9999: the date must come back
// unchanged from formatting, so LoginAttempts20261341 (month 13) and
// LoginAttempts20260230 (30 February) are not day tables, nor are
// LoginAttemptsArchive, LoginAttempts2026 or LoginAttempts202611210.
func Parse(prefix, table string) (day time.Time, ok bool) {
	if len(table) != len(prefix)+len(dateLayout) || table[:len(prefix)] != prefix {
		return time.Time{}, false
	}
	suffix := table[len(prefix):]
	for i := range len(suffix) {
		if suffix[i] < '0' || suffix[i] > '9' {
			return time.Time{}, false
		}
	}
	d, err := time.Parse(dateLayout, suffix)
	if err != nil || d.Format(dateLayout) != suffix || d.Year() < 1 {
		return time.Time{}, false
	}
	return d, true
}

// Defaults of EnsureOptions.
const (
	DefaultMaxWait     = 2 * time.Minute
	DefaultCallTimeout = 30 * time.Second
)

// Backoff between CreateTable attempts on TableBeingDeleted: from 1 s,
// doubling, at most 15 s, each ±20%.
const (
	backoffInitial = time.Second
	backoffMax     = 15 * time.Second
)

// EnsureOptions configure Ensure. The zero value takes the defaults.
type EnsureOptions struct {
	// MaxWait is how long Ensure keeps retrying a name that is still
	// being deleted before it gives up. Default DefaultMaxWait (2 min).
	MaxWait time.Duration
	// CallTimeout bounds each CreateTable call. Default
	// DefaultCallTimeout (30 s).
	CallTimeout time.Duration
	// Clock tells the time and times the backoff; nil is the wall clock.
	// Tests pass one whose timers advance a fake time.
	Clock clock.Clock
}

// Ensure is EnsureOptions{}.Ensure: the day table of t, created if
// missing, with the default wait.
func Ensure(ctx context.Context, tables storeadapter.Tables, prefix string, t time.Time) (string, error) {
	return EnsureOptions{}.Ensure(ctx, tables, prefix, t)
}

// Ensure returns the name of the day table of t (see Name) after making
// sure it exists: CreateTable, where "already exists" is success. A name
// still being deleted (ErrTableBeingDeleted: the day was purged moments
// ago; see the package doc) is retried with jittered exponential backoff,
// 1 s doubling up to 15 s, until MaxWait has passed or ctx ends; then the
// error names the table and wraps ErrTableBeingDeleted. Other errors are
// returned at once, wrapped with the table's name.
//
// Ensure costs one call; a writer calls it once per day (when the name it
// writes to changes), not before every write.
func (o EnsureOptions) Ensure(ctx context.Context, tables storeadapter.Tables, prefix string, t time.Time) (string, error) {
	name, err := Name(prefix, t)
	if err != nil {
		return "", fmt.Errorf("daytable: %w: %w", storeadapter.ErrInvalidInput, err)
	}
	clk := clock.Or(o.Clock)
	maxWait := o.MaxWait
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	callTimeout := o.CallTimeout
	if callTimeout <= 0 {
		callTimeout = DefaultCallTimeout
	}
	b := &backoff.ExponentialBackOff{InitialInterval: backoffInitial, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: backoffMax, MaxElapsedTime: 0, Stop: backoff.Stop, Clock: backoff.SystemClock}
	b.Reset()
	deadline := clk.Now().Add(maxWait)
	for tries := 1; ; tries++ {
		err := create(ctx, tables, name, callTimeout)
		switch {
		case err == nil, errors.Is(err, storeadapter.ErrAlreadyExists):
			return name, nil
		case !errors.Is(err, storeadapter.ErrTableBeingDeleted):
			return "", fmt.Errorf("daytable: ensure table %s: %w", name, err)
		}
		left := deadline.Sub(clk.Now())
		if left <= 0 {
			return "", fmt.Errorf("daytable: ensure table %s: still being deleted after %d tries in %v (a deleted table's name stays unavailable for at least 40 s; is a writer writing a purged day?): %w",
				name, tries, maxWait, err)
		}
		if serr := clock.Sleep(ctx, clk, min(b.NextBackOff(), left)); serr != nil {
			return "", fmt.Errorf("daytable: ensure table %s: waiting for the name to be free: %w", name, serr)
		}
	}
}

// create makes one CreateTable call bounded by timeout.
func create(ctx context.Context, tables storeadapter.Tables, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return tables.CreateTable(ctx, name)
}
