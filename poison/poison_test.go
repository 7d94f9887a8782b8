package poison

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

const sourceName = "work-items"

// bundle is what every test works with: a fake clock, a local store, the
// work queue, the poison queue and container, and a Recorder and an
// Inspector over them.
type bundle struct {
	ctx    context.Context
	clock  *clock.Fake
	store  *instrument.Store
	calls  *instrument.Counts // every call through store
	src    storeadapter.Queue
	poison storeadapter.Queue
	blobs  storeadapter.Blobs
	m      split
}

func setup(t *testing.T) *bundle { return setupWithFault(t, nil) }

// setupWithFault is setup with the store instrument's fault hook, called
// before each storage call.
func setupWithFault(t *testing.T, fault func(context.Context, instrument.Call) error) *bundle {
	t.Helper()
	ctx := t.Context()
	clock := clock.NewFake(t0)
	calls := &instrument.Counts{}
	st := instrument.Wrap(localstore.New(localstore.Options{Clock: clock}), instrument.Options{Fault: fault, Observers: []instrument.Observer{calls}})
	src := st.Queue(sourceName)
	if err := src.Create(ctx); err != nil {
		t.Fatal(err)
	}
	b := &bundle{ctx: ctx, clock: clock, store: st, calls: calls, src: src,
		poison: st.Queue(QueueName(sourceName)), blobs: st.Container(QueueName(sourceName))}
	b.m = newSplit(t, Config{Tables: st.Tables(), Source: src, Poison: b.poison, Blobs: b.blobs, Clock: clock, Host: "ops-host"})
	return b
}

