package poison

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// split is a Recorder and an Inspector of one Config, as the tests use
// them side by side.
type split struct {
	*Recorder
	*Inspector
}

// newSplit returns the Recorder and the Inspector of cfg.
func newSplit(t *testing.T, cfg Config) split {
	t.Helper()
	r, err := NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInspector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return split{r, in}
}

// TestConstructorsRefuseBadConfig: a configuration that cannot work is an
// error of NewRecorder and NewInspector, before any storage call, and
// names what is wrong.
func TestConstructorsRefuseBadConfig(t *testing.T) {
	calls := &instrument.Counts{}
	st := instrument.Wrap(localstore.New(localstore.Options{}), instrument.Options{Observers: []instrument.Observer{calls}})
	good := func() Config {
		return Config{Tables: st.Tables(), Source: st.Queue("work"), Poison: st.Queue("work-poison"), Blobs: st.Container("work-poison")}
	}
	for _, tc := range []struct {
		name, want string
		change     func(*Config)
	}{
		{"no tables", "Tables is required", func(c *Config) { c.Tables = nil }},
		{"no source", "Source is required", func(c *Config) { c.Source = nil }},
		{"no poison queue", "Poison is required", func(c *Config) { c.Poison = nil }},
		{"no container", "Blobs is required", func(c *Config) { c.Blobs = nil }},
		{"bad work queue", "work queue", func(c *Config) { c.Source = st.Queue("Work_Items") }},
		{"bad poison queue", "poison queue", func(c *Config) { c.Poison = st.Queue("p") }},
		{"bad container", "container", func(c *Config) { c.Blobs = st.Container("Work--Poison") }},
		{"bad table", "table", func(c *Config) { c.Table = "1records" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.change(&cfg)
			r, err := NewRecorder(cfg)
			if err == nil || r != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRecorder = %v, %v; want nil and an error saying %q", r, err, tc.want)
			}
			in, err := NewInspector(cfg)
			if err == nil || in != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewInspector = %v, %v; want nil and an error saying %q", in, err, tc.want)
			}
		})
	}
	if _, err := NewRecorder(good()); err != nil {
		t.Errorf("NewRecorder of a good config: %v", err)
	}
	if _, err := NewInspector(good()); err != nil {
		t.Errorf("NewInspector of a good config: %v", err)
	}
	if n := calls.Snapshot().Total().Calls; n != 0 {
		t.Errorf("the constructors made %d storage calls:\n%s", n, calls.Snapshot())
	}
}

// TestInspectorSeesWhatRecorderWrote: the two roles, built separately from
// one Config (as the worker and the CLI do), agree on the record format and
// where records, poison messages and blobs live.
func TestInspectorSeesWhatRecorderWrote(t *testing.T) {
	b := setup(t)
	cfg := Config{Tables: b.store.Tables(), Source: b.src, Poison: b.poison, Blobs: b.blobs, Clock: b.clock}
	rec, err := NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", 60*1024) // with the summary, too large for a message: goes to a blob
	msg := b.deliver(t, text)
	if err := rec.Move(b.ctx, b.failure(msg, "archive", "boom"), msg.PopReceipt, "permanent: bad args"); err != nil {
		t.Fatal(err)
	}
	in, err := NewInspector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := in.Show(b.ctx, msg.ID)
	if err != nil || got.Original != text || got.State != StatePoisoned {
		t.Fatalf("Show = state %q, %d bytes of original, %v; want poisoned with the original", got.State, len(got.Original), err)
	}
	if err := in.Delete(b.ctx, msg.ID); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, b.poison); n != 0 {
		t.Errorf("%d poison messages after Delete, want 0", n)
	}
}

// queueCalls returns the store's Receive and DeleteMessage counts.
func queueCalls(b *bundle) (receives, deletes int64) {
	c := b.calls.Snapshot()
	return c[instrument.OpReceive].Calls, c[instrument.OpDeleteMessage].Calls
}

