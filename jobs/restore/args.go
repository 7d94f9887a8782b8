package restore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tablewrite"
)

// Kind is the envelope kind of restores.
const Kind = "restore"

// Modes of Args.Mode.
const (
	ModeInsert  = "insert"
	ModeReplace = "replace"
	ModeMirror  = "mirror"
)

// MaxManifests bounds a chain.
const MaxManifests = 100

// Args are the arguments of a restore (docs/restore.md documents them).
type Args struct {
	// Manifests are "container/path/manifest-<op>.json": one export, or a
	// chain applied in order (a full export, then its increments).
	Manifests []string `json:"manifests"`
	// Table is the target table; absent: the table the first manifest
	// exported.
	Table string `json:"table,omitempty"`
	// Mode is "insert" (the default), "replace" or "mirror".
	Mode string `json:"mode,omitempty"`
}

// Kind returns "restore".
func (Args) Kind() string { return Kind }

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if len(a.Manifests) == 0 {
		return errors.New("args.manifests: is required: one manifest (container/path/manifest-<op>.json), or a chain (a full export, then its increments, in order)")
	}
	if len(a.Manifests) > MaxManifests {
		return fmt.Errorf("args.manifests: at most %d manifests, got %d", MaxManifests, len(a.Manifests))
	}
	seen := map[string]bool{}
	for i, m := range a.Manifests {
		if _, _, err := SplitManifest(m); err != nil {
			return fmt.Errorf("args.manifests[%d]: %w", i, err)
		}
		if seen[m] {
			return fmt.Errorf("args.manifests[%d]: %q is listed twice", i, m)
		}
		seen[m] = true
	}
	if a.Table != "" {
		if err := storeadapter.ValidateTableName(a.Table); err != nil {
			return fmt.Errorf("args.table: %w", err)
		}
	}
	switch a.Mode {
	case "", ModeInsert:
		if len(a.Manifests) > 1 {
			return fmt.Errorf("args.mode: a chain of %d manifests needs mode replace: an increment holds newer versions of rows an earlier manifest wrote, which insert would skip", len(a.Manifests))
		}
	case ModeReplace:
	case ModeMirror:
		if len(a.Manifests) != 1 {
			return fmt.Errorf("args.mode: mirror needs exactly one manifest (a full export of the scope to mirror), got %d", len(a.Manifests))
		}
	default:
		return fmt.Errorf("args.mode: must be %q, %q or %q, got %q", ModeInsert, ModeReplace, ModeMirror, a.Mode)
	}
	return nil
}

// SplitManifest splits "container/path/manifest-<op>.json" into the
// container and the manifest's blob name, and checks them. Errors name the
// rule, not the field.
func SplitManifest(s string) (container, name string, err error) {
	container, name, err = tableexport.ParseTarget(s)
	if err != nil {
		return "", "", err
	}
	if base := path.Base(name); name == "" || !strings.HasPrefix(base, "manifest-") || !strings.HasSuffix(base, ".json") {
		return "", "", fmt.Errorf("%q: must be container/path/manifest-<op>.json, an export's manifest", s)
	}
	return container, name, nil
}

// writeMode is the writer's mode for a mode of Args.
func writeMode(mode string) tablewrite.Mode {
	if mode == "" || mode == ModeInsert {
		return tablewrite.Insert
	}
	return tablewrite.Replace
}

// source is a restore's manifests, read, and where their parts are.
type source struct {
	manifests []tableexport.Manifest
	blobs     []storeadapter.Blobs // the container each manifest was read from
	table     string               // the target
}

// open reads every manifest. A manifest that is missing or unreadable, or
// a chain of several tables, is a permanent error naming it.
func open(ctx context.Context, store storeadapter.Store, a Args) (source, error) {
	var s source
	for i, ref := range a.Manifests {
		container, name, err := SplitManifest(ref)
		if err != nil {
			return s, jobs.Permanent(fmt.Errorf("restore: args.manifests[%d]: %w", i, err))
		}
		b := store.Container(container)
		m, err := tableexport.ReadManifest(ctx, b, name)
		switch {
		case errors.Is(err, storeadapter.ErrNotFound):
			return s, jobs.Permanent(fmt.Errorf("restore: args.manifests[%d]: %s does not exist: %w", i, ref, err))
		case err != nil && (storeadapter.IsTransient(err) || errors.Is(err, storeadapter.ErrForbidden) || ctx.Err() != nil):
			return s, fmt.Errorf("restore: %w", err)
		case err != nil:
			return s, jobs.Permanent(fmt.Errorf("restore: args.manifests[%d]: %w", i, err))
		}
		if a.Mode == ModeMirror && m.Incremental() {
			return s, jobs.Permanentf("restore: args.manifests[%d]: %s is an incremental export (the rows written since %s): a mirror deletes every row the export lacks, so it needs a full export", i, ref, m.Since)
		}
		if i > 0 && m.Table != s.manifests[0].Table {
			return s, jobs.Permanentf("restore: args.manifests[%d]: %s exported table %s, but the chain starts with table %s: a chain is one table's exports", i, ref, m.Table, s.manifests[0].Table)
		}
		s.manifests = append(s.manifests, m)
		s.blobs = append(s.blobs, b)
	}
	s.table = a.Table
	if s.table == "" {
		s.table = s.manifests[0].Table
	}
	return s, nil
}

// scope is the range of the target a mirror reconciles: the first
// manifest's source, in the target table.
func (s source) scope() storeadapter.Range {
	src := s.manifests[0].Source
	return storeadapter.Range{Table: s.table, PK: src.PK, RKFrom: src.RKFrom, RKTo: src.RKTo}
}

// check reads part p of manifest m through and checks it against the
// manifest. Missing or damaged is permanent, naming the part.
func (s source) check(ctx context.Context, m, p int, done int64) error {
	part := s.manifests[m].Parts[p]
	err := tableexport.CheckPart(ctx, s.blobs[m], part)
	what := fmt.Sprintf("nothing of part %s was written", part.Name)
	if done > 0 {
		what = fmt.Sprintf("nothing more of part %s was used (its first %d lines were, by an earlier delivery, from the part as it was then)", part.Name, done)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tableexport.ErrDamaged) || errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrContainerNotFound):
		return jobs.Permanent(fmt.Errorf("restore: manifest %s: %s: %w", s.manifests[m].Name, what, err))
	case errors.Is(err, storeadapter.ErrContainerNotFound):
		return jobs.Permanent(fmt.Errorf("restore: manifest %s: the container of part %s is gone: %w", s.manifests[m].Name, part.Name, err))
	}
	return fmt.Errorf("restore: %w", err)
}

// changed is the error of the read that uses part p of manifest m after
// its check (tableexport.ReadCheckedPart). A part that no longer matches
// its manifest changed since the check: permanent, naming the part,
// saying what was done with its lines (did) and what to do. Any other
// error is returned as it is (a part gone since is found missing by the
// next delivery's check, before anything of it is read).
func (s source) changed(err error, m, p int, did string) error {
	if !errors.Is(err, tableexport.ErrDamaged) {
		return err
	}
	return jobs.Permanent(fmt.Errorf("restore: manifest %s: part %s changed after its check: %s; the checkpoint does not pass the part. "+
		"Check the export (enqueue export verify), then restore it again as a new operation in mode replace or mirror: %w",
		s.manifests[m].Name, s.manifests[m].Parts[p].Name, did, err))
}
