package clock_test

import (
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// TestFakeTimers: a timer fires when the clock passes its deadline, not
// before; Pending counts the waiting ones.
func TestFakeTimers(t *testing.T) {
	c := clock.NewFake(t0)
	early, late := c.After(time.Second), c.After(time.Minute)
	if now := <-c.After(0); !now.Equal(t0) {
		t.Fatalf("After(0) = %v, want %v at once", now, t0)
	}
	if n := c.Pending(); n != 2 {
		t.Fatalf("Pending = %d, want 2", n)
	}
	c.Advance(30 * time.Second)
	select {
	case got := <-early:
		if !got.Equal(t0.Add(30 * time.Second)) {
			t.Errorf("the timer got %v, want the clock's time %v", got, t0.Add(30*time.Second))
		}
	default:
		t.Fatal("a 1 s timer did not fire after 30 s")
	}
	select {
	case <-late:
		t.Fatal("a 1 min timer fired after 30 s")
	default:
	}
	c.Set(t0.Add(time.Hour))
	<-late
	if n := c.Pending(); n != 0 || !c.Now().Equal(t0.Add(time.Hour)) {
		t.Errorf("Pending = %d, Now = %v; want 0 and %v", n, c.Now(), t0.Add(time.Hour))
	}
}

// TestBlockUntil returns once enough timers are pending, and fails at its
// deadline instead of hanging.
func TestBlockUntil(t *testing.T) {
	c := clock.NewFake(t0)
	go c.After(time.Second)
	if err := c.BlockUntil(1, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.BlockUntil(2, time.Now().Add(20*time.Millisecond)); err == nil {
		t.Fatal("BlockUntil(2) with one timer returned nil; want an error at the deadline")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("BlockUntil took %v past a 20 ms deadline", took)
	}
}
