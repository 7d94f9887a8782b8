// Package clock is tablekeeper's one time source: Real, the wall clock, and
// Fake, a manual clock for tests whose timers fire only when the test moves
// it, and Sleep, the one sleep of the tree. Every component that reads the
// time takes a Clock (nil meaning Real): the runner, the job kinds through
// the catalog (jobs/kit.Deps.Clock), the libraries they use, the poison
// recorder, localstore and the commands.
//
// It must not import anything but the standard library, and must not grow
// anything but time: no host names, no scheduling, no global clock. It is internal to the
// module: tests and commands of tablekeeper use it, other modules cannot.
package clock
