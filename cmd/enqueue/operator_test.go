package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// poisonAgain requeues the record of message id, then poisons the message
// the requeue sent, with op id op, a minute later, and returns its id.
func (b *poisonBundle) poisonAgain(id, op string) string {
	b.t.Helper()
	b.mustRun("", "poison", "requeue", id)
	b.clock.Advance(time.Minute)
	msgs, err := b.queue.Receive(b.t.Context(), 1, 30*time.Second)
	if err != nil || len(msgs) != 1 {
		b.t.Fatalf("receive the requeued message: %d, %v", len(msgs), err)
	}
	f := poison.Failure{MessageID: msgs[0].ID, Text: msgs[0].Text, OpID: op, Kind: "archive",
		Attempt: poison.Attempt{DequeueCount: 1, Time: b.clock.Now(), Host: "worker-8", Error: "again"}}
	if err := b.mover.Move(b.t.Context(), f, msgs[0].PopReceipt, "permanent: again"); err != nil {
		b.t.Fatal(err)
	}
	return msgs[0].ID
}

// TestPoisonShowAfterRequeue: an operation requeued and poisoned again has
// two records; show by its op id gives the current one (the poisoned one)
// and lists the requeued one below, and show by the old message id says
// which is current.
func TestPoisonShowAfterRequeue(t *testing.T) {
	b := setupPoison(t)
	again := b.poisonAgain(b.ids[1], "op-2")
	r := b.mustRun("", "poison", "show", "op-2")
	for _, want := range []string{"Message ID:     " + again, "State:          poisoned", "Current:        yes",
		"Other records of operation op-2 (1), newest first:", b.ids[1] + "  requeued", "as message " + again} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show op-2 lacks %q:\n%s", want, r.stdout)
		}
	}
	r = b.mustRun("", "poison", "show", b.ids[1])
	if !strings.Contains(r.stdout, "Message ID:     "+b.ids[1]) || !strings.Contains(r.stdout, "Current:        no: the operation's current record is "+again+" (poisoned)") {
		t.Errorf("show of the requeued record:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "show", "op-2", "-o", "json")
	var got struct {
		MessageID    string
		Current      bool
		OtherRecords []struct{ MessageID, State, RequeuedMessageID string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, r.stdout)
	}
	if got.MessageID != again || !got.Current || len(got.OtherRecords) != 1 || got.OtherRecords[0].MessageID != b.ids[1] ||
		got.OtherRecords[0].State != poison.StateRequeued || got.OtherRecords[0].RequeuedMessageID != again {
		t.Errorf("show op-2 -o json = %+v", got)
	}
}

// TestPoisonShowDecodesBase64: an original that is no envelope but base64
// of JSON is shown decoded, and says it was base64.
func TestPoisonShowDecodesBase64(t *testing.T) {
	b := setupPoison(t)
	text := base64.StdEncoding.EncodeToString([]byte(`{"v":2,"id":"op-9","kind":"archive"}`))
	if _, err := b.queue.Send(t.Context(), text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.queue.Receive(t.Context(), 1, 30*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	f := poison.Failure{MessageID: msgs[0].ID, Text: text, Attempt: poison.Attempt{DequeueCount: 1, Time: b.clock.Now(), Error: "envelope: v: must be 1"}}
	if err := b.mover.Move(t.Context(), f, msgs[0].PopReceipt, "envelope: v: must be 1, got 2"); err != nil {
		t.Fatal(err)
	}
	r := b.mustRun("", "poison", "show", msgs[0].ID)
	if !strings.Contains(r.stdout, "Original text, base64 of JSON, decoded (not a valid envelope:") || !strings.Contains(r.stdout, "\"v\": 2,\n  \"id\": \"op-9\"") {
		t.Errorf("show of base64 JSON that is no envelope:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "show", msgs[0].ID, "-o", "json")
	var got struct{ Original, OriginalDecoded, EnvelopeError string }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Original != text || !strings.Contains(got.OriginalDecoded, `"id": "op-9"`) || got.EnvelopeError == "" {
		t.Errorf("-o json = %+v, %v", got, err)
	}
	// Not base64: shown raw, as before.
	if r := b.mustRun("", "poison", "show", b.ids[2]); !strings.Contains(r.stdout, "Original text (not a valid envelope:") {
		t.Errorf("show of garbage:\n%s", r.stdout)
	}
}

// poisonMany poisons n messages of kind with reason (text: their original
// text), one second apart, and returns their message ids.
func (b *poisonBundle) poisonMany(n int, kind, reason string, text func(i int) string) []string {
	b.t.Helper()
	ctx := b.t.Context()
	var ids []string
	for i := range n {
		if _, err := b.queue.Send(ctx, text(i), storeadapter.SendOptions{}); err != nil {
			b.t.Fatal(err)
		}
		msgs, err := b.queue.Receive(ctx, 1, 30*time.Second)
		if err != nil || len(msgs) != 1 {
			b.t.Fatalf("receive: %d, %v", len(msgs), err)
		}
		f := poison.Failure{MessageID: msgs[0].ID, Text: msgs[0].Text, OpID: fmt.Sprintf("%s-%d", kind, i), Kind: kind,
			Attempt: poison.Attempt{DequeueCount: 5, Time: b.clock.Now(), Host: "w", Error: reason}}
		if err := b.mover.Move(ctx, f, msgs[0].PopReceipt, reason); err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, msgs[0].ID)
		b.clock.Advance(time.Second)
	}
	return ids
}

// setupMany adds to setupPoison's four records 70 index conflicts and 60
// messages that failed validation.
func setupMany(t *testing.T) *poisonBundle {
	b := setupPoison(t)
	b.poisonMany(70, "index", "dequeue count 5 reached the maximum 5; last error: index: value held by another entity: index ByName value 'x' of p/r is held by RowKey \"q\"",
		func(i int) string { return envelopeLine(fmt.Sprintf("ix-%d", i), "r") })
	b.poisonMany(60, "", "envelope: the message is neither JSON nor base64 of JSON", func(i int) string { return fmt.Sprintf("junk %d", i) })
	return b
}

// TestPoisonTyposAreUsageErrors: a -group or -kind that names nothing
// known is refused with exit 2, listing what exists with a did-you-mean,
// instead of reporting 0; a well-formed group with no record is no error.
func TestPoisonTyposAreUsageErrors(t *testing.T) {
	b := setupMany(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"poison", "requeue", "-group", "index/conflcit"}, []string{`unknown group "index/conflcit" (did you mean "index/conflict"?)`, "groups present: index/conflict (70), validation (61)"}},
		{[]string{"poison", "purge", "-group", "conflict", "-dry-run"}, []string{`unknown group "conflict" (did you mean "index/conflict"?)`, "a group is <kind>/<class>", "dequeue-count"}},
		{[]string{"poison", "delete", "-group", "index/conflcit"}, []string{`did you mean "index/conflict"?`}},
		{[]string{"poison", "list", "-kind", "indx"}, []string{`-kind: unknown kind "indx" (did you mean "index"?); known kinds: archive,`}},
		{[]string{"poison", "requeue", "-all", "-kind", "indx", "-dry-run"}, []string{`did you mean "index"?`}},
		{[]string{"poison", "list", "-group", "index/conflcit"}, []string{`did you mean "index/conflict"?`}},
	}
	for _, c := range cases {
		r := b.run("", c.args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", c.args, r.code, r.stdout, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", c.args, w, r.stderr)
			}
		}
	}
	if n := b.count(b.queue); n != 0 {
		t.Errorf("the refused commands requeued %d messages", n)
	}
	// Well-formed, known, but empty: 0, exit 0.
	r := b.mustRun("", "poison", "requeue", "-group", "archive/conflict", "-dry-run")
	if !strings.Contains(r.stdout, "would requeue 0") {
		t.Errorf("requeue -group archive/conflict -dry-run:\n%s", r.stdout)
	}
	// -group G lists one group's records.
	r = b.mustRun("", "poison", "list", "-group", "index/conflict", "-limit", "0")
	if n := strings.Count(r.stdout, "index/conflict"); n != 70 || strings.Contains(r.stdout, "validation") {
		t.Errorf("list -group index/conflict names the group %d times, want 70:\n%s", n, r.stdout)
	}
}

