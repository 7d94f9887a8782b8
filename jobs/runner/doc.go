// Package runner is tablekeeper's worker loop: it receives messages from
// the work queue, keeps each one's lease while its job runs, dispatches it
// through the registry's middleware to its handler, classifies the outcome
// in one table (see classify) and acknowledges, continues, retries,
// releases or poisons the message. Observers hear every step (logging and
// Stats are two of them).
//
// Long jobs continue instead of running forever: a handler that has saved
// its progress returns jobs.ContinueLater, and the runner re-sends the
// operation as a new message (the envelope's "continued" marker one
// higher) before it deletes the delivered one. The new message starts
// with a dequeue count of 0, so a pause never counts towards
// MaxDequeueCount; a crash between the send and the delete leaves two
// messages of one operation, which both resume from the same checkpoint
// (see continueLater).
//
// It knows no job kind (they come through a jobs.Registry) and parks
// failures through the Poisoner interface. It must not import the Azure
// SDK, a kind, or cmd/; it takes its clock, logger and host name from
// Config.
package runner
