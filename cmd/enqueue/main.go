package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/stopsignal"
	"github.com/tablekeeper/tablekeeper/internal/version"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func main() {
	// SIGINT and SIGTERM are caught since the process started (see
	// stopsignal): the first cancels the command's context; the second
	// prints the counts so far of a command that counts (see Forced) and
	// ends the process at once with status 1.
	m := NewMain()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stopsignal.C
		cancel()
		<-stopsignal.C
		m.Forced()
		os.Exit(exitFailed)
	}()
	os.Exit(m.Run(ctx, os.Args[1:]))
}

// Exit statuses of Run.
const (
	exitOK     = 0 // success
	exitFailed = 1 // an operation failed
	exitUsage  = 2 // unknown command, bad flags or arguments
)

// Main is the enqueue program; tests build one and call Run.
type Main struct {
	// Stdin is what raw reads when no -file is given.
	Stdin io.Reader
	// Stdout receives results; Stderr receives errors, per-line reports
	// and raw's progress line.
	Stdout, Stderr io.Writer
	// Connect returns the store to work on; nil connects to the storage
	// account the common flags and environment describe.
	Connect func() (storeadapter.Store, error)
	// ConfigureAccount, if set, adjusts each command's account once its
	// flags are parsed (tests point the account-name forms at an
	// emulator).
	ConfigureAccount func(a *cli.Account)
	// Clock tells the time (generated op ids, purge cut-offs, checkpoint
	// ages); nil is the wall clock.
	Clock clock.Clock
	// IsTerminal reports whether a stream (stderr for progress lines,
	// stdin for purge's question) is a terminal; nil means cli.IsTerminal.
	IsTerminal func(f any) bool

	// redactor scrubs the credentials of the current command (and
	// anything that looks like one) from everything Run writes to Stdout
	// and Stderr.
	redactor *cli.Redactor
	// final, while a command that counts its progress runs, prints its
	// counts so far (see Forced).
	final atomic.Pointer[func()]
	// account is the account the current command connected to, nil
	// before it did (or when Connect stands in): a refused credential's
	// error names its form (see exit).
	account *cli.Account
}

// setFinal sets what Forced prints while the current command runs; nil
// clears it.
func (m *Main) setFinal(f func()) {
	if f == nil {
		m.final.Store(nil)
		return
	}
	m.final.Store(&f)
}

// Forced prints, on stderr, the counts so far of the running command when
// it counts its progress (a bulk send, a requeue or purge): the process
// calls it when a second interrupt ends it at once, so the operator knows
// how far it got.
func (m *Main) Forced() {
	if f := m.final.Load(); f != nil {
		(*f)()
	}
}

// NewMain returns a Main on the process's standard streams.
func NewMain() *Main { return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr} }

