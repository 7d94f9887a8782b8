// Package stopsignal catches SIGINT and SIGTERM from the moment it is
// initialised, before the packages a command imports and before main:
// a process started and stopped within milliseconds (a container job
// cancelled at once, a test) would otherwise die of the signal while the
// Go runtime still initialises the SDKs, instead of stopping cleanly. It
// imports nothing but the standard library's signal support, so it is
// initialised as early as the runtime allows; a command that imports it
// reads the signals from C.
//
// It must not import anything but the standard library: it runs before
// every other package is initialised.
package stopsignal
