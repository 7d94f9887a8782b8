package catalog

import (
	"cmp"
	"errors"
	"slices"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/blobsync"
	copykind "github.com/tablekeeper/tablekeeper/jobs/copy"
	"github.com/tablekeeper/tablekeeper/jobs/export"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// kinds is the list of job kinds: one line each, naming the kind's Args
// type, its section of Config and its worker's constructor.
var kinds = []kind{
	define[archive.Args](func(c *Config) *archive.Config { return &c.Archive }, archive.New),
	define[index.Args](func(c *Config) *indexes.Config { return &c.Index }, index.New),
	define[export.Args](func(c *Config) *export.Config { return &c.Export }, export.New),
	define[blobsync.Args](func(c *Config) *blobsync.Config { return &c.Blobsync }, blobsync.New),
	define[purge.Args](func(c *Config) *purge.Config { return &c.Purge }, purge.New),
	define[purgeday.Args](func(c *Config) *purgeday.Config { return &c.Purgeday }, purgeday.New),
	define[restore.Args](func(c *Config) *restore.Config { return &c.Restore }, restore.New),
	define[copykind.Args](func(c *Config) *copykind.Config { return &c.Copy }, copykind.New),
}

// Config holds one section per kind of the worker's config file; each
// kind owns its section's type, defaults and Validate.
type Config struct {
	// Archive configures the "archive" kind.
	Archive archive.Config `json:"archive"`
	// Index declares the indexes the "index" kind keeps.
	Index indexes.Config `json:"index"`
	// Export configures the "export" kind.
	Export export.Config `json:"export"`
	// Blobsync configures the "blobsync" kind: offload declarations per
	// table and the reconcile's grace period.
	Blobsync blobsync.Config `json:"blobsync"`
	// Purgeday configures the "purgeday" kind: its checkpoint table,
	// time budget, maximum run time and exported part size.
	Purgeday purgeday.Config `json:"purgeday"`
	// Purge configures the "purge" kind.
	Purge purge.Config `json:"purge"`
	// Restore configures the "restore" kind.
	Restore restore.Config `json:"restore"`
	// Copy configures the "copy" kind: its checkpoint table, time budget,
	// maximum run time, page size and partitions written at once.
	Copy copykind.Config `json:"copy"`
}

// Validate fills every section's defaults and checks it; each error names
// the section and the field.
func (c *Config) Validate() error {
	c.link()
	var errs []error
	for _, k := range kinds {
		errs = append(errs, k.validate(c))
	}
	return errors.Join(errs...)
}

// link tells the sections whose bounds depend on how long other kinds'
// jobs may run what that is (each section's own maxRunTime, or the
// default): the index kind's tombstones must outlast every job that writes
// index entries (archive, purge, restore and copy sync their indexes),
// blobsync's grace every job that puts a managed blob before the entity
// that names it (archive, copy, restore).
func (c *Config) link() {
	type runTime struct {
		name string
		d    jobs.Duration
	}
	longest := func(rs ...runTime) (jobs.Duration, string) {
		var best runTime
		for _, r := range rs {
			if d := cmp.Or(r.d, jobs.Duration(jobs.DefaultMaxRunTime)); d > best.d {
				best = runTime{r.name, d}
			}
		}
		return best.d, best.name + ".maxRunTime"
	}
	archive, purge := runTime{"archive", c.Archive.MaxRunTime}, runTime{"purge", c.Purge.MaxRunTime}
	restore, copies := runTime{"restore", c.Restore.MaxRunTime}, runTime{"copy", c.Copy.MaxRunTime}
	c.Index.Writers, c.Index.WritersFrom = longest(archive, purge, restore, copies)
	c.Blobsync.Writers, c.Blobsync.WritersFrom = longest(archive, copies, restore)
}

// NewRegistry returns the registry of every kind's worker, each built on
// store and clk (nil: the wall clock) with its section of cfg and the
// libraries the kinds share (the declared indexes, the offload layout: see
// kit.Deps) and opts; argsRef blobs are read from store.
func NewRegistry(store storeadapter.Store, clk clock.Clock, cfg Config, opts ...Option) (*jobs.Registry, error) {
	if err := cfg.Validate(); err != nil { // the sections the workers get, linked and filled
		return nil, err
	}
	deps, err := Deps(store, clk, cfg, opts...)
	if err != nil {
		return nil, err
	}
	r := jobs.NewRegistry(store.Container)
	for _, k := range kinds {
		if err := k.worker(r, deps, &cfg); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Deps opens the libraries the kinds share from cfg, on store and clk
// (nil: the wall clock): the indexes of the "index" section and the
// offload layout of the "blobsync" section. cfg is validated first. This
// is the one place a worker's clock comes from. opts add what the
// commands provide (WithAccounts).
func Deps(store storeadapter.Store, clk clock.Clock, cfg Config, opts ...Option) (kit.Deps, error) {
	if err := cfg.Validate(); err != nil {
		return kit.Deps{}, err
	}
	set, err := indexes.Open(store, clk, cfg.Index)
	if err != nil {
		return kit.Deps{}, err
	}
	d := kit.Deps{Store: store, Clock: clock.Or(clk), Indexes: set, Layout: cfg.Blobsync.Tables}
	for _, o := range opts {
		o(&d)
	}
	return d, nil
}

// Option adds to the dependencies the catalog hands every kind what only
// the commands can provide.
type Option func(*kit.Deps)

// WithAccounts gives the kinds the other storage accounts of the config's
// "accounts" section (kit.Deps.Accounts): accounts returns the store of a
// declared name, connected on first use.
func WithAccounts(accounts func(name string) (storeadapter.Store, error)) Option {
	return func(d *kit.Deps) { d.Accounts = accounts }
}

// ArgsRegistry returns a registry that decodes and validates the messages
// of every kind, with no workers: what producers (the CLI) check before
// they send. blobs opens the container of an argsRef (nil refuses argsRef).
func ArgsRegistry(blobs func(container string) storeadapter.Blobs) *jobs.Registry {
	r := jobs.NewRegistry(blobs)
	for _, k := range kinds {
		if err := k.args(r); err != nil {
			panic(err) // two kinds of one name in the list above: a programming error
		}
	}
	return r
}

// kind is one entry of the catalog.
type kind struct {
	args     func(r *jobs.Registry) error
	worker   func(r *jobs.Registry, deps kit.Deps, cfg *Config) error
	validate func(cfg *Config) error
}

// define makes the catalog entry of kind T from its config section and
// its worker's constructor.
func define[T jobs.Args, C any, PC interface {
	*C
	Validate() error
}, W jobs.Worker[T]](section func(*Config) PC, newWorker func(kit.Deps, C) (W, error)) kind {
	return kind{
		args: jobs.RegisterArgs[T],
		worker: func(r *jobs.Registry, deps kit.Deps, cfg *Config) error {
			w, err := newWorker(deps, *section(cfg))
			if err != nil {
				return err
			}
			return jobs.Register[T](r, w)
		},
		validate: func(cfg *Config) error { return section(cfg).Validate() },
	}
}

// CheckpointTables returns the tables in which the kinds of a validated
// cfg keep their checkpoints, each once, sorted: where operators look for
// the progress of long jobs (the console's operations page).
func (c *Config) CheckpointTables() []string {
	names := []string{c.Archive.CheckpointTable, c.Index.CheckpointTable, c.Export.CheckpointTable,
		c.Blobsync.CheckpointTable, c.Purgeday.CheckpointTable, c.Purge.CheckpointTable,
		c.Restore.CheckpointTable, c.Copy.CheckpointTable}
	for i, n := range names {
		if n == "" {
			names[i] = jobs.DefaultCheckpointTable
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