// usageText is printed by "enqueue help" and for an unknown command.
const usageText = `enqueue puts tablekeeper operations on the work queue, manages its poison queue, looks
up and checks the indexes the worker keeps, and checks the outbox rows of transactional enqueues.

usage: enqueue [common flags] <command> [flags]
       enqueue -version          print the version, commit and build date

commands:
  archive         enqueue one archive move:
                    -table T (-to A | -to-blob container/prefix) -pk P (-rk R | -rk-from A [-rk-to B]) [-id ID]
  export          enqueue an export to JSON-lines blobs and a manifest:
                    -table T [-pk P [-rk-from A] [-rk-to B]] -to container/prefix [-since T | -after M | -after-latest]
                    [-gzip] [-max-part-bytes N] [-id ID]
  export verify   check an export's parts against its manifest, read-only (exit 1 on problems):
                    -manifest container/path/manifest-<op>.json | -to container/prefix -table T -id OP
  export clean    delete a finished export's stray parts (of its operation, not in its manifest);
                    a dry run unless -yes: -manifest M | -to container/prefix -table T -id OP [-yes]
  restore         enqueue a restore of an export (or a chain of them) into a table, parts checked first:
                    -manifest M [-manifest M2 ...] [-table T] [-mode insert|replace|mirror] [-dry-run] [-id ID]
  export list     list the exports under a prefix (scope, time, rows, size, mark): -to container/prefix [-verify]
  export prune    delete the exports finished more than N days ago that no kept export needs;
                    a dry run unless -yes: -to container/prefix -keep-days N [-yes]
  checkpoints prune  delete checkpoints last written before a cut-off (done exports and purges,
                    abandoned operations); a dry run unless -yes: [-table T] [-older-than 8d] [-yes]
  purgeday        enqueue the purge of the day tables <prefix>YYYYMMDD older than a cut-off (-dry-run:
                    print what would go, delete nothing): -prefix P (-keep-days N | -before YYYY-MM-DD)
                    [-export-to container/prefix] [-dry-run] [-id ID]
  purge           enqueue the purge of a table's entities (all, or older than a duration) in batches:
                    -table T [-pk P [-rk-from A] [-rk-to B]] [-older-than 720h] [-id ID]
  copy            enqueue the copy of a table, partition or range to a table of this or another account:
                    -table T [-pk P [-rk-from A] [-rk-to B]] [-from NAME] [-to NAME] [-target T2]
                    [-mode insert|replace] [-id ID] [-config FILE]
  raw             enqueue envelopes read as JSON lines from stdin or -file [-concurrency N]
  blobsync offload   enqueue the offload of an entity's large properties to blobs:
                    -table T -pk P -rk R [-property NAME] [-container C] [-id ID]
  blobsync attach    enqueue linking an application's blob to its entity:
                    -table T -pk P -rk R -property NAME -container C -blob NAME [-id ID]
  blobsync reconcile enqueue the repair of a table (or partition) against a container:
                    -table T [-pk P] -container C [-prefix X] [-grace D] [-on-missing report|clear] [-id ID]
  blobsync get    print an entity with its offloaded properties read back and checked against their
                    SHA-256 (exit 1 on a mismatch): -table T -pk P -rk R
  index lookup    print the keys (-entities: the entities) an index lists under a value:
                    -table T -index NAME -value V [-type TYPE] [-pk P] [-entities] [-config FILE]
  index reconcile enqueue the reconcile of one entity's indexes: -table T -pk P -rk R [-id ID]; or of
                    many, keys read as JSON lines {"pk":"…","rk":"…"} from stdin or -file [-concurrency N]
  index rebuild   enqueue the rebuild of a table's indexes: -table T [-pk P] [-id ID]
  index prune     enqueue the deletion of a table's rows indexes' expired dead rows: -table T [-id ID]
  index check     compare an index with its table, read-only (exit 1 on problems): -table T -index NAME
  poison list     list poisoned messages, newest first [-group] [-kind K] [-limit N]
  poison show     show one poisoned message with its attempts and original text: ID or operation id
  poison requeue  send poisoned messages back to the work queue: (ID... | -all | -group G) [-kind K] [-dry-run]
  poison delete   delete poisoned messages and their records: (ID... | -group G) [-dry-run]
  poison purge    delete poisoned and requeued records, stale failure records and abandoned
                    checkpoints [-older-than D] [-kind K] [-group G] [-dry-run] [-yes]
  outbox check    list a table's outbox rows (transactional enqueues) with their status, read-only
                    (exit 1 on poisoned or stale rows and old fences): -table T [-pk P] [-older-than 1h]
  outbox purge    delete the stale outbox rows and old fences check reports; a dry run unless -yes:
                    -table T [-pk P] [-older-than 1h] [-yes]
  stats           count the messages of the work queue and its poison queue, and the dropped jobs
  console         serve the operators' web console (read-only unless -allow-actions):
                    [-listen 127.0.0.1:8080] [-auth-token-env VAR] [-metrics URL]... [-queues A,B] [-config FILE]

common flags (before or after the command):
  -queue NAME               work queue; its poison queue is NAME-poison (default $TABLEKEEPER_QUEUE or "tablekeeper")
  -connection-string S      storage connection string (default $AZURE_STORAGE_CONNECTION_STRING, which is
                            preferable: a flag shows in ps; never printed)
  -account NAME             storage account for DefaultAzureCredential, or for -sas-token
                            (default $AZURE_STORAGE_ACCOUNT)
  -sas-token T              account SAS (sv=…&sig=…) for -account (default $AZURE_STORAGE_SAS_TOKEN,
                            which is preferable; never printed)
  -storage-retries N        SDK retries of a failed storage call, 0-10 (default 3)
  -storage-timeout D        longest one storage call may take, retries included, 1s-1h (default 2m);
                            a silent endpoint is reported on stderr after 5s (or a quarter of D)
  -o table|json             output format (default table)
  -config FILE              index commands: the worker's config file, whose "index" section declares
                            the indexes (default $TABLEKEEPER_CONFIG)

Run 'enqueue <command> -h' for a command's flags. Exit status: 0 success, 1 failure, 2 usage error.
`

