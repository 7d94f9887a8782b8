package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func testQueueInvalidArguments(t *testing.T, e *env) {
	q := e.h.Store.Queue(uniqueName("q")) // missing: validation answers first
	week := storeadapter.MaxVisibility
	calls := []struct {
		name string
		err  error
	}{
		{"Receive of 0", second(q.Receive(e.ctx, 0, time.Second))},
		{"Receive of 33", second(q.Receive(e.ctx, storeadapter.MaxReceiveCount+1, time.Second))},
		{"Receive of -1", second(q.Receive(e.ctx, -1, time.Second))},
		{"Receive with visibility 0", second(q.Receive(e.ctx, 1, 0))},
		{"Receive with visibility 999 ms", second(q.Receive(e.ctx, 1, 999*time.Millisecond))},
		{"Receive with visibility 7 d + 1 s", second(q.Receive(e.ctx, 1, week+time.Second))},
		{"Receive with negative visibility", second(q.Receive(e.ctx, 1, -time.Second))},
		{"Peek of 0", second(q.Peek(e.ctx, 0))},
		{"Peek of 33", second(q.Peek(e.ctx, storeadapter.MaxReceiveCount+1))},
		{"Update with visibility -1 s", second(q.Update(e.ctx, "id", "receipt", "x", -time.Second))},
		{"Update with visibility 7 d + 1 s", second(q.Update(e.ctx, "id", "receipt", "x", week+time.Second))},
		{"Send with delay -1 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: -time.Second}))},
		{"Send with delay 7 d + 1 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: week + time.Second}))},
		{"Send with TTL 500 ms", second(q.Send(e.ctx, "x", storeadapter.SendOptions{TTL: 500 * time.Millisecond}))},
		{"Send with TTL -2 s", second(q.Send(e.ctx, "x", storeadapter.SendOptions{TTL: -2 * time.Second}))},
		{"Send with delay equal to TTL", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: 2 * time.Second, TTL: 2 * time.Second}))},
		{"Send with delay beyond the default TTL", second(q.Send(e.ctx, "x", storeadapter.SendOptions{VisibilityDelay: week}))},
	}
	for _, c := range calls {
		checkErr(t, c.name, c.err, storeadapter.ErrInvalidInput)
	}
}

func testQueueMessageSize(t *testing.T, e *env) {
	missing := e.h.Store.Queue(uniqueName("q"))
	big := []struct {
		name, text string
	}{
		{"65537 ASCII bytes", strings.Repeat("a", storeadapter.MaxMessageBytes+1)},
		// 21846 characters, but 65538 bytes: the limit counts UTF-8 bytes.
		{"21846 euro signs", strings.Repeat("€", storeadapter.MaxMessageBytes/3+1)},
	}
	for _, b := range big {
		_, err := missing.Send(e.ctx, b.text, storeadapter.SendOptions{})
		checkErr(t, "Send of "+b.name, err, storeadapter.ErrTooLarge)
		_, err = missing.Update(e.ctx, "id", "receipt", b.text, 0)
		checkErr(t, "Update with "+b.name, err, storeadapter.ErrTooLarge)
	}

	q := e.newQueue(t)
	largest := strings.Repeat("a", storeadapter.MaxMessageBytes)
	s := e.send(t, q, largest, storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, largest, 1)
	mixed := strings.Repeat("€", storeadapter.MaxMessageBytes/3) + "a" // 65536 bytes
	if e.h.Azurite {
		// Azurite decodes each chunk of a request body as UTF-8 on its own,
		// so a "€" split across a chunk boundary becomes replacement
		// characters and the text outgrows the limit (413). The byte count
		// was validated above; send ASCII of the same length here.
		mixed = strings.Repeat("b", storeadapter.MaxMessageBytes)
	}
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, mixed, 0); err != nil {
		t.Fatalf("Update with 65536 bytes of text: %v", err)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, mixed, 2)
}

