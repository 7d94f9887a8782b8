package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/client"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/lmittmann/tint"

	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
)

// Environment variables the commands read when a flag is not given.
const (
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	EnvAccount          = "AZURE_STORAGE_ACCOUNT"
	EnvSASToken         = "AZURE_STORAGE_SAS_TOKEN"
	EnvQueue            = "TABLEKEEPER_QUEUE"
)

// DefaultQueue is the work queue's default name.
const DefaultQueue = "tablekeeper"

// Account holds how to reach the storage account. Exactly one of three
// forms must be given (see Auth):
//
//   - a connection string: account name and key, a SAS
//     (SharedAccessSignature=, with service endpoints or an account name),
//     or UseDevelopmentStorage=true (Azurite);
//   - an account name alone: Microsoft Entra ID through
//     DefaultAzureCredential (managed identity, workload identity, Azure
//     CLI);
//   - an account name and a SAS token.
type Account struct {
	// ConnectionString (flag -connection-string, env
	// AZURE_STORAGE_CONNECTION_STRING) is the first form.
	ConnectionString string
	// Name (flag -account, env AZURE_STORAGE_ACCOUNT) is the account of
	// the second and third forms.
	Name string
	// SASToken (flag -sas-token, env AZURE_STORAGE_SAS_TOKEN) is the query
	// string of an account SAS for the blob, queue and table services,
	// used with Name.
	SASToken string
	// Retries (flag -storage-retries) is how often the SDK retries a failed
	// storage call before the error reaches tablekeeper, which has its own
	// retries per message. Default 3, the SDK's; 0 turns them off.
	Retries int
	// Timeout (flag -storage-timeout) bounds each storage call, the SDK's
	// retries included. Default (0) azstore.DefaultCallTimeout, 2 min;
	// 1s-1h.
	Timeout time.Duration
	// Log, if set, hears at once when storage stops answering (the first
	// failed try, before the SDK's retries are spent), what a call is
	// waiting for while an endpoint stays silent, and when storage answers
	// again: see StorageWatch.
	Log *slog.Logger
	// Endpoints, if set, returns the service URLs of an account name
	// (the name forms); nil means the public cloud's
	// (azstore.AccountEndpoints). Tests point it at an emulator.
	Endpoints func(account string) azstore.Endpoints
	// Credential holds the options of DefaultAzureCredential (the Entra ID
	// form); nil keeps the SDK's defaults. Tests turn off instance
	// discovery, which asks login.microsoftonline.com whatever the
	// authority host.
	Credential *azidentity.DefaultAzureCredentialOptions
}

// RegisterFlags adds -connection-string, -account, -sas-token,
// -storage-retries and -storage-timeout to fs; the account name's default comes from the
// environment, so flags override it. The connection string and the SAS
// token are read from the environment only when used, so -help never
// prints them.
func (a *Account) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.ConnectionString, "connection-string", "", "storage connection string: account key, SAS, or \"UseDevelopmentStorage=true\" for Azurite (default $"+EnvConnectionString+", which is preferable: a flag shows in ps)")
	fs.StringVar(&a.Name, "account", os.Getenv(EnvAccount), "storage account name, used with DefaultAzureCredential, or with -sas-token (env "+EnvAccount+")")
	fs.StringVar(&a.SASToken, "sas-token", "", "account SAS token (sv=…&sig=…) for -account (default $"+EnvSASToken+", which is preferable: a flag shows in ps)")
	fs.IntVar(&a.Retries, "storage-retries", 3, "SDK retries of a failed storage call (0: none; never of a receive; the worker retries messages itself)")
	DurationVar(fs, &a.Timeout, "storage-timeout", azstore.DefaultCallTimeout, "longest one storage call may take, the SDK's retries included (1s-1h); "+
		"a try unanswered after 5s (or a quarter of this) is reported on stderr")
}

// connectionString is the connection string in force: the flag's, else
// the environment's.
func (a *Account) connectionString() string {
	return strings.TrimSpace(cmp.Or(a.ConnectionString, os.Getenv(EnvConnectionString)))
}

// sasToken is the SAS token in force: the flag's, else the environment's.
func (a *Account) sasToken() string {
	return strings.TrimSpace(cmp.Or(a.SASToken, os.Getenv(EnvSASToken)))
}

// flagNames turns the fields client.Account's errors name into the
// flags (and variables) that set them.
var flagNames = strings.NewReplacer(
	"Account.ConnectionString", "-connection-string ($"+EnvConnectionString+")",
	"Account.Name", "-account ($"+EnvAccount+")",
	"Account.SASToken", "-sas-token ($"+EnvSASToken+")")

// account is the client.Account the flags and environment describe.
func (a *Account) account() client.Account {
	return client.Account{ConnectionString: a.connectionString(), Name: a.Name, SASToken: a.sasToken(),
		CredentialOptions: a.Credential, Endpoints: a.Endpoints}
}

