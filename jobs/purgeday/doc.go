// Package purgeday is the "purgeday" job kind: the high-volume delete
// pattern of the Azure table design guide. Application writers keep each
// day's entities in their own table, <prefix>YYYYMMDD (see
// tablepatterns/daytable); a purgeday job lists the prefix's tables and
// deletes every day older than its cut-off with one DeleteTable each,
// optionally exporting each day to blobs first (the shared exporter,
// tablepatterns/tableexport, its manifest verified before the delete). Its
// arguments (Args), its config section (Config), the plan both the worker
// and the CLI compute (MakePlan) and its Worker (see Worker for the steps
// and why every crash position converges) live here.
//
// It is written against the storeadapter ports, the idempotent packages
// and the jobs contract only: it must not import the Azure SDK, the
// runner or another kind.
package purgeday
