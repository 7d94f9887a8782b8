package blobsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// attach is the attach mode (see Worker).
func (w *Worker) attach(ctx context.Context, a Args) (Result, error) {
	res := Result{Mode: ModeAttach}
	if p, ok := w.cfg.Tables.ManagedIn(a.Container, a.Blob); ok {
		return res, jobs.Permanentf("args.blob: %s is a name of blobsync's managed layout (%s<table>/<pk>/<rk>/<property>/<sha256>) in container %s: "+
			"blobsync deletes such blobs when their own entity's property moves on, so they cannot be attached; copy the blob to a name of your own",
			a.Blob, p, a.Container)
	}
	blobs := w.Store.Container(a.Container)
	// previous are the offloaded blobs the entity named before a replace
	// of this run succeeded; a later round may replace the run's own
	// reference, so they are kept across rounds.
	var previous []largeentity.Ref
	kept := 0
	for round := 0; round < w.cfg.MaxConflicts; round++ {
		h, err := largeentity.HashBlob(ctx, blobs, a.Blob, nil, -1)
		switch {
		case errors.Is(err, storeadapter.ErrContainerNotFound):
			return res, jobs.Permanentf("args.container: container %s does not exist", a.Container)
		case errors.Is(err, storeadapter.ErrNotFound):
			return res, jobs.Permanentf("args.blob: blob %s does not exist in container %s", a.Blob, a.Container)
		case err != nil:
			return res, fmt.Errorf("blobsync: read %s/%s: %w", a.Container, a.Blob, err)
		}
		e, err := w.read(ctx, a)
		if errors.Is(err, errEntityGone) {
			res.Gone = true
			return res, w.deletePrevious(ctx, &res, previous)
		}
		if err != nil {
			return res, err
		}
		cur, hasRef, _ := largeentity.RefOf(e, a.Property)
		v, inline := e.Properties[a.Property]
		if _, ok := movable(v); inline && !ok {
			return res, jobs.Permanentf("args.property: %s is %s in %s %s/%s: only an Edm.String or Edm.Binary property can be replaced by a blob reference",
				a.Property, largeentity.TypeName(v), a.Table, a.PK, a.RK)
		}
		if hasRef && !inline && cur.Container == a.Container && cur.Name == a.Blob && largeentity.SameETag(cur.ETag, h.Props.ETag) && cur.SHA256 == h.Sum {
			res.Already = len(previous) == 0 // else this run attached it in an earlier round
			if !res.Already {
				res.Properties = []string{a.Property}
			}
			res.PreviousKept += kept
			return res, w.deletePrevious(ctx, &res, previous)
		}
		typ := storeadapter.EdmBinary.String()
		if v, ok := e.Properties[a.Property]; ok {
			if _, isString := v.(string); isString {
				typ = storeadapter.EdmString.String()
			}
		} else if hasRef {
			typ = cur.Type
		}
		next := e.Clone()
		ref := largeentity.Ref{V: largeentity.RefVersion, Container: a.Container, Name: a.Blob, Length: h.Length,
			ContentType: h.Props.ContentType, SHA256: h.Sum, ETag: h.Props.ETag, Type: typ, Mode: ModeAttach}
		setRef(next, a.Property, ref)
		if err := storeadapter.ValidateEntity(next); err != nil {
			return res, jobs.Permanentf("args.property: attaching %s would make entity %s/%s invalid: %w", a.Property, a.PK, a.RK, err)
		}
		lost, err := w.replace(ctx, a.Table, next, e.ETag)
		if err != nil {
			return res, err
		}
		if lost {
			res.Rounds++
			continue
		}
		if hasRef {
			w.sortPrevious(a.Table, a.PK, a.RK, a.Property, cur, ref, &previous, &kept)
		}
		now, err := blobs.Properties(ctx, a.Blob)
		if err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
			return res, fmt.Errorf("blobsync: read %s/%s: %w", a.Container, a.Blob, err)
		}
		if err != nil || !largeentity.SameETag(now.ETag, h.Props.ETag) {
			res.Rounds++ // the blob changed (or went) since it was hashed: again from its current state
			continue
		}
		res.Properties = []string{a.Property}
		res.PreviousKept += kept
		return res, w.deletePrevious(ctx, &res, previous)
	}
	return res, fmt.Errorf("blobsync: %s %s/%s or blob %s/%s %w", a.Table, a.PK, a.RK, a.Container, a.Blob, errKeptChanging)
}
