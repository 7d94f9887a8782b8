// Package console is the operators' web console: server-rendered pages
// (html/template, assets embedded with go:embed, no JavaScript needed) over
// the same APIs the enqueue command uses. Overview shows every queue with
// its count and oldest message and, from the workers' metrics, throughput,
// failures and continuations per kind over the last hour; Poison shows the
// poisoned messages by group, page by page, and each record with its
// envelope, attempts and requeue history; Operations shows the checkpoints
// of long jobs; Indexes and exports runs index checks and export
// verifications on demand.
//
// It is read-only unless Config.AllowActions: then requeue, delete and
// purge are offered, each shown as a dry run first, confirmed with a
// CSRF-protected form and logged with who asked and what it did. With
// Config.Token set, every request needs the token (a bearer header, or the
// cookie the login form sets). Every error it shows goes through
// Config.Redact, so no page shows a credential.
//
// It is mounted by `enqueue console` and, read-only, on the worker's -http
// server. It must not import a kind, the catalog, jobs/kit, localstore or
// the Azure SDK: it reads storage through the storeadapter ports (the
// command hands it a store) and the poison, indexes and tableexport
// libraries.
package console
