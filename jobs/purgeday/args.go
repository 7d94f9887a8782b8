package purgeday

import (
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/tablepatterns/daytable"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Kind is the envelope kind of day purges.
const Kind = "purgeday"

// MaxKeepDays is the largest keepDays: 100 years.
const MaxKeepDays = 36500

// Args are the arguments of a day purge (docs/purgeday.md documents them).
// Exactly one of KeepDays and Before sets the cut-off (see Cutoff): the
// day tables <Prefix>YYYYMMDD whose date is strictly before it are
// deleted.
type Args struct {
	// Prefix is the day tables' prefix: a letter, then letters and
	// digits, at most 55 characters (daytable.ValidatePrefix).
	Prefix string `json:"prefix"`
	// KeepDays keeps today (UTC) and the KeepDays days before it; 1-36500.
	KeepDays *int `json:"keepDays,omitempty"`
	// Before is a date, YYYY-MM-DD (UTC), no later than yesterday: the days
	// before it go.
	Before *string `json:"before,omitempty"`
	// ExportTo, "container" or "container/prefix", exports each day to
	// JSON-lines blobs and a manifest (the export kind's format, under
	// <prefix>/<table>/YYYY/MM/DD/HHMM/) and verifies it before the
	// day's table is deleted. The container must exist.
	ExportTo string `json:"exportTo,omitempty"`
	// DryRun lists and computes what would go and touches nothing; the
	// job's result says what it found.
	DryRun bool `json:"dryRun,omitempty"`
}

// Kind returns "purgeday".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
// Whether Before lies in the future depends on a clock, so it is checked
// by Cutoff (MakePlan: the worker on first delivery, the CLI before it
// sends), not here.
func (a Args) Validate() error {
	if err := daytable.ValidatePrefix(a.Prefix); err != nil {
		return fmt.Errorf("args.prefix: %w", err)
	}
	switch {
	case a.KeepDays == nil && a.Before == nil:
		return errors.New("args.keepDays: give keepDays or before (exactly one)")
	case a.KeepDays != nil && a.Before != nil:
		return errors.New("args.before: give keepDays or before, not both")
	case a.KeepDays != nil && (*a.KeepDays < 1 || *a.KeepDays > MaxKeepDays):
		return fmt.Errorf("args.keepDays: must be 1-%d (1 keeps today and yesterday), got %d", MaxKeepDays, *a.KeepDays)
	}
	if a.Before != nil {
		if _, err := parseDate(*a.Before); err != nil {
			return err
		}
	}
	if a.ExportTo != "" {
		_, prefix, err := tableexport.ParseTarget(a.ExportTo)
		if err != nil {
			return fmt.Errorf("args.exportTo: %w", err)
		}
		longest, _ := daytable.Name(a.Prefix, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)) // every day's name has this length
		if err := tableexport.ValidateNames(prefix, longest); err != nil {
			return fmt.Errorf("args.exportTo: %w", err)
		}
	}
	return nil
}

// Cutoff returns the purge's cut-off, a midnight UTC, at the time now:
// today (UTC) minus KeepDays days, or the Before date. The day tables
// whose date is strictly before the cut-off go, so with keepDays N every
// deleted day ended at least N×24 h ago: keepDays 1 at 2026-11-21T10:00Z
// gives 2026-11-20 and deletes 2026-11-19 and earlier, keeping yesterday
// and today. The error names args.before when Before is not a real date
// or is later than yesterday.
func (a Args) Cutoff(now time.Time) (time.Time, error) {
	y, m, d := now.UTC().Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	switch {
	case a.KeepDays != nil:
		return today.AddDate(0, 0, -*a.KeepDays), nil
	case a.Before != nil:
		day, err := parseDate(*a.Before)
		if err != nil {
			return time.Time{}, err
		}
		// Before today at the latest, so that the cut-off is a whole day in
		// the past, as keepDays >= 1 makes it: a before of today would
		// delete yesterday's table the moment it ended (keepDays 0).
		if yesterday := today.AddDate(0, 0, -1); day.After(yesterday) {
			return time.Time{}, fmt.Errorf("args.before: must be no later than yesterday (%s UTC), so that every deleted day ended at least a day ago; got %s", yesterday.Format(time.DateOnly), *a.Before)
		}
		return day, nil
	}
	return time.Time{}, errors.New("args.keepDays: give keepDays or before (exactly one)")
}

// parseDate parses Before: a real date YYYY-MM-DD of the years 0001-9999.
func parseDate(s string) (time.Time, error) {
	day, err := time.Parse(time.DateOnly, s)
	if err != nil || day.Format(time.DateOnly) != s || day.Year() < 1 {
		return time.Time{}, fmt.Errorf("args.before: must be a real date YYYY-MM-DD, got %q", s)
	}
	return day, nil
}
