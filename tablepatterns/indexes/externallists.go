package indexes

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// tableListPartition is the PartitionKey of a table list's parts and
// markers (see markers).
func tableListPartition(ix *index, value string) string { return ix.Name + "_" + value }

// tableListBase is the RowKey base of a table list's parts.
const tableListBase = "p"

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lineMember reads the member of a list line ("" is none).
func lineMember(line string) (member, bool) {
	if line == "" {
		return member{}, false
	}
	_, _, m, err := parseListLine(line)
	return m, err == nil
}

// blobListName is the blob of a blob list's value.
func blobListName(ix *index, value string) string { return ix.source + "/" + ix.Name + "/" + value }

// applyBlob writes the lines of writes to one value's blob list: one get
// and one put If-Match, again while it loses to another writer. pre, when
// not nil, is the list already read: the first try writes from it.
func (x *Set) applyBlob(ctx context.Context, ix *index, value string, ws []write, pre *blobList) error {
	c := x.store.Container(ix.Container)
	name := blobListName(ix, value)
	for try := 1; ; try++ {
		var lines []string
		var etag string
		var err error
		if try == 1 && pre != nil {
			lines, etag = slices.Clone(pre.lines), pre.etag
		} else if lines, etag, err = readBlobList(ctx, c, name); err != nil {
			return err
		}
		changed := false
		for _, w := range ws {
			key := w.pk + "\t" + w.rk
			i := blobLine(lines, key)
			if i >= 0 {
				if cur, ok := lineMember(lines[i]); ok && !newer(&cur, w.gen) {
					continue
				}
				lines = slices.Delete(lines, i, i+1)
			}
			lines, changed = append(lines, listLine(w.pk, w.rk, member{gen: w.gen, dead: !w.live, proof: w.proof})), true
		}
		if !changed {
			return nil
		}
		keep := x.keepLine(x.graceCut())
		lines = slices.DeleteFunc(lines, func(l string) bool { return !keep(l) })
		slices.Sort(lines)
		o := storeadapter.PutOptions{ContentType: "text/plain; charset=utf-8", IfMatch: etag, IfNoneMatchAny: etag == ""}
		err = idempotent.CreateOnMissing(ctx, c.Create, func(ctx context.Context) error {
			_, err := c.Put(ctx, name, []byte(strings.Join(lines, "\n")+"\n"), o)
			return err
		})
		if err == nil || !idempotent.Lost(err) || try >= x.cfg.MaxConflicts {
			return err
		}
		if err := x.pauseUnlessReadAhead(ctx, try, pre != nil); err != nil {
			return err
		}
	}
}

// pauseUnlessReadAhead pauses before try+1 of a list's write, except after
// a first try written from the list as read ahead (see readAhead): read
// before the registration, it was most likely changed since by the settle
// of an earlier registration of the same entity, not by a writer still
// at it, so it is read again at once.
func (x *Set) pauseUnlessReadAhead(ctx context.Context, try int, readAhead bool) error {
	if try == 1 && readAhead {
		return nil
	}
	return x.pause(ctx, try)
}

// blobLine is the index in a blob list's lines of key's line (key: pk, a
// tab, rk), -1 when it has none.
func blobLine(lines []string, key string) int {
	return slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+"\t") })
}

// readBlobList reads a blob list's lines and ETag ("" when missing).
func readBlobList(ctx context.Context, c storeadapter.Blobs, name string) ([]string, string, error) {
	data, props, err := c.Get(ctx, name)
	if errors.Is(err, storeadapter.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var lines []string
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(line) > 0 {
			lines = append(lines, string(line))
		}
	}
	return lines, props.ETag, nil
}