// deliver sends text to the work queue and receives it, as the runner does.
func (b *bundle) deliver(t *testing.T, text string) storeadapter.Message {
	t.Helper()
	if _, err := b.src.Send(b.ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	return b.receive(t)
}

// receive takes the one visible message of the work queue.
func (b *bundle) receive(t *testing.T) storeadapter.Message {
	t.Helper()
	msgs, err := b.src.Receive(b.ctx, 1, 30*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	return msgs[0]
}

// failure describes a failed attempt of msg that started now.
func (b *bundle) failure(msg storeadapter.Message, kind, errText string) Failure {
	return Failure{MessageID: msg.ID, Text: msg.Text, OpID: "op-" + msg.ID[len(msg.ID)-4:], Kind: kind,
		Attempt: Attempt{DequeueCount: msg.DequeueCount, Time: b.clock.Now(), Duration: 1500 * time.Millisecond, Host: "worker-1", Error: errText}}
}

// poisonNow delivers text and moves it to the poison queue at once.
func (b *bundle) poisonNow(t *testing.T, text, kind, reason string) storeadapter.Message {
	t.Helper()
	msg := b.deliver(t, text)
	if err := b.m.Move(b.ctx, b.failure(msg, kind, "boom"), msg.PopReceipt, reason); err != nil {
		t.Fatalf("Move: %v", err)
	}
	return msg
}

// peek returns the visible messages of q (at most 32).
func (b *bundle) peek(t *testing.T, q storeadapter.Queue) []storeadapter.Message {
	t.Helper()
	msgs, err := q.Peek(b.ctx, 32)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// count returns the number of messages of q, visible or not.
func (b *bundle) count(t *testing.T, q storeadapter.Queue) int {
	t.Helper()
	n, err := q.ApproximateCount(b.ctx)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// entity reads a record entity as stored.
func (b *bundle) entity(t *testing.T, id string) storeadapter.Entity {
	t.Helper()
	e, err := b.store.Tables().GetEntity(b.ctx, TableName(sourceName), id, recordRowKey)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestQueueName(t *testing.T) {
	long := strings.Repeat("a", 55) + "-" + strings.Repeat("b", 7) // 63 characters
	for _, tc := range []struct{ source, want string }{
		{"orders", "orders-poison"},
		{"work-items", "work-items-poison"},
		{strings.Repeat("x", 56), strings.Repeat("x", 56) + "-poison"},
		{strings.Repeat("x", 63), strings.Repeat("x", 56) + "-poison"},
		{long, strings.Repeat("a", 55) + "-poison"}, // the cut ends with a hyphen: dropped
	} {
		got := QueueName(tc.source)
		if got != tc.want {
			t.Errorf("QueueName(%q) = %q, want %q", tc.source, got, tc.want)
		}
		if err := storeadapter.ValidateQueueName(got); err != nil {
			t.Errorf("QueueName(%q) = %q: %v", tc.source, got, err)
		}
	}
}

func TestTableName(t *testing.T) {
	for _, tc := range []struct{ source, want string }{
		{"orders", "ordersPoison"},
		{"work-items", "workitemsPoison"},
		{"7-day-jobs", "q7dayjobsPoison"},
		{"abc", "abcPoison"},
		{strings.Repeat("a-", 31) + "b", strings.Repeat("a", 31) + "b" + "Poison"},
		{strings.Repeat("z", 63), strings.Repeat("z", 57) + "Poison"},
	} {
		got := TableName(tc.source)
		if got != tc.want {
			t.Errorf("TableName(%q) = %q, want %q", tc.source, got, tc.want)
		}
		if err := storeadapter.ValidateTableName(got); err != nil {
			t.Errorf("TableName(%q) = %q: %v", tc.source, got, err)
		}
	}
}

func TestRecordAttemptIsIdempotent(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "eyJ2IjoxfQ==")
	f := b.failure(msg, "archive", "table busy")

	// The first write creates the table.
	if err := b.m.RecordAttempt(b.ctx, f); err != nil {
		t.Fatal(err)
	}
	first := b.entity(t, msg.ID)
	if err := b.m.RecordAttempt(b.ctx, f); err != nil {
		t.Fatal(err)
	}
	second := b.entity(t, msg.ID)
	if len(first.Properties) != len(second.Properties) {
		t.Fatalf("second write changed the property count: %d -> %d", len(first.Properties), len(second.Properties))
	}
	for name, v := range first.Properties {
		if !storeadapter.Equal(v, second.Properties[name]) {
			t.Errorf("property %s: %s then %s", name, storeadapter.Format(v), storeadapter.Format(second.Properties[name]))
		}
	}
	if _, ok := first.Properties["Attempt001"]; !ok {
		t.Fatalf("no Attempt001 property: %v", first.Properties)
	}

	// A second attempt adds its own property; FirstAttempt stays.
	b.clock.Advance(time.Minute)
	f2 := f
	f2.Attempt.DequeueCount, f2.Attempt.Time, f2.Attempt.Error = 2, b.clock.Now(), "still busy"
	if err := b.m.RecordAttempt(b.ctx, f2); err != nil {
		t.Fatal(err)
	}
	rec, err := b.m.Show(b.ctx, msg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StateFailing || rec.DequeueCount != 2 || !rec.FirstAttempt.Equal(t0) || !rec.LastAttempt.Equal(t0.Add(time.Minute)) ||
		rec.LastError != "still busy" || rec.Kind != "archive" || rec.Queue != sourceName || rec.Host != "worker-1" {
		t.Errorf("record = %+v", rec)
	}
	want := []Attempt{
		{DequeueCount: 1, Time: t0, Duration: 1500 * time.Millisecond, Host: "worker-1", Error: "table busy"},
		{DequeueCount: 2, Time: t0.Add(time.Minute), Duration: 1500 * time.Millisecond, Host: "worker-1", Error: "still busy"},
	}
	if !slices.EqualFunc(rec.Attempts, want, func(a, b Attempt) bool {
		return a.Time.Equal(b.Time) && a.DequeueCount == b.DequeueCount && a.Error == b.Error && a.Host == b.Host && a.Duration == b.Duration
	}) {
		t.Errorf("attempts = %+v, want %+v", rec.Attempts, want)
	}

	// A failing record is not poisoned: List does not show it.
	if recs, err := b.m.List(b.ctx, ""); err != nil || len(recs) != 0 {
		t.Errorf("List = %v, %v; want none", recs, err)
	}
}

func TestRecordAttemptCapsAttempts(t *testing.T) {
	b := setup(t)
	f := Failure{MessageID: "m1", Text: "x", Kind: "index", Attempt: Attempt{Time: t0, Error: "e"}}
	for _, n := range []int64{199, 200, 201, 250} {
		f.Attempt.DequeueCount = n
		if err := b.m.RecordAttempt(b.ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := b.m.Show(b.ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.DequeueCount != 250 || len(rec.Attempts) != 2 || rec.Attempts[0].DequeueCount != 199 || rec.Attempts[1].DequeueCount != 250 {
		t.Errorf("DequeueCount %d, attempts %+v", rec.DequeueCount, rec.Attempts)
	}
	if _, ok := b.entity(t, "m1").Properties["Attempt250"]; ok {
		t.Error("an attempt beyond MaxAttempts got its own property")
	}
}

// TestRecordWorstCaseFits fills a record to every bound — MaxAttempts
// attempts whose errors escape to the longest JSON, long wide-character
// names and reason, and an Original of MaxStringChars — and checks that
// the store accepts it.
func TestRecordWorstCaseFits(t *testing.T) {
	b := setup(t)
	wide := strings.Repeat("\U0001D11E", 400) // two UTF-16 units each
	f := Failure{MessageID: "worst", Text: strings.Repeat("x", storeadapter.MaxStringChars), OpID: wide, Kind: wide,
		// Each control character of the host escapes to six; the ASCII error
		// then fills the attempt's JSON up to its bound exactly.
		Attempt: Attempt{Time: t0, Host: strings.Repeat("\x01", 400), Error: strings.Repeat("e", 5000)}}
	for n := int64(1); n <= MaxAttempts; n++ {
		f.Attempt.DequeueCount = n
		if err := b.m.RecordAttempt(b.ctx, f); err != nil {
			t.Fatalf("attempt %d: %v", n, err)
		}
	}
	f.Attempt.DequeueCount = MaxAttempts + 1
	f.Attempt.Error = strings.Repeat(wide, 10)
	// The message was never on the work queue: Move takes it as already
	// deleted.
	if err := b.m.Move(b.ctx, f, "no-receipt", strings.Repeat(wide, 10)); err != nil {
		t.Fatalf("Move: %v", err)
	}
	e := b.entity(t, "worst")
	if err := storeadapter.ValidateEntity(e); err != nil {
		t.Fatalf("stored record is invalid: %v", err)
	}
	t.Logf("worst-case record: %d properties, %d bytes", len(e.Properties), storeadapter.EntitySize(e))
	rec, err := b.m.Show(b.ctx, "worst")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Original != f.Text || len(rec.Attempts) != MaxAttempts || rec.State != StatePoisoned {
		t.Errorf("original %d chars, %d attempts, state %s", len(rec.Original), len(rec.Attempts), rec.State)
	}
	if got := []rune(rec.Reason); len(got) != MaxErrorChars || got[len(got)-1] != '…' {
		t.Errorf("reason of %d characters, want %d ending with …", len(got), MaxErrorChars)
	}
}

// decodePoison decodes the visible poison messages.
func (b *bundle) decodePoison(t *testing.T) []Summary {
	t.Helper()
	var out []Summary
	for _, msg := range b.peek(t, b.poison) {
		s, _, _, err := DecodeMessage(msg.Text)
		if err != nil {
			t.Fatalf("poison message %s: %v", msg.ID, err)
		}
		out = append(out, s)
	}
	return out
}

func TestMoveSmallOriginal(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "eyJ2IjoxLCJpZCI6Im9wLTEifQ==")
	f := b.failure(msg, "archive", "first")
	if err := b.m.RecordAttempt(b.ctx, f); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(45 * time.Second)
	msg = b.receive(t)
	f2 := b.failure(msg, "archive", "second")
	if err := b.m.Move(b.ctx, f2, msg.PopReceipt, "dequeue count 2 reached the limit 2"); err != nil {
		t.Fatal(err)
	}

	if n := b.count(t, b.src); n != 0 {
		t.Errorf("work queue holds %d messages after Move, want 0", n)
	}
	msgs := b.peek(t, b.poison)
	if len(msgs) != 1 {
		t.Fatalf("poison queue holds %d messages, want 1", len(msgs))
	}
	if !msgs[0].Expires.IsZero() {
		t.Errorf("poison message expires at %v, want never", msgs[0].Expires)
	}
	s, original, ref, err := DecodeMessage(msgs[0].Text)
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{MessageID: msg.ID, OpID: f.OpID, Kind: "archive", Reason: "dequeue count 2 reached the limit 2", DequeueCount: 2,
		FirstAttempt: t0, LastAttempt: t0.Add(45 * time.Second), Host: "worker-1", Queue: sourceName}
	if s != want {
		t.Errorf("summary\n got %+v\nwant %+v", s, want)
	}
	if original != msg.Text || ref != "" {
		t.Errorf("original %q ref %q, want %q and no ref", original, ref, msg.Text)
	}

	rec, err := b.m.Show(b.ctx, msg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StatePoisoned || rec.Reason != want.Reason || rec.Original != msg.Text || rec.OriginalRef != "" || len(rec.Attempts) != 2 {
		t.Errorf("record = %+v", rec)
	}
	if _, err := b.blobs.Properties(b.ctx, blobName(msg.ID)); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("a small original was stored in a blob: %v", err)
	}
	// A late attempt of a worker that had lost its lease does not turn the
	// record back to failing.
	late := f
	late.Attempt.Error = "late"
	if err := b.m.RecordAttempt(b.ctx, late); err != nil {
		t.Fatal(err)
	}
	if recs, err := b.m.List(b.ctx, ""); err != nil || len(recs) != 1 || recs[0].State != StatePoisoned {
		t.Errorf("List after a late attempt = %+v, %v", recs, err)
	}
}

func TestMoveLargeOriginalGoesToBlob(t *testing.T) {
	for _, tc := range []struct {
		name     string
		text     string
		property bool // the record holds it as well
	}{
		// Too long for a string property, and for the poison message.
		{"60KiB", strings.Repeat("0123456789abcdef", 60*1024/16), false},
		// Fits a string property (20,000 UTF-16 units) but not a message
		// (60,000 bytes of UTF-8, more once base64 encoded).
		{"wide", strings.Repeat("€", 20000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			msg := b.deliver(t, tc.text)
			if err := b.m.Move(b.ctx, b.failure(msg, "blobsync", "x"), msg.PopReceipt, "permanent: bad args"); err != nil {
				t.Fatal(err)
			}
			msgs := b.peek(t, b.poison)
			if len(msgs) != 1 {
				t.Fatalf("poison queue holds %d messages, want 1", len(msgs))
			}
			if len(msgs[0].Text) > storeadapter.MaxMessageBytes {
				t.Fatalf("poison message of %d bytes", len(msgs[0].Text))
			}
			_, original, ref, err := DecodeMessage(msgs[0].Text)
			wantRef := QueueName(sourceName) + "/" + msg.ID + ".txt"
			if err != nil || original != "" || ref != wantRef {
				t.Fatalf("DecodeMessage: original %d chars, ref %q, %v; want ref %q", len(original), ref, err, wantRef)
			}
			data, props, err := b.blobs.Get(b.ctx, msg.ID+".txt")
			if err != nil || string(data) != tc.text || props.ContentType != originalContentType {
				t.Fatalf("blob: %d bytes, %q, %v", len(data), props.ContentType, err)
			}
			if _, has := b.entity(t, msg.ID).Properties[propOriginal]; has != tc.property {
				t.Errorf("record has Original: %v, want %v", has, tc.property)
			}
			rec, err := b.m.Show(b.ctx, msg.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Original != tc.text || rec.OriginalRef != wantRef {
				t.Errorf("Show: original of %d bytes (equal: %v), ref %q", len(rec.Original), rec.Original == tc.text, rec.OriginalRef)
			}

			// Requeue sends it back exactly, from the blob or the record.
			if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{msg.ID}}); err != nil {
				t.Fatal(err)
			}
			back := b.receive(t)
			if back.Text != tc.text {
				t.Errorf("requeued text differs (%d bytes, want %d)", len(back.Text), len(tc.text))
			}
		})
	}
}

func TestMoveWithStaleReceipt(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "aGVsbG8=")
	b.clock.Advance(31 * time.Second) // the lease runs out; another worker takes it
	other := b.receive(t)
	err := b.m.Move(b.ctx, b.failure(msg, "index", "x"), msg.PopReceipt, "too many attempts")
	if !errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
		t.Fatalf("Move with a stale receipt = %v, want ErrPopReceiptMismatch", err)
	}
	if !strings.HasPrefix(err.Error(), "poison: ") {
		t.Errorf("error %q lacks the poison: prefix", err)
	}
	// The message is still on the work queue, held by the other worker.
	if err := b.src.DeleteMessage(b.ctx, other.ID, other.PopReceipt); err != nil {
		t.Errorf("the original was not left to its holder: %v", err)
	}
}

func TestMoveTwiceGivesOneRecord(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "b3JpZ2luYWw=")
	// The first Move gets as far as the poison message, then loses the
	// lease (as a crash before step 3 would): the original stays.
	if err := b.m.Move(b.ctx, b.failure(msg, "archive", "x"), "stale", "permanent"); !errors.Is(err, storeadapter.ErrPopReceiptMismatch) {
		t.Fatalf("Move = %v", err)
	}
	b.clock.Advance(31 * time.Second)
	again := b.receive(t)
	if again.ID != msg.ID || again.DequeueCount != 2 {
		t.Fatalf("redelivered %s #%d", again.ID, again.DequeueCount)
	}
	if err := b.m.Move(b.ctx, b.failure(again, "archive", "x"), again.PopReceipt, "permanent"); err != nil {
		t.Fatal(err)
	}
	if got := b.decodePoison(t); len(got) != 2 || got[0].MessageID != msg.ID || got[1].MessageID != msg.ID {
		t.Fatalf("poison messages = %+v, want two for %s", got, msg.ID)
	}
	recs, err := b.m.List(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].MessageID != msg.ID || recs[0].DequeueCount != 2 || len(recs[0].Attempts) != 2 {
		t.Fatalf("List = %+v, want one record with two attempts", recs)
	}

	// Requeue sends it once and removes both poison messages.
	got, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{msg.ID}})
	if err != nil || len(got) != 1 || got[0].State != StateRequeued {
		t.Fatalf("Requeue = %+v, %v", got, err)
	}
	if n := b.count(t, b.poison); n != 0 {
		t.Errorf("poison queue holds %d messages after Requeue, want 0", n)
	}
	if sent := b.peek(t, b.src); len(sent) != 1 || sent[0].Text != msg.Text {
		t.Fatalf("work queue = %+v, want the original once", sent)
	}
	rec, err := b.m.Show(b.ctx, msg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StateRequeued || rec.RequeuedBy != "ops-host" || !rec.RequeuedAt.Equal(b.clock.Now()) || rec.RequeuedMessageID == "" {
		t.Errorf("record after requeue = %+v", rec)
	}

	// A second Requeue, by id or of all, does nothing.
	for _, o := range []RequeueOptions{{IDs: []string{msg.ID}}, {All: true}} {
		got, err := b.m.Requeue(b.ctx, o)
		if err != nil || len(got) != 0 {
			t.Errorf("second Requeue(%+v) = %+v, %v; want nothing", o, got, err)
		}
	}
	if n := b.count(t, b.src); n != 1 {
		t.Errorf("work queue holds %d messages, want 1", n)
	}
	if recs, _ := b.m.List(b.ctx, ""); len(recs) != 0 {
		t.Errorf("List after requeue = %+v, want none", recs)
	}
}

func TestListNewestFirstAndGroupByReason(t *testing.T) {
	b := setup(t)
	var ids []string
	for i, c := range []struct{ kind, reason string }{
		{"archive", "permanent: bad envelope"},
		{"index", "dequeue count 6 > 5"},
		{"archive", "dequeue count 6 > 5"},
		{"purgeday", "dequeue count 6 > 5"},
	} {
		msg := b.poisonNow(t, base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "msg %d", i)), c.kind, c.reason)
		ids = append(ids, msg.ID)
		b.clock.Advance(time.Minute)
	}
	recs, err := b.m.List(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.MessageID)
	}
	want := []string{ids[3], ids[2], ids[1], ids[0]}
	if !slices.Equal(got, want) {
		t.Errorf("List order = %v, want newest first %v", got, want)
	}

	archive, err := b.m.List(b.ctx, "archive")
	if err != nil || len(archive) != 2 || archive[0].MessageID != ids[2] || archive[1].MessageID != ids[0] {
		t.Errorf("List(archive) = %+v, %v", archive, err)
	}

	groups := GroupRecords(recs)
	wantGroups := []Group{
		{Name: "archive/dequeue-count", Kind: "archive", Class: ClassDequeueCount, Count: 1, Newest: t0.Add(2 * time.Minute), Example: "dequeue count 6 > 5"},
		{Name: "purgeday/dequeue-count", Kind: "purgeday", Class: ClassDequeueCount, Count: 1, Newest: t0.Add(3 * time.Minute), Example: "dequeue count 6 > 5"},
		{Name: "index/dequeue-count", Kind: "index", Class: ClassDequeueCount, Count: 1, Newest: t0.Add(time.Minute), Example: "dequeue count 6 > 5"},
		{Name: "archive/other", Kind: "archive", Class: ClassOther, Count: 1, Newest: t0, Example: "permanent: bad envelope"},
	}
	slices.SortFunc(wantGroups, func(a, b Group) int { return b.Newest.Compare(a.Newest) })
	if !slices.EqualFunc(groups, wantGroups, func(a, b Group) bool {
		return a.Newest.Equal(b.Newest) && a.Name == b.Name && a.Count == b.Count && a.Example == b.Example
	}) {
		t.Errorf("GroupRecords\n got %+v\nwant %+v", groups, wantGroups)
	}
}

