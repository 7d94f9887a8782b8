package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestAuthForms: each form is recognised, and conflicting or incomplete
// ones are errors naming the flags and variables, never a credential.
func TestAuthForms(t *testing.T) {
	const sas = "sv=2020-08-04&sig=SECRETSIGNATURE"
	for _, c := range []struct {
		name         string
		conn, acct   string
		sas, envConn string
		want         client.AuthForm
		err          string
	}{
		{name: "connection string flag", conn: "UseDevelopmentStorage=true", want: client.AuthConnectionString},
		{name: "connection string env", envConn: "UseDevelopmentStorage=true", want: client.AuthConnectionString},
		{name: "account", acct: "acct", want: client.AuthEntraID},
		{name: "account + SAS", acct: "acct", sas: sas, want: client.AuthSASToken},
		{name: "nothing", err: "no storage account: set -connection-string ($AZURE_STORAGE_CONNECTION_STRING), or -account"},
		{name: "SAS alone", sas: sas, err: "-sas-token ($AZURE_STORAGE_SAS_TOKEN) needs -account ($AZURE_STORAGE_ACCOUNT)"},
		{name: "connection string + SAS", envConn: "AccountName=a;AccountKey=SECRETKEY", acct: "a", sas: sas,
			err: "both -connection-string ($AZURE_STORAGE_CONNECTION_STRING) and -sas-token ($AZURE_STORAGE_SAS_TOKEN) are set"},
		{name: "connection string + account", conn: "AccountName=a;AccountKey=SECRETKEY", acct: "b",
			err: "both -connection-string ($AZURE_STORAGE_CONNECTION_STRING) and -account ($AZURE_STORAGE_ACCOUNT) are set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvConnectionString, c.envConn)
			t.Setenv(EnvSASToken, "")
			a := Account{ConnectionString: c.conn, Name: c.acct, SASToken: c.sas}
			got, err := a.Auth()
			if c.err == "" {
				if err != nil || got != c.want {
					t.Fatalf("Auth() = %q, %v; want %q", got, err, c.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Auth() = %q, %v; want an error containing %q", got, err, c.err)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the error quotes a credential: %v", err)
			}
			if _, cerr := a.Connect(); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("Connect() = %v, want Auth's error", cerr)
			}
		})
	}
}

// TestAccountNameChecked: a name that cannot be an account is refused
// before any call, without repeating it (it may be a pasted credential).
func TestAccountNameChecked(t *testing.T) {
	t.Setenv(EnvConnectionString, "")
	t.Setenv(EnvSASToken, "")
	a := Account{Name: "AccountName=x;AccountKey=SECRETKEY"}
	_, err := a.Connect()
	if err == nil || !strings.Contains(err.Error(), "-account ($AZURE_STORAGE_ACCOUNT): must be a storage account name") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Connect() = %v", err)
	}
}

// TestRedactor: known secrets go in every spelling output uses (raw,
// JSON-escaped, URL-encoded), unknown ones by their shape; ordinary text
// stays.
func TestRedactor(t *testing.T) {
	t.Setenv(EnvConnectionString, "")
	t.Setenv(EnvSASToken, "")
	t.Setenv("AZURE_CLIENT_SECRET", "client-secret-value-123")
	const sas = "sv=2020-08-04&ss=bqt&sig=abc%2Bdef%3DSIG"
	a := Account{Name: "acct", SASToken: sas, ConnectionString: "AccountName=a;AccountKey=S2V5S2V5S2V5;SharedAccessSignature=sv=1&sig=CONNSIG123"}
	r := &Redactor{}
	r.Add(a.Secrets()...)
	for _, in := range []string{
		"token " + sas,
		`{"msg":"sv=2020-08-04\u0026ss=bqt\u0026sig=abc%2Bdef%3DSIG"}`,
		"decoded sig abc+def=SIG here",
		"key S2V5S2V5S2V5 and CONNSIG123",
		"client-secret-value-123",
		"Get https://x.blob.core.windows.net/c?sv=1&sig=UNKNOWNSIGNATURE&se=2",
		`"url":"https://x/c?sv=1\u0026sig=UNKNOWNSIGNATURE"`,
		"AccountKey=UNKNOWNKEY0123;AccountName=x",
		"SharedAccessSignature=sv=1&sig=UNKNOWNSIGNATURE;",
	} {
		got := r.String(in)
		for _, secret := range []string{"abc%2Bdef", "abc+def", "S2V5S2V5", "CONNSIG", "client-secret", "UNKNOWN"} {
			if strings.Contains(got, secret) {
				t.Errorf("String(%q) = %q: %s is left", in, got, secret)
			}
		}
		if !strings.Contains(got, Redacted) {
			t.Errorf("String(%q) = %q, want %s in it", in, got, Redacted)
		}
	}
	for _, keep := range []string{"designation=manager", "signature=x", "queue work-items: 3 messages", "sig=abc"} {
		if got := r.String(keep); got != keep {
			t.Errorf("String(%q) = %q, want it unchanged", keep, got)
		}
	}
	var buf bytes.Buffer
	w := r.Writer(&buf)
	if n, err := w.Write([]byte("x " + sas + "\n")); err != nil || n != len("x "+sas+"\n") {
		t.Errorf("Write = %d, %v; want the input's length", n, err)
	}
	if r.Writer(w) != w || strings.Contains(buf.String(), "SIG") {
		t.Errorf("writer: %q (or it wrapped itself twice)", buf.String())
	}
}