// Auth returns the credential form the flags and environment select, or an
// error naming the flags (and variables) that conflict or are missing.
// It never quotes a credential.
func (a *Account) Auth() (client.AuthForm, error) {
	form, err := a.account().Form()
	if err != nil {
		return "", errors.New(flagNames.Replace(err.Error()))
	}
	return form, nil
}

// DisplayName returns the account name for display (-print-config): the
// name when it is a valid storage account name, else a note, since a
// credential pasted into the wrong variable must not be repeated.
func (a *Account) DisplayName() string {
	if strings.TrimSpace(a.Name) == "" {
		return ""
	}
	if client.ValidAccountName(a.Name) != nil {
		return "(not a storage account name: not shown)"
	}
	return a.Name
}

// Secrets returns every credential value the account holds or the SDK may
// read from the environment, for a Redactor: the connection strings (flag
// and environment) with their AccountKey and SharedAccessSignature values
// and signatures, the SAS tokens and their signatures, and the secrets
// DefaultAzureCredential reads (AZURE_CLIENT_SECRET,
// AZURE_CLIENT_CERTIFICATE_PASSWORD, and AZURE_PASSWORD of its
// username-and-password environment credential).
func (a *Account) Secrets() []string {
	out := credentialSecrets([]string{a.ConnectionString, os.Getenv(EnvConnectionString)}, []string{a.SASToken, os.Getenv(EnvSASToken)})
	return append(out, os.Getenv("AZURE_CLIENT_SECRET"), os.Getenv("AZURE_CLIENT_CERTIFICATE_PASSWORD"), os.Getenv("AZURE_PASSWORD"))
}

// credentialSecrets returns the values a Redactor must replace for the
// connection strings conns (each whole, its AccountKey, its
// SharedAccessSignature and that SAS's signature) and the SAS tokens sases
// (each whole and its signature).
func credentialSecrets(conns, sases []string) []string {
	var out []string
	addSAS := func(sas string) {
		out = append(out, sas)
		if q, err := url.ParseQuery(strings.TrimPrefix(sas, "?")); err == nil {
			out = append(out, q["sig"]...)
		}
	}
	for _, conn := range conns {
		out = append(out, conn)
		for part := range strings.SplitSeq(conn, ";") {
			k, v, _ := strings.Cut(part, "=")
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "accountkey":
				out = append(out, strings.TrimSpace(v))
			case "sharedaccesssignature":
				addSAS(strings.TrimSpace(v))
			}
		}
	}
	for _, sas := range sases {
		addSAS(strings.TrimSpace(sas))
	}
	return out
}

// Limits of -storage-timeout.
const (
	MinStorageTimeout = time.Second
	MaxStorageTimeout = time.Hour
)

// CheckFlags refuses a -storage-retries or -storage-timeout out of range,
// naming the flag and its rule (a usage error; Connect checks them too).
func (a *Account) CheckFlags() error {
	if a.Retries < 0 || a.Retries > 10 {
		return fmt.Errorf("-storage-retries: must be 0-10, got %d", a.Retries)
	}
	if a.Timeout != 0 && (a.Timeout < MinStorageTimeout || a.Timeout > MaxStorageTimeout) {
		return fmt.Errorf("-storage-timeout: must be %v-%v, got %v", MinStorageTimeout, MaxStorageTimeout, a.Timeout)
	}
	return nil
}

// options returns the SDK client options for Retries and Timeout.
func (a *Account) options() (*azstore.Options, error) {
	if err := a.CheckFlags(); err != nil {
		return nil, err
	}
	var co azcore.ClientOptions
	co.Retry.MaxRetries = int32(a.Retries)
	if a.Retries == 0 {
		co.Retry.MaxRetries = -1 // the SDK reads 0 as "default"
	}
	o := &azstore.Options{Tables: &aztables.ClientOptions{ClientOptions: co}, Queues: &azqueue.ClientOptions{ClientOptions: co},
		Blobs: &azblob.ClientOptions{ClientOptions: co}, CallTimeout: a.Timeout}
	if a.Log != nil {
		o.OnTry, o.OnWait = StorageWatch(a.Log)
	}
	return o, nil
}

