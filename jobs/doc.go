// Package jobs is the contract between producers, the runner and the job
// kinds: the message envelope (Encode, DecodeEnvelope, strict decoding),
// typed arguments (Args, ParseArgs), the handler types (Worker and Job for
// one kind, Handler and Task for any kind, Middleware), the Registry with
// typed registration (Register, RegisterArgs), Permanent errors, and what a
// handler's context carries (SetResult, TraceParent).
//
// It holds no kind and no loop: the kinds live in jobs/<kind>/, their list
// in jobs/catalog, and the loop that receives, leases, acknowledges,
// retries and poisons in jobs/runner. It is written against the
// storeadapter ports only: it must not import the Azure SDK, a kind,
// jobs/kit, the catalog or the runner.
package jobs
