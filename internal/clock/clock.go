package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a manual clock for tests: time stands still until Advance or Set
// moves it, and timers made by After fire when it passes their deadline.
// It is safe for concurrent use. Inside a testing/synctest bubble, prefer
// synctest.Wait to BlockUntil: it waits until every goroutine is blocked,
// whatever it is blocked on.
type Fake struct {
	mu     sync.Mutex
	t      time.Time
	timers []timer
	// added is closed, and replaced, whenever a timer is added.
	added chan struct{}
	// step is how far each Now moves the clock (see AutoAdvance).
	step time.Duration
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{t: t, added: make(chan struct{})} }

// Now returns the clock's time, first moving it by the AutoAdvance step
// if one is set.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.step > 0 {
		c.setLocked(c.t.Add(c.step))
	}
	return c.t
}

// AutoAdvance makes every later Now move the clock by d before it reads
// it (0 stops it), and returns c: a clock on which every reading is later
// than the one before, for tests of time budgets and distinct timestamps.
func (c *Fake) AutoAdvance(d time.Duration) *Fake {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
	return c
}

// After returns a channel that receives the clock's time once the clock
// has moved d past now (at once when d <= 0).
func (c *Fake) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.t
		return ch
	}
	c.timers = append(c.timers, timer{at: c.t.Add(d), ch: ch})
	close(c.added)
	c.added = make(chan struct{})
	return ch
}

// Advance moves the clock forward by d, firing the timers it passes.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.t.Add(d))
}

// Set moves the clock to t, firing the timers it passes.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t)
}

func (c *Fake) setLocked(t time.Time) {
	c.t = t
	kept := c.timers[:0]
	for _, w := range c.timers {
		if w.at.After(t) {
			kept = append(kept, w)
		} else {
			w.ch <- t
		}
	}
	c.timers = kept
}

// Pending returns how many timers wait for the clock to move.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending, so a test can move
// the clock knowing the code under test waits on it. It gives up, with an
// error saying how many were pending, once the wall clock reaches
// deadline: a test fails fast instead of hanging.
func (c *Fake) BlockUntil(n int, deadline time.Time) error {
	expired := time.After(time.Until(deadline))
	for {
		c.mu.Lock()
		pending, added := len(c.timers), c.added
		c.mu.Unlock()
		if pending >= n {
			return nil
		}
		select {
		case <-added:
		case <-expired:
			return fmt.Errorf("clock: %d timers pending at the deadline, want %d", pending, n)
		}
	}
}

// Or returns c, or Real when c is nil: what a component whose clock is
// optional runs on.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Sleep waits until c has moved d past now (c nil: the wall clock), or
// until ctx ends, returning its error (an ended ctx wins over a timer
// that has fired too). It is the one sleep of the tree:
// retry pauses, backoffs and waits for a name to be free all use it.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	if _, wall := Or(c).(Real); wall {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-c.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
