package archive

import (
	"cmp"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Defaults of Config.
const (
	DefaultMaxConflicts = 5
	MaxMaxConflicts     = 100
)

// Config is the "archive" section of the worker's config file. Zero
// fields take the documented defaults.
type Config struct {
	// CheckpointTable keeps the positions of range moves across
	// redeliveries. Default jobs.DefaultCheckpointTable; a valid table
	// name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// MaxConflicts bounds how often one entity is moved again after a
	// concurrent update, and how often one copy is read again after a
	// conditional write lost to another mover, before the entity is
	// reported as changing and the job is retried later. Default 5, 1–100.
	MaxConflicts int `json:"maxConflicts,omitempty"`
	// MaxRunTime is how long one archive job may run before its context is
	// cancelled and it is retried. Default jobs.DefaultMaxRunTime (30 min),
	// 1s–24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// MaxPartBytes caps the parts a range moved to blobs is written to
	// (uncompressed line bytes; see tableexport). Default 64 MiB,
	// 1 KiB-4 GiB.
	MaxPartBytes int64 `json:"maxPartBytes,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.MaxConflicts = cmp.Or(c.MaxConflicts, DefaultMaxConflicts)
	c.MaxPartBytes = cmp.Or(c.MaxPartBytes, tableexport.DefaultMaxPartBytes)
	if err := jobs.CheckRunSettings("archive", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if c.MaxConflicts < 1 || c.MaxConflicts > MaxMaxConflicts {
		return fmt.Errorf("archive.maxConflicts: must be 1-%d, got %d", MaxMaxConflicts, c.MaxConflicts)
	}
	if err := tableexport.CheckPartBytes(c.MaxPartBytes); err != nil {
		return fmt.Errorf("archive.maxPartBytes: %w", err)
	}
	return nil
}