// TestGroupsAreFailureClasses: reasons that differ only in keys, counts
// and hosts fall in one group per kind and failure class, derived from the
// stored reason (so records written before classes existed group too).
func TestGroupsAreFailureClasses(t *testing.T) {
	cases := []struct{ kind, reason, lastError, class string }{
		{"archive", "permanent: archive: Employees p/r1 does not exist and EmployeesArchive holds no copy", "", ClassNotFound},
		{"archive", "permanent: archive: Employees p/r2 does not exist and EmployeesArchive holds no copy", "", ClassNotFound},
		{"archive", "permanent: archive: source table Old does not exist", "", ClassNotFound},
		{"", "envelope: the message is neither JSON nor base64 of JSON (illegal base64 data at input byte 0)", "", ClassValidation},
		{"", "envelope: id: must be 1-128 characters of A-Za-z0-9._:-, got \"a b\"", "", ClassValidation},
		{"archive", "permanent: args.rkTo: must be greater than rkFrom", "", ClassValidation},
		{"archive", "dequeue count 6 reached the maximum 5; last error: azstore: upsert: service unavailable (HTTP 503 ServerBusy)", "", ClassUnavailable},
		{"archive", "dequeue count 7 reached the maximum 5", "azstore: query: service unavailable: dial tcp: connection refused", ClassUnavailable},
		{"archive", "dequeue count 6 reached the maximum 5", "", ClassDequeueCount},
		{"archive", "permanent: handler panic: runtime error: index out of range [3] with length 3\ngoroutine 1", "", ClassPanic},
		{"archive", "permanent: localstore: insert: too large: entity is 1100000 bytes", "", ClassTooLarge},
		{"archive", "dequeue count 6 reached the maximum 5; last error: precondition failed", "", ClassConflict},
		{"index", "", "azstore: get: forbidden (HTTP 403 AuthorizationFailure)", ClassForbidden},
	}
	var recs []Record
	for i, c := range cases {
		r := Record{MessageID: fmt.Sprint(i), Kind: c.kind, Reason: c.reason, LastError: c.lastError, LastAttempt: t0.Add(time.Duration(i) * time.Minute)}
		if got := Class(r); got != c.class {
			t.Errorf("Class(%q, %q) = %s, want %s", c.reason, c.lastError, got, c.class)
		}
		recs = append(recs, r)
	}
	groups := GroupRecords(recs)
	if len(groups) != 9 || groups[0].Name != "archive/not-found" || groups[0].Count != 3 ||
		groups[0].Example != cases[2].reason || groups[1].Name != "archive/unavailable" || groups[1].Count != 2 || groups[2].Name != "validation" {
		t.Errorf("GroupRecords = %+v", groups)
	}
}

