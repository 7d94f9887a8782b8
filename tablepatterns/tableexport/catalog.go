package tableexport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Entry is one export found by List: its manifest, or why it could not be
// read.
type Entry struct {
	// Name is the manifest's blob name.
	Name string
	// Manifest is the parsed manifest (zero when Problem is set).
	Manifest Manifest
	// Problem says why the manifest could not be read or parsed; such an
	// entry is listed and never pruned.
	Problem string
}

// started and finished parse the manifest's times (zero when unparsable).
func (e Entry) started() time.Time  { t, _ := parseTime(e.Manifest.Started); return t }
func (e Entry) finished() time.Time { t, _ := parseTime(e.Manifest.Finished); return t }

// List returns the exports under prefix in container b: every blob named
// manifest-*.json, read and parsed, ordered by scope, then start, then
// name. It lists the prefix page by page (the parts too, whose names it
// skips) and reads each manifest once. A manifest that cannot be parsed is
// an Entry with its Problem; a storage failure is the error.
func List(ctx context.Context, b storeadapter.Blobs, prefix string) ([]Entry, error) {
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	var out []Entry
	for marker := ""; ; {
		page, err := b.List(ctx, prefix, marker)
		if err != nil {
			return nil, fmt.Errorf("tableexport: list %s/%s: %w", b.Name(), prefix, err)
		}
		for _, p := range page.Blobs {
			if base := path.Base(p.Name); !strings.HasPrefix(base, "manifest-") || !strings.HasSuffix(base, ".json") {
				continue
			}
			data, _, err := b.Get(ctx, p.Name)
			if errors.Is(err, storeadapter.ErrNotFound) {
				continue // deleted since the listing
			}
			if err != nil {
				return nil, fmt.Errorf("tableexport: read manifest %s: %w", p.Name, err)
			}
			m, err := parseManifest(data, p.Name)
			e := Entry{Name: p.Name, Manifest: m}
			if err != nil {
				e.Problem = err.Error()
			}
			out = append(out, e)
		}
		if marker = page.Next; marker == "" {
			break
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Manifest.Scope(), b.Manifest.Scope()), a.started().Compare(b.started()), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Decision is what PlanPrune decided for one export, and why.
type Decision struct {
	Entry
	Delete bool
	Reason string
}

// PlanPrune decides which exports a prune with cut (now less the days to
// keep) deletes. Per scope (Manifest.Scope), with the exports in the
// order they started:
//
//   - an export that finished at or after cut is kept;
//   - the anchor is the newest full export that started no later than the
//     oldest kept export (none kept: the newest full export). It and every
//     export that started after it are kept: restoring any kept point in
//     time applies the anchor, then the increments after it in order, so
//     those are what the kept exports depend on (an increment's lower
//     bound is its predecessor's mark, at or before the anchor's when the
//     predecessor started before the anchor);
//   - every export that finished before cut and started before the anchor
//     is deleted: no kept export needs it;
//   - a scope without a full export loses nothing: its increments may be
//     the only copy of its rows;
//   - an unreadable manifest is kept.
//
// So the newest full export of a scope, and the chain from the full export
// a kept increment starts from, are never deleted.
func PlanPrune(entries []Entry, cut time.Time) []Decision {
	var out []Decision
	scopes := map[string][]Entry{}
	var order []string
	for _, e := range entries {
		if e.Problem != "" {
			out = append(out, Decision{Entry: e, Reason: "unreadable manifest: left alone"})
			continue
		}
		s := e.Manifest.Scope()
		if _, ok := scopes[s]; !ok {
			order = append(order, s)
		}
		scopes[s] = append(scopes[s], e)
	}
	for _, s := range order {
		es := scopes[s]
		slices.SortStableFunc(es, func(a, b Entry) int { return a.started().Compare(b.started()) })
		oldestKept := -1
		for i, e := range es {
			if !e.finished().Before(cut) {
				oldestKept = i
				break
			}
		}
		anchor := -1
		for i, e := range es {
			if !e.Manifest.Incremental() && (oldestKept < 0 || i <= oldestKept) {
				anchor = i
			}
		}
		for i, e := range es {
			d := Decision{Entry: e}
			switch {
			case !e.finished().Before(cut):
				d.Reason = "finished after the cut"
			case anchor < 0:
				d.Reason = "no full export of " + s + ": its increments are kept"
			case i == anchor:
				d.Reason = "the full export the kept exports of " + s + " start from"
			case i > anchor:
				d.Reason = "in the chain after the full export " + es[anchor].Name
			default:
				d.Delete, d.Reason = true, "finished before the cut, before the full export "+es[anchor].Name
			}
			out = append(out, d)
		}
	}
	return out
}

// Deleted is what DeleteExport removed.
type Deleted struct {
	// Parts counts the parts deleted (listed and stray); Gone those
	// already gone.
	Parts, Gone int
	// Manifest is set when the manifest was deleted by this call.
	Manifest bool
}

// DeleteExport deletes an export: its listed parts, then the stray parts
// of its operation in its folder, then its manifest — the manifest last,
// so a crash leaves an export that List still finds (failing Verify) and
// the next prune finishes, never parts that no manifest names. A blob
// already gone counts as done, so it is idempotent. Parts and manifests
// are never rewritten, so each delete is unconditional; each is one call,
// bounded like every storage call.
func DeleteExport(ctx context.Context, b storeadapter.Blobs, m Manifest) (Deleted, error) {
	var d Deleted
	del := func(name string) (bool, error) {
		err := b.Delete(ctx, name, storeadapter.ETagAny)
		if errors.Is(err, storeadapter.ErrNotFound) {
			d.Gone++
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("tableexport: delete %s: %w", name, err)
		}
		return true, nil
	}
	for _, p := range m.Parts {
		ok, err := del(p.Name)
		if err != nil {
			return d, err
		}
		if ok {
			d.Parts++
		}
	}
	err := opParts(ctx, b, m, nil, func(name string) error {
		ok, err := del(name)
		if ok {
			d.Parts++
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("tableexport: delete export %s: %w", m.Name, err)
	}
	ok, err := del(m.Name)
	d.Manifest = ok
	return d, err
}
