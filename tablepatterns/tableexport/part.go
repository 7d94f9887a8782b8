package tableexport

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// GzipLevel is the fixed compression level of gzipped parts. With no file
// name and no modification time in the header, the same lines give the
// same bytes from the same Go release; a committed part is never rewritten,
// so a newer compressor can only change parts not yet written.
const GzipLevel = gzip.DefaultCompression

// Metadata names of a part (lower case, as storeadapter.BlobProps gives
// them back).
const (
	MetaOp          = "op"
	MetaTable       = "table"
	MetaEntityCount = "entitycount"
	MetaStartTime   = "starttime"
	MetaEndTime     = "endtime"
	MetaSHA256      = "sha256"
	MetaPart        = "part"
	// MetaPrev is the number of the operation's part registered before
	// this one (0 for the first) and MetaPass the pass of the scan that
	// wrote it: the link of the chain the manifest is built from.
	MetaPrev = "prev"
	MetaPass = "pass"
)

// cursor streams the source in key order, and can start again after any
// key. It reads the next page while the caller works through the current
// one (ahead), so the query's round trip overlaps the lines' rendering,
// hashing and upload: memory holds two pages.
type cursor struct {
	t storeadapter.Tables
	// filter selects the rows after a key (exporter.filter).
	filter   func(after *storeadapter.Key) storeadapter.Filter
	table    string
	top      int
	q        storeadapter.Query
	page     []storeadapter.Entity
	i        int
	started  bool
	line     []byte // the line of page[i], once rendered
	lineOf   int    // the index line renders, -1 for none
	finished bool
	// transform, when set, turns a row into what its line holds.
	transform func(context.Context, storeadapter.Entity) (storeadapter.Entity, error)
	// keep says whether a row the filter selected is the export's
	// (exporter.selected).
	keep func(storeadapter.Entity) bool
	// ahead is the page being read after the current one, nil when none.
	ahead *pageAhead
}

// pageAhead is a query running ahead of the cursor.
type pageAhead struct {
	q      storeadapter.Query
	cancel context.CancelFunc
	done   chan struct{}
	page   storeadapter.Page
	err    error
}

// readAhead starts the query q.
func (c *cursor) readAhead(ctx context.Context, q storeadapter.Query) {
	ctx, cancel := context.WithCancel(ctx)
	a := &pageAhead{q: q, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.page, a.err = c.t.Query(ctx, c.table, q)
	}()
	c.ahead = a
}

// close stops the query running ahead, if any, and waits for it: the
// cursor's user calls it when it is done with the cursor.
func (c *cursor) close() {
	if a := c.ahead; a != nil {
		a.cancel()
		<-a.done
		c.ahead = nil
	}
}

// query returns the page of c.q: the one read ahead when it is that
// query's, else read now.
func (c *cursor) query(ctx context.Context) (storeadapter.Page, error) {
	if a := c.ahead; a != nil && a.q.Continuation == c.q.Continuation {
		<-a.done
		a.cancel()
		c.ahead = nil
		return a.page, a.err
	}
	c.close()
	return c.t.Query(ctx, c.table, c.q)
}

func newCursor(t storeadapter.Tables, table string, filter func(*storeadapter.Key) storeadapter.Filter, keep func(storeadapter.Entity) bool, after *storeadapter.Key, top int, transform func(context.Context, storeadapter.Entity) (storeadapter.Entity, error)) *cursor {
	c := &cursor{t: t, table: table, filter: filter, keep: keep, top: top, transform: transform}
	c.reset(after)
	return c
}

// reset makes the cursor start again just after the key after (nil: at
// the source's start).
func (c *cursor) reset(after *storeadapter.Key) {
	c.close()
	c.q = storeadapter.Query{Filter: c.filter(after), Top: c.top}
	c.page, c.i, c.started, c.finished, c.lineOf = nil, 0, false, false, -1
}