// StorageWatch returns azstore's OnTry and OnWait hooks, which log:
//
//   - a warning on the first failed try after storage last answered
//     ("storage is not answering; retrying"), or the first answered with
//     an internal error (HTTP 500: "storage answered with a server
//     error"; Azurite answers so a receive of a message it cannot return,
//     which is no outage);
//   - a warning while a try waits for an endpoint that does not answer
//     ("waiting for queue service at HOST (5s)", again as the wait
//     doubles; one line per service and host at a time, however many
//     calls wait), or for a token ("waiting for the credential to sign
//     in (5s)");
//   - a notice when storage answers again after either.
//
// One line per change, not one per try, so an outage is visible at once
// without flooding the log.
func StorageWatch(log *slog.Logger) (onTry func(error), onWait func(azstore.Wait)) {
	var failing, erring, waited atomic.Bool
	var mu sync.Mutex
	lastWait := map[string]time.Time{} // by service and host: when a wait was last logged
	onTry = func(err error) {
		switch {
		case errors.Is(err, storeadapter.ErrServiceFailed):
			// It did answer: with an internal error (HTTP 500).
			if !erring.Swap(true) {
				log.Warn("storage answered with a server error", "err", err)
			}
			return
		case err != nil:
			if !failing.Swap(true) {
				log.Warn("storage is not answering; retrying", "err", err)
			}
			return
		}
		erring.Store(false)
		wasFailing, wasWaiting := failing.Swap(false), waited.Swap(false)
		if wasFailing || wasWaiting {
			log.Info("storage answers again")
		}
	}
	onWait = func(w azstore.Wait) {
		key := w.Service + " " + w.Host
		now := time.Now()
		mu.Lock()
		quiet := now.Sub(lastWait[key]) >= w.Waited/2
		if quiet {
			lastWait[key] = now
		}
		mu.Unlock()
		switch {
		case !quiet:
		case w.Service == azstore.SignIn:
			waited.Store(true)
			log.Warn(fmt.Sprintf("waiting for the credential to sign in (%v)", w.Waited), "service", w.Service, "waited", w.Waited)
		default:
			waited.Store(true)
			log.Warn(fmt.Sprintf("waiting for %s service at %s (%v)", w.Service, w.Host, w.Waited), "service", w.Service, "host", w.Host, "waited", w.Waited)
		}
	}
	return onTry, onWait
}

// Connect returns the store the flags and environment describe (see
// Auth and client.Account.Store). Its errors name the flags and never
// quote a credential.
func (a *Account) Connect() (*azstore.Store, error) {
	s, err := a.connect(a.account())
	if err != nil {
		return nil, flagError{err}
	}
	return s, nil
}

// connect returns the store of acct with a's SDK options (retries, call
// timeout, the storage watch), endpoints and credential options: the one
// way both the account of the flags and the config's other accounts are
// reached.
func (a *Account) connect(acct client.Account) (*azstore.Store, error) {
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	acct.Options, acct.CredentialOptions, acct.Endpoints = opts, a.Credential, a.Endpoints
	return acct.Store()
}

// flagError is an error of client.Account with the fields it names put
// as the flags that set them; it unwraps to the original, so errors.Is
// still sees the SDK's and storeadapter's errors.
type flagError struct{ err error }

func (e flagError) Error() string { return flagNames.Replace(e.err.Error()) }
func (e flagError) Unwrap() error { return e.err }

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
// (a terminal), looking through writers that wrap one (see Redactor).
func IsTerminal(stream any) bool {
	for {
		u, ok := stream.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		stream = u.Unwrap()
	}
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
// poisonConfig), or the configuration's error. clk nil is the wall clock.
func PoisonRecorder(s storeadapter.Store, queue string, clk clock.Clock) (*poison.Recorder, error) {
	return poison.NewRecorder(poisonConfig(s, queue, clk))
}

// PoisonInspector returns the operators' poison inspector of a work queue
// (see poisonConfig), or the configuration's error. clk nil is the wall
// clock.
func PoisonInspector(s storeadapter.Store, queue string, clk clock.Clock) (*poison.Inspector, error) {
	return poison.NewInspector(poisonConfig(s, queue, clk))
}

// poisonConfig wires poison to a work queue: its poison queue and blob
// container are poison.QueueName(queue), its table poison.TableName(queue).
func poisonConfig(s storeadapter.Store, queue string, clk clock.Clock) poison.Config {
	pq := poison.QueueName(queue)
	return poison.Config{Tables: s.Tables(), Source: s.Queue(queue), Poison: s.Queue(pq), Blobs: s.Container(pq), Clock: clk, Host: Host()}
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

// NewRunner wires the job kinds of the catalog, the poison recorder and the
// runner to a store, all on the runner's clock (cfg.Clock, nil: the wall
// clock); opts go to the catalog (catalog.WithAccounts).
func NewRunner(store storeadapter.Store, queue string, cfg runner.Config, kinds catalog.Config, log *slog.Logger, opts ...catalog.Option) (*runner.Runner, error) {
	if err := storeadapter.ValidateQueueName(queue); err != nil {
		return nil, fmt.Errorf("-queue: %w", err)
	}
	reg, err := catalog.NewRegistry(store, cfg.Clock, kinds, opts...)
	if err != nil {
		return nil, err
	}
	cfg.Queue = store.Queue(queue)
	cfg.Tables = store.Tables()
	cfg.Registry = reg
	if cfg.Poison, err = PoisonRecorder(store, queue, cfg.Clock); err != nil {
		return nil, err
	}
	cfg.Logger = log
	cfg.Host = cmp.Or(cfg.Host, Host())
	return runner.New(cfg)
}
