// Package cli holds what tablekeeper's commands share: connecting to a
// storage account from flags and environment variables, and logging
// through slog (tint on a terminal, JSON otherwise). Secrets never reach a
// log line or an error from here.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/lmittmann/tint"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
)

// Environment variables the commands read when a flag is not given.
const (
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	EnvAccount          = "AZURE_STORAGE_ACCOUNT"
	EnvQueue            = "TABLEKEEPER_QUEUE"
)

// DefaultCheckpointTable is the default table of the workers' range
// checkpoints (worker -checkpoint-table).
const DefaultCheckpointTable = "TablekeeperCheckpoints"

// DefaultQueue is the work queue's default name.
const DefaultQueue = "tablekeeper"

// Account holds how to reach the storage account.
type Account struct {
	// ConnectionString (flag -connection-string, env
	// AZURE_STORAGE_CONNECTION_STRING) wins when set.
	ConnectionString string
	// Name (flag -account, env AZURE_STORAGE_ACCOUNT) connects with
	// DefaultAzureCredential (managed identity, workload identity, az login).
	Name string
	// Retries (flag -storage-retries) is how often the SDK retries a failed
	// storage call before the error reaches tablekeeper, which has its own
	// retries per message. Default 3, the SDK's; 0 turns them off.
	Retries int
	// Log, if set, hears at once when storage stops answering (the first
	// failed try, before the SDK's retries are spent) and when it answers
	// again: see StorageWatch.
	Log *slog.Logger
}

// RegisterFlags adds -connection-string and -account to fs; their defaults
// come from the environment, so flags override it. The connection string's
// value is never printed by -help.
func (a *Account) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.ConnectionString, "connection-string", "", "storage connection string (default $"+EnvConnectionString+"; \"UseDevelopmentStorage=true\" for Azurite)")
	fs.StringVar(&a.Name, "account", os.Getenv(EnvAccount), "storage account name, used with DefaultAzureCredential when no connection string is given (env "+EnvAccount+")")
	fs.IntVar(&a.Retries, "storage-retries", 3, "SDK retries of a failed storage call (0: none; the worker retries messages itself)")
}

// options returns the SDK client options for Retries.
func (a *Account) options() (*azstore.Options, error) {
	if a.Retries < 0 || a.Retries > 10 {
		return nil, fmt.Errorf("-storage-retries: must be 0-10, got %d", a.Retries)
	}
	var co azcore.ClientOptions
	co.Retry.MaxRetries = int32(a.Retries)
	if a.Retries == 0 {
		co.Retry.MaxRetries = -1 // the SDK reads 0 as "default"
	}
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: co}, Queues: &azqueue.ClientOptions{ClientOptions: co},
		Blobs: &azblob.ClientOptions{ClientOptions: co}}
	if a.Log != nil {
		o.OnTry = StorageWatch(a.Log)
	}
	return o, nil
}

// StorageWatch returns an azstore OnTry hook that logs a warning on the
// first failed try after storage last answered, and a notice when it
// answers again: one line per change, not one per try, so an outage is
// visible at once without flooding the log.
func StorageWatch(log *slog.Logger) func(error) {
	var failing atomic.Bool
	return func(err error) {
		switch {
		case err != nil && !failing.Swap(true):
			log.Warn("storage is not answering; retrying", "err", err)
		case err == nil && failing.Swap(false):
			log.Info("storage answers again")
		}
	}
}

// Connect returns the store the flags and environment describe.
func (a *Account) Connect() (*azstore.Store, error) {
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	conn := a.ConnectionString
	if conn == "" {
		conn = os.Getenv(EnvConnectionString)
	}
	if conn != "" {
		return azstore.NewFromConnectionString(conn, opts)
	}
	if a.Name == "" {
		return nil, errors.New("no storage account: set -connection-string or $" + EnvConnectionString + ", or -account / $" + EnvAccount + " for DefaultAzureCredential")
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("DefaultAzureCredential: %w", err)
	}
	return azstore.NewWithCredential(azstore.AccountEndpoints(a.Name), cred, opts)
}

// QueueDefault is the -queue default: $TABLEKEEPER_QUEUE or DefaultQueue.
func QueueDefault() string {
	if q := os.Getenv(EnvQueue); q != "" {
		return q
	}
	return DefaultQueue
}

// CheckUTF8 refuses flag values and arguments that are not valid UTF-8:
// on the way to storage they would be rewritten (invalid bytes become
// U+FFFD), so the command would act on another value than the one given.
// The error names the flag (or the argument's position) and never repeats
// the value.
func CheckUTF8(fs *flag.FlagSet, args []string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && !utf8.ValidString(f.Value.String()) {
			err = fmt.Errorf("-%s: must be valid UTF-8 (the value given is not, and would be changed on the way to storage)", f.Name)
		}
	})
	if err != nil {
		return err
	}
	for i, a := range args {
		if !utf8.ValidString(a) {
			return fmt.Errorf("argument %d: must be valid UTF-8 (the value given is not, and would be changed on the way to storage)", i+1)
		}
	}
	return nil
}

// IsTerminal reports whether stream is a file that is a character device
// (a terminal).
func IsTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// NewLogger returns a slog logger writing to w: tint's coloured text when
// format is "text" or "auto" on a terminal (without colour when NO_COLOR is
// set, as no-color.org asks), JSON otherwise. Durations are written as
// text such as "1.5s" in both, never as bare nanoseconds.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: must be debug, info, warn or error, got %q", level)
	}
	noColor := !IsTerminal(w) || os.Getenv("NO_COLOR") != ""
	text := func() slog.Handler {
		return tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, NoColor: noColor})
	}
	json := func() slog.Handler {
		return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationText})
	}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "auto", "":
		if IsTerminal(w) {
			h = text()
		} else {
			h = json()
		}
	case "text":
		h = text()
	case "json":
		h = json()
	default:
		return nil, fmt.Errorf("-log-format: must be auto, text or json, got %q", format)
	}
	return slog.New(h), nil
}

// durationText writes a duration attribute as its text ("1.5s"): JSON
// readers get a value with its unit instead of bare nanoseconds.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// PoisonRecorder returns the worker's poison recorder of a work queue (see
// poisonConfig), or the configuration's error. now nil is the wall clock.
func PoisonRecorder(s storeadapter.Store, queue string, now func() time.Time) (*poison.Recorder, error) {
	return poison.NewRecorder(poisonConfig(s, queue, now))
}

// PoisonInspector returns the operators' poison inspector of a work queue
// (see poisonConfig), or the configuration's error. now nil is the wall
// clock.
func PoisonInspector(s storeadapter.Store, queue string, now func() time.Time) (*poison.Inspector, error) {
	return poison.NewInspector(poisonConfig(s, queue, now))
}

// poisonConfig wires poison to a work queue: its poison queue and blob
// container are poison.QueueName(queue), its table poison.TableName(queue).
func poisonConfig(s storeadapter.Store, queue string, now func() time.Time) poison.Config {
	pq := poison.QueueName(queue)
	return poison.Config{Tables: s.Tables(), Source: s.Queue(queue), Poison: s.Queue(pq), Blobs: s.Container(pq), Now: now, Host: Host()}
}

// Host is this machine's name for failure records and poison summaries
// ("unknown" when the system does not say). The commands are the only
// place that asks the system; packages below cmd/ take it as configuration.
func Host() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}
