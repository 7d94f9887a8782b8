package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The credential forms of an account of the "accounts" section: the
// forms of the worker's own account (see Account), with the secrets in
// environment variables the entry names.
const (
	// CredentialDefault is the account name with DefaultAzureCredential:
	// the worker's own identity (managed identity, workload identity),
	// which needs the data roles on that account too.
	CredentialDefault = "default"
	// CredentialSAS is the account name with an account SAS read from the
	// variable SASTokenEnv names.
	CredentialSAS = "sas"
	// CredentialConnectionString is a connection string read from the
	// variable ConnectionStringEnv names; it names its own account.
	CredentialConnectionString = "connection-string"
)

// OtherAccount is one entry of the config file's "accounts" section:
// another storage account, reached in one of the three credential forms.
// The file holds no secret: a SAS token or connection string is read from
// the environment variable the entry names, when the account is first
// used.
type OtherAccount struct {
	// Account is the storage account name (3-24 lower-case letters and
	// digits), required with "default" and "sas", refused with
	// "connection-string" (the connection string names its account).
	Account string `json:"account,omitempty"`
	// Credential is the form: "default", "sas" or "connection-string".
	Credential string `json:"credential"`
	// SASTokenEnv names the environment variable holding the account SAS,
	// with "sas" only.
	SASTokenEnv string `json:"sasTokenEnv,omitempty"`
	// ConnectionStringEnv names the environment variable holding the
	// connection string, with "connection-string" only.
	ConnectionStringEnv string `json:"connectionStringEnv,omitempty"`
}

// Accounts is the config file's "accounts" section: other storage
// accounts by name (kit.ValidateAccountName), which job args refer to
// ("from", "to" of a copy). The empty name is the worker's own account
// and cannot be declared.
type Accounts map[string]OtherAccount

// envName is the rule of an environment variable's name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// secretShaped reports whether v looks like a credential rather than a
// name: the shape of a SAS, a connection string, or a key.
func secretShaped(v string) bool {
	l := strings.ToLower(v)
	return strings.Contains(l, "sig=") || strings.Contains(l, "accountkey") || strings.Contains(l, "sharedaccesssignature") ||
		strings.Contains(l, "sv=") || strings.ContainsAny(v, "=;&+/?") || len(v) >= 40
}

// Validate checks every entry; each error names the key
// (accounts.NAME.field) and the rule, and never repeats a value that may
// be a secret. The environment is not read: a variable that is not set is
// an error when the account is first used (Opener), so workers that never
// use an account need not hold its secret.
func (as Accounts) Validate() error {
	var errs []error
	for _, name := range as.Names() {
		if err := kit.ValidateAccountName(name); err != nil {
			errs = append(errs, fmt.Errorf("accounts: the name %w", err))
			continue
		}
		errs = append(errs, as[name].validate("accounts."+name))
	}
	return errors.Join(errs...)
}

func (o OtherAccount) validate(key string) error {
	needs := func(field, what string) error {
		return fmt.Errorf("%s.%s: is required with credential %q (%s)", key, field, o.Credential, what)
	}
	refuses := func(field string) error {
		return fmt.Errorf("%s.%s: is not used with credential %q: remove it", key, field, o.Credential)
	}
	var errs []error
	switch o.Credential {
	case CredentialDefault:
		if o.Account == "" {
			errs = append(errs, needs("account", "the storage account name"))
		}
		if o.SASTokenEnv != "" {
			errs = append(errs, refuses("sasTokenEnv"))
		}
		if o.ConnectionStringEnv != "" {
			errs = append(errs, refuses("connectionStringEnv"))
		}
	case CredentialSAS:
		if o.Account == "" {
			errs = append(errs, needs("account", "the account the token was made for"))
		}
		if o.SASTokenEnv == "" {
			errs = append(errs, needs("sasTokenEnv", "the environment variable that holds the account SAS"))
		}
		if o.ConnectionStringEnv != "" {
			errs = append(errs, refuses("connectionStringEnv"))
		}
	case CredentialConnectionString:
		if o.Account != "" {
			errs = append(errs, fmt.Errorf("%s.account: is not used with credential %q: the connection string names its own account; remove it", key, o.Credential))
		}
		if o.ConnectionStringEnv == "" {
			errs = append(errs, needs("connectionStringEnv", "the environment variable that holds the connection string"))
		}
		if o.SASTokenEnv != "" {
			errs = append(errs, refuses("sasTokenEnv"))
		}
	case "":
		return fmt.Errorf(`%s.credential: is required: "default", "sas" or "connection-string"`, key)
	default:
		return fmt.Errorf(`%s.credential: must be "default", "sas" or "connection-string", got %q`, key, o.Credential)
	}
	if o.Account != "" && client.ValidAccountName(o.Account) != nil {
		hint := ""
		if secretShaped(o.Account) {
			hint = "; it looks like a credential, and secrets are never read from the config file: name the variable that holds it in connectionStringEnv or sasTokenEnv"
		}
		errs = append(errs, fmt.Errorf("%s.account: must be a storage account name, 3-24 lower-case letters and digits (the value is not repeated here)%s", key, hint))
	}
	for _, v := range []struct{ field, value string }{{"sasTokenEnv", o.SASTokenEnv}, {"connectionStringEnv", o.ConnectionStringEnv}} {
		switch {
		case v.value == "" || envName.MatchString(v.value):
		case secretShaped(v.value):
			errs = append(errs, fmt.Errorf("%s.%s: holds what looks like the secret itself (the value is not repeated here): secrets are never read from the config file; "+
				"put it in an environment variable and give that variable's name, such as \"DR_SAS\"", key, v.field))
		default:
			errs = append(errs, fmt.Errorf("%s.%s: must be the name of an environment variable, letters, digits and _ not starting with a digit (the value is not repeated here)", key, v.field))
		}
	}
	return errors.Join(errs...)
}

