package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
  check      compare an index with its table, read-only; exit status 1 when it finds problems:
               -table T -index NAME [-config FILE]

The declarations come from the worker's config file (its "index" section): -config FILE, default
$TABLEKEEPER_CONFIG. lookup and check need it; reconcile and rebuild use it, when given, to check
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
		"lookup": m.indexLookup, "reconcile": m.indexReconcile, "rebuild": m.indexRebuild, "check": m.indexCheck,
	}, args)
}

// configFile is what enqueue reads of the worker's config file: every
// kind's section, strictly as the worker does (catalog.Config, so the
// index declarations are checked key by key), and the runner section,
// which is the worker's and only accepted here.
type configFile struct {
	Runner json.RawMessage `json:"runner"`
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
	cfg := f.Index
	if err := cfg.Validate(); err != nil {
		return indexes.Config{}, usagef("-config %s: %v", path, err)
	}
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
	x, err := indexes.Open(store, cfg)
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

// parseValue parses -value as -type says, into the Go type of that EDM
// type. Each error names -value and the type's rule.
func parseValue(typ, s string) (any, error) {
	bad := func(rule string) error {
		return usagef("-value: -type %s takes %s, got %q", typ, rule, storeadapter.Truncate(s, 60))
	}
	switch typ {
	case "string":
		return s, nil
	case "bool":
		switch s {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, bad("true or false")
	case "int32":
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, bad(fmt.Sprintf("a decimal integer from %d to %d", math.MinInt32, math.MaxInt32))
		}
		return int32(n), nil
	case "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, bad(fmt.Sprintf("a decimal integer from %d to %d", int64(math.MinInt64), int64(math.MaxInt64)))
		}
		return n, nil
	case "double":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, bad("a decimal number within ±1.8e308 (such as 42, -0.5 or 6.02e23), NaN, Infinity or -Infinity")
		}
		return f, nil
	case "datetime":
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, bad("an RFC 3339 time with its offset, such as 2026-11-21T10:00:00Z or 2026-11-21T11:00:00.5+01:00")
		}
		return t, nil
	case "guid":
		g, err := storeadapter.ParseGUID(s)
		if err != nil {
			return nil, bad("the 8-4-4-4-12 hexadecimal form, such as 0f8fad5b-d9cb-469f-a165-70867728950e")
		}
		return g, nil
	case "binary":
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, bad("hexadecimal, two digits per byte, such as 0aff (\"\" for no bytes)")
		}
		return b, nil
	}
	return nil, usagef("-type: must be one of %s, got %q", strings.Join(valueTypes, ", "), storeadapter.Truncate(typ, 40))
}

