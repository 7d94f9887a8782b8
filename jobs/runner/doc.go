// Package runner is tablekeeper's worker loop: it receives messages from
// the work queue, keeps each one's lease while its job runs, dispatches it
// through the registry's middleware to its handler, classifies the outcome
// in one table (see classify) and acknowledges, retries, releases or
// poisons the message. Observers hear every step (logging and Stats are
// two of them).
//
// It knows no job kind (they come through a jobs.Registry) and parks
// failures through the Poisoner interface. It must not import the Azure
// SDK, a kind, or cmd/; it takes its clock, logger and host name from
// Config.
package runner