// peek returns the next entity and its line, ok false at the end.
func (c *cursor) peek(ctx context.Context) (e storeadapter.Entity, line []byte, ok bool, err error) {
	for c.i == len(c.page) {
		if c.finished || c.started && c.q.Continuation == "" {
			c.finished = true
			return e, nil, false, nil
		}
		c.page = nil // the memory goes before the next page comes
		page, err := c.query(ctx)
		if err != nil {
			return e, nil, false, fmt.Errorf("tableexport: query %s: %w", c.table, err)
		}
		c.started = true
		c.page, c.i, c.lineOf, c.q.Continuation = page.Entities, 0, -1, page.Next
		c.page = slices.DeleteFunc(c.page, func(e storeadapter.Entity) bool { return !c.keep(e) })
		if page.Next != "" {
			c.readAhead(ctx, c.q)
		}
	}
	if c.lineOf != c.i {
		if c.transform != nil {
			if c.page[c.i], err = c.transform(ctx, c.page[c.i]); err != nil {
				return e, nil, false, err
			}
		}
		if c.line, err = storeadapter.MarshalEntityLine(c.page[c.i]); err != nil {
			return e, nil, false, fmt.Errorf("tableexport: %s %s/%s: %w", c.table, c.page[c.i].PartitionKey, c.page[c.i].RowKey, err)
		}
		if len(c.line) > MaxLineBytes {
			// Only a Transform can make one (the values it adds).
			return e, nil, false, fmt.Errorf("tableexport: %s %s/%s: its line would be %d bytes, more than the %d a part's reader takes: %w",
				c.table, c.page[c.i].PartitionKey, c.page[c.i].RowKey, len(c.line), MaxLineBytes, storeadapter.ErrTooLarge)
		}
		c.lineOf = c.i
	}
	return c.page[c.i], c.line, true, nil
}

// next moves past the entity peek returned.
func (c *cursor) next() { c.i++ }

// maxCommitLosses bounds how often one part's commit may lose its number
// to another writer before the export gives up (transient: the
// redelivery goes on).
const maxCommitLosses = 8

// nextPart writes or adopts the next part of the scan; ok is false when
// the scan has no more rows.
func (e *exporter) nextPart(ctx context.Context, cur *cursor) (p Part, ok bool, err error) {
	start := e.st.Last
	prev, pass := strconv.Itoa(e.st.LastPart), strconv.Itoa(e.st.Pass)
	losses := 0
	for n := e.st.Next; ; {
		name := e.partName(n)
		props, err := e.o.Blobs.Properties(ctx, name)
		md := props.Metadata
		switch {
		case err == nil && md[MetaOp] == e.o.OpID && md[MetaPrev] == prev && md[MetaPass] == pass:
			p, err := e.adopt(ctx, n, name)
			if err != nil {
				return p, false, err
			}
			cur.reset(&p.Last)
			return p, true, nil
		case err == nil:
			// Another export's part in the same folder, or a stray of
			// ours written from a superseded checkpoint.
			n++
			continue
		case !errors.Is(err, storeadapter.ErrNotFound) || idempotent.Missing(err):
			return p, false, fmt.Errorf("tableexport: read part %s: %w", name, err)
		}
		p, err = e.write(ctx, cur, n, name)
		switch {
		case err == nil:
			return p, p.Entities > 0, nil
		case lost(err):
			// Another writer committed part n first: read the part's
			// rows again and look at n once more (ours: adopt it).
			if losses++; losses == maxCommitLosses {
				return p, false, fmt.Errorf("tableexport: part %s: lost the commit to another writer %d times in a row: %w", name, losses, err)
			}
			cur.reset(start)
			continue
		}
		return p, false, err
	}
}

// lost reports whether a commit lost the part's name to another writer.
func lost(err error) bool {
	return errors.Is(err, storeadapter.ErrAlreadyExists) || errors.Is(err, storeadapter.ErrPreconditionFailed)
}

