package indexes

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Index kinds (Decl.Kind).
const (
	KindCopy = "copy" // a copy of the entity under the value (secondary index patterns)
	KindList = "list" // the keys of all entities with the value (index entities pattern)
	KindRows = "rows" // one small entity per (value, key) in a table of its own
)

// Index stores (Decl.Store).
const (
	StorePartition = "partition" // the entity's own partition, changed in one transaction with its membership record
	StoreTable     = "table"     // another table (or, for copy, the same table's "<name>_<pk>" partitions)
	StoreBlob      = "blob"      // one blob per value (list only)
)

// Defaults and bounds of Config.
const (
	DefaultTombstoneGrace = time.Hour
	DefaultMaxConflicts   = 8
	MaxMaxConflicts       = 100
	// DefaultTimeBudget is how long one delivery of a rebuild works
	// before it saves its position and continues in a new message.
	DefaultTimeBudget = 30 * time.Second
	// DefaultRebuildParallel is how many chunks of a rebuild run at once,
	// MaxRebuildParallel the most.
	DefaultRebuildParallel = 4
	MaxRebuildParallel     = 32
	// MaxPartitionIndexes bounds the partition-store indexes of one table:
	// an entity's changes to all of them go in one transaction of at most
	// 100 operations.
	MaxPartitionIndexes = 8
	// maxNameChars bounds an index name: it is part of row keys and
	// property names.
	maxNameChars = 32
)

// Config is the "index" section of the worker's config file: the indexes
// declared for each source table, and the settings of the kind. Zero
// fields take the documented defaults.
type Config struct {
	// Tables maps a source table to the indexes declared on it.
	Tables map[string][]Decl `json:"tables,omitempty"`
	// CheckpointTable keeps the positions of rebuilds across
	// redeliveries. Default jobs.DefaultCheckpointTable; a valid table
	// name.
	CheckpointTable string `json:"checkpointTable,omitempty"`
	// TombstoneGrace is how long the record of a removed index entry is
	// kept in the table, rows and blob stores, so that a reconcile that
	// read an older version of the entity and is still running cannot add
	// the entry back. Default 1h; at least the longest of maxRunTime and
	// Writers, + 5m (a job's storage calls end by then), and at most 30
	// days.
	TombstoneGrace jobs.Duration `json:"tombstoneGrace,omitempty"`
	// Writers is the longest maxRunTime of the other kinds that write index
	// entries (archive, purge, restore and copy sync the indexes of what
	// they move): a job of theirs may still be writing that long. The
	// worker's config sets it (jobs/catalog); it is not in the file.
	Writers jobs.Duration `json:"-"`
	// WritersFrom names the setting Writers comes from, for the error.
	WritersFrom string `json:"-"`
	// MaxConflicts bounds the rounds of one compare-and-swap (the
	// membership record, a shared index entity) lost to other workers
	// before the job is retried later. Default 8, 1–100.
	MaxConflicts int `json:"maxConflicts,omitempty"`
	// MaxRunTime is how long one index job may run before its context is
	// cancelled and it is retried (a rebuild resumes from its checkpoint).
	// Default jobs.DefaultMaxRunTime (30m), 1s–24h.
	MaxRunTime jobs.Duration `json:"maxRunTime,omitempty"`
	// TimeBudget is how long one delivery of a rebuild works before it
	// saves its position and continues later in a new message (so a
	// rebuild never spends its deliveries however long it takes). A
	// delivery of a message that was delivered before (its worker died)
	// hands on after a second. Default 30s (or half maxRunTime when that
	// is shorter); at least 1s and below maxRunTime.
	TimeBudget jobs.Duration `json:"timeBudget,omitempty"`
	// RebuildParallel is how many chunks (of a thousand keys) of a
	// rebuild run at once; chunks of one partition never do. Default 4,
	// 1-32.
	RebuildParallel int `json:"rebuildParallel,omitempty"`
}

// Decl declares one index of a source table (docs/index.md documents every
// combination).
type Decl struct {
	// Name identifies the index within its source table: 1–32 letters and
	// digits, starting with a letter, unique regardless of case.
	Name string `json:"name"`
	// Property is the indexed property. An entity without it (or with a
	// null) is not indexed.
	Property string `json:"property"`
	// Kind is "copy", "list" or "rows".
	Kind string `json:"kind"`
	// Store is "partition" or "table" for copy; "partition", "table" or
	// "blob" for list; empty or "table" for rows.
	Store string `json:"store,omitempty"`
	// Table is the index table: required for list/table and rows,
	// optional for copy/table (default: the source table), not allowed
	// otherwise.
	Table string `json:"table,omitempty"`
	// Container is the blob container of list/blob (required there, not
	// allowed otherwise).
	Container string `json:"container,omitempty"`
	// Properties are the properties a copy holds (default: all). Copy only.
	Properties []string `json:"properties,omitempty"`
}

