package main

import (
	"encoding/base64"
	"encoding/json"
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
