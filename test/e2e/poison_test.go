package e2e

import (
	"encoding/base64"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// malformed is a message sent straight to the queue that no worker can
// run, and what its poison reason must mention.
type malformed struct {
	name, text, reasonHas string
	opID, kind            string // what the record must say ("" when the envelope did not decode)
	id                    string // the queue message id, once sent
}

// TestMalformedPoisonedOnFirstDelivery sends messages that do not decode or
// validate and checks that each is poisoned on its first delivery, with
// its original text untouched and a reason that names the broken field.
// Its subtest checks that `enqueue stats` and `enqueue poison list|show`
// report that state.
func TestMalformedPoisonedOnFirstDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	q := e.queue("malformed")
	msgs := []*malformed{
		{
			name:      "plain JSON without args.to",
			text:      `{"v":1,"id":"op-bad-1","kind":"archive","args":{"table":"Src","pk":"p","rk":"r"}}`,
			reasonHas: "args.to",
			opID:      "op-bad-1", kind: "archive",
		},
		{
			name:      "garbage",
			text:      "this is not a message at all ~~~ {",
			reasonHas: "envelope",
		},
		{
			name:      "base64 with an unknown args field",
			text:      base64.StdEncoding.EncodeToString([]byte(`{"v":1,"id":"op-bad-3","kind":"archive","args":{"table":"Src","to":"Dst","pk":"p","rk":"r","colour":"red"}}`)),
			reasonHas: "args.colour",
			opID:      "op-bad-3", kind: "archive",
		},
	}
	if err := store.Queue(q).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		sent, err := store.Queue(q).Send(e.ctx, m.text, storeadapter.SendOptions{})
		if err != nil {
			t.Fatalf("send %s: %v", m.name, err)
		}
		m.id = sent.ID
	}

	stats := e.drain(q, 30*time.Second)
	if stats.Poisoned != 3 || stats.Received != 3 || stats.Retried != 0 {
		t.Errorf("worker counters = %+v, want 3 received and poisoned, none retried", stats)
	}
	if n := e.count(q); n != 0 {
		t.Errorf("work queue holds %d messages after the drain, want 0", n)
	}

	// The poison queue holds each message once, original text untouched.
	pq := poison.QueueName(q)
	peeked, err := store.Queue(pq).Peek(e.ctx, 32)
	if err != nil {
		t.Fatalf("peek %s: %v", pq, err)
	}
	byID := map[string]*malformed{}
	for _, m := range msgs {
		byID[m.id] = m
	}
	var got []string
	for _, pm := range peeked {
		s, original, ref, err := poison.DecodeMessage(pm.Text)
		if err != nil {
			t.Errorf("poison message %s: %v", pm.ID, err)
			continue
		}
		got = append(got, s.MessageID)
		m := byID[s.MessageID]
		switch {
		case m == nil:
			t.Errorf("poison message for unknown message %s", s.MessageID)
		case ref != "" || original != m.text:
			t.Errorf("%s: poison message carries original %q (ref %q), want %q", m.name, original, ref, m.text)
		case s.DequeueCount != 1 || !strings.Contains(s.Reason, m.reasonHas) || s.Queue != q:
			t.Errorf("%s: poison summary %+v, want dequeue count 1, queue %s and a reason naming %s", m.name, s, q, m.reasonHas)
		}
	}
	if len(got) != len(msgs) {
		t.Errorf("poison queue holds messages for %q, want one for each of the %d sent", got, len(msgs))
	}

	// The failure records say why, on delivery 1.
	mv := mover(q)
	for _, m := range msgs {
		rec, err := mv.Show(e.ctx, m.id)
		if err != nil {
			t.Errorf("%s: Show(%s): %v", m.name, m.id, err)
			continue
		}
		if rec.DequeueCount != 1 || rec.State != poison.StatePoisoned || !strings.Contains(rec.Reason, m.reasonHas) ||
			rec.Queue != q || rec.OpID != m.opID || rec.Kind != m.kind || rec.Original != m.text {
			t.Errorf("%s: record = %+v\nwant dequeue count 1, state %s, queue %s, op id %q, kind %q, the original text and a reason naming %s",
				m.name, rec, poison.StatePoisoned, q, m.opID, m.kind, m.reasonHas)
		}
		if !strings.HasPrefix(rec.Reason, "permanent") {
			t.Errorf("%s: reason %q does not say the failure is permanent", m.name, rec.Reason)
		}
		if len(rec.Attempts) != 1 || rec.Attempts[0].DequeueCount != 1 || rec.Attempts[0].Host == "" || rec.Attempts[0].Error == "" {
			t.Errorf("%s: attempts = %+v, want one, on delivery 1, with host and error", m.name, rec.Attempts)
		}
	}
	list, err := mv.List(e.ctx, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != len(msgs) {
		t.Errorf("List returned %d records, want %d", len(list), len(msgs))
	}

	t.Run("CLI", func(t *testing.T) {
		e := e.sub(t)
		var st struct {
			Queue, Poison struct {
				Name     string `json:"name"`
				Messages int    `json:"messages"`
				Exists   bool   `json:"exists"`
			}
		}
		e.enqueueJSON(&st, "stats", "-queue", q)
		if st.Queue.Name != q || st.Queue.Messages != 0 || !st.Queue.Exists ||
			st.Poison.Name != pq || st.Poison.Messages != len(msgs) || !st.Poison.Exists {
			t.Errorf("enqueue stats -o json = %+v, want %s with 0 messages and %s with %d", st, q, pq, len(msgs))
		}
		if out := e.enqueue("stats", "-queue", q); !strings.Contains(out, pq) {
			t.Errorf("enqueue stats does not name the poison queue %s:\n%s", pq, out)
		}

		var recs []struct {
			MessageID    string `json:"messageId"`
			Queue        string `json:"queue"`
			State        string `json:"state"`
			OpID         string `json:"opId"`
			Kind         string `json:"kind"`
			Reason       string `json:"reason"`
			DequeueCount int64  `json:"dequeueCount"`
		}
		e.enqueueJSON(&recs, "poison", "list", "-queue", q)
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.MessageID)
			m := byID[r.MessageID]
			if m == nil {
				t.Errorf("poison list shows unknown message %s", r.MessageID)
				continue
			}
			if r.DequeueCount != 1 || r.State != poison.StatePoisoned || r.Queue != q || r.OpID != m.opID || r.Kind != m.kind || !strings.Contains(r.Reason, m.reasonHas) {
				t.Errorf("poison list -o json shows %+v for %s", r, m.name)
			}
		}
		wantIDs := slices.Sorted(func(yield func(string) bool) {
			for _, m := range msgs {
				yield(m.id)
			}
		})
		if slices.Sort(ids); !slices.Equal(ids, wantIDs) {
			t.Errorf("poison list -o json lists %q, want %q", ids, wantIDs)
		}

		out := e.enqueue("poison", "list", "-queue", q)
		for _, m := range msgs {
			if !strings.Contains(out, m.id) {
				t.Errorf("poison list does not show %s (%s):\n%s", m.id, m.name, out)
			}
		}

		var show struct {
			MessageID string `json:"messageId"`
			Reason    string `json:"reason"`
			Attempts  []struct {
				N     int64  `json:"n"`
				Host  string `json:"host"`
				Error string `json:"error"`
			} `json:"attempts"`
			Original string `json:"original"`
		}
		m := msgs[0]
		e.enqueueJSON(&show, "poison", "show", m.id, "-queue", q)
		if show.MessageID != m.id || show.Original != m.text || len(show.Attempts) != 1 || show.Attempts[0].N != 1 || !strings.Contains(show.Reason, m.reasonHas) {
			t.Errorf("poison show %s -o json = %+v", m.id, show)
		}
	})
}