func testQueueMessageText(t *testing.T, e *env) {
	missing := e.h.Store.Queue(uniqueName("q"))
	for _, text := range []string{"\x00", "a\x01b", "\x1f", "x\x08", "\ufffe", "\uffff", "a\xffb"} {
		_, err := missing.Send(e.ctx, text, storeadapter.SendOptions{})
		checkErr(t, fmt.Sprintf("Send(%q)", text), err, storeadapter.ErrInvalidInput)
		_, err = missing.Update(e.ctx, "id", "receipt", text, 0)
		checkErr(t, fmt.Sprintf("Update with text %q", text), err, storeadapter.ErrInvalidInput)
	}

	q := e.newQueue(t)
	for _, text := range []string{
		"",
		"eyJ2IjoxLCJpZCI6Im9wLTEiLCJraW5kIjoiYXJjaGl2ZSJ9", // base64, as tablekeeper sends
		`{"v":1,"id":"op-1","kind":"archive","args":{"table":"T"}}`,
		"tab\t newline\n CR\r <xml> & \"quotes\" 'apos' ]]> é 日本 😀 \u0085",
	} {
		s := e.send(t, q, text, storeadapter.SendOptions{})
		m := e.receiveOne(t, q, 30*time.Second, s.ID, text, 1)
		checkNoErr(t, "DeleteMessage", q.DeleteMessage(e.ctx, m.ID, m.PopReceipt))
	}
}

// testQueueLargestMultiByteMessage: the limit is 64 KiB of UTF-8 (Put
// Message: "The encoded message can be up to 64 KB"), so 21,845 euro signs
// (65,535 bytes) are sent, received and updated whole
// (docs/azure-behaviour.md, "Issue 18 decisions").
func testQueueLargestMultiByteMessage(t *testing.T, e *env) {
	text := strings.Repeat("€", storeadapter.MaxMessageBytes/3) // 65,535 bytes
	if e.h.Azurite {
		t.Skip("Azurite decodes each chunk of a request body as UTF-8 on its own, so a \"€\" split across a chunk " +
			"boundary becomes replacement characters and the text outgrows the limit (413); Azure takes 64 KiB of " +
			"UTF-8 (docs/azure-behaviour.md, \"Azurite deviations the contract skips\")")
	}
	q := e.newQueue(t)
	s := e.send(t, q, text, storeadapter.SendOptions{})
	m := e.receiveOne(t, q, 30*time.Second, s.ID, text, 1)
	if _, err := q.Update(e.ctx, m.ID, m.PopReceipt, text, 0); err != nil {
		t.Fatalf("Update with %d bytes of euro signs: %v", len(text), err)
	}
	e.receiveOne(t, q, 30*time.Second, s.ID, text, 2)
}

func testQueueInvalidNames(t *testing.T, e *env) {
	names := []string{"", "ab", "Abc", "a_b", "a--b", "-ab", "ab-", "a b", "qé-x", strings.Repeat("q", 64)}
	for _, name := range names {
		q := e.h.Store.Queue(name)
		calls := []struct {
			op  string
			err error
		}{
			{"Create", q.Create(e.ctx)},
			{"Delete", q.Delete(e.ctx)},
			{"Send", second(q.Send(e.ctx, "x", storeadapter.SendOptions{}))},
			{"Receive", second(q.Receive(e.ctx, 1, time.Second))},
			{"Update", second(q.Update(e.ctx, "id", "receipt", "x", time.Second))},
			{"DeleteMessage", q.DeleteMessage(e.ctx, "id", "receipt")},
			{"Peek", second(q.Peek(e.ctx, 1))},
			{"Clear", q.Clear(e.ctx)},
			{"ApproximateCount", second(q.ApproximateCount(e.ctx))},
		}
		for _, c := range calls {
			checkErr(t, fmt.Sprintf("%s on queue %q", c.op, name), c.err, storeadapter.ErrInvalidInput)
		}
	}
	// The longest valid name, with a hyphen and digits, works.
	name := uniqueName("q")
	name += strings.Repeat("9", 63-len(name))
	q := e.h.Store.Queue(name)
	checkNoErr(t, "Create of a 63-character name", q.Create(e.ctx))
	checkNoErr(t, "Delete of a 63-character name", q.Delete(e.ctx))
}