// TestConflictOutOfDeliveriesIsAConflict: a message whose deliveries ran
// out while its attempts lost ETag races is filed under conflict, not
// dequeue-count: the class of its last specific error, whether the reason
// names it (the runner's text) or only its attempts hold it (a reason
// without "last error", or one whose last error says nothing specific).
func TestConflictOutOfDeliveriesIsAConflict(t *testing.T) {
	b := setup(t)
	etag := "archive: Employees Sales/e1 kept changing while being moved; retrying later"
	cas := "idempotent: update Employees Sales/e2: changed by another writer in each of 5 tries: precondition failed"
	cases := []struct{ lastErr, reason string }{
		{etag, "dequeue count 5 reached the maximum 5; last error: " + etag},
		{cas, "dequeue count 5 reached the maximum 5"},
		{cas, "delivered 6 times, more than the maximum 5, without finishing (the worker may have crashed, lost the lease or failed to acknowledge each time); no failed attempt was recorded"},
	}
	for i, c := range cases {
		msg := b.deliver(t, fmt.Sprintf(`{"v":1,"id":"op-%d","kind":"archive","args":{}}`, i))
		for n := range 4 {
			f := b.failure(msg, "archive", c.lastErr)
			f.Attempt.DequeueCount = int64(n + 1)
			if err := b.m.RecordAttempt(b.ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		f := b.failure(msg, "archive", c.lastErr)
		f.Attempt.DequeueCount = 5
		if err := b.m.Move(b.ctx, f, msg.PopReceipt, c.reason); err != nil {
			t.Fatal(err)
		}
		r, err := b.m.Show(b.ctx, msg.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := GroupName(r); got != "archive/conflict" {
			t.Errorf("reason %q, attempts ending in %q: group %s, want archive/conflict", c.reason, c.lastErr, got)
		}
	}
	// Nothing specific anywhere: dequeue-count.
	r := Record{Kind: "archive", Reason: "dequeue count 5 reached the maximum 5; last error: context canceled", LastError: "context canceled",
		Attempts: []Attempt{{Error: "context canceled"}}}
	if got := Class(r); got != ClassDequeueCount {
		t.Errorf("Class with no specific error = %s, want %s", got, ClassDequeueCount)
	}
}

func TestListWithoutTable(t *testing.T) {
	b := setup(t)
	recs, err := b.m.List(b.ctx, "")
	if err != nil || len(recs) != 0 {
		t.Fatalf("List on a missing table = %v, %v", recs, err)
	}
	if _, err := b.m.Show(b.ctx, "nope"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Show of a missing record = %v, want ErrNotFound", err)
	}
}

func TestListOnlyThisQueue(t *testing.T) {
	b := setup(t)
	// "workitems" shares the table of "work-items".
	other := b.store.Queue("workitems")
	if err := other.Create(b.ctx); err != nil {
		t.Fatal(err)
	}
	mo := newSplit(t, Config{Tables: b.store.Tables(), Source: other, Poison: b.store.Queue(QueueName("workitems")),
		Blobs: b.store.Container(QueueName("workitems")), Clock: b.clock})
	if _, err := other.Send(b.ctx, "b3RoZXI=", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs, _ := other.Receive(b.ctx, 1, time.Minute)
	if err := mo.Move(b.ctx, b.failure(msgs[0], "index", "x"), msgs[0].PopReceipt, "r"); err != nil {
		t.Fatal(err)
	}
	mine := b.poisonNow(t, "bWluZQ==", "index", "r")

	recs, err := b.m.List(b.ctx, "")
	if err != nil || len(recs) != 1 || recs[0].MessageID != mine.ID {
		t.Errorf("List = %+v, %v; want only %s", recs, err, mine.ID)
	}
	if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{msgs[0].ID}}); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Requeue of another queue's record = %v, want ErrNotFound", err)
	}
}

func TestRequeueConcurrentSendsOnce(t *testing.T) {
	b := setup(t)
	const n = 10
	var ids []string
	for i := range n {
		ids = append(ids, b.poisonNow(t, base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "msg %d", i)), "archive", "r").ID)
	}

	// Two goroutines requeue each id at the same moment.
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string]int{}
	for _, id := range ids {
		for range 2 {
			wg.Go(func() {
				<-start
				got, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{id}})
				if err != nil {
					t.Errorf("Requeue(%s): %v", id, err)
				}
				mu.Lock()
				won[id] += len(got)
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()

	for _, id := range ids {
		if won[id] != 1 {
			t.Errorf("%s was requeued %d times, want 1", id, won[id])
		}
	}
	texts := map[string]int{}
	b.receiveAll(t, b.src, func(m storeadapter.Message) { texts[m.Text]++ })
	if len(texts) != n {
		t.Errorf("work queue holds %d distinct originals, want %d", len(texts), n)
	}
	for text, c := range texts {
		if c != 1 {
			t.Errorf("original %q sent %d times, want once", text, c)
		}
	}

	// Concurrent passes may have hidden each other's poison messages; the
	// next Requeue removes what is left and sends nothing.
	if got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true}); err != nil || len(got) != 0 {
		t.Errorf("final Requeue = %+v, %v", got, err)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages, want 0", c)
	}
	if c := b.count(t, b.src); c != n {
		t.Errorf("work queue holds %d messages, want %d", c, n)
	}
}