// TestRemoveByNotedID: Move notes the poison message's id and receipt in
// the record, so Delete, Requeue and Purge delete it with one call and
// receive nothing from the poison queue; when the receipt is stale (the
// message was received since) or a send went unnoted, they fall back to
// the sweep and still remove every poison message.
func TestRemoveByNotedID(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(b *bundle, id string) error
	}{
		{"delete", func(b *bundle, id string) error { return b.m.Delete(b.ctx, id) }},
		{"requeue", func(b *bundle, id string) error {
			_, err := b.m.Requeue(b.ctx, RequeueOptions{IDs: []string{id}})
			return err
		}},
		{"purge", func(b *bundle, _ string) error { _, err := b.m.Purge(b.ctx, PurgeOptions{}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			msg := b.poisonNow(t, "bm90ZWQ=", "archive", "permanent: bad args")
			if refs, known := poisonRefs(b.entity(t, msg.ID)); !known || len(refs) != 1 {
				t.Fatalf("record notes %v (all known: %v), want the one poison message", refs, known)
			}
			r0, d0 := queueCalls(b)
			if err := tc.remove(b, msg.ID); err != nil {
				t.Fatal(err)
			}
			r1, d1 := queueCalls(b)
			if r1 != r0 || d1-d0 != 1 {
				t.Errorf("%d receives and %d deletes; want no receive (no sweep) and 1 delete", r1-r0, d1-d0)
			}
			if n := b.count(t, b.poison); n != 0 {
				t.Errorf("%d poison messages left, want 0", n)
			}
		})
		t.Run(tc.name+"/stale receipt", func(t *testing.T) {
			b := setup(t)
			msg := b.poisonNow(t, "c3RhbGU=", "archive", "permanent: bad args")
			// Another consumer of the poison queue receives it and lets it go.
			got, err := b.poison.Receive(b.ctx, 1, time.Second)
			if err != nil || len(got) != 1 {
				t.Fatalf("receive from the poison queue: %v, %v", got, err)
			}
			b.clock.Advance(2 * time.Second)
			r0, _ := queueCalls(b)
			if err := tc.remove(b, msg.ID); err != nil {
				t.Fatal(err)
			}
			if r1, _ := queueCalls(b); r1 == r0 {
				t.Error("no receive: the stale receipt did not fall back to the sweep")
			}
			if n := b.count(t, b.poison); n != 0 {
				t.Errorf("%d poison messages left, want 0", n)
			}
		})
		t.Run(tc.name+"/unnoted send", func(t *testing.T) {
			b := setup(t)
			msg := b.poisonNow(t, "dW5ub3RlZA==", "archive", "permanent: bad args")
			// A second Move of the same message crashed after its send,
			// before noting it: the record counts two sends, notes one.
			e := b.entity(t, msg.ID)
			e.Properties[propPoisonSends] = int64(2)
			if _, err := b.store.Tables().UpdateEntity(b.ctx, TableName(sourceName), e, storeadapter.Replace, e.ETag); err != nil {
				t.Fatal(err)
			}
			text, err := encodeMessage(Summary{MessageID: msg.ID, Queue: sourceName}, "dW5ub3RlZA==", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.poison.Send(b.ctx, text, storeadapter.SendOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := tc.remove(b, msg.ID); err != nil {
				t.Fatal(err)
			}
			if n := b.count(t, b.poison); n != 0 {
				t.Errorf("%d poison messages left, want 0 (the unnoted one too)", n)
			}
		})
	}
}

// TestMoveNotesAtMostMaxPoisonRefs: a message moved more often than a
// record notes poison messages (retried moves) leaves the rest unknown,
// and Delete sweeps for them.
func TestMoveNotesAtMostMaxPoisonRefs(t *testing.T) {
	b := setup(t)
	msg := b.deliver(t, "cmV0cmllZA==")
	for range maxPoisonRefs + 1 {
		if err := b.m.Move(b.ctx, b.failure(msg, "archive", "boom"), msg.PopReceipt, "permanent: bad args"); err != nil {
			t.Fatal(err)
		}
	}
	e := b.entity(t, msg.ID)
	if refs, known := poisonRefs(e); known || len(refs) != maxPoisonRefs || e.Properties[propPoisonSends] != int64(maxPoisonRefs+1) {
		t.Fatalf("record notes %d poison messages (all known: %v) of %v sends; want %d, not all", len(refs), known, e.Properties[propPoisonSends], maxPoisonRefs)
	}
	if err := b.m.Delete(b.ctx, msg.ID); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, b.poison); n != 0 {
		t.Errorf("%d poison messages left, want 0", n)
	}
}

// TestRemoveAfterNotFoundReceipt: Azure's documentation has Delete Message
// answer 404 when no message holds the receipt (Azurite answers 400
// PopReceiptMismatch), so a 404 on the noted receipt may mean the poison
// message was received since, not that it is gone: Delete falls back to the
// sweep and the message is removed all the same.
func TestRemoveAfterNotFoundReceipt(t *testing.T) {
	var notFound atomic.Bool
	b := setupWithFault(t, func(_ context.Context, c instrument.Call) error {
		if c.Op == instrument.OpDeleteMessage && c.Name == QueueName(sourceName) && notFound.CompareAndSwap(true, false) {
			return fmt.Errorf("injected 404 for a stale receipt: %w", storeadapter.ErrNotFound)
		}
		return nil
	})
	msg := b.poisonNow(t, "NDA0", "archive", "permanent: bad args")
	notFound.Store(true)
	if err := b.m.Delete(b.ctx, msg.ID); err != nil {
		t.Fatal(err)
	}
	if notFound.Load() {
		t.Fatal("the noted receipt was never used")
	}
	if n := b.count(t, b.poison); n != 0 {
		t.Errorf("%d poison messages left after a 404 on the noted receipt, want 0 (the sweep finds it)", n)
	}
}
