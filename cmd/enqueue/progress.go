package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
)

// quietFor is how long a phase of a poison command runs before a stderr
// that is no terminal hears of it, and then how often at most: a script's
// log gets one line per long phase every few seconds and none for quick
// runs.
const quietFor = 5 * time.Second

// progress returns the Progress callback of a poison requeue, delete or
// purge, which reports each phase on stderr as "<verb>: <phase> N/M". On a
// terminal it redraws one line at most every progressEvery and ends it
// with the phase's final count, so every phase stays on screen. Elsewhere
// it writes a line once a phase has run quietFor, then at most every
// quietFor, and the phase's final line if it wrote any: never one line
// per record, and nothing for a quick run.
//
// It keeps the last report for Forced: a second interrupt prints it.
func (m *Main) progress(verb string) func(poison.Progress) {
	p := &phaseLines{w: m.Stderr, verb: verb, terminal: m.isTerminal(m.Stderr), now: time.Now}
	var last atomic.Pointer[poison.Progress]
	m.setFinal(func() {
		if pr := last.Load(); pr != nil {
			fmt.Fprintf(m.Stderr, "\ninterrupted: %s: %s %d/%d so far\n", verb, pr.Phase, pr.Done, pr.Total)
		}
	})
	return func(pr poison.Progress) {
		last.Store(&pr)
		p.report(pr)
	}
}

// phaseLines draws the progress of a poison command's phases.
type phaseLines struct {
	w        io.Writer
	verb     string
	terminal bool
	now      func() time.Time

	mu      sync.Mutex
	phase   string    // the phase being reported
	started time.Time // when it began
	last    time.Time // when a line of it was last written; zero: none yet
	open    bool      // a terminal line is drawn and not ended
}

// report hears one Progress. The poison package ends every phase it
// completes with a report whose Done equals its Total.
func (p *phaseLines) report(pr poison.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if pr.Phase != p.phase {
		if p.open { // a phase that did not finish
			fmt.Fprintln(p.w)
			p.open = false
		}
		p.phase, p.started, p.last = pr.Phase, now, time.Time{}
	}
	final := pr.Total > 0 && pr.Done >= pr.Total
	count := fmt.Sprint(pr.Done)
	if pr.Total > 0 {
		count = fmt.Sprintf("%d/%d", pr.Done, pr.Total)
	}
	switch {
	case p.terminal && (final || now.Sub(p.last) >= progressEvery):
		fmt.Fprintf(p.w, "\r%s: %s %s\x1b[K", p.verb, pr.Phase, count)
		p.open = !final
		if final {
			fmt.Fprintln(p.w)
		}
	case p.terminal:
		return
	case final && !p.last.IsZero(),
		!final && now.Sub(p.started) >= quietFor && now.Sub(p.last) >= quietFor:
		fmt.Fprintf(p.w, "%s: %s %s\n", p.verb, pr.Phase, count)
	default:
		return
	}
	p.last = now
}
