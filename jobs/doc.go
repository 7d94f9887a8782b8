// Package jobs is tablekeeper's worker: the message envelope (decode and
// strict validation), one file per job kind, the registry that maps kinds to
// handlers, and the Runner that polls the queue, keeps each message's lease,
// dispatches it and acknowledges, retries or poisons it.
//
// It is written against the storeadapter ports only and never imports the
// Azure SDK, so the same code runs on Azure and on localstore.
package jobs
