package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// indexUsage lists the index subcommands.
const indexUsage = `usage: enqueue index <subcommand> [flags]

subcommands:
  lookup     print the keys (-entities: the entities) an index lists under a value, reading the index only:
               -table T -index NAME -value V [-type TYPE] [-pk P] [-entities] [-config FILE]
  reconcile  enqueue the reconcile of one entity's indexes: -table T -pk P -rk R [-id ID]; or of many,
               keys read as JSON lines {"pk":"…","rk":"…"} from stdin or -file [-concurrency N]
  rebuild    enqueue the rebuild of a table's indexes: -table T [-pk P] [-id ID]
  prune      enqueue the folding of a table's table lists and the deletion of expired dead rows: -table T [-id ID]
  check      compare an index with its table, read-only; exit status 1 when it finds problems:
               -table T -index NAME [-config FILE]

The declarations come from the worker's config file (its "index" section): -config FILE, default
$TABLEKEEPER_CONFIG. lookup and check need it; reconcile, rebuild and prune use it, when given, to check
that the table has indexes. Run 'enqueue index <subcommand> -h' for its flags.
`

// valueTypes are the -type names of lookup, in the order the help lists
// them.
var valueTypes = []string{"string", "bool", "int32", "int64", "double", "datetime", "guid", "binary"}

// checkFlushRows is how many findings check prints between two flushes of
// its table: the columns are aligned within each block of this many rows,
// and memory does not grow with the number of findings.
const checkFlushRows = 200

// propertiesChars is how much of an entity's properties lookup's table
// shows.
const propertiesChars = 200

// runIndex runs one index subcommand and returns its name for error
// messages ("index lookup").
func (m *Main) runIndex(ctx context.Context, args []string) (string, error) {
	return m.runGroup(ctx, "index", indexUsage, map[string]func(context.Context, []string) error{
		"lookup": m.indexLookup, "reconcile": m.indexReconcile, "check": m.indexCheck,
		"rebuild": func(ctx context.Context, args []string) error { return m.indexTableJob(ctx, args, false) },
		"prune":   func(ctx context.Context, args []string) error { return m.indexTableJob(ctx, args, true) },
	}, args)
}

// configFile is what enqueue reads of the worker's config file: every
// kind's section, strictly as the worker does (catalog.Config, so the
// index declarations are checked key by key), the runner section,
// which is the worker's and only accepted here, and the other accounts
// (copy checks its -from and -to against them).
type configFile struct {
	Runner   json.RawMessage `json:"runner"`
	Accounts cli.Accounts    `json:"accounts"`
	catalog.Config
}

// configFlag registers -config on fs, defaulting to $TABLEKEEPER_CONFIG.
func configFlag(fs *flag.FlagSet, path *string, what string) {
	fs.StringVar(path, "config", os.Getenv(cli.EnvConfig),
		"the worker's config file, whose \"index\" section declares the indexes (env "+cli.EnvConfig+"); "+what)
}

// indexConfig reads and checks the index section of the config file at
// path. Its errors are usage errors that name -config, the file and, for
// a bad key, its line:column.
func indexConfig(path string) (indexes.Config, error) {
	var f configFile
	if err := cli.ReadConfigFile(path, &f); err != nil {
		return indexes.Config{}, &usageError{err: err}
	}
	// The whole file, as the worker checks it: the index section's
	// tombstones depend on the other kinds' run times.
	if err := f.Validate(); err != nil {
		return indexes.Config{}, usagef("-config %s: %v", path, err)
	}
	cfg := f.Index
	if len(cfg.Tables) == 0 {
		return indexes.Config{}, usagef("-config %s: declares no indexes (its \"index\" section has no \"tables\")", path)
	}
	return cfg, nil
}

// requireConfig returns the index section of -config, which the command
// needs.
// openIndex reads the declarations of the -config file (required by
// cmd), connects, and returns the indexes and the declaration of table's
// index name.
func (m *Main) openIndex(c *common, cfgPath, table, name, cmd string) (*indexes.Set, indexes.Decl, error) {
	cfg, err := requireConfig(cfgPath, cmd)
	if err != nil {
		return nil, indexes.Decl{}, err
	}
	store, err := m.connect(c)
	if err != nil {
		return nil, indexes.Decl{}, err
	}
	x, err := openIndexes(store, cfg, cfgPath, table)
	if err != nil {
		return nil, indexes.Decl{}, err
	}
	d, err := declaration(x, cfgPath, table, name)
	return x, d, err
}

func requireConfig(path, cmd string) (indexes.Config, error) {
	if path == "" {
		return indexes.Config{}, usagef("-config: %s reads the index declarations from the worker's config file: give -config FILE or set $%s", cmd, cli.EnvConfig)
	}
	return indexConfig(path)
}