// Run runs the command args names (args excludes the program name) and
// returns the exit status: 0 on success, 1 when the operation failed, 2
// for a usage error.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(m.Stderr, usageText)
		return exitUsage
	}
	stdout, stderr := m.Stdout, m.Stderr
	defer func() { m.Stdout, m.Stderr = stdout, stderr }()
	m.redactor, m.account = &cli.Redactor{}, nil
	defer m.setFinal(nil)
	m.redactor.Add((&cli.Account{}).Secrets()...) // the environment's
	m.Stdout, m.Stderr = m.redactor.Writer(stdout), m.redactor.Writer(stderr)
	args, err := commonFirst(args)
	if err != nil {
		fmt.Fprintf(m.Stderr, "enqueue: %s\nRun 'enqueue help' for the commands and common flags.\n", m.redact(err.Error()))
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, usageText)
		return exitOK
	case "-version", "--version":
		if len(rest) > 0 {
			fmt.Fprintf(m.Stderr, "enqueue: -version takes no command or arguments, got %q\n", rest[0])
			return exitUsage
		}
		fmt.Fprintln(m.Stdout, version.String("enqueue"))
		return exitOK
	case "archive":
		err = m.runArchive(ctx, rest)
	case "export":
		name, err = m.runExport(ctx, rest)
	case "restore":
		err = m.runRestore(ctx, rest)
	case "purgeday":
		err = m.runPurgeday(ctx, rest)
	case "purge":
		err = m.runPurge(ctx, rest)
	case "copy":
		err = m.runCopy(ctx, rest)
	case "raw":
		err = m.runRaw(ctx, rest)
	case "poison":
		name, err = m.runPoison(ctx, rest)
	case "index":
		name, err = m.runIndex(ctx, rest)
	case "blobsync":
		name, err = m.runBlobsync(ctx, rest)
	case "stats":
		err = m.runStats(ctx, rest)
	case "checkpoints":
		name, err = m.runCheckpoints(ctx, rest)
	case "outbox":
		name, err = m.runOutbox(ctx, rest)
	case "console":
		err = m.runConsole(ctx, rest)
	default:
		fmt.Fprintf(m.Stderr, "enqueue: unknown command %q%s\nRun 'enqueue help' for the commands.\n", name, cli.DidYouMean(name, commands))
		return exitUsage
	}
	return m.exit(name, err)
}

// commands are the commands Run knows, for a did-you-mean.
var commands = []string{"archive", "export", "purgeday", "purge", "restore", "copy", "raw", "poison", "index", "blobsync", "stats", "checkpoints", "outbox", "help"}

// commonFlags are the flags every command takes (and -config, which the
// index commands take), which may come before the command too.
var commonFlags = []string{"queue", "connection-string", "account", "sas-token", "storage-retries", "storage-timeout", "o", "config"}

// commonFirst moves common flags given before the command ("enqueue
// -queue X stats") after it, where the command's flag set reads them
// (before a "--", which ends the flags). Any other flag before the command
// is an error; -h, -help and -version stay where they are.
func commonFirst(args []string) ([]string, error) {
	var moved []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && len(args[i]) > 1 {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case slices.Contains([]string{"h", "help", "version"}, name):
			if i == 0 {
				return args, nil
			}
			return nil, fmt.Errorf("%s goes before any other flag, or after the command", a)
		case a == "--":
			return nil, errors.New("a command must come before --")
		case !slices.Contains(commonFlags, name):
			var dashed []string
			for _, f := range commonFlags {
				dashed = append(dashed, "-"+f)
			}
			return nil, fmt.Errorf("flag %s before the command: only the common flags (%s) may come before it; put it after the command%s",
				a, strings.Join(dashed, ", "), cli.DidYouMean("-"+name, dashed))
		case hasValue:
			moved = append(moved, a)
			i++
		case i+1 >= len(args):
			return nil, fmt.Errorf("flag %s needs a value", a)
		default:
			moved = append(moved, a, args[i+1])
			i += 2
		}
	}
	if len(moved) == 0 {
		return args, nil
	}
	if i == len(args) {
		return nil, errors.New("no command after the flags")
	}
	rest := args[i:]
	out := slices.Clone(rest)
	if k := slices.Index(rest, "--"); k >= 0 {
		out = append(slices.Clone(rest[:k]), moved...)
		return append(out, rest[k:]...), nil
	}
	return append(out, moved...), nil
}

