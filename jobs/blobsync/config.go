package blobsync

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// Defaults and bounds of Config.
const (
	DefaultGrace        = 24 * time.Hour
	DefaultMaxConflicts = 5
	MaxMaxConflicts     = 100
	// MaxGrace bounds the grace period: an orphan is collected at most
	// this long after it was left.
	MaxGrace = 365 * 24 * time.Hour
)

// Config is the "blobsync" section of the worker's config file. Zero
// fields take the documented defaults.
type Config struct {
	// Tables declares, per table, where its offloaded properties go and
	// which properties an offload without args.property moves.
	Tables largeentity.Layout `json:"tables,omitempty"`
	// Grace is how old a blob in the managed layout must be (by its
	// LastModified) before reconcile may delete it as an orphan. Default
	// 24h; at least the longest of MaxRunTime and Writers (an offload, an
	// archive, a copy or a restore writes its blob before its entity and
	// runs at most its maxRunTime, so a younger unreferenced blob may
	// belong to a job still running), at most 365 days.
	Grace jobs.Duration `json:"grace,omitempty"`
	// Writers is the longest maxRunTime of the other kinds that put a
	// managed blob before the entity that names it (archive, copy,
	// restore: largeentity.Carry and Place). The worker's config sets it
	// (jobs/catalog); it is not in the file.
	Writers jobs.Duration `json:"-"`
	// WritersFrom names the setting Writers comes from, for the error.
	WritersFrom string `json:"-"`
	// OnMissing is what reconcile does with a reference whose blob is
	// gone: "report" (default: count it and name it in the result) or
	// "clear" (remove the reference from the entity, If-Match).
	OnMissing string `json:"onMissing,omitempty"`
	// MaxConflicts bounds the rounds of one entity write lost to other
	// writers (the entity changed between read and replace) before the job
	// is retried later. Default 5, 1–100.
	MaxConflicts int `json:"maxConflicts,omitempty"`
	// MaxRunTime is how long one blobsync job may run before its context
	// is cancelled and it is retried (reconcile resumes from its
	// checkpoint). Default jobs.DefaultMaxRunTime (30m), 1s–24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// CheckpointTable keeps the positions of reconciles across
	// redeliveries. Default jobs.DefaultCheckpointTable; a valid table
	// name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// PageSize is the number of entities reconcile reads per query page
	// (and checkpoints after). Default and maximum 1000.
	PageSize int `json:"pageSize,omitempty"`
}

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.MaxConflicts = cmp.Or(c.MaxConflicts, DefaultMaxConflicts)
	if err := jobs.CheckRunSettings("blobsync", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	c.Grace = cmp.Or(c.Grace, jobs.Duration(DefaultGrace))
	c.OnMissing = cmp.Or(c.OnMissing, OnMissingReport)
	c.PageSize = cmp.Or(c.PageSize, storeadapter.MaxPageSize)
	if c.MaxConflicts < 1 || c.MaxConflicts > MaxMaxConflicts {
		return fmt.Errorf("blobsync.maxConflicts: must be 1-%d, got %d", MaxMaxConflicts, c.MaxConflicts)
	}
	if err := c.checkGrace(time.Duration(c.Grace)); err != nil {
		return fmt.Errorf("blobsync.grace: %w", err)
	}
	if err := checkOnMissing(c.OnMissing); err != nil {
		return fmt.Errorf("blobsync.onMissing: %w", err)
	}
	if c.PageSize < 1 || c.PageSize > storeadapter.MaxPageSize {
		return fmt.Errorf("blobsync.pageSize: must be 1-%d, got %d", storeadapter.MaxPageSize, c.PageSize)
	}
	if err := c.Tables.Validate("blobsync.tables"); err != nil {
		return err
	}
	return nil
}

// checkGrace applies the bounds of a grace period.
func (c *Config) checkGrace(grace time.Duration) error {
	from := "blobsync.maxRunTime"
	if c.Writers > c.MaxRunTime {
		from = c.WritersFrom
	}
	switch least := time.Duration(max(c.MaxRunTime, c.Writers)); {
	case grace < least:
		return fmt.Errorf("must be at least the longest maxRunTime of the kinds that write a managed blob before its entity (blobsync, archive, copy, restore), %v (%s): a younger unreferenced blob may belong to a job still running, got %v", least, from, grace)
	case grace > MaxGrace:
		return fmt.Errorf("must be at most %v, got %v", MaxGrace, grace)
	}
	return nil
}

// checkOnMissing checks an onMissing value.
func checkOnMissing(s string) error {
	if s != OnMissingReport && s != OnMissingClear {
		return fmt.Errorf("must be %q or %q, got %q", OnMissingReport, OnMissingClear, s)
	}
	return nil
}