// withDeadBlobEndpoint returns cs with its blob endpoint moved to a
// loopback port nobody listens on.
func withDeadBlobEndpoint(t *testing.T, cs string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	parts := strings.Split(cs, ";")
	for i, p := range parts {
		if strings.HasPrefix(p, "BlobEndpoint=") {
			parts[i] = "BlobEndpoint=http://" + dead + "/" + azurite.Account
		}
	}
	return strings.Join(parts, ";")
}

// TestAlwaysFailingPoisonedAfterThresholdThenRequeued archives an entity to
// blob storage while the worker's blob endpoint refuses connections, so
// every write fails transiently and is retried. It checks that the message
// is poisoned after -max-dequeue-count deliveries with each attempt
// recorded; then, with blob storage back, it requeues the message with the
// CLI and checks that a second drain archives the entity and leaves the
// poison queue empty.
func TestAlwaysFailingPoisonedAfterThresholdThenRequeued(t *testing.T) {
	t.Parallel()
	e := setup(t, 90*time.Second)
	src := e.table("OutageSrc")
	c := e.container("outage")
	q := e.queue("outage")

	// Keys that need escaping in the blob name.
	const pk, rk, prefix = "p 1", "r%1", "archive/2026"
	want := storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: edmProperties("outage")}
	e.seed(src, []storeadapter.Entity{want})
	blobName := prefix + "/" + src + "/" + url.PathEscape(pk) + "/" + url.PathEscape(rk) + ".json"
	blobs := store.Container(c)

	var sent archiveOutput
	e.enqueueJSON(&sent, "archive", "-queue", q, "-table", src, "-to-blob", c+"/"+prefix, "-pk", pk, "-rk", rk)

	// A blob service that is down: the worker's blob endpoint is a port
	// nobody listens on, and the SDK does not retry on its own.
	e.environ = childEnvironment(withDeadBlobEndpoint(t, emulatorConnectionString))
	start := time.Now()
	stats := e.drain(q, 60*time.Second, "-max-dequeue-count", "3", "-retry-base", "1s", "-retry-max", "2s", "-visibility", "5s", "-storage-retries", "0")
	e.environ = nil
	t.Logf("poisoned after 3 deliveries in %v", time.Since(start).Round(time.Millisecond))
	if stats.Received != 3 || stats.Retried != 2 || stats.Poisoned != 1 || stats.Succeeded != 0 {
		t.Errorf("worker counters = %+v, want 3 received, 2 retried, 1 poisoned", stats)
	}
	pq := poison.QueueName(q)
	if n := e.count(pq); n != 1 {
		t.Errorf("poison queue holds %d messages, want 1", n)
	}
	if !e.exists(src, pk, rk) {
		t.Errorf("the source entity is gone although the archive never succeeded")
	}

	mv := mover(q)
	rec, err := mv.Show(e.ctx, sent.MessageID)
	if err != nil {
		t.Fatalf("Show(%s): %v", sent.MessageID, err)
	}
	if rec.DequeueCount != 3 || rec.State != poison.StatePoisoned || rec.OpID != sent.OpID || rec.Kind != "archive" ||
		!strings.Contains(rec.Reason, "maximum 3") || !strings.Contains(rec.Reason, "service unavailable") {
		t.Errorf("record = %+v\nwant dequeue count 3, state poisoned, op id %s, kind archive, a reason naming the maximum 3 and the outage", rec, sent.OpID)
	}
	if len(rec.Attempts) != 3 {
		t.Fatalf("record has %d attempts, want 3: %+v", len(rec.Attempts), rec.Attempts)
	}
	for i, a := range rec.Attempts {
		if a.DequeueCount != int64(i+1) || a.Host == "" || a.Time.IsZero() || a.Time.Before(start.Add(-time.Minute)) || !strings.Contains(a.Error, "service unavailable") {
			t.Errorf("attempt %d = %+v, want delivery %d with a host, a time and the outage error", i+1, a, i+1)
		}
		if i > 0 && !a.Time.After(rec.Attempts[i-1].Time) {
			t.Errorf("attempt %d at %v is not after attempt %d at %v", i+1, a.Time, i, rec.Attempts[i-1].Time)
		}
	}

	// Blob storage is back: requeue by the original message id, drain again.
	var requeued struct {
		DryRun   bool `json:"dryRun"`
		Requeued []struct {
			MessageID    string `json:"messageId"`
			OpID         string `json:"opId"`
			NewMessageID string `json:"newMessageId"`
		} `json:"requeued"`
	}
	e.enqueueJSON(&requeued, "poison", "requeue", sent.MessageID, "-queue", q)
	if len(requeued.Requeued) != 1 || requeued.Requeued[0].MessageID != sent.MessageID || requeued.Requeued[0].OpID != sent.OpID || requeued.Requeued[0].NewMessageID == "" {
		t.Fatalf("poison requeue -o json = %+v, want message %s (op %s) with its new message id", requeued, sent.MessageID, sent.OpID)
	}
	if n := e.count(pq); n != 0 {
		t.Errorf("poison queue holds %d messages after the requeue, want 0", n)
	}

	stats = e.drain(q, 30*time.Second, "-max-dequeue-count", "3", "-retry-base", "1s", "-retry-max", "2s", "-visibility", "5s")
	if stats.Succeeded != 1 || stats.Poisoned != 0 {
		t.Errorf("worker counters after the requeue = %+v, want 1 succeeded", stats)
	}
	data, props, err := blobs.Get(e.ctx, blobName)
	if err != nil {
		t.Fatalf("get archived blob %s: %v", blobName, err)
	}
	got, err := storeadapter.UnmarshalEntityJSON(data, "")
	if err != nil {
		t.Fatalf("archived blob %s (%s): %v", blobName, props.ContentType, err)
	}
	if got.PartitionKey != pk || got.RowKey != rk {
		t.Errorf("archived blob holds %s/%s, want %s/%s", got.PartitionKey, got.RowKey, pk, rk)
	}
	if d := diffProperties(want.Properties, got.Properties); len(d) > 0 {
		t.Errorf("archived blob differs from the source entity:\n%s", strings.Join(d, "\n"))
	}
	if e.exists(src, pk, rk) {
		t.Errorf("the source entity still exists after the archive succeeded")
	}
	for _, name := range []string{q, pq} {
		if n := e.count(name); n != 0 {
			t.Errorf("queue %s holds %d messages, want 0", name, n)
		}
	}
	if rec, err := mv.Show(e.ctx, sent.MessageID); err != nil || rec.State != poison.StateRequeued || rec.RequeuedMessageID != requeued.Requeued[0].NewMessageID {
		t.Errorf("record after the requeue = %+v, %v; want state %s with the new message id", rec, err, poison.StateRequeued)
	}
}
