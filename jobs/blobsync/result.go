package blobsync

import (
	"fmt"
	"strings"
)

// Result is what a blobsync job did.
type Result struct {
	Mode string
	// Properties are the properties this run offloaded or attached
	// (offload, attach), sorted.
	Properties []string
	// Already is set when the entity held the references already.
	Already bool
	// Rounds counts the entity writes lost to other writers and redone.
	Rounds int
	// PreviousDeleted counts previous offloaded blobs deleted after the
	// entity stopped naming them; PreviousKept previous references whose
	// blobs were left: gone or written again since (reconcile collects
	// those), or not this property's own managed blob (an attached blob, a
	// reference copied from another entity).
	PreviousDeleted, PreviousKept int
	// Skipped names the properties an offload without args.property
	// left inline, each with why: a name too long for a TkBlob_ reference,
	// or a reference larger than its value in an entity near 1 MiB.
	Skipped []string
	// Gone is set when the entity does not exist (offload, attach): the
	// application deleted it after sending the job, so there is nothing to
	// do, as an archive takes a source already moved. A blob an earlier
	// round of an offload put for it is an orphan that a reconcile collects
	// after its grace period.
	Gone bool
	// Reconcile holds the counts of a reconcile.
	Reconcile ReconcileCounts
}

// ReconcileCounts are what one run of a reconcile found and repaired
// (a resumed reconcile counts from where it resumed).
type ReconcileCounts struct {
	// Entities read in phase 1; References checked (into the container);
	// Foreign references to other containers (not checked); Invalid
	// TkBlob_ properties that do not parse (reported).
	Entities, References, Foreign, Invalid int
	// Missing references whose blob is gone; Cleared of those removed
	// (onMissing "clear"); Refreshed references given the blob's current
	// ETag (and, for attach, hash, length and content type); Corrupt
	// offloaded blobs whose content no longer matches their hash
	// (reported, not changed); Unsettled entities that kept changing;
	// Refused entities whose repair would break Azure's entity rules (a
	// refreshed reference pushing it past 1 MiB: reported, not written).
	Missing, Cleared, Refreshed, Corrupt, Unsettled, Refused int
	// NoTable is set when the table does not exist: phase 1 had nothing
	// to check, and phase 2 collected the table's old managed blobs.
	NoTable bool
	// Blobs listed in phase 2; Orphans deleted; Young blobs kept for
	// the grace period; Kept blobs their entity references; Unparsed
	// names not of the managed layout (left alone); Raced deletes that
	// found the blob gone or written again (left).
	Blobs, Orphans, Young, Kept, Unparsed, Raced int
	// Problems names up to MaxProblems findings (missing, corrupt,
	// invalid, unsettled), "pk/rk property: what".
	Problems []string
}

// MaxProblems bounds ReconcileCounts.Problems.
const MaxProblems = 20

// String summarises the result in one line (the job's result text).
func (r Result) String() string {
	switch r.Mode {
	case ModeOffload, ModeAttach:
		verb := map[string]string{ModeOffload: "offloaded", ModeAttach: "attached"}[r.Mode]
		var s string
		switch {
		case r.Gone:
			s = "nothing " + verb + ": the entity does not exist (deleted since the job was sent); a reconcile collects any blob left for it"
		case len(r.Properties) == 0 && len(r.Skipped) > 0:
			s = "nothing " + verb
		case r.Already || len(r.Properties) == 0:
			s = "already done"
		default:
			s = verb + " " + strings.Join(r.Properties, ", ")
		}
		if len(r.Skipped) > 0 {
			s += "; skipped " + strings.Join(r.Skipped, ", ")
		}
		if r.PreviousDeleted > 0 {
			s += fmt.Sprintf("; deleted %d previous blob(s)", r.PreviousDeleted)
		}
		if r.PreviousKept > 0 {
			s += fmt.Sprintf("; left %d previous blob(s) (gone, rewritten, or not this property's own)", r.PreviousKept)
		}
		if r.Rounds > 0 {
			s += fmt.Sprintf("; %d round(s) lost to concurrent writers", r.Rounds)
		}
		return s
	case ModeReconcile:
		c := r.Reconcile
		s := fmt.Sprintf("checked %d references in %d entities: %d missing (%d cleared), %d refreshed, %d corrupt, %d invalid; "+
			"%d blobs: %d orphans deleted, %d young kept, %d referenced, %d not managed",
			c.References, c.Entities, c.Missing, c.Cleared, c.Refreshed, c.Corrupt, c.Invalid,
			c.Blobs, c.Orphans, c.Young, c.Kept, c.Unparsed)
		if c.NoTable {
			s = "table does not exist; " + s
		}
		if c.Unsettled > 0 {
			s += fmt.Sprintf("; %d entities kept changing", c.Unsettled)
		}
		if c.Refused > 0 {
			s += fmt.Sprintf("; %d repairs not written (entity too large)", c.Refused)
		}
		if len(c.Problems) > 0 {
			s += "; " + strings.Join(c.Problems, "; ")
		}
		return s
	}
	return ""
}