// TestExplain: an error of a refused credential, or of a missing
// permission, gains the form in force, where it came from and what to check
// for it, without quoting the credential; other errors are unchanged.
func TestExplain(t *testing.T) {
	const key = "U0VDUkVUS0VZMDEyMzQ1Njc4OQ=="
	const sas = "sv=2020-08-04&ss=bqt&sig=SECRETSIGNATURE0123"
	refused := fmt.Errorf("queue work: azstore: create queue work: %w (HTTP 403 AuthenticationFailed)", storeadapter.ErrAuthentication)
	lacking := fmt.Errorf("queue work: azstore: create queue work: %w (HTTP 403 AuthorizationPermissionMismatch)", storeadapter.ErrForbidden)
	for _, c := range []struct {
		name                   string
		a                      Account
		refused, lacking, both string
	}{
		{name: "account key", a: Account{ConnectionString: "AccountName=acct;AccountKey=" + key},
			both:    "a connection string with an account key (-connection-string or $AZURE_STORAGE_CONNECTION_STRING)",
			refused: "check that its AccountKey is one of the account's two current keys", lacking: "check that shared key access is allowed"},
		{name: "SAS connection string", a: Account{ConnectionString: "QueueEndpoint=https://acct.queue.core.windows.net;SharedAccessSignature=" + sas},
			both:    "a connection string with a SAS (-connection-string or $AZURE_STORAGE_CONNECTION_STRING)",
			refused: "check that the SAS has not expired (se=)", lacking: "grants the permissions rwdlacup"},
		{name: "development storage", a: Account{ConnectionString: "UseDevelopmentStorage=true"},
			both: "development storage (UseDevelopmentStorage=true", refused: "Azurite", lacking: "Azurite"},
		{name: "SAS token", a: Account{Name: "acct", SASToken: sas},
			both:    "an account name with a SAS token (-account or $AZURE_STORAGE_ACCOUNT, with -sas-token or $AZURE_STORAGE_SAS_TOKEN)",
			refused: "ss=bqt", lacking: "rwdlacup"},
		{name: "Entra ID", a: Account{Name: "acct"},
			both:    "an account name with DefaultAzureCredential (-account or $AZURE_STORAGE_ACCOUNT alone)",
			refused: "that an identity is available to DefaultAzureCredential here", lacking: "Storage Queue Data Contributor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvConnectionString, "")
			t.Setenv(EnvSASToken, "")
			for err, want := range map[error]string{refused: c.refused, lacking: c.lacking} {
				got := c.a.Explain(err)
				msg := got.Error()
				if !errors.Is(got, err) || !strings.HasPrefix(msg, err.Error()) || !strings.Contains(msg, c.both) || !strings.Contains(msg, want) {
					t.Errorf("Explain(%v)\n = %s\nwant it to keep the error and add %q and %q", err, msg, c.both, want)
				}
				if strings.Contains(msg, "SECRET") || strings.Contains(msg, key) {
					t.Errorf("the explanation quotes a credential: %s", msg)
				}
			}
			other := fmt.Errorf("queue work: %w", storeadapter.ErrUnavailable)
			if got := c.a.Explain(other); got != other {
				t.Errorf("Explain(%v) = %v; want it unchanged", other, got)
			}
		})
	}
}