// Validate fills the defaults and checks every field and declaration,
// naming the source table, the index and the rule. It never panics.
func (c *Config) Validate() error {
	c.MaxConflicts = cmp.Or(c.MaxConflicts, DefaultMaxConflicts)
	if err := jobs.CheckRunSettings("index", &c.CheckpointTable, &c.MaxRunTime); err != nil {
		return err
	}
	c.RebuildParallel = cmp.Or(c.RebuildParallel, DefaultRebuildParallel)
	least := time.Duration(max(c.MaxRunTime, c.Writers)) + 5*time.Minute
	c.TombstoneGrace = cmp.Or(c.TombstoneGrace, jobs.Duration(max(DefaultTombstoneGrace, least)))
	if c.MaxConflicts < 1 || c.MaxConflicts > MaxMaxConflicts {
		return fmt.Errorf("index.maxConflicts: must be 1-%d, got %d", MaxMaxConflicts, c.MaxConflicts)
	}
	if err := jobs.CheckTimeBudget("index", &c.TimeBudget, c.MaxRunTime, DefaultTimeBudget); err != nil {
		return err
	}
	if c.RebuildParallel < 1 || c.RebuildParallel > MaxRebuildParallel {
		return fmt.Errorf("index.rebuildParallel: must be 1-%d, got %d", MaxRebuildParallel, c.RebuildParallel)
	}
	if d := time.Duration(c.TombstoneGrace); d < least || d > 30*24*time.Hour {
		from := "index.maxRunTime"
		if c.Writers > c.MaxRunTime {
			from = c.WritersFrom
		}
		return fmt.Errorf("index.tombstoneGrace: must be at least the longest maxRunTime of the kinds that write index entries (index, archive, purge, restore, copy) + 5m (%v, from %s) and at most 720h, got %v", least, from, d)
	}
	_, err := compile(*c)
	return err
}

// compile checks the declarations and resolves them into the indexes of
// each source table.
func compile(c Config) (map[string]*tableIndexes, error) {
	out := map[string]*tableIndexes{}
	owner := map[string]string{} // lower-case index table -> "source/index" that owns it
	rowsTable := map[string]string{}
	var errs []error
	for _, source := range slices.Sorted(maps.Keys(c.Tables)) {
		if err := storeadapter.ValidateTableName(source); err != nil {
			errs = append(errs, fmt.Errorf("index.tables[%q]: %w", source, err))
			continue
		}
		if strings.EqualFold(source, c.CheckpointTable) {
			errs = append(errs, fmt.Errorf("index.tables[%q]: is the checkpoint table", source))
			continue
		}
		if _, dup := out[strings.ToLower(source)]; dup {
			errs = append(errs, fmt.Errorf("index.tables[%q]: declared twice (table names ignore case)", source))
			continue
		}
		ti := &tableIndexes{source: source}
		names := map[string]bool{}
		partition := 0
		for i, d := range c.Tables[source] {
			where := fmt.Sprintf("index.tables[%q][%d]", source, i)
			if d.Name != "" {
				where = fmt.Sprintf("index.tables[%q] index %q", source, d.Name)
			}
			ix, err := resolve(source, d)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			if names[strings.ToLower(d.Name)] {
				errs = append(errs, fmt.Errorf("%s: name: is declared twice for this table (names ignore case)", where))
				continue
			}
			names[strings.ToLower(d.Name)] = true
			if ix.Store == StorePartition {
				if partition++; partition > MaxPartitionIndexes {
					errs = append(errs, fmt.Errorf("%s: store: at most %d partition-store indexes per table (an entity's changes to them go in one transaction)", where, MaxPartitionIndexes))
					continue
				}
			}
			if ix.table != "" && !strings.EqualFold(ix.table, source) {
				key := strings.ToLower(ix.table)
				if prev, ok := owner[key]; ok && !strings.HasPrefix(prev, source+"/") {
					errs = append(errs, fmt.Errorf("%s: table: %s is already the index table of %s; an index table serves one source table", where, ix.table, prev))
					continue
				}
				if prev, ok := rowsTable[key]; ok || ix.Kind == KindRows && owner[key] != "" {
					errs = append(errs, fmt.Errorf("%s: table: %s is shared with %s; a rows index needs a table of its own", where, ix.table, cmp.Or(prev, owner[key])))
					continue
				}
				if strings.EqualFold(ix.table, c.CheckpointTable) {
					errs = append(errs, fmt.Errorf("%s: table: %s is the checkpoint table", where, ix.table))
					continue
				}
				owner[key] = source + "/" + d.Name
				if ix.Kind == KindRows {
					rowsTable[key] = source + "/" + d.Name
				}
			}
			ti.indexes = append(ti.indexes, ix)
		}
		out[strings.ToLower(source)] = ti
	}
	// An index table must not be a declared source table: its rows would
	// be taken for entities.
	for key, who := range owner {
		if ti, ok := out[key]; ok {
			errs = append(errs, fmt.Errorf("index.tables[%q] index %q: table: %s is a declared source table", strings.SplitN(who, "/", 2)[0], strings.SplitN(who, "/", 2)[1], ti.source))
		}
	}
	return out, errors.Join(errs...)
}

