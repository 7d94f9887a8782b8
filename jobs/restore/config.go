package restore

import (
	"cmp"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// DefaultCheckpointRows is Config.CheckpointRows when it is 0.
const DefaultCheckpointRows = 10000

// Config is the "restore" section of the worker's config file. Zero fields
// take the documented defaults.
type Config struct {
	// CheckpointTable keeps each restore's position (manifest, part, line)
	// and counts across redeliveries. Default jobs.DefaultCheckpointTable;
	// a valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// CheckpointRows is how many lines of a part a restore writes (or, in
	// mirror's second pass, reconciles) between two checkpoints; each
	// checkpoint waits for every batch in flight. Default 10,000, 100 to
	// 1,000,000.
	CheckpointRows int `json:"checkpointRows,omitempty"`
	// Partitions bounds the partitions written at once (each with one
	// entity group transaction in flight). Default 8, 1-64.
	Partitions int `json:"partitions,omitempty"`
	// TimeBudget is how long one delivery restores before it stops at its
	// next checkpoint and continues in a new message (jobs.ContinueLater).
	// Default 5 min (or half MaxRunTime when that is shorter; see
	// jobs.CheckTimeBudget); at least 1 s and less than MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one restore job may run before its context is
	// cancelled and it is retried (resuming at its last checkpoint).
	// Default jobs.DefaultMaxRunTime (30 min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.CheckpointRows = cmp.Or(c.CheckpointRows, DefaultCheckpointRows)
	c.Partitions = cmp.Or(c.Partitions, tablewrite.DefaultPartitions)
	if err := jobs.CheckRunSettings("restore", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if c.CheckpointRows < 100 || c.CheckpointRows > 1000000 {
		return fmt.Errorf("restore.checkpointRows: must be 100-1000000, got %d", c.CheckpointRows)
	}
	if c.Partitions < 1 || c.Partitions > 64 {
		return fmt.Errorf("restore.partitions: must be 1-64, got %d", c.Partitions)
	}
	return jobs.CheckTimeBudget("restore", &c.TimeBudget, c.MaxRunTime, jobs.DefaultTimeBudget)
}
