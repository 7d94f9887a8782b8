package export

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Config is the "export" section of the worker's config file. Zero fields
// take the documented defaults.
type Config struct {
	// CheckpointTable keeps each export's progress (and, once done, its
	// result) across redeliveries. Default jobs.DefaultCheckpointTable; a
	// valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// MaxPartBytes is the size cap of a part (uncompressed line bytes)
	// when the args give none. Default 64 MiB, 1 KiB-4 GiB.
	MaxPartBytes int64 `json:"maxPartBytes,omitempty"`
	// TimeBudget is how long one delivery exports before it stops after
	// its current part (registered in the checkpoint) and continues in a
	// new message (jobs.ContinueLater): the next delivery goes on from the
	// next row. It is checked after each part, so a delivery runs about
	// TimeBudget plus one part. Default 5 min (or half MaxRunTime when
	// that is shorter; see jobs.CheckTimeBudget); at least 1 s and less than
	// MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one export job may run before its context
	// is cancelled and it is retried (resuming after its last part).
	// Default jobs.DefaultMaxRunTime (30 min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// MarkMargin is how far before an export's start, as the service saw
	// it, the mark its manifest records for the next increment lies: the
	// allowance for the service's clocks and writes in flight (see
	// docs/export.md, "Incremental exports"). Rows written in the margin
	// are exported twice. Default 5 min, at most 24h.
	MarkMargin jobs.Duration `json:"markMargin,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.MaxPartBytes = cmp.Or(c.MaxPartBytes, tableexport.DefaultMaxPartBytes)
	if err := jobs.CheckRunSettings("export", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if err := tableexport.CheckPartBytes(c.MaxPartBytes); err != nil {
		return fmt.Errorf("export.maxPartBytes: %w", err)
	}
	c.MarkMargin = cmp.Or(c.MarkMargin, jobs.Duration(tableexport.DefaultMarkMargin))
	if d := time.Duration(c.MarkMargin); d < 0 || d > tableexport.MaxMarkMargin {
		return fmt.Errorf("export.markMargin: must be 0-%v, got %v", tableexport.MaxMarkMargin, d)
	}
	return jobs.CheckTimeBudget("export", &c.TimeBudget, c.MaxRunTime, jobs.DefaultTimeBudget)
}