// openIndexes binds the declarations to the store and checks that table
// has indexes.
func openIndexes(store storeadapter.Store, cfg indexes.Config, path, table string) (*indexes.Set, error) {
	x, err := indexes.Open(store, nil, cfg)
	if err != nil {
		return nil, usagef("-config %s: %v", path, err)
	}
	if len(x.Names(table)) == 0 {
		return nil, usagef("-table: %s has no indexes declared in -config %s (tables with indexes: %s)", table, path, strings.Join(x.Tables(), ", "))
	}
	return x, nil
}

// declaration returns the resolved declaration of the index -index names
// (names ignore case).
func declaration(x *indexes.Set, path, table, name string) (indexes.Decl, error) {
	d, err := x.Declaration(table, name)
	if err != nil {
		return d, usagef("-index: %s has no index %q in -config %s (its indexes: %s)", table, name, path, strings.Join(x.Names(table), ", "))
	}
	return d, nil
}

// visited returns the names of the flags set on the command line.
func visited(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkTableFlag checks -table: given, and a valid table name.
func checkTableFlag(table string) error {
	if err := storeadapter.ValidateTableName(table); err != nil {
		return usagef("-table: %v", err)
	}
	return nil
}

// indexArgsFlags renames the index args fields in validation errors to
// the flags that set them.
var indexArgsFlags = strings.NewReplacer(
	"args.table", "-table",
	"args.pk", "-pk",
	"args.rk", "-rk",
)

// indexLineFields renames the index args fields in the errors of a key
// line of a bulk reconcile to the line's own fields.
var indexLineFields = strings.NewReplacer(
	"args.pk", "pk",
	"args.rk", "rk",
)

// indexReconcile enqueues index reconciles: one entity's from flags, or
// one per key line read from stdin or -file.
func (m *Main) indexReconcile(ctx context.Context, args []string) error {
	var (
		c                          common
		table, pk, rk, id, cfgPath string
		file                       string
		concurrency                int
	)
	fs := m.newFlagSet("index reconcile", "index reconcile -table T (-pk P -rk R [-id ID] | [-file F] [-concurrency N]) [-config FILE] [flags]",
		"Enqueues index jobs that bring every index of table -table up to date with an entity as it is now (a\n"+
			"missing entity is removed from them): run one after each write of an indexed entity, in any order.\n"+
			"With -pk and -rk it enqueues one and prints its op id and message id. With neither it reads keys as\n"+
			"JSON lines {\"pk\":\"…\",\"rk\":\"…\"} from stdin or -file (blank lines skipped) and enqueues one job per\n"+
			"line, each with a generated op id; bad lines are reported as \"line N: <error>\" and skipped, and the\n"+
			"exit status is then 1. With -config (default $"+cli.EnvConfig+") the table must have declared indexes.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&pk, "pk", "", "PartitionKey of the one entity (with -rk)")
	fs.StringVar(&rk, "rk", "", "RowKey of the one entity (with -pk)")
	fs.StringVar(&id, "id", "", "operation id of the one job, 1-128 characters of A-Za-z0-9._:- (default: generated)")
	fs.StringVar(&file, "file", "", "read the keys from this file instead of stdin (without -pk and -rk)")
	fs.IntVar(&concurrency, "concurrency", client.DefaultConcurrency, "messages sent at once when reading keys (1-1024)")
	configFlag(fs, &cfgPath, "optional: checks that -table has indexes")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	single := set["pk"] || set["rk"]
	switch {
	case single && !(set["pk"] && set["rk"]):
		return usagef("-pk and -rk: give both to reconcile one entity, or neither to read keys from stdin or -file")
	case single && set["file"]:
		return usagef("-file: reads the keys of many entities; give -file or -pk and -rk, not both")
	case single && set["concurrency"]:
		return usagef("-concurrency: is for keys read from stdin or -file, not for one entity")
	case !single && set["id"]:
		return usagef("-id: names the one job of -pk and -rk; keys read from stdin or -file each get a generated id")
	}
	if err := checkTableFlag(table); err != nil {
		return err
	}
	if err := checkConcurrency(concurrency); err != nil {
		return err
	}
	one := index.Args{Table: table, PK: &pk, RK: &rk}
	if single {
		if !set["id"] {
			id = client.NewOpID(m.now())
		}
		if err := checkJob(ctx, one, id, indexArgsFlags); err != nil {
			return err
		}
	}
	var cfg indexes.Config
	if cfgPath != "" {
		var err error
		if cfg, err = indexConfig(cfgPath); err != nil {
			return err
		}
	}
	var in *lineInput
	if !single {
		var err error
		if in, err = m.openLines(file); err != nil {
			return err
		}
		defer in.Close()
	}
	cl, store, err := m.connectClient(&c, concurrency)
	if err != nil {
		return err
	}
	if cfgPath != "" {
		if _, err := openIndexes(store, cfg, cfgPath, table); err != nil {
			return err
		}
	}
	if single {
		return m.sendOne(ctx, &c, cl, one, id)
	}
	return m.sendLines(ctx, in, bulkSend{
		client:  cl,
		asJSON:  c.json(),
		command: "enqueue index reconcile -table " + table,
		again:   "a reconcile changes nothing when the indexes are up to date",
		convert: func(ctx context.Context, line string) (client.Message, error) {
			return reconcileLine(ctx, cl, table, line)
		},
	})
}

// reconcileLine prepares the reconcile job of one key line
// {"pk":"…","rk":"…"}, under a new op id. Its errors name the line's field
// and the rule.
func reconcileLine(ctx context.Context, cl *client.Client, table, line string) (client.Message, error) {
	if !strings.HasPrefix(line, "{") {
		return client.Message{}, errors.New(`must be a JSON object {"pk":"…","rk":"…"}`)
	}
	var k struct {
		PK *string `json:"pk"`
		RK *string `json:"rk"`
	}
	if err := jobs.DecodeStrict([]byte(line), &k, ""); err != nil {
		return client.Message{}, err
	}
	switch {
	case k.PK == nil:
		return client.Message{}, errors.New("pk: is required")
	case k.RK == nil:
		return client.Message{}, errors.New("rk: is required")
	}
	msg, err := cl.Prepare(ctx, index.Args{Table: table, PK: k.PK, RK: k.RK})
	if err != nil {
		return msg, errors.New(indexLineFields.Replace(jobError(err, msg.OpID).Error()))
	}
	return msg, nil
}

// tableJobs are the index subcommands that enqueue one job over a whole
// table: their usage and help.
var tableJobs = map[bool]struct{ name, usage, help string }{
	false: {"index rebuild", "index rebuild -table T [-pk P] [-id ID] [-config FILE] [flags]",
		"Enqueues one index job that rebuilds every index of table -table: it reconciles each entity with every\n" +
			"index rewritten, removes the entries whose entity is gone or has another value, and prunes expired\n" +
			"tombstones, and folds the table lists' markers into their lines. With -pk it covers that partition's\n" +
			"entities only (and leaves the dead rows and the folding to 'index prune'). It saves its position under its op id\n" +
			"after each page, so a redelivered message resumes where the last attempt stopped. It prints the op id\n" +
			"and the message id. With -config (default $" + cli.EnvConfig + ") the table must have declared indexes."},
	true: {"index prune", "index prune -table T [-id ID] [-config FILE] [flags]",
		"Enqueues one index job that folds the markers of table -table's table lists into the lists' lines (so\n" +
			"that lookups read a few lines instead of a marker per member), then deletes the expired dead rows of its\n" +
			"rows indexes and the expired dead markers of its table lists: made dead more than index.tombstoneGrace\n" +
			"ago, one per change of an entity's value, which lookups read past until a prune or a rebuild deletes\n" +
			"them. It reads those rows only and writes nothing else. It saves its position under its op id after each\n" +
			"value folded and each page. It prints the op id and the message id. With -config (default\n" +
			"$" + cli.EnvConfig + ") the table must have declared indexes."},
}

// indexTableJob enqueues the rebuild of a table's indexes (or of one
// partition's entities), or with prune the prune of its rows indexes.
func (m *Main) indexTableJob(ctx context.Context, args []string, prune bool) error {
	var (
		c                      common
		table, pk, id, cfgPath string
	)
	j := tableJobs[prune]
	fs := m.newFlagSet(j.name, j.usage, j.help, &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	if !prune {
		fs.StringVar(&pk, "pk", "", "rebuild the entities of this partition only")
	}
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	configFlag(fs, &cfgPath, "optional: checks that -table has indexes")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	if err := checkTableFlag(table); err != nil {
		return err
	}
	a := index.Args{Table: table, Rebuild: !prune, Prune: prune}
	if set["pk"] {
		a.PK = &pk
	}
	if !set["id"] {
		id = client.NewOpID(m.now())
	}
	if err := checkJob(ctx, a, id, indexArgsFlags); err != nil {
		return err
	}
	var cfg indexes.Config
	if cfgPath != "" {
		var err error
		if cfg, err = indexConfig(cfgPath); err != nil {
			return err
		}
	}
	cl, store, err := m.connectClient(&c, 0)
	if err != nil {
		return err
	}
	if cfgPath != "" {
		if _, err := openIndexes(store, cfg, cfgPath, table); err != nil {
			return err
		}
	}
	return m.sendOne(ctx, &c, cl, a, id)
}