// exit reports err (scrubbed of secrets) and returns its exit status.
func (m *Main) exit(cmd string, err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		if !ue.printed {
			fmt.Fprintf(m.Stderr, "enqueue %s: %s\nRun 'enqueue %s -h' for usage.\n", cmd, m.redact(ue.Error()), cmd)
		}
		return exitUsage
	case errors.Is(err, errReported):
		return exitFailed
	}
	if m.account != nil {
		err = m.account.Explain(err) // a refused credential: its form and what to check
	}
	fmt.Fprintf(m.Stderr, "enqueue %s: %s\n", cmd, m.redact(err.Error()))
	return exitFailed
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct {
	err error
	// printed is set when the flag package has already printed the error
	// and the usage.
	printed bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// errReported is returned by a command that has already printed why it
// failed: Run exits with status 1 and prints nothing more.
var errReported = errors.New("failed (reported above)")

// redact replaces every credential of the current command in s (for
// text that goes elsewhere than Stdout and Stderr, which redact on their
// own).
func (m *Main) redact(s string) string { return m.redactor.String(s) }

// common holds the flags every command accepts.
type common struct {
	queue   string
	account cli.Account
	output  string
	// flagOut collects what the flag package prints (usage, parse errors)
	// until parse knows whether it goes to stdout (-h) or stderr.
	flagOut bytes.Buffer
}

// json reports whether the output format is JSON.
func (c *common) json() bool { return c.output == "json" }

// newFlagSet returns the flag set of one command with the common flags
// registered. line is the command's usage line, about what it does.
func (m *Main) newFlagSet(name, line, about string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&c.flagOut)
	fs.StringVar(&c.queue, "queue", cli.QueueDefault(), "work queue; its poison queue is <queue>-poison (env "+cli.EnvQueue+")")
	c.account.RegisterFlags(fs)
	fs.StringVar(&c.output, "o", "table", "output format: table or json")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: enqueue %s\n\n%s\n\nflags:\n", line, about)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args with fs, allowing flags after positional arguments
// ("poison show ID -o json"); everything after "--" is positional. It
// returns the positional arguments and checks the common flags and that
// every value is valid UTF-8. The usage that -h asks for goes to stdout,
// a parse error and the usage after it to stderr.
func (m *Main) parse(fs *flag.FlagSet, c *common, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				_, werr := c.flagOut.WriteTo(m.Stdout)
				return nil, cmp.Or(werr, err)
			}
			// The error alone, and a one-line hint (exit prints it), not
			// the flag list the flag package printed after it.
			return nil, &usageError{err: cli.FlagError(err, fs)}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	m.redactor.Add(c.account.Secrets()...)
	if err := cli.CheckUTF8(fs, pos); err != nil {
		return nil, &usageError{err: err}
	}
	if c.output != "table" && c.output != "json" {
		return nil, usagef("-o: must be table or json, got %q", c.output)
	}
	if err := c.account.CheckFlags(); err != nil {
		return nil, &usageError{err: err}
	}
	if err := storeadapter.ValidateQueueName(c.queue); err != nil {
		return nil, usagef("-queue: %v", err)
	}
	return pos, nil
}

// connect returns the store: Main.Connect's, or the account's.
func (m *Main) connect(c *common) (storeadapter.Store, error) {
	if m.Connect != nil {
		return m.Connect()
	}
	// Say at once when storage is not answering, instead of staying silent
	// through the SDK's retries; warnings only, plain text.
	if log, err := cli.NewLogger(m.Stderr, "text", "warn"); err == nil {
		c.account.Log = log
	}
	if m.ConfigureAccount != nil {
		m.ConfigureAccount(&c.account)
	}
	m.account = &c.account
	s, err := c.account.Connect()
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return s, nil
}

// isTerminal reports whether stream is a terminal.
func (m *Main) isTerminal(stream any) bool {
	if m.IsTerminal != nil {
		return m.IsTerminal(stream)
	}
	return cli.IsTerminal(stream)
}

// now returns the current time.
func (m *Main) now() time.Time { return clock.Or(m.Clock).Now() }

// parseNoArgs parses a command that takes flags only.
func (m *Main) parseNoArgs(fs *flag.FlagSet, c *common, args []string) error {
	pos, err := m.parse(fs, c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (this command takes flags only)", pos[0])
	}
	return nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a tabwriter for aligned columns; Flush it when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes one table row of cells, each made safe with cell.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, cell(c, 0))
	}
	io.WriteString(w, "\n")
}

// cell makes s fit a table cell: control characters (tabs, newlines,
// terminal escapes) become spaces, "" becomes "-", and a text
// longer than limit characters is cut and ends with "…" when limit > 0.
func cell(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if s == "" {
		return "-"
	}
	if limit > 0 {
		s = text.Truncate(s, limit)
	}
	return s
}

// timeCell formats t for a table: UTC, to the second; "-" when zero.
func timeCell(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
