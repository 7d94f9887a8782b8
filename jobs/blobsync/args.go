package blobsync

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// Kind is the envelope kind of blobsync jobs.
const Kind = "blobsync"

// Modes (Args.Mode). An offload and an attach leave a reference of their
// mode (largeentity.Ref.Mode).
const (
	ModeOffload   = largeentity.ModeOffload // move a property to a blob blobsync owns
	ModeAttach    = largeentity.ModeAttach  // link a blob the application uploaded itself
	ModeReconcile = "reconcile"             // repair drift between a table and a container
)

// OnMissing values (Args.OnMissing, Config.OnMissing).
const (
	OnMissingReport = "report"
	OnMissingClear  = "clear"
)

// Args are the arguments of a blobsync job (docs/blobsync.md documents them).
// Mode selects what the job does and which fields it takes:
//
//	offload   table, pk, rk, property?, container?
//	attach    table, pk, rk, property, container, blob
//	reconcile table, pk?, container, prefix?, grace?, onMissing?
//
// A field the mode does not take is refused, naming it.
type Args struct {
	Mode      string         `json:"mode"`
	Table     string         `json:"table"`
	PK        string         `json:"pk,omitempty"`
	RK        string         `json:"rk,omitempty"`
	Property  string         `json:"property,omitempty"`
	Container string         `json:"container,omitempty"`
	Blob      string         `json:"blob,omitempty"`
	Prefix    string         `json:"prefix,omitempty"`
	Grace     *jobs.Duration `json:"grace,omitempty"`
	OnMissing string         `json:"onMissing,omitempty"`
}

// Kind returns "blobsync".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
// The grace period's lower bound (the kind's maxRunTime) is in the
// worker's config: the worker checks it, permanently, on first delivery.
func (a Args) Validate() error {
	var need, allow []string // fields the mode requires and allows besides mode and table
	switch a.Mode {
	case ModeOffload:
		need, allow = []string{"pk", "rk"}, []string{"property", "container"}
	case ModeAttach:
		need = []string{"pk", "rk", "property", "container", "blob"}
	case ModeReconcile:
		need, allow = []string{"container"}, []string{"pk", "prefix", "grace", "onMissing"}
	case "":
		return fmt.Errorf("args.mode: is required: %s, %s or %s", ModeOffload, ModeAttach, ModeReconcile)
	default:
		return fmt.Errorf("args.mode: must be %s, %s or %s, got %q", ModeOffload, ModeAttach, ModeReconcile, a.Mode)
	}
	if err := field("table", storeadapter.ValidateTableName(a.Table)); err != nil {
		return err
	}
	given := map[string]bool{"pk": a.PK != "", "rk": a.RK != "", "property": a.Property != "", "container": a.Container != "",
		"blob": a.Blob != "", "prefix": a.Prefix != "", "grace": a.Grace != nil, "onMissing": a.OnMissing != ""}
	for _, f := range need {
		if !given[f] {
			return fmt.Errorf("args.%s: is required with mode %s", f, a.Mode)
		}
	}
	for _, f := range []string{"pk", "rk", "property", "container", "blob", "prefix", "grace", "onMissing"} {
		if given[f] && !slices.Contains(need, f) && !slices.Contains(allow, f) {
			return fmt.Errorf("args.%s: is not taken by mode %s", f, a.Mode)
		}
	}
	checks := []struct {
		field string
		err   func() error
	}{
		{"pk", func() error { return storeadapter.ValidateKey("pk", a.PK) }},
		{"rk", func() error {
			if storeadapter.IsReserved(a.RK) {
				return fmt.Errorf("must not start with %q, which is reserved for tablekeeper's own rows", storeadapter.ReservedPrefix)
			}
			return storeadapter.ValidateKey("rk", a.RK)
		}},
		{"property", func() error { return largeentity.CheckProperty(a.Property) }},
		{"container", func() error { return storeadapter.ValidateContainerName(a.Container) }},
		{"blob", func() error { return storeadapter.ValidateBlobName(a.Blob) }},
		{"prefix", func() error { _, err := largeentity.CleanPrefix(a.Prefix); return err }},
		{"grace", func() error {
			if d := time.Duration(*a.Grace); d < time.Second || d > MaxGrace {
				return fmt.Errorf("must be 1s-%v (and at least the blobsync maxRunTime), got %v", MaxGrace, d)
			}
			return nil
		}},
		{"onMissing", func() error { return checkOnMissing(a.OnMissing) }},
	}
	for _, c := range checks {
		if given[c.field] {
			if err := field(c.field, c.err()); err != nil {
				return err
			}
		}
	}
	if a.Mode == ModeOffload {
		// The put would fail at run time, naming no field; the worker checks
		// again with the config's prefix.
		if err := managedNameFits("", a.Table, a.PK, a.RK, a.Property); err != nil {
			return err
		}
	}
	if a.Mode == ModeReconcile && a.Prefix != "" {
		// The listed names must fit Azure's limits.
		p, _ := largeentity.CleanPrefix(a.Prefix)
		if err := storeadapter.ValidateBlobName(largeentity.BlobName(p, a.Table, "p", "r", "P", strings.Repeat("0", 64))); err != nil {
			return field("prefix", err)
		}
	}
	return nil
}

// managedNameFits checks that the longest managed name an offload of
// (table, pk, rk) could write under prefix fits Azure's blob-name rules:
// BlobName with property (or, when it is "", a stand-in of
// largeentity.MaxPropertyChars characters: an offload without args.property may pick
// any property name blobsync moves) and a 64-digit SHA-256. Escaping can
// make a key three times longer, so keys Azure takes in an entity may not
// fit in a name. The error names args.pk, or args.rk when the row key is
// what makes the name too long.
func managedNameFits(prefix, table, pk, rk, property string) error {
	if property == "" {
		property = strings.Repeat("x", largeentity.MaxPropertyChars)
	}
	sum := strings.Repeat("0", 64)
	err := storeadapter.ValidateBlobName(largeentity.BlobName(prefix, table, pk, rk, property, sum))
	if err == nil {
		return nil
	}
	f := "pk"
	if storeadapter.ValidateBlobName(largeentity.BlobName(prefix, table, pk, "r", property, sum)) == nil {
		f = "rk"
	}
	in := ""
	if prefix != "" {
		in = fmt.Sprintf(" under prefix %q", prefix)
	}
	return fmt.Errorf("args.%s: the keys must fit a managed blob name%s (<prefix>/<table>/<pk>/<rk>/<property>/<sha256>, keys escaped): %w", f, in, err)
}

// field prefixes a validation error with its args field.
func field(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("args.%s: %w", name, err)
}

var errKeptChanging = errors.New("kept changing while blobsync worked on it; retrying later")