// TestRequeueLosesClaim runs a second Requeue of the same id inside the
// first one, just before its claim: the first loses the ETag race, sees the
// record claimed and skips it.
func TestRequeueLosesClaim(t *testing.T) {
	var (
		b      *bundle
		id     string
		armed  bool
		nested []Record
		nerr   error
	)
	b = setupWithFault(t, func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpUpdateEntity && armed {
			armed = false
			nested, nerr = b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{id}})
		}
		return nil
	})
	id = b.poisonNow(t, "cmFjZQ==", "archive", "r").ID
	armed = true
	got, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{id}})
	if err != nil || len(got) != 0 {
		t.Errorf("outer Requeue = %+v, %v; want it to skip the claimed record", got, err)
	}
	if nerr != nil || len(nested) != 1 {
		t.Errorf("inner Requeue = %+v, %v; want it to requeue the record", nested, nerr)
	}
	if sent := b.peek(t, b.src); len(sent) != 1 || sent[0].Text != "cmFjZQ==" {
		t.Errorf("work queue = %+v, want the original once", sent)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages", c)
	}
}

func TestRequeueDryRunChangesNothing(t *testing.T) {
	b := setup(t)
	msg := b.poisonNow(t, "ZHJ5", "index", "r")
	before := b.entity(t, msg.ID)
	calls := b.calls.Snapshot()

	got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true, DryRun: true})
	if err != nil || len(got) != 1 || got[0].MessageID != msg.ID || got[0].State != StatePoisoned {
		t.Fatalf("dry run = %+v, %v", got, err)
	}
	if after := b.entity(t, msg.ID); after.ETag != before.ETag {
		t.Error("dry run changed the record")
	}
	after := b.calls.Snapshot()
	for _, op := range []instrument.Op{instrument.OpSend, instrument.OpUpdateEntity, instrument.OpUpsertEntity, instrument.OpDeleteEntity, instrument.OpInsertEntity,
		instrument.OpTransact, instrument.OpReceive, instrument.OpDeleteMessage, instrument.OpUpdate, instrument.OpPut, instrument.OpDeleteBlob} {
		if n := after[op].Calls - calls[op].Calls; n != 0 {
			t.Errorf("dry run called %s %d times", op, n)
		}
	}
	if b.count(t, b.src) != 0 || b.count(t, b.poison) != 1 {
		t.Error("dry run changed the queues")
	}
}

func TestRequeueByKind(t *testing.T) {
	b := setup(t)
	a1 := b.poisonNow(t, "YTE=", "archive", "r")
	i1 := b.poisonNow(t, "aTE=", "index", "r")
	a2 := b.poisonNow(t, "YTI=", "archive", "r")

	got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true, Kind: "archive"})
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, r := range got {
		gotIDs = append(gotIDs, r.MessageID)
	}
	slices.Sort(gotIDs)
	wantIDs := []string{a1.ID, a2.ID}
	slices.Sort(wantIDs)
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("requeued %v, want %v", gotIDs, wantIDs)
	}
	if s := b.decodePoison(t); len(s) != 1 || s[0].MessageID != i1.ID {
		t.Errorf("poison queue = %+v, want only the index message", s)
	}
	if recs, _ := b.m.List(b.ctx, ""); len(recs) != 1 || recs[0].MessageID != i1.ID {
		t.Errorf("List = %+v, want only the index record", recs)
	}
	var texts []string
	for _, m := range b.peek(t, b.src) {
		texts = append(texts, m.Text)
	}
	slices.Sort(texts)
	if !slices.Equal(texts, []string{"YTE=", "YTI="}) {
		t.Errorf("work queue = %v", texts)
	}

	// Selecting by id with a kind that does not match requeues nothing.
	if got, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{i1.ID}, Kind: "archive"}); err != nil || len(got) != 0 {
		t.Errorf("Requeue(index id, kind archive) = %+v, %v", got, err)
	}
}

