package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// poisonShow prints one record with its attempts and its original text,
// and the other records of its operation (an operation requeued and
// poisoned again has one per message).
func (m *Main) poisonShow(ctx context.Context, args []string) error {
	var c common
	fs := m.newFlagSet("poison show", "poison show ID [flags]",
		"Shows one poisoned message, by its original message id or by its operation id: the failure\n"+
			"record, each attempt, and the original text (the envelope pretty-printed when it decodes; an\n"+
			"original that is not an envelope but base64 of text is shown decoded too, and says so). An\n"+
			"operation requeued and poisoned again has a record per message: an operation id shows the\n"+
			"current one (poisoned before requeued, then the latest attempt), and every record lists the\n"+
			"operation's others below it.", &c)
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("give exactly one message id or operation id, got %d", len(pos))
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	rec, others, err := ins.Lookup(ctx, pos[0])
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		return fmt.Errorf("no poison record with message id or operation id %s on queue %s", pos[0], c.queue)
	case errors.Is(err, storeadapter.ErrInvalidInput):
		return &usageError{err: err}
	case err != nil:
		return err
	}
	env, envErr := jobs.DecodeEnvelope(rec.Original)
	decoded, isJSON := "", false
	if envErr != nil {
		decoded, isJSON = decodeBase64Text(rec.Original)
	}

	if c.json() {
		out := showJSON{recordJSON: toRecordJSON(rec), Attempts: []attemptJSON{}, Original: rec.Original, OtherRecords: []otherRecordJSON{}}
		for _, a := range rec.Attempts {
			out.Attempts = append(out.Attempts, attemptJSON{N: a.DequeueCount, Time: a.Time, DurationNs: a.Duration.Nanoseconds(), Host: a.Host, Error: a.Error})
		}
		if envErr == nil {
			out.Envelope, out.Outbox = &env, env.Outbox
		} else {
			out.EnvelopeError = envErr.Error()
			out.OriginalDecoded = decoded
		}
		out.Current = len(others) == 0 || poison.Current(rec, others[0]) < 0
		for _, o := range others {
			out.OtherRecords = append(out.OtherRecords, otherRecordJSON{MessageID: o.MessageID, State: o.State, LastAttempt: o.LastAttempt,
				RequeuedAt: o.RequeuedAt, RequeuedMessageID: o.RequeuedMessageID, Group: poison.GroupName(o)})
		}
		return writeJSON(m.Stdout, out)
	}

	tw := newTable(m.Stdout)
	field := func(name, value string) { row(tw, name+":", value) }
	field("Message ID", rec.MessageID)
	field("Queue", rec.Queue)
	field("State", rec.State)
	field("Op ID", rec.OpID)
	if len(others) > 0 {
		if poison.Current(rec, others[0]) < 0 {
			field("Current", fmt.Sprintf("yes: the newest of the operation's %d records (the others are listed below)", len(others)+1))
		} else {
			field("Current", fmt.Sprintf("no: the operation's current record is %s (%s); 'poison show %s' shows it", others[0].MessageID, others[0].State, others[0].MessageID))
		}
	}
	field("Kind", rec.Kind)
	if envErr == nil && env.Outbox != nil {
		field("Outbox", outboxText(env.Outbox))
	}
	field("Group", poison.GroupName(rec))
	field("Reason", rec.Reason)
	field("Deliveries", strconv.FormatInt(rec.DequeueCount, 10))
	field("First attempt", timeCell(rec.FirstAttempt))
	field("Last attempt", timeCell(rec.LastAttempt))
	field("Host", rec.Host)
	if rec.OriginalRef != "" {
		field("Original blob", rec.OriginalRef)
	}
	if !rec.RequeuedAt.IsZero() {
		field("Requeued", fmt.Sprintf("%s by %s as message %s", timeCell(rec.RequeuedAt), cell(rec.RequeuedBy, 0), cell(rec.RequeuedMessageID, 0)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(m.Stdout, "\nAttempts (%d):\n", len(rec.Attempts))
	tw = newTable(m.Stdout)
	row(tw, "  #", "TIME", "HOST", "DURATION", "ERROR")
	for _, a := range rec.Attempts {
		row(tw, "  "+strconv.FormatInt(a.DequeueCount, 10), timeCell(a.Time), a.Host, a.Duration.Round(time.Millisecond).String(), a.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(others) > 0 {
		fmt.Fprintf(m.Stdout, "\nOther records of operation %s (%d), newest first:\n", cell(rec.OpID, 0), len(others))
		tw = newTable(m.Stdout)
		row(tw, "  MESSAGE ID", "STATE", "LAST ATTEMPT", "GROUP", "REQUEUED")
		for _, o := range others {
			requeued := "-"
			if !o.RequeuedAt.IsZero() {
				requeued = fmt.Sprintf("%s as message %s", timeCell(o.RequeuedAt), cell(o.RequeuedMessageID, 0))
			}
			row(tw, "  "+o.MessageID, o.State, timeCell(o.LastAttempt), poison.GroupName(o), requeued)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	switch {
	case envErr == nil:
		b, err := json.MarshalIndent(env, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "\nOriginal envelope:\n%s\n", b)
	case decoded != "":
		what := "text"
		if isJSON {
			what = "JSON"
		}
		fmt.Fprintf(m.Stdout, "\nOriginal text, base64 of %s, decoded (not a valid envelope: %s):\n", what, envErr)
		printRaw(m.Stdout, decoded)
	default:
		fmt.Fprintf(m.Stdout, "\nOriginal text (not a valid envelope: %s):\n", envErr)
		printRaw(m.Stdout, rec.Original)
	}
	return nil
}

// decodeBase64Text returns the text an original holds when it is base64
// (standard, padded, as Azure Functions writes) of valid UTF-8, with JSON
// indented and isJSON set; "" when it is not.
func decodeBase64Text(original string) (decoded string, isJSON bool) {
	s := strings.TrimSpace(original)
	if s == "" {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || !utf8.Valid(b) {
		return "", false
	}
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		return out.String(), true
	}
	return string(b), false
}

// outboxText describes the outbox reference of a job sent by a
// transactional enqueue: its row, "table/pk/rk", and its commit window.
func outboxText(o *jobs.OutboxRef) string {
	s := fmt.Sprintf("%s/%s/%s (window %v", o.Table, o.PK, o.RK, time.Duration(o.Window))
	if !o.Since.IsZero() {
		s += " from " + timeCell(o.Since)
	}
	return s + "; the row stays until the job is done: requeue runs it, delete leaves the row to 'outbox purge')"
}

// printRaw writes an original text that is not an envelope, with control
// characters other than newlines and tabs escaped so that it cannot drive
// the terminal.
func printRaw(w io.Writer, s string) {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	fmt.Fprintln(w, b.String())
}
