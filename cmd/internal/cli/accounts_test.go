package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestAccountsValidate: each credential form with its fields passes; a bad
// name, a missing or unknown form, a field of another form, and a secret
// where a variable's name belongs are refused, naming the key and never
// repeating the value.
func TestAccountsValidate(t *testing.T) {
	good := Accounts{
		"dr":      {Account: "drstore", Credential: "default"},
		"partner": {Account: "partnerstore", Credential: "sas", SASTokenEnv: "PARTNER_SAS"},
		"old-1":   {Credential: "connection-string", ConnectionStringEnv: "OLD_CS"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	const secretSAS = "sv=2020-08-04&ss=bqt&sig=SECRETSIG0123456789"
	const secretConn = "AccountName=x;AccountKey=SECRETKEY0123456789=="
	for _, c := range []struct {
		name string
		a    OtherAccount
		want string
	}{
		{"DR", OtherAccount{Account: "drstore", Credential: "default"}, `accounts: the name must be 1-32 lower-case letters, digits and hyphens, starting with a letter, got "DR"`},
		{"1dr", OtherAccount{Account: "drstore", Credential: "default"}, "accounts: the name must be"},
		{strings.Repeat("d", 33), OtherAccount{Account: "drstore", Credential: "default"}, "accounts: the name must be"},
		{"", OtherAccount{Account: "drstore", Credential: "default"}, "accounts: the name must be"},
		{"dr", OtherAccount{Account: "drstore"}, `accounts.dr.credential: is required: "default", "sas" or "connection-string"`},
		{"dr", OtherAccount{Account: "drstore", Credential: "key"}, `accounts.dr.credential: must be "default", "sas" or "connection-string", got "key"`},
		{"dr", OtherAccount{Credential: "default"}, `accounts.dr.account: is required with credential "default"`},
		{"dr", OtherAccount{Account: "drstore", Credential: "sas"}, `accounts.dr.sasTokenEnv: is required with credential "sas"`},
		{"dr", OtherAccount{Credential: "sas", SASTokenEnv: "DR_SAS"}, `accounts.dr.account: is required with credential "sas"`},
		{"dr", OtherAccount{Credential: "connection-string"}, `accounts.dr.connectionStringEnv: is required`},
		{"dr", OtherAccount{Account: "drstore", Credential: "connection-string", ConnectionStringEnv: "DR_CS"}, `accounts.dr.account: is not used with credential "connection-string": the connection string names its own account`},
		{"dr", OtherAccount{Account: "drstore", Credential: "default", SASTokenEnv: "DR_SAS"}, `accounts.dr.sasTokenEnv: is not used with credential "default"`},
		{"dr", OtherAccount{Account: "drstore", Credential: "sas", SASTokenEnv: "DR_SAS", ConnectionStringEnv: "DR_CS"}, `accounts.dr.connectionStringEnv: is not used with credential "sas"`},
		{"dr", OtherAccount{Account: "drstore", Credential: "sas", SASTokenEnv: secretSAS}, `accounts.dr.sasTokenEnv: holds what looks like the secret itself (the value is not repeated here): secrets are never read from the config file`},
		{"dr", OtherAccount{Credential: "connection-string", ConnectionStringEnv: secretConn}, `accounts.dr.connectionStringEnv: holds what looks like the secret itself`},
		{"dr", OtherAccount{Credential: "connection-string", ConnectionStringEnv: "1ABC"}, `accounts.dr.connectionStringEnv: must be the name of an environment variable`},
		{"dr", OtherAccount{Account: secretConn, Credential: "default"}, `accounts.dr.account: must be a storage account name, 3-24 lower-case letters and digits (the value is not repeated here); it looks like a credential`},
		{"dr", OtherAccount{Account: "Dr_Store", Credential: "default"}, `accounts.dr.account: must be a storage account name`},
	} {
		err := Accounts{c.name: c.a}.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%q: %+v) = %v; want an error containing %q", c.name, c.a, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Validate(%q) quotes the secret: %v", c.name, err)
		}
	}
}

