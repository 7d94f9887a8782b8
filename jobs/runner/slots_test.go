package runner

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlotGoroutinesReused: messages started on free slots, as the loop
// starts them, run on at most limit goroutines however many there are,
// each at most limit at a time; close ends every goroutine after its
// message.
func TestSlotGoroutinesReused(t *testing.T) {
	const limit, messages = 4, 500
	var wg sync.WaitGroup
	s := newSlotGoroutines(limit, &wg)
	slots := make(chan struct{}, limit)
	var running, most, ran atomic.Int32
	for range messages {
		slots <- struct{}{} // the loop starts a message only on a free slot
		s.start(func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(50 * time.Microsecond)
			running.Add(-1)
			ran.Add(1)
			<-slots
		})
	}
	if s.started > limit {
		t.Errorf("%d goroutines started for %d messages, want at most %d", s.started, messages, limit)
	}
	s.close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("goroutines still running 5s after close")
	}
	if ran.Load() != messages || most.Load() > limit {
		t.Errorf("ran %d messages, at most %d at once; want %d, at most %d", ran.Load(), most.Load(), messages, limit)
	}
}
