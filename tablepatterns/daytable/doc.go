// Package daytable names, recognises and creates per-day tables: the
// high-volume delete pattern of the Azure table design guide, where each
// day's entities live in their own table (LoginAttempts20261121) so that
// deleting a day is one DeleteTable instead of a scan and thousands of
// entity deletes. Application writers use Name and Ensure; the purgeday
// job kind uses ValidatePrefix and Parse to find the days to delete.
//
// # Day names are never reused
//
// A deleted table's name cannot be used again for a while: Azure answers
// 409 TableBeingDeleted for at least 40 seconds after a DeleteTable, and
// the design guide recommends unique table names for that reason. Day
// tables have unique names by construction: a day's name holds its date,
// so once the day is over no writer needs the name again. The purgeday
// kind deletes only days strictly before its cut-off, which is at least
// one whole day in the past (keepDays >= 1, or a before date no later
// than today), so the only names it makes unavailable are names writers
// no longer write. A late writer of an expired day (a clock far behind, a
// retry queue that held an old event for days) meets one of two things:
// TableBeingDeleted, which Ensure retries with backoff until MaxWait and
// then reports; or a fresh empty table, which the next purge deletes
// again, with whatever was written to it. Writers must therefore not
// write days older than the purge's keepDays: route or drop such events
// before they reach a day table.
//
// It is written against the storeadapter ports only: it must not import
// the Azure SDK, jobs or a kind.
package daytable