// resolve checks one declaration.
func resolve(source string, d Decl) (*index, error) {
	if d.Name == "" {
		return nil, errors.New("name: is required")
	}
	if !validName(d.Name) {
		return nil, fmt.Errorf("name: must be 1-%d letters and digits starting with a letter, got %q", maxNameChars, text.Truncate(d.Name, 40))
	}
	if d.Property == "" {
		return nil, errors.New("property: is required")
	}
	if err := storeadapter.ValidatePropertyName(d.Property); err != nil {
		return nil, fmt.Errorf("property: %w", err)
	}
	ix := &index{Decl: d, source: source}
	switch d.Kind {
	case KindCopy:
		switch d.Store {
		case StorePartition:
			if d.Table != "" {
				return nil, errors.New("table: a partition copy lives in the source partition; remove table")
			}
		case StoreTable:
			ix.table = cmp.Or(d.Table, source)
		default:
			return nil, fmt.Errorf("store: a copy index is stored in %q or %q, got %q", StorePartition, StoreTable, d.Store)
		}
		if err := checkCopyProperties(d); err != nil {
			return nil, err
		}
	case KindList:
		switch d.Store {
		case StorePartition:
			if d.Table != "" {
				return nil, errors.New("table: a partition list lives in the source partition; remove table")
			}
		case StoreTable:
			if d.Table == "" {
				return nil, errors.New("table: is required for a list index in store \"table\"")
			}
			ix.table = d.Table
		case StoreBlob:
			if d.Table != "" {
				return nil, errors.New("table: a blob list has a container, not a table")
			}
			if d.Container == "" {
				return nil, errors.New("container: is required for a list index in store \"blob\"")
			}
			if err := storeadapter.ValidateContainerName(d.Container); err != nil {
				return nil, fmt.Errorf("container: %w", err)
			}
		default:
			return nil, fmt.Errorf("store: a list index is stored in %q, %q or %q, got %q", StorePartition, StoreTable, StoreBlob, d.Store)
		}
	case KindRows:
		if d.Store != "" && d.Store != StoreTable {
			return nil, fmt.Errorf("store: a rows index is always a table of its own (store %q or none), got %q", StoreTable, d.Store)
		}
		ix.Store = StoreTable
		if d.Table == "" {
			return nil, errors.New("table: is required for a rows index")
		}
		if strings.EqualFold(d.Table, source) {
			return nil, errors.New("table: a rows index needs a table of its own, not the source table")
		}
		ix.table = d.Table
	default:
		return nil, fmt.Errorf("kind: must be %q, %q or %q, got %q", KindCopy, KindList, KindRows, text.Truncate(d.Kind, 40))
	}
	if d.Kind != KindList || d.Store != StoreBlob {
		if d.Container != "" {
			return nil, errors.New("container: only a list index in store \"blob\" has a container")
		}
	}
	if d.Kind != KindCopy && len(d.Properties) > 0 {
		return nil, errors.New("properties: only a copy index holds properties")
	}
	if ix.table != "" {
		if err := storeadapter.ValidateTableName(ix.table); err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
	}
	if d.Kind == KindList && d.Store == StoreTable && strings.EqualFold(d.Table, source) {
		return nil, errors.New("table: a list index needs a table other than the source table")
	}
	return ix, nil
}

// checkCopyProperties checks a copy's property list: valid, distinct
// names, none of them reserved for bookkeeping, and few enough to leave
// room for the bookkeeping properties in one entity.
func checkCopyProperties(d Decl) error {
	seen := map[string]bool{}
	for i, p := range d.Properties {
		if err := storeadapter.ValidatePropertyName(p); err != nil {
			return fmt.Errorf("properties[%d]: %w", i, err)
		}
		if reservedProperty(p) {
			return fmt.Errorf("properties[%d]: %q is reserved for index bookkeeping (names starting with %q)", i, p, bookkeepingPrefix)
		}
		if seen[p] {
			return fmt.Errorf("properties[%d]: %q is listed twice", i, p)
		}
		seen[p] = true
	}
	if limit := storeadapter.MaxCustomProperties - copyBookkeeping; len(d.Properties) > limit {
		return fmt.Errorf("properties: a copy holds at most %d properties (an entity's %d less %d for bookkeeping), got %d",
			limit, storeadapter.MaxCustomProperties, copyBookkeeping, len(d.Properties))
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > maxNameChars || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
