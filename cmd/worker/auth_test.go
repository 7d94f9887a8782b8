package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli/clitest"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// runWorker parses args and runs the worker in-process on the account the
// environment and args describe, within a deadline; -print-config runs
// too, so every path that prints is covered.
func runWorker(t *testing.T, f clitest.Form, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWorkerWithin(t, f, time.Minute, args...)
}

// runWorkerWithin is runWorker with the run's deadline: a worker still
// running then is stopped as by a signal (and Run returns nil).
func runWorkerWithin(t *testing.T, f clitest.Form, limit time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut}
	if err = m.ParseFlags(args); err == nil {
		f.Configure(&m.Account)
		err = m.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(m.Stderr, "worker:", err) // as main does
	}
	return out.String(), errOut.String(), err
}

// TestCredentialsNeverPrintedOnFailure runs the worker (JSON logs at debug
// level, and -print-config) with every credential form, by environment and
// by flags, against storage that fails: it exits with an error once
// receives have failed for -receive-outage, and no secret appears in its
// output.
func TestCredentialsNeverPrintedOnFailure(t *testing.T) {
	for _, f := range clitest.FailingForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			for _, viaFlags := range []bool{false, true} {
				t.Setenv(cli.EnvQueue, "")
				var credFlags []string
				if viaFlags {
					credFlags = f.ApplyAsFlags(t)
				} else {
					f.Apply(t)
				}
				common := append([]string{"-queue", "work", "-storage-retries", "0", "-log-format", "json", "-log-level", "debug"}, credFlags...)
				out, errOut, err := runWorker(t, f, append(common, "-drain", "-receive-outage", "300ms", "-idle-max", "100ms")...)
				if err == nil {
					t.Errorf("worker (flags %v) succeeded against failing storage; stderr:\n%s", viaFlags, errOut)
				}
				f.CheckNoSecret(t, out, errOut)
				out, errOut, _ = runWorker(t, f, append(common, "-print-config")...)
				f.CheckNoSecret(t, out, errOut)
			}
		})
	}
}

// TestCredentialRefusedFailsAtStart: a credential storage refuses (a wrong
// key, an expired SAS: 403 AuthenticationFailed) or a sign-in that cannot
// succeed is a broken configuration, not an outage: the worker fails at
// start, well within -receive-outage, with an error that names the
// credential form in force and what to check, and prints no secret.
func TestCredentialRefusedFailsAtStart(t *testing.T) {
	for _, f := range clitest.RefusingForms(t) {
		t.Run(f.Name, func(t *testing.T) {
			f.Apply(t)
			t.Setenv(cli.EnvQueue, "")
			start := time.Now()
			out, errOut, err := runWorkerWithin(t, f, 20*time.Second, "-queue", "work", "-drain", "-receive-outage", "1m", "-log-format", "json")
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "storage refused the credential in force, "+f.Hint) || !strings.Contains(err.Error(), ": check ") {
				t.Errorf("worker: %v (after %v); want an error naming %q and what to check\nstderr:\n%s", err, took.Round(time.Millisecond), f.Hint, errOut)
			}
			if took > 10*time.Second {
				t.Errorf("the worker failed after %v; a refused credential must fail at start, not after retries", took.Round(time.Millisecond))
			}
			if !strings.Contains(errOut, `"msg":"worker failed"`) || strings.Contains(errOut, "storage is not answering") {
				t.Errorf("want the failure logged, and no 'storage is not answering' line:\n%s", errOut)
			}
			f.CheckNoSecret(t, out, errOut)
		})
	}
}

// TestCredentialsNeverPrintedOnSuccess runs the worker with -drain against
// Azurite with every form it accepts: it runs a purgeday job (a table
// listing), drains the queue, exits cleanly, and prints no secret.
func TestCredentialsNeverPrintedOnSuccess(t *testing.T) {
	in := azurite.ForTest(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	store, err := azstore.NewFromConnectionString(in.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range clitest.WorkingForms(t, in.ConnectionString) {
		t.Run(f.Name, func(t *testing.T) {
			f.Apply(t)
			t.Setenv(cli.EnvQueue, "")
			queue := fmt.Sprintf("auth-%d", i)
			q := store.Queue(queue)
			if err := q.Create(ctx); err != nil {
				t.Fatal(err)
			}
			text, err := jobs.Encode(jobs.Envelope{V: 1, ID: fmt.Sprintf("op-auth-%d", i), Kind: "purgeday", Args: []byte(`{"prefix":"AuthDays","keepDays":3}`)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
				t.Fatal(err)
			}
			out, errOut, err := runWorker(t, f, "-queue", queue, "-drain", "-log-format", "json", "-log-level", "debug")
			if err != nil {
				t.Fatalf("worker: %v\nstderr:\n%s", err, errOut)
			}
			if !strings.Contains(errOut, `"succeeded":1`) {
				t.Errorf("the purgeday job did not succeed:\n%s", errOut)
			}
			f.CheckNoSecret(t, out, errOut)
		})
	}
}

// TestLogsRedacted logs credentials the way an SDK error quoting a URL
// would, through the worker's own writers, and checks the JSON and text
// logs show neither the known secret nor a signature it was not told of.
func TestLogsRedacted(t *testing.T) {
	const known = "sv=2020-08-04&ss=bqt&sig=KNOWNSIGNATURE0123456789%2B%3D"
	t.Setenv(cli.EnvSASToken, known)
	t.Setenv(cli.EnvAccount, "acct")
	t.Setenv(cli.EnvConnectionString, "")
	for _, format := range []string{"json", "text"} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut}
		if err := m.ParseFlags([]string{"-log-format", format}); err != nil {
			t.Fatal(err)
		}
		m.redact()
		log, err := cli.NewLogger(m.Stderr, m.LogFormat, "debug")
		if err != nil {
			t.Fatal(err)
		}
		log.Error("GET https://acct.queue.core.windows.net/q?"+known, "err", fmt.Errorf("Get %q: refused", "https://acct.blob.core.windows.net/c?sv=1&sig=UNKNOWNSIG0123456789"),
			"conn", "AccountName=acct;AccountKey=QUNDT1VOVEtFWTAxMjM0NTY3ODk=;EndpointSuffix=core.windows.net")
		for _, secret := range []string{"KNOWNSIGNATURE", "UNKNOWNSIG", "QUNDT1VOVEtFWTAxMjM0NTY3ODk"} {
			if strings.Contains(errOut.String(), secret) {
				t.Errorf("%s log holds %s:\n%s", format, secret, errOut.String())
			}
		}
		if !strings.Contains(errOut.String(), cli.Redacted) {
			t.Errorf("%s log does not show %s:\n%s", format, cli.Redacted, errOut.String())
		}
	}
}