// indexLookup prints the keys (and with -entities the entities) an index
// lists under a value, through indexes.Set.Lookup: it reads the index,
// never scans the table.
func (m *Main) indexLookup(ctx context.Context, args []string) error {
	var (
		c                                    common
		table, name, value, typ, pk, cfgPath string
		entities                             bool
	)
	fs := m.newFlagSet("index lookup", "index lookup -table T -index NAME -value V [-type TYPE] [-pk P] [-entities] [-config FILE] [flags]",
		"Prints the keys of the entities that index -index of table -table lists under the value -value, in key\n"+
			"order, reading the index only (the table is never scanned). The value's type must be the indexed\n"+
			"property's: -type int64 does not find an Edm.Int32 property's 42. With -entities it also prints each\n"+
			"entity: for a copy index the copy (its declared properties), else the entity as it is now (none when it\n"+
			"no longer exists). The indexes kept in each partition (store \"partition\") need -pk; for the others\n"+
			"-pk keeps that partition's keys only. The declarations come from -config.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&name, "index", "", "index name, as declared (required; names ignore case)")
	fs.StringVar(&value, "value", "", "the value to look up (required; \"\" is a string value)")
	fs.StringVar(&typ, "type", "string", "the value's type: "+strings.Join(valueTypes, ", ")+
		"\n(datetime: RFC 3339 with offset; guid: 8-4-4-4-12; binary: hexadecimal)")
	fs.StringVar(&pk, "pk", "", "PartitionKey: required for a partition-store index, a filter for the others")
	fs.BoolVar(&entities, "entities", false, "print the entities too (one more read per key, except for a copy index)")
	configFlag(fs, &cfgPath, "required")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	if err := checkTableFlag(table); err != nil {
		return err
	}
	switch {
	case name == "":
		return usagef("-index: is required")
	case !set["value"]:
		return usagef("-value: is required (-value '' looks up the empty string)")
	}
	v, err := parseValue(typ, value)
	if err != nil {
		return err
	}
	if _, err := indexes.EncodeValue(v); err != nil {
		return usagef("-value: %v", err)
	}
	var o indexes.LookupOptions
	o.Entities = entities
	if set["pk"] {
		if err := storeadapter.ValidateKey("pk", pk); err != nil {
			return usagef("-pk: %v", err)
		}
		o.PK = &pk
	}
	x, d, err := m.openIndex(&c, cfgPath, table, name, "lookup")
	if err != nil {
		return err
	}
	if d.Store == indexes.StorePartition && o.PK == nil {
		return usagef("-pk: index %s of %s is kept in each partition (store %q): give the partition to look in", d.Name, table, indexes.StorePartition)
	}
	matches, err := x.Lookup(ctx, table, d.Name, v, o)
	if errors.Is(err, storeadapter.ErrInvalidInput) {
		return &usageError{err: err}
	}
	if err != nil {
		return err
	}
	if c.json() {
		return writeLookupJSON(m.Stdout, table, d.Name, typ, value, o, matches)
	}
	if len(matches) == 0 {
		where := ""
		if o.PK != nil {
			where = fmt.Sprintf(" in partition %q", pk)
		}
		fmt.Fprintf(m.Stdout, "index %s of %s lists nothing under %s%s\n", d.Name, table, cell(storeadapter.Format(v), 0), where)
		return nil
	}
	tw := newTable(m.Stdout)
	if entities {
		row(tw, "PK", "RK", "PROPERTIES")
	} else {
		row(tw, "PK", "RK")
	}
	for _, mt := range matches {
		if !entities {
			row(tw, mt.PK, mt.RK)
			continue
		}
		props := "(the entity no longer exists)"
		if mt.Entity != nil {
			props = cell(properties(*mt.Entity), propertiesChars)
		}
		row(tw, mt.PK, mt.RK, props)
	}
	return tw.Flush()
}

// properties renders an entity's properties for a table cell, by name:
// "Email=jones@contoso.com LastName=Jones".
func properties(e storeadapter.Entity) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(e.Properties)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		var s string
		switch v := e.Properties[name].(type) {
		case time.Time:
			s = v.UTC().Format(time.RFC3339Nano)
		case []byte:
			s = hex.EncodeToString(v)
		default:
			s = fmt.Sprint(v)
		}
		b.WriteString(name + "=" + s)
	}
	return b.String()
}

// lookupMatchJSON is one match of lookup -o json; entity is the OData
// JSON of the entity (every EDM type kept, as the service writes it),
// null when it no longer exists, and absent without -entities.
type lookupMatchJSON struct {
	PK     string          `json:"pk"`
	RK     string          `json:"rk"`
	Entity json.RawMessage `json:"entity,omitempty"`
}

// writeLookupJSON writes lookup's result as one JSON document.
func writeLookupJSON(w io.Writer, table, name, typ, value string, o indexes.LookupOptions, matches []indexes.Match) error {
	out := struct {
		Table   string            `json:"table"`
		Index   string            `json:"index"`
		Type    string            `json:"type"`
		Value   string            `json:"value"`
		PK      *string           `json:"pk,omitempty"`
		Count   int               `json:"count"`
		Matches []lookupMatchJSON `json:"matches"`
	}{Table: table, Index: name, Type: typ, Value: value, PK: o.PK, Count: len(matches), Matches: []lookupMatchJSON{}}
	for _, mt := range matches {
		j := lookupMatchJSON{PK: mt.PK, RK: mt.RK}
		switch {
		case !o.Entities:
		case mt.Entity == nil:
			j.Entity = json.RawMessage("null")
		default:
			data, err := storeadapter.MarshalEntityJSON(*mt.Entity)
			if err != nil {
				return err
			}
			j.Entity = data
		}
		out.Matches = append(out.Matches, j)
	}
	return writeJSON(w, out)
}

