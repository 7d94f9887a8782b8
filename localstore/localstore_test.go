package localstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/storetest"
)

// TestContract runs the shared contract suite against localstore. Every
// case gets its own store on its own fake clock, so cases that move time
// cannot disturb each other.
func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		clock := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 123456789, time.UTC))
		return storetest.Harness{
			Store:   localstore.New(localstore.Options{Clock: clock}),
			Advance: clock.Advance,
			Now:     clock.Now,
		}
	})
}

// TestExpiredMessagesCountedUntilCollected: like Azure, ApproximateCount
// keeps expired messages until the garbage collection ExpiredCountDelay
// after they expired, even once a receive or peek has passed them by.
func TestExpiredMessagesCountedUntilCollected(t *testing.T) {
	ctx := context.Background()
	clock := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))
	q := localstore.New(localstore.Options{Clock: clock}).Queue("work")
	if err := q.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{time.Minute, time.Minute, storeadapter.NeverExpire} {
		if _, err := q.Send(ctx, "m", storeadapter.SendOptions{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(when string, want int) {
		t.Helper()
		if n, err := q.ApproximateCount(ctx); err != nil || n != want {
			t.Errorf("%s: ApproximateCount = %d, %v; want %d", when, n, err, want)
		}
	}
	clock.Advance(time.Minute)
	count("as two messages expire", 3)
	if msgs, err := q.Receive(ctx, 32, time.Hour); err != nil || len(msgs) != 1 {
		t.Fatalf("Receive after the TTL = %d messages, %v; want the one that never expires", len(msgs), err)
	}
	count("after a receive passed the expired ones by", 3)
	clock.Advance(localstore.ExpiredCountDelay - time.Second)
	count("a second before the collection", 3)
	clock.Advance(time.Second)
	count("after the collection", 1)
}