// hashingWriter counts and hashes what passes to w.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashingWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// write streams lines from cur into part n until the next line would pass
// the cap, and commits it with If-None-Match *. A part with no line is not
// written (Entities 0).
func (e *exporter) write(ctx context.Context, cur *cursor, n int, name string) (Part, error) {
	p := Part{Number: n, Name: name}
	first, _, ok, err := cur.peek(ctx)
	if err != nil || !ok {
		return p, err
	}
	p.First = storeadapter.Key{PK: first.PartitionKey, RK: first.RowKey}
	ct := ContentTypeLines
	if e.o.Gzip {
		ct = ContentTypeGzip
	}
	bw := storeadapter.NewBlobWriter(ctx, e.o.Blobs, name, storeadapter.BlobWriterOptions{
		BlockSize: e.o.BlockSize, Put: storeadapter.PutOptions{ContentType: ct, IfNoneMatchAny: true}})
	hw := &hashingWriter{w: bw, h: sha256.New()}
	var out io.Writer = hw
	var gz *gzip.Writer
	if e.o.Gzip {
		gz, _ = gzip.NewWriterLevel(hw, GzipLevel) // a valid level
		out = gz
	}
	var lineBytes int64
	for {
		ent, line, ok, err := cur.peek(ctx)
		if err != nil {
			return p, err
		}
		if !ok || p.Entities > 0 && lineBytes+int64(len(line)) > e.o.MaxPartBytes {
			break
		}
		if _, err := out.Write(line); err != nil {
			return p, fmt.Errorf("tableexport: write part %s: %w", name, err)
		}
		p.note(ent)
		lineBytes += int64(len(line))
		cur.next()
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return p, fmt.Errorf("tableexport: write part %s: %w", name, err)
		}
	}
	p.Bytes, p.SHA256 = hw.n, hex.EncodeToString(hw.h.Sum(nil))
	if err := bw.SetMetadata(e.metadata(p)); err != nil {
		return p, err
	}
	if _, err := bw.Commit(); err != nil {
		return p, fmt.Errorf("tableexport: %w", err)
	}
	return p, nil
}

// note adds one entity to the part's count, times and last key.
func (p *Part) note(e storeadapter.Entity) {
	ts := storeadapter.DateTime(e.Timestamp)
	if p.Entities == 0 || ts.Before(p.StartTime) {
		p.StartTime = ts
	}
	if p.Entities == 0 || ts.After(p.EndTime) {
		p.EndTime = ts
	}
	p.Entities++
	p.Last = storeadapter.Key{PK: e.PartitionKey, RK: e.RowKey}
}

// metadata is the part's blob metadata.
func (e *exporter) metadata(p Part) map[string]string {
	return map[string]string{
		MetaOp:          e.o.OpID,
		MetaTable:       e.src.Table,
		MetaEntityCount: strconv.FormatInt(p.Entities, 10),
		MetaStartTime:   storeadapter.FormatDateTime(p.StartTime),
		MetaEndTime:     storeadapter.FormatDateTime(p.EndTime),
		MetaSHA256:      p.SHA256,
		MetaPart:        strconv.Itoa(p.Number),
		MetaPrev:        strconv.Itoa(e.st.LastPart),
		MetaPass:        strconv.Itoa(e.st.Pass),
	}
}

