package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
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

// TestCopyThroughTheWorker runs copies through the worker in-process on
// two localstore accounts: the kind reaches the "dr" account through the
// catalog's hook, and a copy to an account whose variable is not set is
// poisoned, permanently, with the key and the variable named (and the
// worker goes on and drains).
func TestCopyThroughTheWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv(cli.EnvQueue, "")
	t.Setenv("LATER_CS", "")
	home, dr := localstore.New(localstore.Options{}), localstore.New(localstore.Options{})
	if err := home.Tables().CreateTable(ctx, "Orders"); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := home.Tables().InsertEntity(ctx, "Orders", storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%02d", i), Properties: map[string]any{"N": int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	q := home.Queue("copies")
	if err := q.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for id, args := range map[string]string{"op-dr": `{"table":"Orders","to":"dr"}`, "op-later": `{"table":"Orders","to":"later"}`} {
		text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: "copy", Args: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, []byte(`{"accounts": {
  "dr": {"account": "drstore", "credential": "default"},
  "later": {"credential": "connection-string", "connectionStringEnv": "LATER_CS"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Connect: func() (storeadapter.Store, error) { return home, nil }}
	if err := m.ParseFlags([]string{"-config", path, "-queue", "copies", "-drain", "-drain-quiet", "1s", "-idle-max", "100ms", "-log-format", "json"}); err != nil {
		t.Fatal(err)
	}
	opener := m.Accounts.Opener(&cli.Account{}, nil) // the real one for every name but dr
	m.ConnectAccount = func(name string) (storeadapter.Store, error) {
		if name == "dr" {
			return dr, nil
		}
		return opener(name)
	}
	if err := m.Run(ctx); err != nil {
		t.Fatalf("worker: %v\n%s", err, errOut.String())
	}
	page, err := dr.Tables().Query(ctx, "Orders", storeadapter.Query{})
	if err != nil || len(page.Entities) != 30 {
		t.Fatalf("dr/Orders holds %d rows (%v), want 30\n%s", len(page.Entities), err, errOut.String())
	}
	if !strings.Contains(errOut.String(), `copied 30 rows of Orders (the worker's own account) to Orders (account \"dr\"): 30 written, 0 skipped`) {
		t.Errorf("the log lacks the copy's result:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), `"msg":"job poisoned"`) ||
		!strings.Contains(errOut.String(), `"reason":"permanent: copy: args.to: accounts.later.connectionStringEnv: $LATER_CS is empty or not set on this worker"`) {
		t.Errorf("the log lacks the permanent failure naming the key and the variable:\n%s", errOut.String())
	}
}