// TestPoisonAnswersNotDumps: with many records, list prints the counts by
// group and the newest 50 with how many more; a purge dry run prints
// counts, and the records only with -details; the warning about
// validation failures names a few ids; -o json stays complete.
func TestPoisonAnswersNotDumps(t *testing.T) {
	b := setupMany(t)
	r := b.mustRun("", "poison", "list")
	summary, records, _ := strings.Cut(r.stdout, "\nNewest first:\n")
	if !strings.HasPrefix(summary, "134 poisoned messages in 4 groups:") || !strings.Contains(summary, "index/conflict         70") {
		t.Errorf("list summary:\n%s", summary)
	}
	lines := strings.Split(strings.TrimRight(records, "\n"), "\n")
	if len(lines) != 52 || lines[51] != "84 more messages (use -limit 0 for all)" {
		t.Errorf("list prints %d record lines, last %q; want a header, 50 and \"84 more messages (use -limit 0 for all)\"", len(lines), lines[len(lines)-1])
	}
	r = b.mustRun("", "poison", "list", "-o", "json")
	var recs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 134 {
		t.Errorf("list -o json: %d records, %v; want all 134", len(recs), err)
	}

	r = b.mustRun("", "poison", "purge", "-dry-run")
	if n := strings.Count(r.stdout, "\n"); n > 8 || !strings.Contains(r.stdout, "validation             poisoned  61") ||
		!strings.Contains(r.stdout, "would remove 134 (134 poisoned)") {
		t.Errorf("purge -dry-run prints %d lines, want the counts by group and state and the total:\n%s", n, r.stdout)
	}
	r = b.mustRun("", "poison", "purge", "-dry-run", "-details", "-limit", "10")
	if !strings.Contains(r.stdout, "124 more records (use -limit 0 for all)") || strings.Count(r.stdout, "  poisoned  ") != 14 {
		t.Errorf("purge -dry-run -details -limit 10:\n%s", r.stdout)
	}
	r = b.mustRun("", "poison", "purge", "-dry-run", "-o", "json")
	var purged struct {
		Purged  int
		Records []map[string]any
	}
	if err := json.Unmarshal([]byte(r.stdout), &purged); err != nil || purged.Purged != 134 || len(purged.Records) != 134 {
		t.Errorf("purge -dry-run -o json: %d, %d records, %v", purged.Purged, len(purged.Records), err)
	}

	r = b.mustRun("", "poison", "requeue", "-group", "validation", "-dry-run")
	warning := r.stderr
	if !strings.Contains(warning, "warning: 61 requeued messages would be poisoned by a validation error") ||
		!strings.Contains(warning, "and 56 more (-details or -o json list them)") || len(warning) > 400 {
		t.Errorf("requeue of 60 invalid messages warns with %d characters:\n%s", len(warning), warning)
	}
	if strings.Count(r.stdout, "\n") > 3 || !strings.Contains(r.stdout, "validation  61") {
		t.Errorf("requeue -group validation -dry-run prints the counts, not the records:\n%s", r.stdout)
	}
}

