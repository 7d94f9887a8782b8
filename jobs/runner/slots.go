package runner

import "sync"

// slotGoroutines runs the slots' messages on goroutines kept from one
// message to the next. A goroutine's stack grows while it decodes and
// handles a message (encoding/json recurses); a new goroutine per message
// grew, that is copied, its stack again every time: 8 % of the CPU per
// message at 512 slots (see BENCHMARKS.md). Only the receive loop calls
// start and close.
type slotGoroutines struct {
	work    chan func()
	started int // goroutines started; at most limit
	limit   int
	wg      *sync.WaitGroup // done when a goroutine ends, after close
	closing sync.Once
}

func newSlotGoroutines(limit int, wg *sync.WaitGroup) *slotGoroutines {
	return &slotGoroutines{work: make(chan func()), limit: limit, wg: wg}
}

// start runs f on an idle goroutine, or on a new one while fewer than
// limit were started. At the limit it waits for one to take f: the loop
// starts f only on a free slot (f frees its slot as its last step), so
// one of the limit goroutines is idle or about to be.
func (s *slotGoroutines) start(f func()) {
	if s.started < s.limit {
		select {
		case s.work <- f:
			return
		default:
		}
		s.started++
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for ; f != nil; f = <-s.work {
				f()
			}
		}()
		return
	}
	s.work <- f
}

// close ends every goroutine once it finishes its message. Run calls it
// before it waits for them, and again (a no-op then) on its way out, so
// that a panic in the loop does not leave them waiting for work.
func (s *slotGoroutines) close() { s.closing.Do(func() { close(s.work) }) }
