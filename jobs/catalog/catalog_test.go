package catalog_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestCatalog: the worker's registry and the producers' registry know the
// same kinds; a producer's registry decodes args but runs nothing.
func TestCatalog(t *testing.T) {
	var cfg catalog.Config
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	workers, err := catalog.NewRegistry(localstore.New(localstore.Options{}), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	args := catalog.ArgsRegistry(nil)
	if w, a := strings.Join(workers.Kinds(), ","), strings.Join(args.Kinds(), ","); w != a || w != "archive,blobsync,copy,export,index,purge,purgeday,restore" {
		t.Fatalf("worker kinds %q, producer kinds %q; want both \"archive,blobsync,copy,export,index,purge,purgeday,restore\"", w, a)
	}
	if h, _ := workers.Handler("archive"); h == nil {
		t.Error("the worker registry has no archive handler")
	}
	if h, _ := args.Handler("archive"); h != nil {
		t.Error("the producers' registry has a handler; want args only")
	}
	text := `{"v":1,"id":"op-1","kind":"archive","args":{"table":"Src","to":"Src","pk":"p","rk":"r"}}`
	if _, err := args.Decode(t.Context(), storeadapter.Message{Text: text}); err == nil || !strings.Contains(err.Error(), "args.to: must differ from args.table") {
		t.Errorf("decode of invalid archive args: %v, want the archive kind's own rule", err)
	}
}

// TestConfigValidate names the section and the field of a bad setting.
func TestConfigValidate(t *testing.T) {
	cfg := catalog.Config{}
	cfg.Archive.MaxConflicts = 1000
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "archive.maxConflicts: must be 1-100, got 1000") {
		t.Fatalf("Validate = %v, want the archive.maxConflicts rule", err)
	}
	if _, err := catalog.NewRegistry(localstore.New(localstore.Options{}), nil, catalog.Config{Archive: cfg.Archive}); err == nil {
		t.Fatal("NewRegistry accepted an invalid archive section")
	}
}

// TestGracesOutlastOtherKinds: blobsync's grace must outlast every job
// that puts a managed blob before the entity naming it (an archive still
// running would else find its blob collected as an orphan), and the index
// tombstones every job that writes index entries: a longer archive,
// copy, restore or purge maxRunTime raises the least grace, and the
// tombstones' default with it.
func TestGracesOutlastOtherKinds(t *testing.T) {
	for kind, set := range map[string]func(*catalog.Config, jobs.Duration){
		"archive": func(c *catalog.Config, d jobs.Duration) { c.Archive.MaxRunTime = d },
		"copy":    func(c *catalog.Config, d jobs.Duration) { c.Copy.MaxRunTime = d },
		"restore": func(c *catalog.Config, d jobs.Duration) { c.Restore.MaxRunTime = d },
	} {
		var cfg catalog.Config
		set(&cfg, jobs.Duration(2*time.Hour))
		cfg.Blobsync.Grace = jobs.Duration(time.Hour)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "blobsync.grace: must be at least the longest maxRunTime of the kinds that write a managed blob before its entity (blobsync, archive, copy, restore), 2h0m0s ("+kind+".maxRunTime)") {
			t.Errorf("Validate = %v, want the blobsync.grace rule at 2h, naming %s.maxRunTime", err, kind)
		}
		cfg.Blobsync.Grace = jobs.Duration(2 * time.Hour)
		if _, err := catalog.NewRegistry(localstore.New(localstore.Options{}), nil, cfg); err != nil {
			t.Errorf("NewRegistry with the grace at 2h: %v", err)
		}
	}
	var cfg catalog.Config
	cfg.Purge.MaxRunTime = jobs.Duration(3 * time.Hour)
	if err := cfg.Validate(); err != nil || time.Duration(cfg.Index.TombstoneGrace) != 3*time.Hour+5*time.Minute {
		t.Errorf("Validate = %v, index.tombstoneGrace %v; want the default raised to purge's maxRunTime + 5m", err, time.Duration(cfg.Index.TombstoneGrace))
	}
	cfg.Index.TombstoneGrace = jobs.Duration(time.Hour)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "index.tombstoneGrace: must be at least the longest maxRunTime of the kinds that write index entries (index, archive, purge, restore, copy) + 5m (3h5m0s, from purge.maxRunTime)") {
		t.Errorf("Validate = %v, want the index.tombstoneGrace rule at 3h5m", err)
	}
}

// TestCheckpointTables: every kind's table once, the default filled in.
func TestCheckpointTables(t *testing.T) {
	var c catalog.Config
	c.Export.CheckpointTable = "ExportCheckpoints"
	c.Purge.CheckpointTable = "ExportCheckpoints"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := c.CheckpointTables()
	if want := []string{"ExportCheckpoints", jobs.DefaultCheckpointTable}; !slices.Equal(got, want) {
		t.Errorf("CheckpointTables = %v, want %v", got, want)
	}
}
