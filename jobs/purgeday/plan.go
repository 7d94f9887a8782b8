package purgeday

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/daytable"
)

// Day is one day table.
type Day struct {
	// Table is the table's name, <prefix>YYYYMMDD.
	Table string
	// Date is its day, midnight UTC.
	Date time.Time
}

// Plan is what a day purge would delete now.
type Plan struct {
	// Prefix is the day tables' prefix.
	Prefix string
	// Cutoff is the cut-off: the days strictly before it go.
	Cutoff time.Time
	// Expired are the day tables before the cut-off, in date order.
	Expired []Day
	// Kept counts the day tables on or after the cut-off.
	Kept int
	// Other counts the tables with the prefix that are not day tables
	// (LoginAttemptsArchive, LoginAttempts20261341): never touched.
	Other int
}

// DayTables counts the day tables found.
func (p Plan) DayTables() int { return len(p.Expired) + p.Kept }

// MakePlan lists the tables starting with args.Prefix, page by page, and
// sorts them into expired day tables (whose date is before the cut-off at
// now), kept day tables and other tables. It holds the expired names only
// (a few thousand at most: one per day), never the other tables. It makes
// ListTables calls only. An error of args (a Before later than yesterday by
// now) names the field and wraps storeadapter.ErrInvalidInput.
func MakePlan(ctx context.Context, tables storeadapter.Tables, args Args, now time.Time) (Plan, error) {
	if err := daytable.ValidatePrefix(args.Prefix); err != nil {
		return Plan{}, fmt.Errorf("%w: args.prefix: %w", storeadapter.ErrInvalidInput, err)
	}
	cutoff, err := args.Cutoff(now)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %w", storeadapter.ErrInvalidInput, err)
	}
	p := Plan{Prefix: args.Prefix, Cutoff: cutoff}
	for next := ""; ; {
		names, token, err := tables.ListTables(ctx, args.Prefix, next)
		if err != nil {
			return Plan{}, fmt.Errorf("list tables %s*: %w", args.Prefix, err)
		}
		for _, name := range names {
			day, ok := daytable.Parse(args.Prefix, name)
			switch {
			case !ok:
				p.Other++
			case day.Before(cutoff):
				p.Expired = append(p.Expired, Day{Table: name, Date: day})
			default:
				p.Kept++
			}
		}
		if next = token; next == "" {
			break
		}
	}
	slices.SortFunc(p.Expired, func(a, b Day) int { return a.Date.Compare(b.Date) })
	return p, nil
}

// cutoffText is the cut-off as the results write it.
func (p Plan) cutoffText() string { return p.Cutoff.Format(time.DateOnly) }

// DryRunResult is the result of a dry run: what would go.
func (p Plan) DryRunResult() string {
	if len(p.Expired) == 0 {
		return "dry run: " + p.nothing()
	}
	return fmt.Sprintf("dry run: would delete %d of %d day tables, those older than %s (%s)",
		len(p.Expired), p.DayTables(), p.cutoffText(), names(p.Expired))
}

// nothing is the result when no day table is older than the cut-off.
func (p Plan) nothing() string {
	return fmt.Sprintf("nothing to delete: 0 of %d day tables older than %s", p.DayTables(), p.cutoffText())
}

// names lists days briefly: "A", "A, B" or "A … Z".
func names(days []Day) string {
	switch len(days) {
	case 0:
		return ""
	case 1:
		return days[0].Table
	case 2:
		return days[0].Table + ", " + days[1].Table
	}
	return strings.Join([]string{days[0].Table, days[len(days)-1].Table}, " … ")
}