// adopt reads back part n, which an earlier run of the operation
// committed, for its count, hash, times and keys.
func (e *exporter) adopt(ctx context.Context, n int, name string) (Part, error) {
	p := Part{Number: n, Name: name, Adopted: true}
	st, err := scanPart(ctx, e.o.Blobs, name, func(_ []byte, ent storeadapter.Entity) error {
		if p.Entities == 0 {
			p.First = storeadapter.Key{PK: ent.PartitionKey, RK: ent.RowKey}
		}
		p.note(ent)
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("tableexport: adopt part %s: %w", name, err)
	}
	if st.lines == 0 {
		return p, fmt.Errorf("tableexport: adopt part %s: it holds no line", name)
	}
	p.Bytes, p.SHA256 = st.bytes, st.sha256
	return p, nil
}

// partOf returns part n as recorded in its metadata (for a pending
// AfterPart; the hook reads the lines itself).
func (e *exporter) partOf(ctx context.Context, n int) (Part, error) {
	name := e.partName(n)
	props, err := e.o.Blobs.Properties(ctx, name)
	if err != nil {
		return Part{}, fmt.Errorf("tableexport: read part %s: %w", name, err)
	}
	mp, err := manifestPart(props)
	if err != nil {
		return Part{}, err
	}
	p := Part{Number: n, Name: name, Entities: mp.Entities, Bytes: mp.Bytes, SHA256: mp.SHA256}
	p.StartTime, _ = time.Parse(time.RFC3339Nano, mp.StartTime)
	p.EndTime, _ = time.Parse(time.RFC3339Nano, mp.EndTime)
	if e.st.Last != nil {
		p.Last = *e.st.Last
	}
	return p, nil
}

// partStats is what scanPart found.
type partStats struct {
	lines, bytes int64
	sha256       string
}

// MaxLineBytes caps one line of a part, as an export writes it and as
// scanPart reads it. The line of an entity as the table holds it is at
// most about 3.2 MiB: an entity is at most storeadapter.MaxEntityBytes (1
// MiB, strings counted at 2 bytes per UTF-16 unit), JSON escapes a unit
// into at most 6 bytes (\u001f), plus the annotations of at most 252
// properties. The rest is room for the offloaded values an export holds
// beside their references (largeentity.Embed); an export refuses a row
// whose line would pass the cap, naming it. A longer line is not one of
// ours, and gathering it would let a bad blob take unbounded memory.
const MaxLineBytes = 16 << 20

// scanPart streams a part: fn gets each line and its entity. It hashes
// the bytes as stored and counts them; a name ending in ".gz" is
// decompressed. Each line must be exactly one JSON object holding
// PartitionKey, RowKey, Timestamp and odata.etag as strings (see
// checkLine); a nil fn only counts the lines and hashes the bytes.
// Memory holds one line (at most MaxLineBytes).
func scanPart(ctx context.Context, b storeadapter.Blobs, name string, fn func(line []byte, e storeadapter.Entity) error) (partStats, error) {
	var st partStats
	rc, _, err := b.Open(ctx, name)
	if err != nil {
		return st, err
	}
	defer rc.Close()
	hw := &hashingWriter{w: io.Discard, h: sha256.New()}
	raw := io.TeeReader(rc, hw)
	var r io.Reader = raw
	if strings.HasSuffix(name, ".gz") {
		gz, err := gzip.NewReader(raw)
		if err != nil {
			return st, fmt.Errorf("gunzip: %w", err)
		}
		r = gz
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than br's buffer, gathered
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(chunk) > MaxLineBytes {
				return st, fmt.Errorf("line %d: longer than %d bytes, more than any exported entity takes", st.lines+1, MaxLineBytes)
			}
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if len(long) > 0 {
			long = append(long, chunk...)
			line, long = long, long[:0]
		}
		if len(line) > MaxLineBytes {
			return st, fmt.Errorf("line %d: longer than %d bytes, more than any exported entity takes", st.lines+1, MaxLineBytes)
		}
		if err == io.EOF {
			if len(line) > 0 {
				return st, fmt.Errorf("line %d: no newline at the end of the part (cut short?)", st.lines+1)
			}
			break
		}
		if err != nil {
			return st, err
		}
		st.lines++
		if fn == nil {
			continue // counting and hashing only
		}
		if err := checkLine(line); err != nil {
			return st, fmt.Errorf("line %d: %w", st.lines, err)
		}
		ent, perr := storeadapter.UnmarshalEntityJSON(line, "")
		if perr != nil {
			return st, fmt.Errorf("line %d: %w", st.lines, perr)
		}
		if err := fn(line, ent); err != nil {
			return st, err
		}
	}
	if _, err := io.Copy(io.Discard, raw); err != nil { // the hash covers every stored byte
		return st, err
	}
	st.bytes, st.sha256 = hw.n, hex.EncodeToString(hw.h.Sum(nil))
	return st, nil
}

// checkLine checks that a line is exactly one JSON object, with nothing
// after it but its newline, that holds PartitionKey, RowKey, Timestamp and
// odata.etag as strings: what MarshalEntityLine writes for every entity.
func checkLine(line []byte) error {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) == 0 || line[0] != '{' || line[len(line)-1] != '}' || !json.Valid(line) {
		return errors.New("not exactly one JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return fmt.Errorf("not exactly one JSON object: %w", err)
	}
	for _, k := range []string{"PartitionKey", "RowKey", "Timestamp", "odata.etag"} {
		if v, ok := fields[k]; !ok || len(v) == 0 || v[0] != '"' {
			return fmt.Errorf("%s: missing or not a string", k)
		}
	}
	return nil
}

// ReadPart streams a part's entities to fn, in the order written, with
// their Timestamps and the ETags they were exported with; an error from
// fn stops it and is returned. A name ending in ".gz" is decompressed. A
// missing part is storeadapter.ErrNotFound. Memory holds one line.
func ReadPart(ctx context.Context, b storeadapter.Blobs, name string, fn func(storeadapter.Entity) error) error {
	_, err := scanPart(ctx, b, name, func(_ []byte, e storeadapter.Entity) error { return fn(e) })
	if err != nil {
		return fmt.Errorf("tableexport: read part %s: %w", name, err)
	}
	return nil
}