func TestRequeueOptionsAreValidated(t *testing.T) {
	b := setup(t)
	for _, o := range []RequeueOptions{{}, {All: true, IDs: []string{"x"}}} {
		if _, err := b.m.Requeue(b.ctx, o); !errors.Is(err, storeadapter.ErrInvalidInput) {
			t.Errorf("Requeue(%+v) = %v, want ErrInvalidInput", o, err)
		}
	}
	if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{"missing"}}); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Requeue of a missing id = %v, want ErrNotFound", err)
	}
}

func TestRequeueResumesAfterCrash(t *testing.T) {
	b := setup(t)
	msg := b.poisonNow(t, "Y3Jhc2g=", "archive", "r")
	// A requeue claimed the record and crashed before sending.
	claim := storeadapter.Entity{PartitionKey: msg.ID, RowKey: recordRowKey, Properties: map[string]any{
		propState: StateRequeuing, propRequeuingAt: b.clock.Now(), propRequeuedBy: "crashed-host"}}
	if _, err := b.store.Tables().UpdateEntity(b.ctx, TableName(sourceName), claim, storeadapter.Merge, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}

	// While the claim is fresh it belongs to the running requeue.
	if got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true}); err != nil || len(got) != 0 {
		t.Fatalf("Requeue of a fresh claim = %+v, %v", got, err)
	}
	b.clock.Advance(RequeueTimeout)
	got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true})
	if err != nil || len(got) != 1 {
		t.Fatalf("Requeue of a stale claim = %+v, %v", got, err)
	}
	if sent := b.peek(t, b.src); len(sent) != 1 || sent[0].Text != msg.Text {
		t.Errorf("work queue = %+v", sent)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages", c)
	}
}

func TestRequeueSweepsLeftoversAfterCrash(t *testing.T) {
	b := setup(t)
	msg := b.poisonNow(t, "bGVmdA==", "archive", "r")
	// A requeue sent the original and finished the record, then crashed
	// before removing the poison message.
	done := storeadapter.Entity{PartitionKey: msg.ID, RowKey: recordRowKey, Properties: map[string]any{
		propState: StateRequeued, propRequeuedAt: b.clock.Now(), propSwept: false}}
	if _, err := b.store.Tables().UpdateEntity(b.ctx, TableName(sourceName), done, storeadapter.Merge, storeadapter.ETagAny); err != nil {
		t.Fatal(err)
	}
	got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true})
	if err != nil || len(got) != 0 {
		t.Fatalf("Requeue = %+v, %v; want nothing sent", got, err)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages, want 0", c)
	}
	if c := b.count(t, b.src); c != 0 {
		t.Errorf("work queue holds %d messages, want 0", c)
	}
	if swept, _ := b.entity(t, msg.ID).Properties[propSwept].(bool); !swept {
		t.Error("record not marked swept")
	}
}

func TestDelete(t *testing.T) {
	b := setup(t)
	keep := b.poisonNow(t, "a2VlcA==", "index", "r")
	big := b.poisonNow(t, strings.Repeat("A", 60*1024), "archive", "r")
	// A message that is not in the poison format stays untouched.
	if _, err := b.poison.Send(b.ctx, "not base64 json", storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := b.m.Delete(b.ctx, big.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Show(b.ctx, big.ID); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("Show after Delete = %v, want ErrNotFound", err)
	}
	if _, err := b.blobs.Properties(b.ctx, blobName(big.ID)); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("blob after Delete: %v, want ErrNotFound", err)
	}
	msgs := b.peek(t, b.poison)
	var texts []string
	for _, m := range msgs {
		if s, _, _, err := DecodeMessage(m.Text); err == nil {
			texts = append(texts, s.MessageID)
		} else {
			texts = append(texts, m.Text)
		}
	}
	slices.Sort(texts)
	want := []string{keep.ID, "not base64 json"}
	slices.Sort(want)
	if !slices.Equal(texts, want) {
		t.Errorf("visible poison messages after Delete = %v, want %v", texts, want)
	}
	if err := b.m.Delete(b.ctx, big.ID); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if recs, _ := b.m.List(b.ctx, ""); len(recs) != 1 || recs[0].MessageID != keep.ID {
		t.Errorf("List after Delete = %+v", recs)
	}
}

func TestPurgeOlderThan(t *testing.T) {
	b := setup(t)
	old1 := b.poisonNow(t, "b2xkMQ==", "archive", "r")
	old2 := b.poisonNow(t, strings.Repeat("B", 60*1024), "index", "r")
	b.clock.Advance(48 * time.Hour)
	fresh := b.poisonNow(t, "ZnJlc2g=", "archive", "r")
	b.clock.Advance(time.Hour)

	res, err := b.m.Purge(b.ctx, PurgeOptions{OlderThan: 24 * time.Hour})
	if err != nil || len(res.Records) != 2 {
		t.Fatalf("Purge(24h) = %+v, %v; want 2", res, err)
	}
	for _, id := range []string{old1.ID, old2.ID} {
		if _, err := b.m.Show(b.ctx, id); !errors.Is(err, storeadapter.ErrNotFound) {
			t.Errorf("record %s survived Purge: %v", id, err)
		}
	}
	if _, err := b.blobs.Properties(b.ctx, blobName(old2.ID)); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Errorf("blob of %s survived Purge: %v", old2.ID, err)
	}
	if s := b.decodePoison(t); len(s) != 1 || s[0].MessageID != fresh.ID {
		t.Errorf("poison queue after Purge(24h) = %+v, want only %s", s, fresh.ID)
	}

	if res, err := b.m.Purge(b.ctx, PurgeOptions{}); err != nil || len(res.Records) != 1 {
		t.Fatalf("Purge(0) = %+v, %v; want 1", res, err)
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages after Purge(0)", c)
	}
	if res, err := b.m.Purge(b.ctx, PurgeOptions{}); err != nil || len(res.Records) != 0 {
		t.Errorf("Purge of nothing = %+v, %v", res, err)
	}
}

