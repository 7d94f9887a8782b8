package copykind

import (
	"cmp"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// MaxPartitions bounds Config.Partitions.
const MaxPartitions = 64

// Config is the "copy" section of the worker's config file. Zero fields
// take the documented defaults.
type Config struct {
	// CheckpointTable keeps each copy's position and counts across
	// deliveries, in the worker's own account whatever the copy's
	// accounts; a finished copy's checkpoint stays there, marked done.
	// Default jobs.DefaultCheckpointTable; a valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// TimeBudget is how long one delivery copies before it saves its
	// position and continues later (a fresh message; see
	// jobs.ContinueLater). It is checked after each page. Default 5m (or
	// half MaxRunTime when that is shorter; see jobs.CheckTimeBudget); at
	// least 1s and less than MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one delivery may run before its context is
	// cancelled and it is retried (resuming from its checkpoint). Default
	// jobs.DefaultMaxRunTime (30 min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// PageSize is the number of entities a source page asks for, 1-1,000;
	// a page is written and checkpointed at a time. Default 1,000 (Azure's
	// maximum); smaller pages are a test aid.
	PageSize int `json:"pageSize,omitempty"`
	// Partitions is how many partitions the writer writes at once (one
	// transaction in flight each), 1-64. Default
	// tablewrite.DefaultPartitions (8).
	Partitions int `json:"partitions,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.PageSize = cmp.Or(c.PageSize, storeadapter.MaxPageSize)
	c.Partitions = cmp.Or(c.Partitions, tablewrite.DefaultPartitions)
	if err := jobs.CheckRunSettings("copy", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if err := jobs.CheckTimeBudget("copy", &c.TimeBudget, c.MaxRunTime, jobs.DefaultTimeBudget); err != nil {
		return err
	}
	if c.PageSize < 1 || c.PageSize > storeadapter.MaxPageSize {
		return fmt.Errorf("copy.pageSize: must be 1-%d, got %d", storeadapter.MaxPageSize, c.PageSize)
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return fmt.Errorf("copy.partitions: must be 1-%d, got %d", MaxPartitions, c.Partitions)
	}
	return nil
}
