package blobsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// offload is the offload mode (see Worker).
func (w *Worker) offload(ctx context.Context, a Args) (Result, error) {
	res := Result{Mode: ModeOffload}
	tc := w.cfg.Tables.Table(a.Table)
	container, containerField := a.Container, "args.container"
	if container == "" && tc != nil {
		container, containerField = tc.Container, fmt.Sprintf("blobsync.tables[%s].container", tc.Table)
	}
	if container == "" {
		return res, jobs.Permanentf("args.container: is required: table %s has no blobsync.tables entry", a.Table)
	}
	prefix := w.cfg.Tables.PrefixFor(a.Table, container)
	if err := managedNameFits(prefix, a.Table, a.PK, a.RK, a.Property); err != nil {
		return res, jobs.Permanent(err)
	}
	blobs := w.Store.Container(container)
	for round := 0; round < w.cfg.MaxConflicts; round++ {
		e, err := w.read(ctx, a)
		if errors.Is(err, errEntityGone) {
			res.Gone = true
			return res, nil
		}
		if err != nil {
			return res, err
		}
		props, skipped, err := pick(e, a, tc)
		if err != nil {
			return res, err
		}
		res.Skipped = skipped
		if len(props) == 0 {
			res.Already = len(skipped) == 0
			return res, nil
		}
		// The entity as it will be written is checked before any blob is
		// put, with a stand-in for each reference's ETag (the put gives
		// the real one), so a refused replace leaves no blob behind.
		next := e.Clone()
		refs := map[string]largeentity.Ref{}
		data := map[string][]byte{}
		for _, p := range props {
			d, typ := valueBytes(e.Properties[p])
			sum := largeentity.Digest(d)
			ctype := largeentity.ContentTypeBinary
			if typ == storeadapter.EdmString {
				ctype = largeentity.ContentTypeString
			}
			data[p] = d
			refs[p] = largeentity.Ref{V: largeentity.RefVersion, Container: container, Name: largeentity.BlobName(prefix, a.Table, a.PK, a.RK, p, sum), Length: int64(len(d)),
				ContentType: ctype, SHA256: sum, ETag: etagStandIn, Type: typ.String(), Mode: ModeOffload}
			setRef(next, p, refs[p])
		}
		props, err = fitOffload(a, tc, e, next, props, &res)
		if err != nil {
			return res, err
		}
		if len(props) == 0 {
			return res, nil
		}
		var previous []largeentity.Ref
		kept := 0
		for _, p := range props {
			ref := refs[p]
			etag, err := blobs.Put(ctx, ref.Name, data[p], storeadapter.PutOptions{ContentType: ref.ContentType})
			if err != nil {
				return res, missingContainer(fmt.Errorf("blobsync: put %s/%s: %w", container, ref.Name, err), containerField, container)
			}
			ref.ETag = etag
			setRef(next, p, ref)
			if old, ok, _ := largeentity.RefOf(e, p); ok {
				w.sortPrevious(a.Table, a.PK, a.RK, p, old, ref, &previous, &kept)
			}
		}
		if err := storeadapter.ValidateEntity(next); err != nil {
			return res, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid: %w", offloadField(a, tc), strings.Join(props, ", "), a.PK, a.RK, err)
		}
		lost, err := w.replace(ctx, a.Table, next, e.ETag)
		if err != nil {
			return res, err
		}
		if lost {
			res.Rounds++
			continue
		}
		res.Properties = props
		res.PreviousKept += kept
		return res, w.deletePrevious(ctx, &res, previous)
	}
	return res, fmt.Errorf("blobsync: %s %s/%s %w", a.Table, a.PK, a.RK, errKeptChanging)
}

// etagStandIn stands for a reference's ETag while the entity is checked
// before the put: longer than Azure's (about 20 characters, quoted).
var etagStandIn = `"` + strings.Repeat("0", 62) + `"`

// setRef replaces property p of e by its reference.
func setRef(e storeadapter.Entity, p string, ref largeentity.Ref) {
	delete(e.Properties, p)
	e.Properties[largeentity.RefPrefix+p] = ref.String()
}

// offloadField names what chose an offload's properties: args.property,
// or the table's config entry.
func offloadField(a Args, tc *largeentity.TableConfig) string {
	if a.Property != "" || tc == nil {
		return "args.property"
	}
	return fmt.Sprintf("blobsync.tables[%s].properties", tc.Table)
}

// fitOffload checks next, the entity an offload of props would write
// (e with each of props replaced by its reference), against Azure's
// entity rules before anything is written. A reference can be larger than
// the value it replaces (a short declared property), so near 1 MiB the
// replace would be refused: a property named by args.property is then a
// permanent error naming it; of properties chosen by the config, those
// whose reference is larger than their value are put back in next,
// skipped and reported in res.Skipped, and the rest (which only shrink the
// entity) go on. It returns the properties to offload.
func fitOffload(a Args, tc *largeentity.TableConfig, e, next storeadapter.Entity, props []string, res *Result) ([]string, error) {
	err := storeadapter.ValidateEntity(next)
	if err == nil {
		return props, nil
	}
	if !errors.Is(err, storeadapter.ErrTooLarge) || a.Property != "" {
		return nil, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid (a reference can be larger than a short value): %w",
			offloadField(a, tc), strings.Join(props, ", "), a.PK, a.RK, err)
	}
	var keep []string
	for _, p := range props {
		refSize, valSize := propertySize(largeentity.RefPrefix+p, next.Properties[largeentity.RefPrefix+p]), propertySize(p, e.Properties[p])
		if refSize > valSize {
			delete(next.Properties, largeentity.RefPrefix+p)
			next.Properties[p] = e.Properties[p]
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (its reference, %d bytes, is larger than its value, %d bytes, and the entity would pass %d bytes)",
				p, refSize, valSize, storeadapter.MaxEntityBytes))
			continue
		}
		keep = append(keep, p)
	}
	if err := storeadapter.ValidateEntity(next); err != nil {
		return nil, jobs.Permanentf("%s: offloading %s would make entity %s/%s invalid: %w", offloadField(a, tc), strings.Join(keep, ", "), a.PK, a.RK, err)
	}
	return keep, nil
}