// TestPurgeLeavesNothingBehind: after a requeue of every record, a purge
// removes the requeued records too (nothing else lists or removes them),
// failing records older than the message TTL (their message succeeded or
// expired), and the range checkpoints of the operations it abandons; it
// keeps a failing record that may still be retried, and the checkpoints of
// an operation whose requeued copy may still run.
func TestPurgeLeavesNothingBehind(t *testing.T) {
	b := setup(t)
	const cpTable = "TablekeeperCheckpoints"
	cp := idempotent.Checkpoints{Tables: b.store.Tables(), Table: cpTable}
	var requeued []storeadapter.Message
	for i := range 5 {
		requeued = append(requeued, b.poisonNow(t, base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "r%d", i)), "archive", "r"))
	}
	if got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true}); err != nil || len(got) != 5 {
		t.Fatalf("Requeue = %d, %v", len(got), err)
	}
	abandonedMsg := b.poisonNow(t, "YWJhbmRvbmVk", "archive", "permanent: args.pk: is required")
	stale := b.deliver(t, "c3RhbGU=")
	if err := b.m.RecordAttempt(b.ctx, b.failure(stale, "archive", "busy")); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(DefaultStaleAfter + time.Hour)
	young := b.deliver(t, "eW91bmc=")
	if err := b.m.RecordAttempt(b.ctx, b.failure(young, "archive", "busy")); err != nil {
		t.Fatal(err)
	}
	opOf := func(m storeadapter.Message) string { return b.failure(m, "", "").OpID }
	for _, m := range []storeadapter.Message{abandonedMsg, stale, requeued[0], young} {
		for _, step := range []string{"range", "range-2"} {
			if err := cp.Save(b.ctx, opOf(m), step, "token"); err != nil {
				t.Fatal(err)
			}
		}
	}

	dry, err := b.m.Purge(b.ctx, PurgeOptions{CheckpointTable: cpTable, DryRun: true})
	if err != nil || len(dry.Records) != 7 || dry.Checkpoints != 4 {
		t.Fatalf("dry run = %d records, %d checkpoints, %v; want 7, 4", len(dry.Records), dry.Checkpoints, err)
	}
	var done []int
	res, err := b.m.Purge(b.ctx, PurgeOptions{CheckpointTable: cpTable, Progress: func(p Progress) {
		if p.Phase == PhaseDeleteRecords {
			done = append(done, p.Done, p.Total)
		}
	}})
	if err != nil || len(res.Records) != 7 || res.Checkpoints != 4 {
		t.Fatalf("Purge = %d records, %d checkpoints, %v; want 7, 4", len(res.Records), res.Checkpoints, err)
	}
	if len(done) != 14 || done[12] != 7 || done[13] != 7 {
		t.Errorf("progress calls = %v, want 1/7 … 7/7", done)
	}
	var left []string
	page, err := b.store.Tables().Query(b.ctx, TableName(sourceName), storeadapter.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Entities {
		left = append(left, e.PartitionKey)
	}
	if !slices.Equal(left, []string{young.ID}) {
		t.Errorf("poison table after Purge holds %v, want only the young failing record %s", left, young.ID)
	}
	for _, c := range []struct {
		m    storeadapter.Message
		kept bool
	}{{abandonedMsg, false}, {stale, false}, {requeued[0], true}, {young, true}} {
		tok, err := cp.Load(b.ctx, opOf(c.m), "range")
		if err != nil || (tok != "") != c.kept {
			t.Errorf("checkpoint of %s after Purge: %q, %v; want kept=%v", opOf(c.m), tok, err, c.kept)
		}
	}
	if c := b.count(t, b.poison); c != 0 {
		t.Errorf("poison queue holds %d messages after Purge", c)
	}
}

func TestDecodeMessage(t *testing.T) {
	s := Summary{MessageID: "m", Kind: "archive", DequeueCount: 3, FirstAttempt: t0, LastAttempt: t0, Queue: "q"}
	for _, tc := range []struct{ original, ref string }{{"", ""}, {"text", ""}, {"", "c/m.txt"}} {
		text, err := encodeMessage(s, tc.original, tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		got, original, ref, err := DecodeMessage(text)
		if err != nil || got != s || original != tc.original || ref != tc.ref {
			t.Errorf("round trip of %+v: %+v %q %q %v", tc, got, original, ref, err)
		}
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{
		"%%%",
		b64("not json"),
		b64(`{"v":2,"poison":{"messageId":"m"},"original":""}`),
		b64(`{"v":1,"poison":{},"original":""}`),
		b64(`{"v":1,"poison":{"messageId":"m"}}`),
		b64(`{"v":1,"poison":{"messageId":"m"},"original":"","originalRef":"c/b"}`),
	} {
		if _, _, _, err := DecodeMessage(bad); err == nil {
			t.Errorf("DecodeMessage(%q) succeeded", bad)
		}
	}
	if _, original, _, err := DecodeMessage(`{"v":1,"poison":{"messageId":"m"},"original":"plain"}`); err != nil || original != "plain" {
		t.Errorf("plain JSON: %q, %v", original, err)
	}
}

// TestForget drops the record of a message that succeeded after failing,
// keeps a poisoned one, and treats a missing record as done.
func TestForget(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "eyJ2IjoxfQ==")
	if err := b.m.RecordAttempt(b.ctx, b.failure(msg, "archive", "table busy")); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Forget(b.ctx, msg.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Show(b.ctx, msg.ID); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Fatalf("Show after Forget = %v, want ErrNotFound", err)
	}
	if err := b.m.Forget(b.ctx, msg.ID); err != nil {
		t.Fatalf("second Forget = %v, want nil", err)
	}

	poisoned := b.deliver(t, "eyJ2IjoyfQ==")
	if err := b.m.Move(b.ctx, b.failure(poisoned, "archive", "bad"), poisoned.PopReceipt, "permanent: bad"); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Forget(b.ctx, poisoned.ID); err != nil {
		t.Fatal(err)
	}
	if rec, err := b.m.Show(b.ctx, poisoned.ID); err != nil || rec.State != StatePoisoned {
		t.Fatalf("Forget removed or changed a poisoned record: %+v, %v", rec, err)
	}
}

// TestShowByOperationID: Show finds a record by its operation id too; when
// an operation has several (requeued, then poisoned again), Lookup returns
// the current one and lists the others; an id that can be neither is
// explained.
func TestShowByOperationID(t *testing.T) {
	b := setup(t)
	msg := b.poisonNow(t, "b25l", "archive", "r")
	op := b.failure(msg, "", "").OpID
	if rec, err := b.m.Show(b.ctx, op); err != nil || rec.MessageID != msg.ID || rec.Original != "b25l" {
		t.Fatalf("Show(op id) = %+v, %v", rec, err)
	}
	if _, err := b.m.Show(b.ctx, "op-none"); !errors.Is(err, storeadapter.ErrNotFound) || !strings.Contains(err.Error(), "no record with that message id or operation id") {
		t.Errorf("Show(unknown) = %v", err)
	}
	// Requeued and poisoned again: the operation has two records, and the
	// poisoned one is current, whatever the order of their keys.
	if _, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{msg.ID}}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	again := b.receive(t)
	f := b.failure(again, "archive", "x")
	f.OpID = op
	if err := b.m.Move(b.ctx, f, again.PopReceipt, "r"); err != nil {
		t.Fatal(err)
	}
	rec, others, err := b.m.Lookup(b.ctx, op)
	if err != nil || rec.MessageID != again.ID || rec.State != StatePoisoned || rec.Original != "b25l" ||
		len(others) != 1 || others[0].MessageID != msg.ID || others[0].State != StateRequeued || others[0].Original != "" {
		t.Fatalf("Lookup(op id of a requeued and poisoned-again operation) = %+v, others %+v, %v; want the new poisoned record, the requeued one listed", rec, others, err)
	}
	if rec, err := b.m.Show(b.ctx, op); err != nil || rec.MessageID != again.ID {
		t.Errorf("Show(op id of two records) = %+v, %v; want the current one, %s", rec, err, again.ID)
	}
	// By message id: that record, the operation's others listed.
	if rec, others, err := b.m.Lookup(b.ctx, msg.ID); err != nil || rec.MessageID != msg.ID || len(others) != 1 || others[0].MessageID != again.ID {
		t.Errorf("Lookup(requeued message id) = %+v, others %+v, %v", rec, others, err)
	}
	_, err = b.m.Show(b.ctx, "x/y?z")
	if !errors.Is(err, storeadapter.ErrInvalidInput) || !strings.Contains(err.Error(), `"x/y?z" is not a valid message id or operation id`) ||
		strings.Contains(err.Error(), "PartitionKey") {
		t.Errorf("Show(x/y?z) = %v", err)
	}
}

