package kit

import (
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs"
)

// Base is the skeleton every kind's worker embeds: its dependencies, its
// checkpoints and its maximum run time (the MaxRunTime of jobs.Worker).
// A worker is its Base, its config section and the methods of its kind.
type Base struct {
	Deps
	// Checkpoints is where the kind keeps its progress across deliveries.
	Checkpoints idempotent.Checkpoints
	maxRunTime  time.Duration
}

// NewBase returns the skeleton of a worker on d whose config section
// names checkpointTable and maxRunTime (validated, defaults filled in). A
// nil d.Clock is the wall clock.
func NewBase(d Deps, checkpointTable string, maxRunTime jobs.Duration) Base {
	d.Clock = clock.Or(d.Clock)
	return Base{Deps: d, Checkpoints: idempotent.Checkpoints{Tables: d.Store.Tables(), Table: checkpointTable},
		maxRunTime: time.Duration(maxRunTime)}
}

// MaxRunTime is how long one delivery may run: the section's maxRunTime.
func (b Base) MaxRunTime() time.Duration { return b.maxRunTime }

// Budget returns a time budget of d from now on the worker's clock.
func (b Base) Budget(d jobs.Duration) jobs.Budget { return jobs.NewBudget(time.Duration(d), b.Clock) }