// propertySize is the size one property adds to an entity as Azure counts
// it against the 1 MiB limit.
func propertySize(name string, v any) int {
	return storeadapter.EntitySize(storeadapter.Entity{Properties: map[string]any{name: v}}) - storeadapter.EntitySize(storeadapter.Entity{})
}

// sortPrevious files the reference old, which an entity held for p before
// this job replaced it by cur, as a blob to delete after the replace (into
// previous) or one to leave (kept). Only a blob blobsync owns for this
// very property is deleted: a reference of mode offload whose name, parsed
// with the prefix in force for its container, is the managed name of
// (table, pk, rk, p), and which is not the blob cur names. Any other
// previous reference is left alone: an attached blob is the
// application's, and a reference copied from another entity (the
// application copied the entity to a new key, or the archive moved it)
// names that entity's blob, which the other entity may still reference.
func (w *Worker) sortPrevious(table, pk, rk, p string, old, cur largeentity.Ref, previous *[]largeentity.Ref, kept *int) {
	if old.Container == cur.Container && old.Name == cur.Name {
		return // the same blob: nothing was replaced
	}
	m, ok := largeentity.ParseBlobName(w.cfg.Tables.PrefixFor(table, old.Container), old.Name)
	if old.Mode == ModeOffload && ok && strings.EqualFold(m.Table, table) && m.PK == pk && m.RK == rk && m.Property == p {
		*previous = append(*previous, old)
		return
	}
	*kept++
}

// pick returns the properties an offload moves now, sorted: args.property,
// or the table's declared properties and those over its offloadOver. A
// property over offloadOver whose name is too long for a TkBlob_
// reference is skipped and reported (skipped), not an error: the others
// still move.
func pick(e storeadapter.Entity, a Args, tc *largeentity.TableConfig) (props, skipped []string, err error) {
	if a.Property != "" {
		v, ok := e.Properties[a.Property]
		if !ok {
			if _, has := e.Properties[largeentity.RefPrefix+a.Property]; has {
				return nil, nil, nil // offloaded already
			}
			return nil, nil, jobs.Permanentf("args.property: property %s does not exist in %s %s/%s", a.Property, a.Table, a.PK, a.RK)
		}
		if _, ok := movable(v); !ok {
			return nil, nil, jobs.Permanentf("args.property: %s is %s: only Edm.String and Edm.Binary properties can be offloaded", a.Property, largeentity.TypeName(v))
		}
		return []string{a.Property}, nil, nil
	}
	if tc == nil {
		return nil, nil, jobs.Permanentf("args.property: is required: table %s has no blobsync.tables entry declaring properties", a.Table)
	}
	var out []string
	for _, p := range tc.Properties {
		v, ok := e.Properties[p]
		if !ok {
			continue
		}
		if _, ok := movable(v); !ok {
			return nil, nil, jobs.Permanentf("blobsync.tables[%s].properties: %s is %s in %s/%s: only Edm.String and Edm.Binary properties can be offloaded",
				tc.Table, p, largeentity.TypeName(v), a.PK, a.RK)
		}
		out = append(out, p)
	}
	if tc.OffloadOver > 0 {
		for p, v := range e.Properties {
			n, ok := movable(v)
			if !ok || n <= tc.OffloadOver || strings.HasPrefix(p, largeentity.RefPrefix) || slices.Contains(out, p) {
				continue
			}
			if err := largeentity.CheckProperty(p); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s (over offloadOver, but %v)", p, err))
				continue
			}
			out = append(out, p)
		}
	}
	slices.Sort(out)
	slices.Sort(skipped)
	return out, skipped, nil
}

// movable reports whether a value can live in a blob (String or Binary)
// and its size there in bytes.
func movable(v any) (int64, bool) {
	switch x := v.(type) {
	case string:
		return int64(len(x)), true
	case []byte:
		return int64(len(x)), true
	}
	return 0, false
}

// valueBytes returns a String or Binary value's bytes and its type.
func valueBytes(v any) ([]byte, storeadapter.EdmType) {
	if s, ok := v.(string); ok {
		return []byte(s), storeadapter.EdmString
	}
	return v.([]byte), storeadapter.EdmBinary
}

// deletePrevious deletes previous offloaded blobs the entity no longer
// names, each If-Match the ETag its reference recorded.
func (w *Worker) deletePrevious(ctx context.Context, res *Result, previous []largeentity.Ref) error {
	for _, old := range previous {
		err := w.Store.Container(old.Container).Delete(ctx, old.Name, old.ETag)
		switch {
		case err == nil:
			res.PreviousDeleted++
		case errors.Is(err, storeadapter.ErrPreconditionFailed), errors.Is(err, storeadapter.ErrNotFound):
			res.PreviousKept++
		default:
			return fmt.Errorf("blobsync: delete previous blob %s/%s: %w", old.Container, old.Name, err)
		}
	}
	return nil
}
