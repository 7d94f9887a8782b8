package purge

import (
	"cmp"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Config is the "purge" section of the worker's config file. Zero fields
// take the documented defaults.
type Config struct {
	// CheckpointTable keeps each purge's cut-off and position across
	// deliveries; a finished purge's checkpoint stays there, marked done.
	// Default jobs.DefaultCheckpointTable; a valid table name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// TimeBudget is how long one delivery deletes before it saves its
	// position and continues later (a fresh message; see
	// jobs.ContinueLater). Default 5m (or half MaxRunTime when that is
	// shorter; see jobs.CheckTimeBudget); at least 1s and less than MaxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// MaxRunTime is how long one delivery may run before its context is
	// cancelled and it is retried (resuming from its checkpoint). Default
	// jobs.DefaultMaxRunTime (30 min), 1s-24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// PageSize is the number of entities a query page asks for, 1-1,000.
	// Default 1,000 (Azure's maximum); smaller pages are a test aid.
	PageSize int `json:"pageSize,omitempty"`
	// Transactions bounds the entity group transactions of one page that
	// run at once (see "Overlap" in overlap.go). Default
	// DefaultTransactions (8), 1-64; 1 deletes one batch after another.
	Transactions int `json:"transactions,omitempty"`
}

// DefaultTransactions is Config.Transactions when it is 0.
const DefaultTransactions = 8

// Validate fills the defaults and checks each field, naming it and its
// rule. It never panics.
func (c *Config) Validate() error {
	c.PageSize = cmp.Or(c.PageSize, storeadapter.MaxPageSize)
	c.Transactions = cmp.Or(c.Transactions, DefaultTransactions)
	if err := jobs.CheckRunSettings("purge", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	if err := jobs.CheckTimeBudget("purge", &c.TimeBudget, c.MaxRunTime, jobs.DefaultTimeBudget); err != nil {
		return err
	}
	if c.PageSize < 1 || c.PageSize > storeadapter.MaxPageSize {
		return fmt.Errorf("purge.pageSize: must be 1-%d, got %d", storeadapter.MaxPageSize, c.PageSize)
	}
	if c.Transactions < 1 || c.Transactions > 64 {
		return fmt.Errorf("purge.transactions: must be 1-64, got %d", c.Transactions)
	}
	return nil
}