// TestCommandLineMistakes: common flags may come before the command; a
// mistyped command or flag gets a did-you-mean, and a bad flag value its
// error and a one-line hint, not the help.
func TestCommandLineMistakes(t *testing.T) {
	b := setupPoison(t)
	r := b.mustRun("", "-queue", queueName, "-o", "json", "poison", "list")
	var recs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 4 {
		t.Errorf("enqueue -queue Q -o json poison list: %d records, %v:\n%s", len(recs), err, r.stdout)
	}
	if r := b.run("", "-queue", "no-such-queue", "poison", "list"); r.code != 1 || !strings.Contains(r.stderr, "queue no-such-queue does not exist") {
		t.Errorf("-queue before the command is not used: exit %d\n%s", r.code, r.stderr)
	}
	if r := b.run("", "-queue=no-such-queue", "stats", "--", "x"); r.code != 2 || !strings.Contains(r.stderr, `unexpected argument "x"`) {
		t.Errorf("-queue=Q stats -- x: exit %d\n%s", r.code, r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stts"}, `enqueue: unknown command "stts" (did you mean "stats"?)` + "\nRun 'enqueue help' for the commands.\n"},
		{[]string{"poison", "list", "-limit", "abc"}, "enqueue poison list: -limit: must be a whole number, got \"abc\"\nRun 'enqueue poison list -h' for usage.\n"},
		{[]string{"poison", "list", "-limt", "5"}, "enqueue poison list: unknown flag -limt (did you mean \"-limit\"?)\nRun 'enqueue poison list -h' for usage.\n"},
		{[]string{"-limit", "5", "poison", "list"}, "enqueue: flag -limit before the command: only the common flags"},
		{[]string{"-queue", queueName}, "enqueue: no command after the flags\n"},
	} {
		r := b.run("", c.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") > 2 {
			t.Errorf("enqueue %q: exit %d, stderr:\n%s\nwant exit 2 and, in at most two lines, %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := b.run("", "poison", "lst"); r.code != 2 || !strings.Contains(r.stderr, `unknown subcommand "lst" (did you mean "list"?)`) {
		t.Errorf("poison lst: exit %d\n%s", r.code, r.stderr)
	}
}

// TestForcedExitPrintsCounts: while a bulk send runs, a second interrupt
// (Forced) prints how far it got; so does a requeue's progress.
func TestForcedExitPrintsCounts(t *testing.T) {
	b := setup(t)
	in, feed := io.Pipe()
	// Only the command writes to these until Forced, from this goroutine,
	// while raw waits for input (nothing fails: it writes nothing).
	var out, errOut bytes.Buffer
	m := &Main{Stdin: in, Stdout: &out, Stderr: &errOut, Clock: b.clock,
		Connect: func() (storeadapter.Store, error) { return b.store, nil }}
	done := make(chan int)
	go func() { done <- m.Run(t.Context(), []string{"raw"}) }()
	for i := range 3 {
		fmt.Fprintln(feed, envelopeLine(fmt.Sprintf("op-%d", i), "r"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.count(b.queue) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the 3 lines were not sent within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.Forced()
	if !strings.Contains(errOut.String(), "interrupted: sent 3, failed 0, not sent at most 0 of 3 lines read") {
		t.Errorf("a forced exit during raw prints:\n%s", errOut.String())
	}
	feed.Close()
	if code := <-done; code != 0 {
		t.Errorf("raw: exit %d\n%s", code, errOut.String())
	}
	m.Forced() // nothing runs: nothing printed
	if strings.Count(errOut.String(), "interrupted:") != 1 {
		t.Errorf("Forced after the command ended printed again:\n%s", errOut.String())
	}

	var errs bytes.Buffer
	m = &Main{Stderr: &errs}
	m.progress("requeued")(poison.Progress{Phase: poison.PhaseClaimSend, Done: 40, Total: 1000})
	m.Forced()
	if !strings.Contains(errs.String(), "interrupted: requeued: claim/send 40/1000 so far") {
		t.Errorf("a forced exit during a requeue prints %q", errs.String())
	}
}
