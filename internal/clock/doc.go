// Package clock is tablekeeper's one time source: Real, the wall clock, and
// Fake, a manual clock for tests whose timers fire only when the test moves
// it. The runner, the poison recorder and localstore take their time from
// it (the latter two as a func() time.Time: pass Clock.Now).
//
// It depends on the standard library only and must not grow anything but
// time: no host names, no scheduling, no global clock. It is internal to the
// module: tests and commands of tablekeeper use it, other modules cannot.
package clock