// indexArgsFlags renames the index args fields in validation errors to
// the flags that set them.
var indexArgsFlags = strings.NewReplacer(
	"args.table", "-table",
	"args.pk", "-pk",
	"args.rk", "-rk",
	"envelope: id:", "-id:",
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
	fs.IntVar(&concurrency, "concurrency", defaultRawConcurrency, "messages sent at once when reading keys (1-1024)")
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
	reg := catalog.ArgsRegistry(nil)
	var text string
	if single {
		if !set["id"] {
			id = newOpID(m.now())
		}
		var err error
		if text, err = kindMessage(ctx, reg, id, index.Args{Table: table, PK: &pk, RK: &rk}); err != nil {
			return usagef("%s", indexArgsFlags.Replace(err.Error()))
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
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	if cfgPath != "" {
		if _, err := openIndexes(store, cfg, cfgPath, table); err != nil {
			return err
		}
	}
	if single {
		return m.sendOne(ctx, &c, store, id, text)
	}
	return m.sendLines(ctx, in, bulkSend{
		queue:       store.Queue(c.queue),
		concurrency: concurrency,
		asJSON:      c.json(),
		command:     "enqueue index reconcile -table " + table,
		again:       "a reconcile changes nothing when the indexes are up to date",
		convert: func(ctx context.Context, line string) (string, error) {
			return reconcileLine(ctx, reg, table, newOpID(m.now()), line)
		},
	})
}

// reconcileLine turns one key line {"pk":"…","rk":"…"} into the message
// text of its reconcile job. Its errors name the line's field and the rule.
func reconcileLine(ctx context.Context, reg *jobs.Registry, table, id, line string) (string, error) {
	if !strings.HasPrefix(line, "{") {
		return "", errors.New(`must be a JSON object {"pk":"…","rk":"…"}`)
	}
	var k struct {
		PK *string `json:"pk"`
		RK *string `json:"rk"`
	}
	if err := jobs.DecodeStrict([]byte(line), &k, ""); err != nil {
		return "", err
	}
	switch {
	case k.PK == nil:
		return "", errors.New("pk: is required")
	case k.RK == nil:
		return "", errors.New("rk: is required")
	}
	text, err := kindMessage(ctx, reg, id, index.Args{Table: table, PK: k.PK, RK: k.RK})
	if err != nil {
		return "", errors.New(indexLineFields.Replace(err.Error()))
	}
	return text, nil
}

// indexRebuild enqueues the rebuild of a table's indexes (or of one
// partition's entities).
func (m *Main) indexRebuild(ctx context.Context, args []string) error {
	var (
		c                      common
		table, pk, id, cfgPath string
	)
	fs := m.newFlagSet("index rebuild", "index rebuild -table T [-pk P] [-id ID] [-config FILE] [flags]",
		"Enqueues one index job that rebuilds every index of table -table: it reconciles each entity with every\n"+
			"index rewritten, removes the entries whose entity is gone or has another value, and prunes expired\n"+
			"tombstones. With -pk it covers that partition's entities only. It saves its position under its op id\n"+
			"after each page, so a redelivered message resumes where the last attempt stopped. It prints the op id\n"+
			"and the message id. With -config (default $"+cli.EnvConfig+") the table must have declared indexes.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&pk, "pk", "", "rebuild the entities of this partition only")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	configFlag(fs, &cfgPath, "optional: checks that -table has indexes")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := visited(fs)
	if err := checkTableFlag(table); err != nil {
		return err
	}
	a := index.Args{Table: table, Rebuild: true}
	if set["pk"] {
		a.PK = &pk
	}
	if !set["id"] {
		id = newOpID(m.now())
	}
	text, err := kindMessage(ctx, catalog.ArgsRegistry(nil), id, a)
	if err != nil {
		return usagef("%s", indexArgsFlags.Replace(err.Error()))
	}
	var cfg indexes.Config
	if cfgPath != "" {
		if cfg, err = indexConfig(cfgPath); err != nil {
			return err
		}
	}
	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	if cfgPath != "" {
		if _, err := openIndexes(store, cfg, cfgPath, table); err != nil {
			return err
		}
	}
	return m.sendOne(ctx, &c, store, id, text)
}

// indexCheck compares one index with its table, read-only, and prints the
// findings and a summary. It fails (exit status 1) when there are
// findings.
func (m *Main) indexCheck(ctx context.Context, args []string) error {
	var (
		c                    common
		table, name, cfgPath string
	)
	fs := m.newFlagSet("index check", "index check -table T -index NAME [-config FILE] [flags]",
		"Compares index -index with table -table, read-only: every entity is looked up in the index and every\n"+
			"entry's entity is read, about one read each. It prints each finding (missing: the entity has the\n"+
			"value, the index does not list it; stale: the index lists an entity that is gone or has another\n"+
			"value, or a copy is out of date; conflict: a copy index's value is held by another entity;\n"+
			"unindexable: the value cannot be indexed) and a summary. The exit status is 1 when it found any:\n"+
			"'enqueue index rebuild -table T' repairs missing and stale entries. On a table being written it\n"+
			"also reports the changes not reconciled yet. -o json prints one JSON document, streamed.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&name, "index", "", "index name, as declared (required; names ignore case)")
	configFlag(fs, &cfgPath, "required")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := checkTableFlag(table); err != nil {
		return err
	}
	if name == "" {
		return usagef("-index: is required")
	}
	x, d, err := m.openIndex(&c, cfgPath, table, name, "check")
	if err != nil {
		return err
	}
	var out checkOutput
	if c.json() {
		out = newCheckJSON(m.Stdout, table, d.Name)
	} else {
		out = &checkTable{w: m.Stdout, tw: newTable(m.Stdout), table: table, index: d.Name}
	}
	res, err := x.Check(ctx, table, d.Name, out.finding)
	if err != nil {
		// The error goes to stdout too (in JSON), so it is scrubbed here.
		if werr := out.fail(errors.New(m.redact(err.Error()))); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	if err := out.summary(res); err != nil {
		return err
	}
	if n := res.Problems(); n > 0 {
		return fmt.Errorf("index %s of %s: %d problem(s) found", d.Name, table, n)
	}
	return nil
}

// checkOutput prints check's findings as they come, then its summary, or
// how it failed.
type checkOutput interface {
	finding(f indexes.Finding) error
	summary(res indexes.CheckResult) error
	fail(err error) error
}

// checkSummary is the summary of check -o json: CheckResult's counts and
// their total.
type checkSummary struct {
	indexes.CheckResult
	Problems int `json:"problems"`
}

// checkTable prints check's findings as an aligned table, flushed every
// checkFlushRows rows.
type checkTable struct {
	w            io.Writer
	tw           *tabwriter.Writer
	table, index string
	rows         int
}

func (t *checkTable) finding(f indexes.Finding) error {
	if t.rows == 0 {
		row(t.tw, "PROBLEM", "INDEX", "VALUE", "PK", "RK", "DETAIL")
	}
	row(t.tw, f.Problem, f.Index, f.Value, f.PK, f.RK, f.Detail)
	if t.rows++; t.rows%checkFlushRows == 0 {
		return t.tw.Flush()
	}
	return nil
}

func (t *checkTable) summary(res indexes.CheckResult) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	counts := fmt.Sprintf("%d entities read, %d indexed, %d entries read", res.Entities, res.Indexed, res.Entries)
	if res.Problems() == 0 {
		_, err := fmt.Fprintf(t.w, "index %s of %s is consistent: %s\n", t.index, t.table, counts)
		return err
	}
	_, err := fmt.Fprintf(t.w, "index %s of %s: %s; %d missing, %d stale, %d conflicts, %d unindexable\n",
		t.index, t.table, counts, res.Missing, res.Stale, res.Conflicts, res.Unindexable)
	return err
}

func (t *checkTable) fail(error) error { return t.tw.Flush() }

// checkJSON streams check's result as one indented JSON document, as
// writeJSON would print it whole, without holding the findings:
//
//	{"table": …, "index": …, "findings": [ … ], "summary": { … }}
//
// A check that fails part way ends the document with "error" instead of
// "summary", so what was printed stays valid JSON.
type checkJSON struct {
	w   io.Writer
	n   int   // findings written
	err error // the first write error
}

func newCheckJSON(w io.Writer, table, name string) *checkJSON {
	j := &checkJSON{w: w}
	j.printf("{\n  \"table\": %s,\n  \"index\": %s,\n  \"findings\": [", jsonText(table), jsonText(name))
	return j
}

// printf writes to w, remembering the first error.
func (j *checkJSON) printf(format string, args ...any) {
	if j.err == nil {
		_, j.err = fmt.Fprintf(j.w, format, args...)
	}
}

// indented renders v as JSON indented to sit at depth levels.
func indented(v any, depth int) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent(strings.Repeat("  ", depth), "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// jsonText renders s as a JSON string.
func jsonText(s string) string {
	t, _ := indented(s, 0) // a string always encodes
	return t
}

func (j *checkJSON) finding(f indexes.Finding) error {
	s, err := indented(f, 2)
	if err != nil {
		return err
	}
	sep := ","
	if j.n == 0 {
		sep = ""
	}
	j.n++
	j.printf("%s\n    %s", sep, s)
	return j.err
}

// end closes the findings array and the document with key: v.
func (j *checkJSON) end(key string, v any) error {
	s, err := indented(v, 1)
	if err != nil {
		return err
	}
	if j.n > 0 {
		j.printf("\n  ")
	}
	j.printf("],\n  %s: %s\n}\n", jsonText(key), s)
	return j.err
}

func (j *checkJSON) summary(res indexes.CheckResult) error {
	return j.end("summary", checkSummary{CheckResult: res, Problems: res.Problems()})
}

func (j *checkJSON) fail(err error) error { return j.end("error", err.Error()) }
