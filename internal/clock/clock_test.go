package clock_test

import (
	"context"
	"errors"
	"runtime"
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

// TestSleep: Sleep waits on the clock it is given (a fake one only moves
// when the test moves it), on the wall clock when given none, and returns
// the context's error when it ends first or has ended already.
func TestSleep(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(ctx, fake, time.Minute) }()
	for fake.Pending() == 0 {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		t.Fatalf("Sleep on a fake clock returned %v before the clock moved", err)
	default:
	}
	fake.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Errorf("Sleep after the clock moved = %v", err)
	}

	start := time.Now()
	if err := clock.Sleep(ctx, nil, 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep on the wall clock = %v after %v, want nil after 20ms", err, time.Since(start))
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	fired := clock.NewFake(time.Time{})
	if err := clock.Sleep(cancelled, fired, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("clock.Sleep(0) on an ended context = %v, want context.Canceled", err)
	}
	if err := clock.Sleep(cancelled, nil, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel2()
	if err := clock.Sleep(short, fake, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep past its context's deadline = %v, want context.DeadlineExceeded", err)
	}
	if clock.Or(nil) != (clock.Real{}) || clock.Or(fake) != clock.Clock(fake) {
		t.Error("Or: nil is not Real, or a clock is not kept")
	}
}

// TestAutoAdvance: each reading moves the clock by the step first, and
// fires the timers it passes; a zero step stops it.
func TestAutoAdvance(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(t0).AutoAdvance(time.Second)
	timer := c.After(2 * time.Second)
	if got := c.Now(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("first Now = %v, want %v", got, t0.Add(time.Second))
	}
	if got := c.Now(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("second Now = %v, want %v", got, t0.Add(2*time.Second))
	}
	select {
	case <-timer:
	default:
		t.Fatal("a timer the readings passed did not fire")
	}
	c.AutoAdvance(0)
	if a, b := c.Now(), c.Now(); !a.Equal(b) {
		t.Errorf("readings after AutoAdvance(0) differ: %v, %v", a, b)
	}
}
