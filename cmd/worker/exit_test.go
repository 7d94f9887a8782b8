package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExitStatus: usage errors (bad flags and values, a -config file that
// cannot be read or has an unknown key) exit 2 with the error and a
// one-line hint; no credentials exit 1 (see docs/operations.md, "Exit
// codes", whose examples docs/exitcodes_test.go runs on the binaries).
func TestExitStatus(t *testing.T) {
	for _, name := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_SAS_TOKEN", "TABLEKEEPER_QUEUE", "TABLEKEEPER_CONFIG"} {
		t.Setenv(name, "")
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"runner": {"concurency": 3}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-log-level", "verbose"}, 2, `-log-level: must be debug, info, warn or error, got "verbose"`},
		{[]string{"-log-format", "xml"}, 2, "-log-format: must be auto, text or json"},
		{[]string{"-queue", "Bad_Queue"}, 2, "-queue: invalid input: queue name"},
		{[]string{"-concurency", "3"}, 2, `unknown flag -concurency (did you mean "-concurrency"?)`},
		{[]string{"-batch", "x"}, 2, `-batch: must be a whole number, got "x"`},
		{[]string{"-config", filepath.Join(dir, "missing.json")}, 2, "-config: open "},
		{[]string{"-config", bad}, 2, `runner.concurency: unknown field (did you mean "concurrency"?)`},
		{[]string{"-queue", "work", "-log-format", "json"}, 1, "no storage account"},
	} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut}
		code := m.Exec(context.Background(), c.args)
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("worker %q: exit %d, stderr:\n%s\nwant exit %d and %q", c.args, code, errOut.String(), c.code, c.want)
		}
		if c.code == 2 && (strings.Count(errOut.String(), "\n") != 2 || !strings.HasSuffix(errOut.String(), "\nRun 'worker -h' for usage.\n")) {
			t.Errorf("worker %q: a usage error is the error and a one-line hint, got:\n%s", c.args, errOut.String())
		}
	}
}
