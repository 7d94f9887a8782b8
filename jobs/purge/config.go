package purge

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Defaults of Config.
const (
	DefaultCheckpointTable = "TablekeeperCheckpoints"
	DefaultTimeBudget      = 5 * time.Minute
)

// Config is the "purge" section of the worker's config file. Zero fields
// take the documented defaults.
type Config struct {
	// CheckpointTable keeps each purge's cut-off and position across
	// deliveries; a finished purge's checkpoint stays there, marked done.
	// Default "TablekeeperCheckpoints"; a valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// TimeBudget is how long one delivery deletes before it saves its
	// position and continues later (a fresh message; see
	// jobs.ContinueLater). Default 5m; at least 1s and less than
	// MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one delivery may run before its context is
	// cancelled and it is retried (resuming from its checkpoint). Default
	// jobs.DefaultMaxRunTime (30 min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// PageSize is the number of entities a query page asks for, 1-1,000.
	// Default 1,000 (Azure's maximum); smaller pages are a test aid.
	PageSize int `json:"pageSize,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.CheckpointTable = cmp.Or(c.CheckpointTable, DefaultCheckpointTable)
	c.TimeBudget = cmp.Or(c.TimeBudget, jobs.Duration(DefaultTimeBudget))
	c.MaxRunTime = cmp.Or(c.MaxRunTime, jobs.Duration(jobs.DefaultMaxRunTime))
	c.PageSize = cmp.Or(c.PageSize, storeadapter.MaxPageSize)
	if err := storeadapter.ValidateTableName(c.CheckpointTable); err != nil {
		return fmt.Errorf("purge.checkpointTable: %w", err)
	}
	if d := time.Duration(c.MaxRunTime); d < time.Second || d > 24*time.Hour {
		return fmt.Errorf("purge.maxRunTime: must be 1s-24h, got %v", d)
	}
	if d := time.Duration(c.TimeBudget); d < time.Second || d >= time.Duration(c.MaxRunTime) {
		return fmt.Errorf("purge.timeBudget: must be at least 1s and less than purge.maxRunTime (%v), got %v", time.Duration(c.MaxRunTime), d)
	}
	if c.PageSize < 1 || c.PageSize > storeadapter.MaxPageSize {
		return fmt.Errorf("purge.pageSize: must be 1-%d, got %d", storeadapter.MaxPageSize, c.PageSize)
	}
	return nil
}