// Names returns the declared names, sorted.
func (as Accounts) Names() []string {
	names := make([]string, 0, len(as))
	for n := range as {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Check returns nil when name is "" (this account) or declared, else an
// error naming the declared ones.
func (as Accounts) Check(name string) error {
	if _, ok := as[name]; ok || name == "" {
		return nil
	}
	if len(as) == 0 {
		return fmt.Errorf("account %q: %w", name, kit.ErrNoAccounts)
	}
	return fmt.Errorf("account %q: not in the config's \"accounts\" section (it declares %s)", name, strings.Join(as.Names(), ", "))
}

// Secrets returns the credential values the accounts' variables hold
// now, for a Redactor: each connection string with its key and SAS and
// signature, each SAS token and its signature (see Account.Secrets).
func (as Accounts) Secrets() []string {
	var conns, sases []string
	for _, o := range as {
		if o.ConnectionStringEnv != "" {
			conns = append(conns, os.Getenv(o.ConnectionStringEnv))
		}
		if o.SASTokenEnv != "" {
			sases = append(sases, os.Getenv(o.SASTokenEnv))
		}
	}
	return credentialSecrets(conns, sases)
}

// client returns the client.Account of entry name, reading its secret's
// variable now; a variable that is empty or not set is an error naming it
// and the key.
func (as Accounts) client(name string) (client.Account, error) {
	o, ok := as[name]
	if !ok {
		return client.Account{}, as.Check(name)
	}
	key := "accounts." + name
	read := func(field, env string) (string, error) {
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", fmt.Errorf("%s.%s: $%s is empty or not set on this worker", key, field, env)
		}
		return v, nil
	}
	switch o.Credential {
	case CredentialSAS:
		sas, err := read("sasTokenEnv", o.SASTokenEnv)
		return client.Account{Name: o.Account, SASToken: sas}, err
	case CredentialConnectionString:
		cs, err := read("connectionStringEnv", o.ConnectionStringEnv)
		return client.Account{ConnectionString: cs}, err
	}
	return client.Account{Name: o.Account}, nil
}

// accountFields turns the fields client.Account's errors name into the
// keys of entry key (and the variables they came from).
func accountFields(key string, o OtherAccount) *strings.Replacer {
	return strings.NewReplacer(
		"Account.ConnectionString", key+".connectionStringEnv ($"+o.ConnectionStringEnv+")",
		"Account.Name", key+".account",
		"Account.SASToken", key+".sasTokenEnv ($"+o.SASTokenEnv+")")
}

// Opener returns the function that gives the store of a declared account
// (kit.Deps.Accounts), connected on its first use with base's SDK
// options, endpoints and credential options (see Account.Connect), then
// passed through wrap (nil: none; the worker counts its calls) and kept.
// Its errors name the entry's keys and never quote a credential: an
// undeclared name, a variable that is empty or not set. A failed connect
// is not kept, so a variable set later is seen.
func (as Accounts) Opener(base *Account, wrap func(storeadapter.Store) storeadapter.Store) func(name string) (storeadapter.Store, error) {
	var mu sync.Mutex
	open := map[string]storeadapter.Store{}
	return func(name string) (storeadapter.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := open[name]; ok {
			return s, nil
		}
		acct, err := as.client(name)
		if err != nil {
			return nil, err
		}
		s, err := base.connect(acct)
		if err != nil {
			return nil, errors.New(accountFields("accounts."+name, as[name]).Replace(err.Error()))
		}
		var st storeadapter.Store = s
		if wrap != nil {
			st = wrap(st)
		}
		open[name] = st
		return st, nil
	}
}
