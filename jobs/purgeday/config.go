package purgeday

import (
	"cmp"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Config is the "purgeday" section of the worker's config file. Zero
// fields take the documented defaults.
type Config struct {
	// CheckpointTable keeps the progress of each day's export (exportTo)
	// across redeliveries and continuations. Default
	// jobs.DefaultCheckpointTable; a valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// TimeBudget is how long one delivery works before it saves its
	// progress and continues later (a fresh message; see
	// jobs.ContinueLater): checked after each day and, with exportTo,
	// after each exported part. Default 5m (or half MaxRunTime when that
	// is shorter; see jobs.CheckTimeBudget); at least 1s and less than
	// MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one delivery may run before its context is
	// cancelled and it is retried. Default jobs.DefaultMaxRunTime (30
	// min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// MaxPartBytes caps the uncompressed bytes of one exported part
	// (exportTo). Default 64 MiB, 1 KiB-4 GiB.
	MaxPartBytes int64 `json:"maxPartBytes,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.MaxPartBytes = cmp.Or(c.MaxPartBytes, tableexport.DefaultMaxPartBytes)
	if err := jobs.CheckRunSettings("purgeday", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if err := jobs.CheckTimeBudget("purgeday", &c.TimeBudget, c.MaxRunTime, jobs.DefaultTimeBudget); err != nil {
		return err
	}
	if err := tableexport.CheckPartBytes(c.MaxPartBytes); err != nil {
		return fmt.Errorf("purgeday.maxPartBytes: %w", err)
	}
	return nil
}
