package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli/clitest"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// runReal runs enqueue in-process on the account the environment and args
// describe (no Connect override), within a deadline.
func runReal(t *testing.T, f clitest.Form, args ...string) result {
	t.Helper()
	return runRealWithin(t, f, time.Minute, args...)
}

// runRealWithin is runReal with the command's deadline.
func runRealWithin(t *testing.T, f clitest.Form, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	var out, errOut bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, ConfigureAccount: f.Configure}
	code := m.Run(ctx, args)
	return result{code, out.String(), errOut.String()}
}

// TestCredentialsNeverPrintedOnFailure runs enqueue with every credential
// form, given by environment and by flags, against storage that fails
// (closed port, malformed endpoints, a token authority that refuses) and
// checks that it fails with status 1 and that no secret appears on
// stdout or stderr.
func TestCredentialsNeverPrintedOnFailure(t *testing.T) {
	for _, f := range clitest.FailingForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			for _, viaFlags := range []bool{false, true} {
				setup(t)
				var credFlags []string
				if viaFlags {
					credFlags = f.ApplyAsFlags(t)
				} else {
					f.Apply(t)
				}
				for _, cmd := range [][]string{{"stats"}, {"purgeday", "-prefix", "Logins", "-keep-days", "3"}} {
					args := append(append(cmd, "-storage-retries", "0"), credFlags...)
					r := runReal(t, f, args...)
					if r.code != 1 {
						t.Errorf("enqueue %s (flags %v): exit %d, want 1\nstderr:\n%s", cmd[0], viaFlags, r.code, r.stderr)
					}
					f.CheckNoSecret(t, r.stdout, r.stderr)
				}
			}
		})
	}
}

// TestCredentialRefused: a credential storage refuses (a wrong key, an
// expired SAS: 403 AuthenticationFailed) or a sign-in that cannot succeed
// fails each command at once with status 1 and an error naming the
// credential form in force and what to check, and no secret.
func TestCredentialRefused(t *testing.T) {
	for _, f := range clitest.RefusingForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			setup(t)
			f.Apply(t)
			for _, args := range [][]string{{"stats"}, {"poison", "list"}, {"purgeday", "-prefix", "Logins", "-keep-days", "3"}} {
				start := time.Now()
				r := runRealWithin(t, f, 20*time.Second, args...)
				took := time.Since(start)
				if r.code != 1 || !strings.Contains(r.stderr, "storage refused the credential in force, "+f.Hint) || !strings.Contains(r.stderr, ": check ") {
					t.Errorf("enqueue %s: exit %d after %v; want 1 and an error naming %q and what to check\nstderr:\n%s",
						strings.Join(args, " "), r.code, took.Round(time.Millisecond), f.Hint, r.stderr)
				}
				if took > 10*time.Second {
					t.Errorf("enqueue %s failed after %v; a refused credential must fail at once", strings.Join(args, " "), took.Round(time.Millisecond))
				}
				f.CheckNoSecret(t, r.stdout, r.stderr)
			}
		})
	}
}

// TestCredentialsNeverPrintedOnSuccess runs enqueue against Azurite with
// every form Azurite accepts (account key, SAS connection string, account
// name + SAS token): the commands succeed, and no secret is printed.
func TestCredentialsNeverPrintedOnSuccess(t *testing.T) {
	conn := startAzurite(t)
	for _, f := range clitest.WorkingForms(t, conn) {
		t.Run(f.Name, func(t *testing.T) {
			setup(t)
			f.Apply(t)
			for _, args := range [][]string{
				{"purgeday", "-prefix", "Logins", "-keep-days", "3", "-o", "json"},
				{"stats"}, {"stats", "-o", "json"}, {"poison", "list"},
			} {
				r := runReal(t, f, args...)
				if r.code != 0 {
					t.Errorf("enqueue %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
				}
				f.CheckNoSecret(t, r.stdout, r.stderr)
			}
		})
	}
}

// startAzurite starts an emulator for the test and returns its connection
// string. The test fails when Azurite is not installed.
func startAzurite(t *testing.T) string {
	t.Helper()
	return azurite.ForTest(t).ConnectionString
}
