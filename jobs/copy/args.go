package copykind

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// Kind is the envelope kind of copies.
const Kind = "copy"

// The modes of Args.Mode.
const (
	// ModeInsert adds the rows the target lacks; a row it holds is left
	// as it is and counted skipped.
	ModeInsert = "insert"
	// ModeReplace upserts every row (replace, not merge).
	ModeReplace = "replace"
)

// Args are the arguments of a copy (docs/copy.md documents them). Table
// alone copies the whole table; PK one partition; PK with RKFrom and/or
// RKTo the half-open RowKey range [RKFrom, RKTo) in Azure's key order, as
// the export kind's source. From and To name accounts of the config's
// "accounts" section ("" or absent: the worker's own account). Target is
// the table written to (default: Table); Mode is "insert" (default) or
// "replace".
type Args struct {
	Table  string  `json:"table"`
	PK     *string `json:"pk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
	From   string  `json:"from,omitempty"`
	To     string  `json:"to,omitempty"`
	Target string  `json:"target,omitempty"`
	Mode   string  `json:"mode,omitempty"`
}

// Kind returns "copy".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := a.source().Validate(); err != nil {
		return fmt.Errorf("args.%w", err)
	}
	for _, f := range []struct{ field, name string }{{"from", a.From}, {"to", a.To}} {
		if f.name == "" {
			continue
		}
		if err := kit.ValidateAccountName(f.name); err != nil {
			return fmt.Errorf("args.%s: an account of the worker's config (\"\" for its own) %w", f.field, err)
		}
	}
	if a.Target != "" {
		if err := storeadapter.ValidateTableName(a.Target); err != nil {
			return fmt.Errorf("args.target: %w", err)
		}
	}
	if _, err := a.mode(); err != nil {
		return err
	}
	if a.From == a.To && strings.EqualFold(a.target(), a.Table) {
		return fmt.Errorf("args.target: the copy would write table %s onto itself (table names ignore case): give another target or another account (from, to)", a.Table)
	}
	return nil
}

// source is the range the copy reads.
func (a Args) source() storeadapter.Range {
	return storeadapter.Range{Table: a.Table, PK: a.PK, RKFrom: a.RKFrom, RKTo: a.RKTo}
}

// target is the table written to.
func (a Args) target() string { return cmp.Or(a.Target, a.Table) }

// mode is the writer's mode of Mode.
func (a Args) mode() (tablewrite.Mode, error) {
	switch a.Mode {
	case "", ModeInsert:
		return tablewrite.Insert, nil
	case ModeReplace:
		return tablewrite.Replace, nil
	}
	return 0, fmt.Errorf("args.mode: must be %q or %q, got %q", ModeInsert, ModeReplace, a.Mode)
}

// account names an account in messages: "this account" or its name.
func account(name string) string {
	if name == "" {
		return "the worker's own account"
	}
	return fmt.Sprintf("account %q", name)
}

// checkArgs are the arguments' checks that need the worker's config.
func (w *Worker) checkArgs(a Args) error {
	if a.To == "" && strings.EqualFold(a.target(), w.cfg.CheckpointTable) {
		return jobs.Permanentf("copy: args.target: %s is the copy's own checkpoint table (copy.checkpointTable)", a.target())
	}
	return nil
}
