package indexes

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// A list (the index entities pattern) is kept as lines of text, one per
// member, in one or more "parts": entities of one partition whose RowKeys
// are a common base followed by a four-digit part number. A part holds its
// lines in string properties L0, L1, … of at most partChars UTF-16 units
// each, and at most partBytes bytes of lines as they travel in a
// transaction's JSON; a list that outgrows a part spills over to the next.
// The byte bound keeps a transaction within Azure's 4 MiB: a reconcile
// rewrites at most two parts (the old and the new value's) of each of at
// most MaxPartitionIndexes partition lists, 8 × 2 × 192 KiB = 3 MiB, and
// partition copies that would not fit beside them are left out (see
// reconcile). A member's line starts with its key and appears in at most
// one part: see ops for why.
var (
	partChars = storeadapter.MaxStringChars - 768
	partBytes = 192 << 10
)

// maxParts bounds the parts of one list, so that a table list's
// transaction, which touches every part, stays within 100 operations. A
// value with more members than that holds (tens of thousands) belongs in
// a rows index.
const maxParts = 60

// lineBytes is what a line adds to a part: its size in a transaction's
// JSON and a newline.
func lineBytes(line string) int { return storeadapter.JSONStringSize(line) - 2 + 1 }

// list is a list as read: its parts, with their ETags.
type list struct {
	pk, base string // the partition and the RowKey base of the parts
	parts    []*part
}

type part struct {
	number int
	etag   string // "" for a part not yet written
	lines  []string
	size   int // lineBytes of the lines
	dirty  bool
}

func (l *list) partKey(n int) string { return fmt.Sprintf("%s%04d", l.base, n) }

// readList reads every part of a list (one range query).
func readList(ctx context.Context, t storeadapter.Tables, table, pk, base string) (*list, error) {
	l := &list{pk: pk, base: base}
	f := storeadapter.And(storeadapter.PartitionEquals(pk), partRange(base))
	err := queryAll(ctx, t, table, storeadapter.Query{Filter: f}, l.addPart)
	if err != nil && !idempotent.Missing(err) {
		return nil, err
	}
	return l, nil
}

// partRange selects the parts of a list by their RowKeys: base followed by
// four digits.
func partRange(base string) storeadapter.Filter {
	return storeadapter.And(storeadapter.Compare("RowKey", storeadapter.Ge, base+"0000"), storeadapter.Compare("RowKey", storeadapter.Lt, base+":"))
}

// addPart adds a part as read to the list.
func (l *list) addPart(e storeadapter.Entity) error {
	suffix := strings.TrimPrefix(e.RowKey, l.base)
	n, err := strconv.Atoi(suffix)
	if err != nil || len(suffix) != 4 {
		return fmt.Errorf("index: list part %s/%s: not a part number", l.pk, e.RowKey)
	}
	p := &part{number: n, etag: e.ETag, lines: partLines(e)}
	for _, line := range p.lines {
		p.size += lineBytes(line)
	}
	l.parts = append(l.parts, p)
	return nil
}

// find returns the part and index of the line that starts with key+"\t"
// (or equals key), or nil.
func (l *list) find(key string) (*part, int) {
	for _, p := range l.parts {
		for i, line := range p.lines {
			if line == key || strings.HasPrefix(line, key) && line[len(key)] == '\t' {
				return p, i
			}
		}
	}
	return nil, -1
}

// line returns the member line of key, or "".
func (l *list) line(key string) string {
	if p, i := l.find(key); p != nil {
		return p.lines[i]
	}
	return ""
}

// set makes key's line the given line, adding it to the first part with
// room (a new part when none has).
func (l *list) set(key, line string) error {
	if p, i := l.find(key); p != nil {
		if p.lines[i] == line {
			return nil
		}
		p.size += lineBytes(line) - lineBytes(p.lines[i])
		p.lines[i], p.dirty = line, true
		return nil
	}
	n := lineBytes(line)
	var target *part
	for _, p := range l.parts {
		if p.size+n <= partBytes {
			target = p
			break
		}
	}
	if target == nil {
		if len(l.parts) >= maxParts {
			return fmt.Errorf("index: list %s/%s has %d parts, the most one list may have: use a rows index for so common a value: %w",
				l.pk, strings.TrimSpace(l.base), maxParts, storeadapter.ErrTooLarge)
		}
		next := 0 // the lowest free number, so numbers stay below maxParts
		for slices.ContainsFunc(l.parts, func(p *part) bool { return p.number == next }) {
			next++
		}
		target = &part{number: next}
		l.parts = append(l.parts, target)
	}
	target.lines = append(target.lines, line)
	target.size += n
	target.dirty = true
	return nil
}

// remove drops key's line, if any.
func (l *list) remove(key string) {
	if p, i := l.find(key); p != nil {
		p.size -= lineBytes(p.lines[i])
		p.lines = append(p.lines[:i], p.lines[i+1:]...)
		p.dirty = true
	}
}

// pruneAll drops the lines keep rejects from the parts, marking the parts
// it changes to be written, up to most of them.
func (l *list) pruneAll(keep func(line string) bool, most int) {
	for _, p := range l.parts {
		if !p.dirty && !slices.ContainsFunc(p.lines, func(line string) bool { return !keep(line) }) {
			continue
		}
		if most--; most < 0 {
			return
		}
		kept := p.lines[:0]
		for _, line := range p.lines {
			if keep(line) {
				kept = append(kept, line)
				continue
			}
			p.size -= lineBytes(line)
			p.dirty = true
		}
		p.lines = kept
	}
}

// ops returns the transaction that writes the list: changed parts are
// replaced (inserted when new, deleted when empty) on the ETags read, and
// with touch the unchanged ones are touched. It returns nil when nothing
// changed. A table list's fold touches (two folds of one list, of
// different markers, could otherwise add one key's line each to another
// part); a partition list need not, because every write of a key's line
// is in one transaction with that key's membership record, If-Match, so
// two writers of one key never both succeed.
func (l *list) ops(touch bool) []storeadapter.TableOp {
	changed := false
	for _, p := range l.parts {
		changed = changed || p.dirty
	}
	if !changed {
		return nil
	}
	var ops []storeadapter.TableOp
	for _, p := range l.parts {
		e := storeadapter.Entity{PartitionKey: l.pk, RowKey: l.partKey(p.number)}
		switch {
		case !p.dirty && touch:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateMerge, Entity: e, IfMatch: p.etag})
		case !p.dirty:
		case len(p.lines) == 0 && p.etag == "":
		case len(p.lines) == 0:
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: e, IfMatch: p.etag})
		default:
			e.Properties = p.properties()
			if p.etag == "" {
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: e})
			} else {
				ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: e, IfMatch: p.etag})
			}
		}
	}
	return ops
}

// properties packs the lines into L0, L1, ….
func (p *part) properties() map[string]any {
	props := map[string]any{}
	var b strings.Builder
	n, size := 0, 0
	for _, line := range p.lines {
		w := storeadapter.UTF16Len(line) + 1
		if size+w > partChars && b.Len() > 0 {
			props[fmt.Sprintf("L%d", n)] = b.String()
			b.Reset()
			n, size = n+1, 0
		}
		b.WriteString(line)
		b.WriteByte('\n')
		size += w
	}
	if b.Len() > 0 {
		props[fmt.Sprintf("L%d", n)] = b.String()
	}
	return props
}

// lines returns every line of the list.
func (l *list) lines() []string {
	var out []string
	for _, p := range l.parts {
		out = append(out, p.lines...)
	}
	return out
}
