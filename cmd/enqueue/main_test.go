package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/internal/version"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// queueName is the work queue every test uses (through $TABLEKEEPER_QUEUE,
// so the -queue default is exercised too).
const queueName = "work-items"

// bundle is what the tests work with: a fake clock, a local store and the
// work queue.
type bundle struct {
	t     *testing.T
	clock *clock.Fake
	store *localstore.Store
	queue storeadapter.Queue
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Setenv(cli.EnvQueue, queueName)
	t.Setenv(cli.EnvConnectionString, "")
	t.Setenv(cli.EnvAccount, "")
	t.Setenv(cli.EnvConfig, "")
	clock := clock.NewFake(t0)
	st := localstore.New(localstore.Options{Clock: clock})
	return &bundle{t: t, clock: clock, store: st, queue: st.Queue(queueName)}
}

// result is what one run of the program produced.
type result struct {
	code           int
	stdout, stderr string
}

// run runs enqueue with args against the local store.
func (b *bundle) run(stdin string, args ...string) result {
	b.t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Connect: func() (storeadapter.Store, error) { return b.store, nil },
		Clock:   b.clock,
	}
	code := m.Run(b.t.Context(), args)
	return result{code, out.String(), errOut.String()}
}

// mustRun runs enqueue and fails the test unless it exits 0.
func (b *bundle) mustRun(stdin string, args ...string) result {
	b.t.Helper()
	r := b.run(stdin, args...)
	if r.code != 0 {
		b.t.Fatalf("enqueue %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// receiveAll takes every visible message of q.
func (b *bundle) receiveAll(q storeadapter.Queue) []storeadapter.Message {
	b.t.Helper()
	var all []storeadapter.Message
	for {
		msgs, err := q.Receive(b.t.Context(), storeadapter.MaxReceiveCount, time.Minute)
		if errors.Is(err, storeadapter.ErrNotFound) {
			return all
		}
		if err != nil {
			b.t.Fatal(err)
		}
		if len(msgs) == 0 {
			return all
		}
		all = append(all, msgs...)
	}
}

// count returns the number of messages of q; 0 when it does not exist.
func (b *bundle) count(q storeadapter.Queue) int {
	b.t.Helper()
	n, err := q.ApproximateCount(b.t.Context())
	if errors.Is(err, storeadapter.ErrNotFound) {
		return 0
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// decodeArchive decodes message text as the worker does and returns its
// envelope and archive args.
func decodeArchive(t *testing.T, text string) (jobs.Envelope, archive.Args) {
	t.Helper()
	if strings.HasPrefix(text, "{") {
		t.Errorf("message text %q is plain JSON, want base64", text)
	}
	if _, err := base64.StdEncoding.DecodeString(text); err != nil {
		t.Errorf("message text is not base64: %v", err)
	}
	env, err := jobs.DecodeEnvelope(text)
	if err != nil {
		t.Fatalf("DecodeEnvelope: %v", err)
	}
	args, err := jobs.ParseArgs[archive.Args](env.Args)
	if err != nil {
		t.Fatalf("ParseArgs(%s): %v", env.Args, err)
	}
	return env, args
}

// show renders archive args with their optional keys spelled out.
func show(a archive.Args) string {
	p := func(s *string) string {
		if s == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", *s)
	}
	return fmt.Sprintf("table=%s to=%s toBlob=%s pk=%s rk=%s rkFrom=%s rkTo=%s", a.Table, a.To, a.ToBlob, p(a.PK), p(a.RK), p(a.RKFrom), p(a.RKTo))
}

func ptr(s string) *string { return &s }

func TestArchiveEnqueuesEnvelope(t *testing.T) {
	b := setup(t)
	r := b.mustRun("", "archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "Engineering", "-rk", "000042", "-id", "op-2026-11-21-0001")
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(msgs))
	}
	for _, want := range []string{"OP ID", "MESSAGE ID", "op-2026-11-21-0001", msgs[0].ID} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	env, args := decodeArchive(t, msgs[0].Text)
	if env.V != 1 || env.ID != "op-2026-11-21-0001" || env.Kind != "archive" {
		t.Errorf("envelope = v %d id %q kind %q, want 1, op-2026-11-21-0001, archive", env.V, env.ID, env.Kind)
	}
	want := archive.Args{Table: "Employees", To: "EmployeesArchive", PK: ptr("Engineering"), RK: ptr("000042")}
	if show(args) != show(want) {
		t.Errorf("args\n got %s\nwant %s", show(args), show(want))
	}
}

func TestArchiveRangeToBlobWithGeneratedID(t *testing.T) {
	b := setup(t)
	r := b.mustRun("", "archive", "-o", "json", "-table", "Logins", "-to-blob", "archive/2026", "-pk", "Day1", "-rk-from", "a", "-rk-to", "m")
	var out struct{ OpID, MessageID string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, r.stdout)
	}
	if !regexp.MustCompile(`^op-\d{8}T\d{6}Z-[0-9a-f]{8}$`).MatchString(out.OpID) {
		t.Errorf("generated op id %q does not match op-<yyyymmddThhmmssZ>-<8 hex>", out.OpID)
	}
	if !strings.HasPrefix(out.OpID, "op-20261121T100000Z-") {
		t.Errorf("generated op id %q does not carry the clock's time 20261121T100000Z", out.OpID)
	}
	msgs := b.receiveAll(b.queue)
	if len(msgs) != 1 || msgs[0].ID != out.MessageID {
		t.Fatalf("queue holds %d messages, want the one with id %q", len(msgs), out.MessageID)
	}
	env, args := decodeArchive(t, msgs[0].Text)
	if env.ID != out.OpID {
		t.Errorf("envelope id %q, printed op id %q", env.ID, out.OpID)
	}
	want := archive.Args{Table: "Logins", ToBlob: "archive/2026", PK: ptr("Day1"), RKFrom: ptr("a"), RKTo: ptr("m")}
	if show(args) != show(want) {
		t.Errorf("args\n got %s\nwant %s", show(args), show(want))
	}

	// Two generated ids differ even within one second.
	r2 := b.mustRun("", "archive", "-o", "json", "-table", "Logins", "-to", "LoginsArchive", "-pk", "p", "-rk-from", "")
	var out2 struct{ OpID string }
	if err := json.Unmarshal([]byte(r2.stdout), &out2); err != nil || out2.OpID == out.OpID {
		t.Errorf("second op id %q (err %v), first %q: want a different one", out2.OpID, err, out.OpID)
	}
}

func TestArchiveFlagErrors(t *testing.T) {
	valid := []string{"-table", "Employees", "-to", "EmployeesArchive", "-pk", "p"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"rk with rk-from", append(valid, "-rk", "a", "-rk-from", "b"), "-rk: give rk for one entity or rkFrom/rkTo for a range, not both"},
		{"missing table", []string{"-to", "EmployeesArchive", "-pk", "p", "-rk", "a"}, `-table: invalid input: table name: "" must be`},
		{"bad table name", []string{"-table", "1x", "-to", "EmployeesArchive", "-pk", "p", "-rk", "a"}, `-table: invalid input: table name: "1x" must be 3-63 letters and digits`},
		{"no target", []string{"-table", "Employees", "-pk", "p", "-rk", "a"}, "-to: is required (or -to-blob)"},
		{"two targets", append(valid, "-to-blob", "archive", "-rk", "a"), "-to and -to-blob: give one, not both"},
		{"same table", []string{"-table", "Employees", "-to", "employees", "-pk", "p", "-rk", "a"}, "-to: must differ from -table"},
		{"bad container", []string{"-table", "Employees", "-to-blob", "Archive/x", "-pk", "p", "-rk", "a"}, "-to-blob: invalid input: container name"},
		{"missing pk", []string{"-table", "Employees", "-to", "EmployeesArchive", "-rk", "a"}, "-pk: is required"},
		{"bad pk", []string{"-table", "Employees", "-to", "EmployeesArchive", "-pk", "a/b", "-rk", "a"}, "-pk: invalid input"},
		{"no row key", valid, "-rk: is required, or -rk-from and/or -rk-to for a range"},
		{"rk-to alone", append(valid, "-rk-to", "b"), "-rk-to: needs -rk-from"},
		{"empty range", append(valid, "-rk-from", "m", "-rk-to", "a"), "-rk-to: must be greater than"},
		{"bad id", append(valid, "-rk", "a", "-id", "op 1"), "-id: must be 1-128 characters"},
		{"bad output", append(valid, "-rk", "a", "-o", "yaml"), "-o: must be table or json"},
		{"bad queue", append(valid, "-rk", "a", "-queue", "Work_Items"), "-queue: invalid input: queue name"},
		{"stray argument", append(valid, "-rk", "a", "extra"), `unexpected argument "extra"`},
		{"unknown flag", append(valid, "-rk", "a", "-row", "b"), "unknown flag -row"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			r := b.run("", append([]string{"archive"}, c.args...)...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2 (usage)", r.code)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, r.stderr)
			}
			if n := b.count(b.queue); n != 0 {
				t.Errorf("the queue holds %d messages after a usage error, want 0", n)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	b := setup(t)
	r := b.run("", "frobnicate")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) || !strings.Contains(r.stderr, "Run 'enqueue help' for the commands.") {
		t.Errorf("unknown command: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = b.run("")
	if r.code != 2 || !strings.Contains(r.stderr, "usage: enqueue [common flags] <command>") {
		t.Errorf("no command: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, cmd := range []string{"archive", "export", "export verify", "raw", "blobsync offload", "blobsync attach", "blobsync reconcile", "blobsync get", "poison list", "poison show", "poison requeue", "poison delete", "poison purge", "outbox check", "outbox purge", "stats"} {
		if !strings.Contains(r.stderr, "\n  "+cmd+" ") {
			t.Errorf("usage does not list %q:\n%s", cmd, r.stderr)
		}
	}
	if r := b.run("", "help"); r.code != 0 || !strings.Contains(r.stdout, "usage: enqueue [common flags] <command>") {
		t.Errorf("help: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	for _, flag := range []string{"-version", "--version"} {
		if r := b.run("", flag); r.code != 0 || r.stdout != version.String("enqueue")+"\n" || r.stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", flag, r.code, r.stdout, r.stderr)
		}
	}
	if r := b.run("", "-version", "stats"); r.code != 2 || !strings.Contains(r.stderr, "-version takes no command") {
		t.Errorf("-version stats: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "archive", "-h"); r.code != 0 || !strings.Contains(r.stdout, "usage: enqueue archive -table T") {
		t.Errorf("archive -h: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if r := b.run("", "poison", "frob"); r.code != 2 || !strings.Contains(r.stderr, `unknown subcommand "frob"`) {
		t.Errorf("poison frob: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestSecretsNeverPrinted checks that a connection string given by flag or
// environment never appears in an error, whatever the failure says.
func TestSecretsNeverPrinted(t *testing.T) {
	const key = "c2VjcmV0LWtleS12YWx1ZQ=="
	conn := "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + key
	for _, viaEnv := range []bool{false, true} {
		setup(t)
		args := []string{"stats"}
		if viaEnv {
			t.Setenv(cli.EnvConnectionString, conn)
		} else {
			args = append(args, "-connection-string", conn)
		}
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut, Connect: func() (storeadapter.Store, error) {
			return nil, fmt.Errorf("dial with %q (key %s)", conn, key)
		}}
		if code := m.Run(t.Context(), args); code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if strings.Contains(errOut.String(), key) || strings.Contains(out.String(), key) {
			t.Errorf("the account key was printed:\n%s%s", out.String(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "[REDACTED]") {
			t.Errorf("stderr does not show the redacted error:\n%s", errOut.String())
		}
	}
}

// envelopeLine returns one raw input line: an archive envelope as JSON.
func envelopeLine(id, rk string) string {
	return fmt.Sprintf(`{"v":1,"id":%q,"kind":"archive","args":{"table":"Employees","to":"EmployeesArchive","pk":"p","rk":%q}}`, id, rk)
}

func TestRawSendsValidLinesAndReportsBadOnes(t *testing.T) {
	b := setup(t)
	base64Line := base64.StdEncoding.EncodeToString([]byte(envelopeLine("op-b64", "r4")))
	input := strings.Join([]string{
		envelopeLine("op-1", "r1"), // line 1
		"",                         // line 2: blank, skipped
		envelopeLine("op-2", "r2"), // line 3
		`{"v":1,"id":"op-x","kind":"archive","args":{"table":"Employees","to":"EmployeesArchive","pk":"p","rk":"a","rkFrom":"b"}}`, // line 4
		`not json at all!`,                               // line 5
		"   " + envelopeLine("op-3", "r3"),               // line 6: surrounding blanks are fine
		`{"v":1,"id":"op-y","kind":"reindex","args":{}}`, // line 7
		base64Line,                 // line 8
		envelopeLine("op-5", "r5"), // line 9, no final newline
	}, "\n")
	r := b.run(input, "raw", "-concurrency", "3")
	if r.code != 1 {
		t.Errorf("exit %d, want 1 (some lines failed)", r.code)
	}
	if !strings.Contains(r.stdout, "sent 5, failed 3") {
		t.Errorf("stdout lacks the counts \"sent 5, failed 3\":\n%s", r.stdout)
	}
	for _, want := range []string{
		"line 4: args.rk: give rk for one entity or rkFrom/rkTo for a range, not both",
		"line 5: envelope: the message is neither JSON nor base64",
		`line 7: envelope: kind: "reindex" is not one of [archive blobsync copy export index purge purgeday restore]`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	for _, n := range []string{"line 1:", "line 2:", "line 3:", "line 6:", "line 8:", "line 9:"} {
		if strings.Contains(r.stderr, n) {
			t.Errorf("stderr reports a valid line (%s):\n%s", n, r.stderr)
		}
	}
	var ids []string
	for _, msg := range b.receiveAll(b.queue) {
		env, args := decodeArchive(t, msg.Text)
		ids = append(ids, env.ID+"/"+*args.RK)
	}
	slices.Sort(ids)
	if want := []string{"op-1/r1", "op-2/r2", "op-3/r3", "op-5/r5", "op-b64/r4"}; !slices.Equal(ids, want) {
		t.Errorf("queue holds %v, want %v", ids, want)
	}
}

func TestRawFromFileWithProgressAndJSON(t *testing.T) {
	b := setup(t)
	path := filepath.Join(t.TempDir(), "ops.jsonl")
	var in strings.Builder
	const n = 40
	for i := range n {
		fmt.Fprintln(&in, envelopeLine(fmt.Sprintf("op-%03d", i), fmt.Sprintf("r%03d", i)))
		if i%10 == 0 {
			in.WriteString("\n")
		}
	}
	if err := os.WriteFile(path, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("ignored"),
		Connect:    func() (storeadapter.Store, error) { return b.store, nil },
		IsTerminal: func(any) bool { return true }}
	if code := m.Run(t.Context(), []string{"raw", "-file", path, "-o", "json"}); code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	var counts struct{ Sent, Failed, NotSent int }
	if err := json.Unmarshal(out.Bytes(), &counts); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, out.String())
	}
	if counts.Sent != n || counts.Failed != 0 || counts.NotSent != 0 {
		t.Errorf("counts = %+v, want %d sent", counts, n)
	}
	if want := fmt.Sprintf("\rsent %d/%d (", n, n); !strings.Contains(errOut.String(), want) {
		t.Errorf("progress line lacks %q: %q", want, errOut.String())
	}
	if got := b.count(b.queue); got != n {
		t.Errorf("queue holds %d messages, want %d", got, n)
	}
}

func TestRawLongLineIsSkipped(t *testing.T) {
	b := setup(t)
	input := envelopeLine("op-1", "r1") + "\n" + strings.Repeat("x", maxLineBytes+10) + "\n" + envelopeLine("op-2", "r2") + "\n"
	r := b.run(input, "raw")
	if r.code != 1 || !strings.Contains(r.stdout, "sent 2, failed 1") || !strings.Contains(r.stderr, "line 2: longer than") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestRawStopsWhenTheQueueFails(t *testing.T) {
	setup(t)
	// A queue that cannot be reached at all, not a per-message rejection.
	down := unreachable()
	var in strings.Builder
	for i := range 500 {
		fmt.Fprintln(&in, envelopeLine(fmt.Sprintf("op-%d", i), "r"))
	}
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(in.String()),
		Connect: func() (storeadapter.Store, error) { return down, nil }}
	if code := m.Run(t.Context(), []string{"raw", "-concurrency", "2"}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !regexp.MustCompile(`enqueue raw: stopped: line \d+: send to queue work-items: dial: service unavailable\n`).MatchString(errOut.String()) || !strings.Contains(out.String(), "not sent at most ") || !strings.Contains(out.String(), "some may have reached the queue") {
		t.Errorf("want a stop report\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	if lines := strings.Count(errOut.String(), "\n"); lines > 10 {
		t.Errorf("%d lines of errors: the run did not stop early", lines)
	}
}

// poisonBundle holds poisoned messages made with the real mover.
type poisonBundle struct {
	*bundle
	mover *poison.Recorder
	ids   []string // original message ids, oldest first
	texts []string // their original texts
}

// setupPoison poisons four messages, one minute apart: three archive
// envelopes (two of them for the same reason) and one that is not an
// envelope at all.
func setupPoison(t *testing.T) *poisonBundle {
	t.Helper()
	b := &poisonBundle{bundle: setup(t)}
	b.mover = recorder(t, b.store, b.clock)
	ctx := t.Context()
	if err := b.queue.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct{ text, kind, reason string }{
		{base64.StdEncoding.EncodeToString([]byte(envelopeLine("op-1", "r1"))), "archive", "dequeue count 6 reached the maximum 5"},
		{envelopeLine("op-2", "r2"), "archive", "permanent: archive: Employees p/r2 does not exist and EmployeesArchive holds no copy"},
		{"garbage\u0085line\tend", "", "envelope: the message is neither JSON nor base64 of JSON"},
		{base64.StdEncoding.EncodeToString([]byte(envelopeLine("op-4", "r4"))), "archive", "dequeue count 6 reached the maximum 5"},
	} {
		if _, err := b.queue.Send(ctx, c.text, storeadapter.SendOptions{}); err != nil {
			t.Fatal(err)
		}
		msgs, err := b.queue.Receive(ctx, 1, 30*time.Second)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %d messages, %v", len(msgs), err)
		}
		msg := msgs[0]
		f := poison.Failure{MessageID: msg.ID, Text: msg.Text, OpID: fmt.Sprintf("op-%d", i+1), Kind: c.kind,
			Attempt: poison.Attempt{DequeueCount: msg.DequeueCount, Time: b.clock.Now(), Duration: 1500 * time.Millisecond, Host: "worker-7", Error: "boom " + c.reason}}
		if err := b.mover.Move(ctx, f, msg.PopReceipt, c.reason); err != nil {
			t.Fatalf("Move: %v", err)
		}
		b.ids = append(b.ids, msg.ID)
		b.texts = append(b.texts, msg.Text)
		b.clock.Advance(time.Minute)
	}
	return b
}

func TestPoisonList(t *testing.T) {
	b := setupPoison(t)
	r := b.mustRun("", "poison", "list")
	summary, records, ok := strings.Cut(r.stdout, "\nNewest first:\n")
	if !ok || !strings.HasPrefix(summary, "4 poisoned messages in 3 groups:\nGROUP ") || !strings.Contains(summary, "\narchive/dequeue-count  2 ") {
		t.Fatalf("list does not start with the counts by group:\n%s", r.stdout)
	}
	lines := strings.Split(strings.TrimRight(records, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want a header and 4 records:\n%s", len(lines), r.stdout)
	}
	for _, h := range []string{"MESSAGE ID", "OP ID", "KIND", "DELIVERIES", "LAST ATTEMPT", "REASON"} {
		if !strings.Contains(lines[0], h) {
			t.Errorf("header lacks %q: %s", h, lines[0])
		}
	}
	for i, line := range lines[1:] { // newest first
		if id := b.ids[len(b.ids)-1-i]; !strings.HasPrefix(line, id+" ") {
			t.Errorf("line %d = %q, want record %s (newest first)", i+1, line, id)
		}
	}
	if !strings.Contains(r.stdout, "2026-11-21T10:03:00Z") {
		t.Errorf("LAST ATTEMPT of the newest record missing:\n%s", r.stdout)
	}
	if !strings.Contains(lines[3], "permanent: archive: Employees p/r2 does not exist and EmployeesArchive holds no…") {
		t.Errorf("long reason not cut to 80 characters: %q", lines[3])
	}

	r = b.mustRun("", "poison", "list", "-kind", "archive", "-o", "json")
	var recs []struct {
		MessageID, OpID, Kind, State, Reason string
		DequeueCount                         int64
		LastAttempt                          time.Time
	}
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, rec := range recs {
		got = append(got, rec.MessageID)
		if rec.Kind != "archive" || rec.State != poison.StatePoisoned || rec.DequeueCount != 1 {
			t.Errorf("record %+v: want kind archive, state poisoned, 1 delivery", rec)
		}
	}
	if want := []string{b.ids[3], b.ids[1], b.ids[0]}; !slices.Equal(got, want) {
		t.Errorf("-kind archive gives %v, want %v", got, want)
	}
	if !recs[0].LastAttempt.Equal(t0.Add(3 * time.Minute)) {
		t.Errorf("lastAttempt = %v, want %v", recs[0].LastAttempt, t0.Add(3*time.Minute))
	}

	r = b.mustRun("", "poison", "list", "-group")
	lines = strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "GROUP") || !strings.Contains(lines[0], "COUNT") ||
		!strings.HasPrefix(lines[1], "archive/dequeue-count  2 ") || !strings.HasPrefix(lines[2], "validation ") ||
		!strings.HasPrefix(lines[3], "archive/not-found ") {
		t.Errorf("-group output:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "list", "-group", "-o", "json", "-limit", "2")
	var groups []struct {
		Group, Kind, Class, Example string
		Count                       int
		Newest                      time.Time
	}
	if err := json.Unmarshal([]byte(r.stdout), &groups); err != nil || len(groups) != 2 || groups[0].Count != 2 ||
		groups[0].Group != "archive/dequeue-count" || groups[0].Class != "dequeue-count" || !groups[0].Newest.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("-group -o json -limit 2 = %+v (%v):\n%s", groups, err, r.stdout)
	}
	r = b.mustRun("", "poison", "list", "-limit", "1")
	_, records, _ = strings.Cut(r.stdout, "\nNewest first:\n")
	if lines := strings.Split(strings.TrimRight(records, "\n"), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], b.ids[3]) ||
		lines[2] != "3 more messages (use -limit 0 for all)" {
		t.Errorf("list -limit 1:\n%s", r.stdout)
	}
	if r := b.run("", "poison", "list", "-limit", "-1"); r.code != 2 || !strings.Contains(r.stderr, "-limit: must be 0 (all) or more") {
		t.Errorf("list -limit -1: exit %d\n%s", r.code, r.stderr)
	}
}

func TestPoisonListEmpty(t *testing.T) {
	b := setup(t)
	if err := b.queue.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := b.mustRun("", "poison", "list"); !strings.Contains(r.stdout, "no poisoned messages") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if r := b.mustRun("", "poison", "list", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("-o json of nothing = %q, want []", r.stdout)
	}
}

func TestPoisonShow(t *testing.T) {
	b := setupPoison(t)
	r := b.mustRun("", "poison", "show", b.ids[0])
	for _, want := range []string{
		"Message ID:", b.ids[0], "State:", "poisoned", "Op ID:", "op-1",
		"Reason:", "dequeue count 6 reached the maximum 5",
		"Attempts (1):", "worker-7", "1.5s", "boom dequeue count 6", "2026-11-21T10:00:00Z",
		"Original envelope:", `"kind": "archive"`, `"rk": "r1"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	// An original that is not an envelope is shown raw, control characters
	// escaped; flags may follow the id.
	r = b.mustRun("", "poison", "show", b.ids[2])
	if !strings.Contains(r.stdout, "not a valid envelope") || !strings.Contains(r.stdout, "garbage\\x85line\tend") {
		t.Errorf("show of a non-envelope:\n%q", r.stdout)
	}

	r = b.mustRun("", "poison", "show", b.ids[1], "-o", "json")
	var got struct {
		MessageID, OpID, Original string
		Attempts                  []struct {
			N          int64
			Host       string
			DurationNs int64
			Error      string
		}
		Envelope *jobs.Envelope
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, r.stdout)
	}
	if got.MessageID != b.ids[1] || got.Original != b.texts[1] || len(got.Attempts) != 1 || got.Attempts[0].Host != "worker-7" ||
		got.Attempts[0].DurationNs != int64(1500*time.Millisecond) || got.Envelope == nil || got.Envelope.ID != "op-2" {
		t.Errorf("show -o json = %+v", got)
	}

	if r := b.run("", "poison", "show", "no-such-id"); r.code != 1 || !strings.Contains(r.stderr, "no poison record with message id or operation id no-such-id") {
		t.Errorf("show of a missing id: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "poison", "show"); r.code != 2 {
		t.Errorf("show without an id: exit %d, want 2", r.code)
	}
}

func TestPoisonRequeue(t *testing.T) {
	b := setupPoison(t)
	pq := b.store.Queue(poison.QueueName(queueName))
	if n := b.count(pq); n != 4 {
		t.Fatalf("poison queue holds %d, want 4", n)
	}

	for _, args := range [][]string{{"-all", b.ids[0]}, {}, {"-kind", "archive"}} {
		if r := b.run("", append([]string{"poison", "requeue"}, args...)...); r.code != 2 {
			t.Errorf("requeue %v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}

	r := b.mustRun("", "poison", "requeue", "-all", "-kind", "archive", "-dry-run", "-details")
	if !strings.Contains(r.stdout, "would requeue 3") || !strings.Contains(r.stdout, b.ids[0]) || strings.Contains(r.stdout, b.ids[2]) {
		t.Errorf("dry run:\n%s", r.stdout)
	}
	if n, p := b.count(b.queue), b.count(pq); n != 0 || p != 4 {
		t.Errorf("after a dry run: work queue %d, poison queue %d; want 0 and 4", n, p)
	}

	r = b.mustRun("", "poison", "requeue", b.ids[1], b.ids[2], "-o", "json")
	var out struct {
		DryRun   bool
		Requeued []struct{ MessageID, NewMessageID string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, r.stdout)
	}
	if out.DryRun || len(out.Requeued) != 2 {
		t.Fatalf("requeue -o json = %+v", out)
	}
	msgs := b.receiveAll(b.queue)
	var texts []string
	newIDs := map[string]bool{}
	for _, msg := range msgs {
		texts = append(texts, msg.Text)
		newIDs[msg.ID] = true
	}
	slices.Sort(texts)
	want := []string{b.texts[1], b.texts[2]}
	slices.Sort(want)
	if !slices.Equal(texts, want) {
		t.Errorf("work queue holds %q, want the originals %q", texts, want)
	}
	for _, rq := range out.Requeued {
		if !newIDs[rq.NewMessageID] {
			t.Errorf("printed new message id %q is not on the work queue", rq.NewMessageID)
		}
	}
	if p := b.count(pq); p != 2 {
		t.Errorf("poison queue holds %d, want 2", p)
	}

	r = b.mustRun("", "poison", "requeue", "-all", "-details")
	if !strings.Contains(r.stdout, "requeued 2 to "+queueName) || !strings.Contains(r.stdout, "NEW MESSAGE ID") {
		t.Errorf("requeue -all:\n%s", r.stdout)
	}
	if r := b.mustRun("", "poison", "list"); !strings.Contains(r.stdout, "no poisoned messages") {
		t.Errorf("list after requeueing everything:\n%s", r.stdout)
	}

	if r := b.run("", "poison", "requeue", "no-such-id"); r.code != 1 || !strings.Contains(r.stderr, "no-such-id") {
		t.Errorf("requeue of a missing id: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestPoisonDeleteAndPurge(t *testing.T) {
	b := setupPoison(t)
	pq := b.store.Queue(poison.QueueName(queueName))

	r := b.mustRun("", "poison", "delete", b.ids[0])
	if !strings.Contains(r.stdout, "deleted "+b.ids[0]) {
		t.Errorf("delete:\n%s", r.stdout)
	}
	if r := b.run("", "poison", "show", b.ids[0]); r.code != 1 {
		t.Errorf("show after delete: exit %d, want 1", r.code)
	}
	if p := b.count(pq); p != 3 {
		t.Errorf("poison queue holds %d after delete, want 3", p)
	}
	if r := b.run("", "poison", "delete", b.ids[0]); r.code != 1 || !strings.Contains(r.stderr, "no poison record for message "+b.ids[0]) {
		t.Errorf("second delete: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "poison", "delete"); r.code != 2 {
		t.Errorf("delete without an id: exit %d, want 2", r.code)
	}

	// Records last tried at 10:01, 10:02 and 10:03 remain; it is now 11:04,
	// so 61m30s ago is 10:02:30.
	b.clock.Advance(time.Hour)
	if r := b.run("", "poison", "purge", "-older-than", "-1h"); r.code != 2 || !strings.Contains(r.stderr, "-older-than: must not be negative") {
		t.Errorf("purge -older-than -1h: exit %d, want 2; stderr:\n%s", r.code, r.stderr)
	}
	if r := b.run("", "poison", "purge", "-stale-after", "-1h"); r.code != 2 || !strings.Contains(r.stderr, "-stale-after: must be more than 0") {
		t.Errorf("purge -stale-after -1h: exit %d, want 2; stderr:\n%s", r.code, r.stderr)
	}
	r = b.mustRun("", "poison", "purge", "-older-than", "61m30s")
	if strings.TrimSpace(r.stdout) != "purged 2 (2 poisoned)" {
		t.Errorf("purge -older-than 61m30s = %q, want \"purged 2\"", r.stdout)
	}
	r = b.mustRun("", "poison", "purge", "-older-than", "1d", "-o", "json")
	var out struct{ Purged int }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Purged != 0 {
		t.Errorf("purge -older-than 1d -o json = %q (%v), want 0 purged", r.stdout, err)
	}
	r = b.mustRun("", "poison", "purge", "-yes")
	if strings.TrimSpace(r.stdout) != "purged 1 (1 poisoned)" {
		t.Errorf("purge = %q, want \"purged 1\"", r.stdout)
	}
	if p := b.count(pq); p != 0 {
		t.Errorf("poison queue holds %d after purging all, want 0", p)
	}
}

func TestStats(t *testing.T) {
	b := setup(t)
	r := b.mustRun("", "stats")
	if strings.Count(r.stdout, "does not exist") != 2 || !strings.Contains(r.stdout, queueName+"-poison") {
		t.Errorf("stats before any queue exists:\n%s", r.stdout)
	}

	for i := range 3 {
		b.mustRun("", "archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "p", "-rk", fmt.Sprint(i))
	}
	msgs, err := b.queue.Receive(t.Context(), 1, time.Minute)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	mv := recorder(t, b.store, b.clock)
	f := poison.Failure{MessageID: msgs[0].ID, Text: msgs[0].Text, Attempt: poison.Attempt{DequeueCount: 1, Time: t0}}
	if err := mv.Move(t.Context(), f, msgs[0].PopReceipt, "test"); err != nil {
		t.Fatal(err)
	}

	r = b.mustRun("", "stats", "-o", "json")
	var out struct {
		Queue, Poison struct {
			Name     string
			Messages int
			Exists   bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-o json output does not parse: %v\n%s", err, r.stdout)
	}
	if out.Queue.Name != queueName || out.Queue.Messages != 2 || !out.Queue.Exists ||
		out.Poison.Name != queueName+"-poison" || out.Poison.Messages != 1 || !out.Poison.Exists {
		t.Errorf("stats = %+v, want 2 on %s and 1 on its poison queue", out, queueName)
	}
	r = b.mustRun("", "stats", "-queue", "other-queue")
	if !strings.Contains(r.stdout, "other-queue-poison") || strings.Count(r.stdout, "does not exist") != 2 {
		t.Errorf("stats -queue other-queue:\n%s", r.stdout)
	}
}

// TestNonUTF8ArgumentsAreRefused: a flag value or argument that is not
// valid UTF-8 would be rewritten on the way to storage (and the job
// poisoned later); every command refuses it with exit 2 naming the flag.
func TestNonUTF8ArgumentsAreRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "caf\xe9", "-rk", "r"}, "-pk: must be valid UTF-8"},
		{[]string{"archive", "-table", "Employees", "-to", "EmployeesArchive", "-pk", "p", "-rk-from", "a\xff"}, "-rk-from: must be valid UTF-8"},
		{[]string{"poison", "list", "-kind", "\xfe"}, "-kind: must be valid UTF-8"},
		{[]string{"poison", "show", "id\xff"}, "argument 1: must be valid UTF-8"},
		{[]string{"stats", "-account", "\xff"}, "-account: must be valid UTF-8"},
	} {
		b := setup(t)
		r := b.run("", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("enqueue %q: exit %d, stderr:\n%s\nwant exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		if !utf8.ValidString(r.stderr) {
			t.Errorf("enqueue %q: stderr repeats the invalid bytes:\n%q", c.args, r.stderr)
		}
		if n := b.count(b.queue); n != 0 {
			t.Errorf("enqueue %q: the queue holds %d messages, want 0", c.args, n)
		}
	}
}

// TestHelpGoesToStdout: -h of every command prints its usage on stdout and
// exits 0, so "enqueue archive -h | less" works.
func TestHelpGoesToStdout(t *testing.T) {
	for _, cmd := range [][]string{{"archive"}, {"raw"}, {"stats"}, {"poison", "list"}, {"poison", "show"},
		{"poison", "requeue"}, {"poison", "delete"}, {"poison", "purge"}, {"outbox", "check"}, {"outbox", "purge"}} {
		for _, h := range []string{"-h", "-help", "--help"} {
			b := setup(t)
			r := b.run("", append(slices.Clone(cmd), h)...)
			want := "usage: enqueue " + strings.Join(cmd, " ")
			if r.code != 0 || !strings.Contains(r.stdout, want) || r.stderr != "" {
				t.Errorf("enqueue %s %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and %q on stdout only", strings.Join(cmd, " "), h, r.code, r.stdout, r.stderr, want)
			}
		}
	}
	b := setup(t)
	if r := b.run("", "poison", "-h"); r.code != 0 || !strings.Contains(r.stdout, "usage: enqueue poison") {
		t.Errorf("poison -h: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

// TestPoisonCommandsOnAMissingQueue: a mistyped -queue is reported as a
// missing queue by every poison command, as stats does, not as "no
// poisoned messages".
func TestPoisonCommandsOnAMissingQueue(t *testing.T) {
	b := setupPoison(t)
	for _, args := range [][]string{{"list"}, {"list", "-group"}, {"show", b.ids[0]}, {"requeue", "-all"},
		{"delete", b.ids[0]}, {"purge", "-yes"}} {
		r := b.run("", append(append([]string{"poison"}, args...), "-queue", "work-itmes")...)
		if r.code != 1 || !strings.Contains(r.stderr, "queue work-itmes does not exist (check -queue or $TABLEKEEPER_QUEUE)") {
			t.Errorf("poison %v -queue work-itmes: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestPoisonShowIDs: show takes an operation id too, and an id that can be
// neither gets a usage error that says why, in the operator's words.
func TestPoisonShowIDs(t *testing.T) {
	b := setupPoison(t)
	r := b.mustRun("", "poison", "show", "op-2")
	if !strings.Contains(r.stdout, "Message ID:     "+b.ids[1]) || !strings.Contains(r.stdout, "Group:          archive/not-found") {
		t.Errorf("show op-2:\n%s", r.stdout)
	}
	r = b.run("", "poison", "show", "x/y?z")
	if r.code != 2 || !strings.Contains(r.stderr, `"x/y?z" is not a valid message id or operation id`) ||
		!strings.Contains(r.stderr, "must not contain / \\ # ?") || strings.Contains(r.stderr, "PartitionKey") {
		t.Errorf("show x/y?z: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestPoisonPurgeAsksFirst: a purge without a filter needs -yes, or a "y"
// on a terminal; a dry run changes nothing and needs neither.
func TestPoisonPurgeAsksFirst(t *testing.T) {
	b := setupPoison(t)
	pq := b.store.Queue(poison.QueueName(queueName))
	r := b.run("", "poison", "purge")
	if r.code != 2 || !strings.Contains(r.stderr, "add -yes to confirm") {
		t.Errorf("purge off a terminal without -yes: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = b.mustRun("", "poison", "purge", "-dry-run", "-details")
	if !strings.Contains(r.stdout, "would remove 4 (4 poisoned) (dry run: nothing changed)") || !strings.Contains(r.stdout, b.ids[2]+"  poisoned  validation") {
		t.Errorf("purge -dry-run:\n%s", r.stdout)
	}
	if n := b.count(pq); n != 4 {
		t.Fatalf("poison queue holds %d after a refused purge and a dry run, want 4", n)
	}

	onTerminal := func(answer string) result {
		var out, errOut bytes.Buffer
		m := &Main{Stdin: strings.NewReader(answer), Stdout: &out, Stderr: &errOut, Clock: b.clock,
			Connect: func() (storeadapter.Store, error) { return b.store, nil }, IsTerminal: func(any) bool { return true }}
		code := m.Run(t.Context(), []string{"poison", "purge"})
		return result{code, out.String(), errOut.String()}
	}
	if r := onTerminal("n\n"); r.code != 2 || !strings.Contains(r.stderr, "purge every poisoned and requeued record of queue work-items? [y/N]") ||
		!strings.Contains(r.stderr, "not confirmed: nothing purged") || b.count(pq) != 4 {
		t.Errorf("answer n: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := onTerminal("y\n"); r.code != 0 || !strings.Contains(r.stdout, "purged 4") || !strings.Contains(r.stderr, "purged: delete records 4/4") || b.count(pq) != 0 {
		t.Errorf("answer y: exit %d\nstdout:\n%s\nstderr:\n%q", r.code, r.stdout, r.stderr)
	}
}

// TestPoisonGroupsSelect: requeue and delete take a group; requeue warns
// about validation failures and says why an id was not requeued; delete
// has a dry run.
func TestPoisonGroupsSelect(t *testing.T) {
	b := setupPoison(t)
	r := b.mustRun("", "poison", "delete", "-group", "archive/not-found", "-dry-run", "-details")
	if !strings.Contains(r.stdout, "would remove 1 (1 poisoned) (dry run") || !strings.Contains(r.stdout, b.ids[1]) {
		t.Errorf("delete -group -dry-run:\n%s", r.stdout)
	}
	if r := b.mustRun("", "poison", "delete", b.ids[1], "-dry-run"); strings.TrimSpace(r.stdout) != "would delete "+b.ids[1] {
		t.Errorf("delete ID -dry-run:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "requeue", "-group", "archive/dequeue-count")
	if !strings.Contains(r.stdout, "requeued 2 to work-items") || b.count(b.queue) != 2 {
		t.Errorf("requeue -group archive/dequeue-count:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "requeue", b.ids[0], b.ids[2])
	if !strings.Contains(r.stderr, "not requeued "+b.ids[0]+": it was already requeued at") ||
		!strings.Contains(r.stderr, "warning: 1 requeued messages were poisoned by a validation error; unchanged, they will be poisoned again: "+b.ids[2]) {
		t.Errorf("requeue of a requeued and an invalid message: stderr:\n%s", r.stderr)
	}
	r = b.mustRun("", "poison", "delete", "-group", "archive/not-found")
	if strings.TrimSpace(r.stdout) != "deleted 1 (1 poisoned)" {
		t.Errorf("delete -group:\n%s", r.stdout)
	}
	if r := b.run("", "poison", "delete", "-group", "x", b.ids[1]); r.code != 2 {
		t.Errorf("delete with ids and -group: exit %d", r.code)
	}
}

// TestRawCapsErrorsAndSaysHowToResume: a file of many bad lines prints the
// first 20 errors and a count of the rest (all of them in -o json); a run
// that stops says which lines were not sent and from which line to resume.
func TestRawCapsErrorsAndSaysHowToResume(t *testing.T) {
	b := setup(t)
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, `{"v":1,"id":"op-%d","kind":"nope","args":{}}`+"\n", i)
	}
	fmt.Fprintln(&in, envelopeLine("op-good", "r"))
	r := b.run(in.String(), "raw")
	if r.code != 1 || strings.Count(r.stderr, "\nline ")+boolInt(strings.HasPrefix(r.stderr, "line ")) != 20 ||
		!strings.Contains(r.stderr, "line 20: envelope: kind") || strings.Contains(r.stderr, "line 21:") ||
		!strings.Contains(r.stderr, "30 more failed lines not shown (-o json lists them all)") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = b.run(in.String(), "raw", "-o", "json")
	var out struct {
		Sent, Failed int
		Failures     []struct {
			Line  int
			Error string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Sent != 1 || out.Failed != 50 || len(out.Failures) != 50 ||
		out.Failures[49].Line != 50 || !strings.Contains(out.Failures[49].Error, `kind: "nope" is not one of`) {
		t.Errorf("-o json = %+v (%v)\n%s", out, err, r.stdout)
	}

	down := unreachable()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(file, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Connect: func() (storeadapter.Store, error) { return down, nil }}
	if code := m.Run(t.Context(), []string{"raw", "-file", file, "-concurrency", "1"}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	// Whether the reader had reached the end of the file when the send
	// failed is a race ("line 51" or "line 51 and every line after 51 (not
	// read)"); the resume command is the same either way.
	if out := stderr.String(); !strings.Contains(out, "not sent: line 51") || !strings.Contains(out, "resume with: tail -n +51 "+file+" | enqueue raw") {
		t.Errorf("stop report:\n%s", stderr.String())
	}
}

// TestRawRefusedLineFailsAlone: a message the queue service refuses fails
// its line alone; the lines after it are sent.
func TestRawRefusedLineFailsAlone(t *testing.T) {
	b := setup(t)
	if err := b.queue.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sends atomic.Int64 // one sender: line 2's is the second
	store := instrument.Wrap(b.store, instrument.Options{Fault: func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpSend && sends.Add(1) == 2 {
			return fmt.Errorf("the service says no: %w", storeadapter.ErrInvalidInput)
		}
		return nil
	}})
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(envelopeLine("op-1", "r1") + "\n" + envelopeLine("op-2", "r2") + "\n" + envelopeLine("op-3", "r3") + "\n"),
		Connect: func() (storeadapter.Store, error) { return store, nil }}
	if code := m.Run(t.Context(), []string{"raw", "-concurrency", "1"}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out.String() != "sent 2, failed 1\n" || errOut.String() != "line 2: send to queue work-items: the service says no: invalid input\nenqueue raw: 1 of 3 lines failed\n" {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

// unreachable is a store every call of which fails as a storage account
// that cannot be reached does.
func unreachable() storeadapter.Store {
	return instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Fault: func(context.Context, instrument.Call) error {
		return fmt.Errorf("dial: %w", storeadapter.ErrUnavailable)
	}})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// recorder returns the worker's poison recorder of the test queue, to
// poison messages as the worker would.
func recorder(t *testing.T, s storeadapter.Store, clk clock.Clock) *poison.Recorder {
	t.Helper()
	r, err := cli.PoisonRecorder(s, queueName, clk)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
