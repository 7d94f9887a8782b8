package jobs

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// DefaultCheckpointTable is the table the kinds keep their checkpoints in
// when their section names no other. They share it: a checkpoint's keys
// are its operation id and step.
const DefaultCheckpointTable = "TablekeeperCheckpoints"

// DefaultTimeBudget is the time budget of a long kind's delivery (see
// Budget and ContinueLater) when its config sets none and its maximum run
// time allows it; see CheckTimeBudget.
const DefaultTimeBudget = 5 * time.Minute

// CheckRunSettings fills in and checks the settings every kind's config
// section has, naming section's fields in errors: checkpointTable
// defaults to DefaultCheckpointTable and must be a valid table name;
// maxRunTime defaults to DefaultMaxRunTime and must be 1s-24h.
func CheckRunSettings(section string, checkpointTable *string, maxRunTime *Duration) error {
	*checkpointTable = cmp.Or(*checkpointTable, DefaultCheckpointTable)
	*maxRunTime = cmp.Or(*maxRunTime, Duration(DefaultMaxRunTime))
	if err := storeadapter.ValidateTableName(*checkpointTable); err != nil {
		return fmt.Errorf("%s.checkpointTable: %w", section, err)
	}
	if d := time.Duration(*maxRunTime); d < time.Second || d > 24*time.Hour {
		return fmt.Errorf("%s.maxRunTime: must be 1s-24h, got %v", section, d)
	}
	return nil
}

// CheckTimeBudget fills in and checks the time budget of a kind that
// continues later, naming section's fields in errors: it defaults to def,
// or half of maxRunTime when that is shorter (so a config that sets only a
// short maxRunTime stays valid), and must be at least 1s and below
// maxRunTime, leaving room for the last unit of work after the budget is
// spent. maxRunTime is the checked value of CheckRunSettings.
func CheckTimeBudget(section string, timeBudget *Duration, maxRunTime Duration, def time.Duration) error {
	*timeBudget = cmp.Or(*timeBudget, Duration(min(def, time.Duration(maxRunTime)/2)))
	if d := time.Duration(*timeBudget); d < time.Second || d >= time.Duration(maxRunTime) {
		return fmt.Errorf("%s.timeBudget: must be at least 1s and less than %s.maxRunTime (%v), got %v", section, section, time.Duration(maxRunTime), d)
	}
	return nil
}
