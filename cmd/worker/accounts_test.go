package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
)

// TestAccountsSection reads the "accounts" section of the config file:
// entries are kept; a secret in the file (under a key of its own, or in
// place of a variable's name), a bad name and an unknown key are refused,
// naming the key (with its line:column when the decoder finds it) and
// never quoting the secret.
func TestAccountsSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.json")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(cli.EnvQueue, "")
	write(`{"accounts": {"dr": {"account": "drstore", "credential": "sas", "sasTokenEnv": "DR_SAS"},
  "old": {"credential": "connection-string", "connectionStringEnv": "OLD_CS"}}}`)
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	if err := m.ParseFlags([]string{"-config", path}); err != nil {
		t.Fatal(err)
	}
	if got := m.Accounts["dr"]; len(m.Accounts) != 2 || got.Account != "drstore" || got.SASTokenEnv != "DR_SAS" || m.Accounts["old"].ConnectionStringEnv != "OLD_CS" {
		t.Fatalf("accounts %+v", m.Accounts)
	}
	const sas = "sv=2020-08-04&ss=bqt&sig=FILESECRET0123456789"
	for body, want := range map[string]string{
		`{"accounts": {"dr": {"account": "drstore", "credential": "sas", "sasToken": "` + sas + `"}}}`:    `worker.json:1:65: accounts.dr.sasToken: unknown field (did you mean "sasTokenEnv"?): secrets are never read from the config file`,
		"{\"accounts\": {\"dr\": {\n \"accountKey\": \"FILESECRET0123456789\"}}}":                         `worker.json:2:2: accounts.dr.accountKey: unknown field`,
		`{"accounts": {"dr": {"account": "drstore", "credential": "sas", "sasTokenEnv": "` + sas + `"}}}`: `worker.json: accounts.dr.sasTokenEnv: holds what looks like the secret itself (the value is not repeated here)`,
		`{"accounts": {"DR": {"account": "drstore", "credential": "default"}}}`:                           `worker.json: accounts: the name must be 1-32 lower-case letters, digits and hyphens`,
		`{"accounts": {"dr": {"account": "drstore", "credential": "default", "region": "x"}}}`:            `worker.json:1:69: accounts.dr.region: unknown field`,
		`{"accounts": {"dr": {"account": "drstore"}}}`:                                                    `accounts.dr.credential: is required`,
		`{"accounts": ["dr"]}`: `accounts: must be an object, got array`,
	} {
		write(body)
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
		err := m.ParseFlags([]string{"-config", path})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: got %v, want an error containing %q", body, err, want)
			continue
		}
		if strings.Contains(err.Error(), "FILESECRET") {
			t.Errorf("config %s: the error quotes the secret: %v", body, err)
		}
	}
}

// TestAccountsSecretsRedacted: the secrets the accounts' variables hold are
// redacted from the worker's output from the start, -print-config shows
// the accounts with the variables' names only, and an unset variable is
// no error at start (only at first use).
func TestAccountsSecretsRedacted(t *testing.T) {
	const drSAS = "sv=2020-08-04&ss=bqt&srt=sco&sp=rwdlacup&sig=DRSIGNATURE0123456789%2B"
	const oldKey = "T0xEQUNDT1VOVEtFWTAxMjM0NTY3ODk="
	t.Setenv("DR_SAS", drSAS)
	t.Setenv("OLD_CS", "DefaultEndpointsProtocol=https;AccountName=oldstore;AccountKey="+oldKey+";EndpointSuffix=core.windows.net")
	t.Setenv("UNSET_CS", "")
	t.Setenv(cli.EnvConnectionString, "UseDevelopmentStorage=true")
	t.Setenv(cli.EnvQueue, "")
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, []byte(`{"accounts": {
  "dr": {"account": "drstore", "credential": "sas", "sasTokenEnv": "DR_SAS"},
  "old": {"credential": "connection-string", "connectionStringEnv": "OLD_CS"},
  "later": {"credential": "connection-string", "connectionStringEnv": "UNSET_CS"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "text"} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut}
		if err := m.ParseFlags([]string{"-config", path, "-log-format", format, "-print-config"}); err != nil {
			t.Fatal(err)
		}
		log, err := cli.NewLogger(m.Stderr, m.LogFormat, "debug")
		if err != nil {
			t.Fatal(err)
		}
		log.Error("copy failed", "err", fmt.Errorf("GET https://drstore.table.core.windows.net/T?%s: refused", drSAS), "conn", os.Getenv("OLD_CS"))
		if err := m.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"DRSIGNATURE", "T0xEQUNDT1VOVEtFWTAx"} {
			if strings.Contains(out.String()+errOut.String(), secret) {
				t.Errorf("%s: the output holds %s:\nstdout:\n%s\nstderr:\n%s", format, secret, out.String(), errOut.String())
			}
		}
		if !strings.Contains(errOut.String(), cli.Redacted) {
			t.Errorf("%s: stderr does not show %s:\n%s", format, cli.Redacted, errOut.String())
		}
		if !strings.Contains(out.String(), `"sasTokenEnv": "DR_SAS"`) || !strings.Contains(out.String(), `"connectionStringEnv": "UNSET_CS"`) {
			t.Errorf("-print-config does not show the accounts:\n%s", out.String())
		}
	}
}