// TestAccountsOpener: an account is connected on its first use (no call
// to storage: an unset variable is an error then, naming the key and the
// variable, and a variable set later is seen), kept for later uses, and
// wrapped; an undeclared name is an error naming the declared ones.
func TestAccountsOpener(t *testing.T) {
	t.Setenv("DR_SAS", "")
	t.Setenv("OLD_CS", "UseDevelopmentStorage=true")
	as := Accounts{
		"dr":  {Account: "drstore", Credential: "sas", SASTokenEnv: "DR_SAS"},
		"old": {Credential: "connection-string", ConnectionStringEnv: "OLD_CS"},
	}
	wrapped := 0
	open := as.Opener(&Account{}, func(s storeadapter.Store) storeadapter.Store { wrapped++; return s })
	if _, err := open("dr"); err == nil || err.Error() != "accounts.dr.sasTokenEnv: $DR_SAS is empty or not set on this worker" {
		t.Fatalf(`open("dr") with $DR_SAS unset = %v; want the key and the variable named`, err)
	}
	t.Setenv("DR_SAS", "sv=2020-08-04&ss=bqt&srt=sco&sp=rwdlacup&sig=SECRETSIG0123456789")
	dr, err := open("dr")
	if err != nil || dr == nil {
		t.Fatalf(`open("dr") once $DR_SAS is set = %v, %v`, dr, err)
	}
	if again, err := open("dr"); err != nil || again != dr {
		t.Errorf(`open("dr") again = %v, %v; want the store of the first use`, again, err)
	}
	if s, err := open("old"); err != nil || s == nil {
		t.Errorf(`open("old") = %v, %v`, s, err)
	}
	if wrapped != 2 {
		t.Errorf("wrap called %d times, want once per account", wrapped)
	}
	if _, err := open("nope"); err == nil || err.Error() != `account "nope": not in the config's "accounts" section (it declares dr, old)` {
		t.Errorf(`open("nope") = %v`, err)
	}
	if err := (Accounts{}).Check("nope"); !errors.Is(err, kit.ErrNoAccounts) {
		t.Errorf("Check with no accounts = %v, want kit.ErrNoAccounts", err)
	}
	t.Setenv("BAD_CS", "AccountName=a;AccountKey=SECRETKEY0123;SharedAccessSignature=sv=1&sig=SECRETSIG0123")
	bad := Accounts{"bad": {Credential: "connection-string", ConnectionStringEnv: "BAD_CS"}}
	if _, err := bad.Opener(&Account{}, nil)("bad"); err == nil || !strings.Contains(err.Error(), "accounts.bad.connectionStringEnv ($BAD_CS): holds both AccountKey and SharedAccessSignature") ||
		strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a connection string of two forms: %v; want the key and variable named, no secret", err)
	}
}

// TestAccountsRedacted: the secrets the accounts' variables hold are
// redacted in every spelling output uses, as the worker's own are.
func TestAccountsRedacted(t *testing.T) {
	t.Setenv("DR_SAS", "sv=2020-08-04&ss=bqt&sig=DRSIG%2Babc%3D")
	t.Setenv("OLD_CS", "AccountName=old;AccountKey=T0xES0VZT0xES0VZ;EndpointSuffix=core.windows.net")
	t.Setenv("PARTNER_CS", "BlobEndpoint=https://p.blob.core.windows.net;SharedAccessSignature=sv=1&sig=PARTNERSIG123")
	as := Accounts{
		"dr":      {Account: "drstore", Credential: "sas", SASTokenEnv: "DR_SAS"},
		"old":     {Credential: "connection-string", ConnectionStringEnv: "OLD_CS"},
		"partner": {Credential: "connection-string", ConnectionStringEnv: "PARTNER_CS"},
		"mi":      {Account: "mistore", Credential: "default"},
	}
	r := &Redactor{}
	r.Add(as.Secrets()...)
	for _, in := range []string{
		"token sv=2020-08-04&ss=bqt&sig=DRSIG%2Babc%3D",
		`{"msg":"sv=2020-08-04\u0026ss=bqt\u0026sig=DRSIG%2Babc%3D"}`,
		"decoded DRSIG+abc= here",
		"key T0xES0VZT0xES0VZ",
		"PARTNERSIG123 in a message",
	} {
		got := r.String(in)
		for _, secret := range []string{"DRSIG", "T0xES0VZ", "PARTNERSIG"} {
			if strings.Contains(got, secret) {
				t.Errorf("String(%q) = %q: %s is left", in, got, secret)
			}
		}
		if !strings.Contains(got, Redacted) {
			t.Errorf("String(%q) = %q, want %s in it", in, got, Redacted)
		}
	}
	if got := r.String("accounts.dr.sasTokenEnv: $DR_SAS mistore"); got != "accounts.dr.sasTokenEnv: $DR_SAS mistore" {
		t.Errorf("names and variables are no secrets, got %q", got)
	}
}
