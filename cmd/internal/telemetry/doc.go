// Package telemetry is the worker's health and metrics: Prometheus
// counters fed by a runner.Observer and an instrument.Observer, a sampler
// of queue depth and age, the summary logged at exit, and the opt-in HTTP
// server of /healthz, /readyz and /metrics. Only the commands import it.
//
// It must not import a kind, the catalog, localstore or the Azure SDK: it
// watches the runner and the store through their observers.
package telemetry