// TestRequeueSaysWhyAndTakesAGroup: an id that is not requeued is reported
// with the reason, and a group selects the records of one failure class.
func TestRequeueSaysWhyAndTakesAGroup(t *testing.T) {
	b := setup(t)
	missing := b.poisonNow(t, "bTE=", "archive", "permanent: archive: T p/a does not exist and U holds no copy")
	invalid := b.poisonNow(t, "bTI=", "archive", "permanent: args.pk: is required")
	missing2 := b.poisonNow(t, "bTM=", "archive", "permanent: archive: T p/b does not exist and U holds no copy")
	failing := b.deliver(t, "bTQ=")
	if err := b.m.RecordAttempt(b.ctx, b.failure(failing, "archive", "busy")); err != nil {
		t.Fatal(err)
	}
	got, err := b.m.Requeue(b.ctx, RequeueOptions{All: true, Group: "archive/not-found"})
	if err != nil || len(got) != 2 || got[0].MessageID == invalid.ID || got[1].MessageID == invalid.ID || missing2.ID == "" {
		t.Fatalf("Requeue(group) = %+v, %v", got, err)
	}
	skipped := map[string]string{}
	got, err = b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{missing.ID, invalid.ID, failing.ID}, Kind: "index",
		Skipped: func(r Record, why string) { skipped[r.MessageID] = why }})
	if err != nil || len(got) != 0 {
		t.Fatalf("Requeue(kind index) = %+v, %v", got, err)
	}
	if !strings.Contains(skipped[invalid.ID], `its kind is "archive", not "index"`) {
		t.Errorf("skipped = %v", skipped)
	}
	clear(skipped)
	_, err = b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{missing.ID, invalid.ID, failing.ID},
		Skipped: func(r Record, why string) { skipped[r.MessageID] = why }})
	if err != nil || len(skipped) != 2 || !strings.Contains(skipped[missing.ID], "already requeued at 2026-11-21T10:00:00Z as message") ||
		!strings.Contains(skipped[failing.ID], "not poisoned: the message is still being retried") {
		t.Errorf("skipped = %v, %v", skipped, err)
	}
}

// hookTables runs hook once, before the first record write (UpsertEntity)
// it sees after hook is set.
type hookTables struct {
	storeadapter.Tables
	hook func()
}

func (h *hookTables) UpsertEntity(ctx context.Context, table string, e storeadapter.Entity, mode storeadapter.UpdateMode) (string, error) {
	if hook := h.hook; hook != nil {
		h.hook = nil
		hook()
	}
	return h.Tables.UpsertEntity(ctx, table, e, mode)
}

// TestRemoveKeepsBlobOfRepoisonedOriginal: a redelivered original is
// poisoned again while an operator removes its record; Move has rewritten
// the blob and not yet the record when Purge or Delete runs. The record
// Move then writes must still find its original.
func TestRemoveKeepsBlobOfRepoisonedOriginal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(b *bundle, id string) error
	}{
		{"purge", func(b *bundle, _ string) error { _, err := b.m.Purge(b.ctx, PurgeOptions{}); return err }},
		{"delete", func(b *bundle, id string) error { return b.m.Delete(b.ctx, id) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			tables := &hookTables{Tables: b.store.Tables()}
			b.m = newSplit(t, Config{Tables: tables, Source: b.src, Poison: b.poison, Blobs: b.blobs, Clock: b.clock, Host: "ops-host"})
			text := strings.Repeat("0123456789abcdef", 60*1024/16) // goes to a blob
			msg := b.deliver(t, text)
			if err := b.m.Move(b.ctx, b.failure(msg, "blobsync", "x"), msg.PopReceipt, "permanent: bad args"); err != nil {
				t.Fatal(err)
			}
			// Had the first move's delete been lost, the original would
			// come back and be poisoned again: a copy stands in for it.
			b.clock.Advance(time.Minute)
			again := b.deliver(t, text)
			f := b.failure(again, "blobsync", "x")
			f.MessageID = msg.ID
			tables.hook = func() {
				if err := tc.remove(b, msg.ID); err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
			}
			if err := b.m.Move(b.ctx, f, again.PopReceipt, "permanent: bad args"); err != nil {
				t.Fatal(err)
			}
			rec, err := b.m.Show(b.ctx, msg.ID)
			if err != nil {
				t.Fatalf("Show after the second move: %v", err)
			}
			if rec.Original != text {
				t.Errorf("the record's original has %d bytes; want the %d of the blob", len(rec.Original), len(text))
			}
		})
	}
}
