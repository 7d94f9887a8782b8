// Package instrument wraps a storeadapter.Store so that every call of every
// Tables, Queue and Blobs method passes through one place, named by a typed
// Op after the interface method. There it can be observed (its latency and
// error, for counts, logs and metrics: see Observer and Counts), delayed (an
// injected round trip: see Options.Latency) and failed or held (see
// Options.Fault), so tests can inject storage errors and build
// interleavings, and benchmarks can run the in-process store at Azure's
// speed.
//
// The wrapper adds no behaviour of its own: every method keeps the wrapped
// store's error contract, and an injected error is returned exactly as the
// hook gave it, so tests can inject storeadapter.ErrUnavailable and the
// like. It must not import anything but the standard library and
// storeadapter.
package instrument
