// Package restore is the "restore" job kind: its arguments (Args, with
// their strict validation), its section of the config file (Config) and
// its Worker, which writes an export (or a chain: a full export, then its
// increments) back into a table from the manifests tableexport wrote,
// checking every part's length and SHA-256 before anything of it is
// written, through the shared batch writer (tablepatterns/tablewrite), and
// in mirror mode deletes the target's rows in the exported scope that the
// export does not hold. See Worker for the steps and why every crash
// position converges; Plan counts what a restore would do without
// writing.
//
// It is written against the storeadapter ports, the idempotent package,
// the tablepatterns libraries and the jobs contract only: it must not
// import the Azure SDK, the runner or another kind.
package restore
