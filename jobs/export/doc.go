// Package export is the "export" job kind: its arguments (Args, with
// their strict validation), its section of the config file (Config) and
// its Worker, which writes a table, a partition or a RowKey range to
// time-named JSON-lines blobs and a manifest through the shared exporter
// (tablepatterns/tableexport; see Worker for the steps and why every crash
// position converges). The log data pattern of the Azure table design
// guide.
//
// It is written against the storeadapter ports, the idempotent packages
// and the jobs contract only: it must not import the Azure SDK, the
// runner or another kind.
package export
