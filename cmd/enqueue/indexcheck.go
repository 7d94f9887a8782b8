package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// indexCheck compares one index with its table, read-only, and prints the
// findings and a summary. It fails (exit status 1) when there are
// findings.
func (m *Main) indexCheck(ctx context.Context, args []string) error {
	var (
		c                    common
		table, name, cfgPath string
	)
	fs := m.newFlagSet("index check", "index check -table T -index NAME [-config FILE] [flags]",
		"Compares index -index with table -table, read-only: every entity is looked up in the index and every\n"+
			"entry's entity is read, about one read each. It prints each finding (missing: the entity has the\n"+
			"value, the index does not list it; stale: the index lists an entity that is gone or has another\n"+
			"value, or a copy is out of date; conflict: a copy index's value is held by another entity;\n"+
			"unindexable: the value cannot be indexed) and a summary. The exit status is 1 when it found any:\n"+
			"'enqueue index rebuild -table T' repairs missing and stale entries. On a table being written it\n"+
			"also reports the changes not reconciled yet. -o json prints one JSON document, streamed.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&name, "index", "", "index name, as declared (required; names ignore case)")
	configFlag(fs, &cfgPath, "required")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := checkTableFlag(table); err != nil {
		return err
	}
	if name == "" {
		return usagef("-index: is required")
	}
	x, d, err := m.openIndex(&c, cfgPath, table, name, "check")
	if err != nil {
		return err
	}
	var out checkOutput
	if c.json() {
		out = newCheckJSON(m.Stdout, table, d.Name)
	} else {
		out = &checkTable{blockTable: newBlockTable(m.Stdout), w: m.Stdout, table: table, index: d.Name}
	}
	res, err := x.Check(ctx, table, d.Name, out.finding)
	if err != nil {
		// The error goes to stdout too (in JSON), so it is scrubbed here.
		if werr := out.fail(errors.New(m.redact(err.Error()))); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	if err := out.summary(res); err != nil {
		return err
	}
	if n := res.Problems(); n > 0 {
		return fmt.Errorf("index %s of %s: %d problem(s) found", d.Name, table, n)
	}
	return nil
}

// checkOutput prints check's findings as they come, then its summary, or
// how it failed.
type checkOutput interface {
	finding(f indexes.Finding) error
	summary(res indexes.CheckResult) error
	fail(err error) error
}

// checkSummary is the summary of check -o json: CheckResult's counts and
// their total.
type checkSummary struct {
	indexes.CheckResult
	Problems int `json:"problems"`
}

// checkTable prints check's findings as an aligned table (see
// blockTable).
type checkTable struct {
	blockTable
	w            io.Writer
	table, index string
}

func (t *checkTable) finding(f indexes.Finding) error {
	return t.row([]string{"PROBLEM", "INDEX", "VALUE", "PK", "RK", "DETAIL"}, f.Problem, f.Index, f.Value, f.PK, f.RK, f.Detail)
}

func (t *checkTable) summary(res indexes.CheckResult) error {
	if err := t.flush(); err != nil {
		return err
	}
	counts := fmt.Sprintf("%d entities read, %d indexed, %d entries read", res.Entities, res.Indexed, res.Entries)
	if res.Problems() == 0 {
		_, err := fmt.Fprintf(t.w, "index %s of %s is consistent: %s\n", t.index, t.table, counts)
		return err
	}
	_, err := fmt.Fprintf(t.w, "index %s of %s: %s; %d missing, %d stale, %d conflicts, %d unindexable\n",
		t.index, t.table, counts, res.Missing, res.Stale, res.Conflicts, res.Unindexable)
	return err
}

func (t *checkTable) fail(error) error { return t.flush() }

// blockTable prints rows as they come in an aligned table whose header
// goes before the first row, flushed every checkFlushRows rows: the
// columns are aligned within each block, and memory does not grow with
// the number of rows.
type blockTable struct {
	tw   *tabwriter.Writer
	rows int
}

func newBlockTable(w io.Writer) blockTable { return blockTable{tw: newTable(w)} }

// row writes one row of cells, and header first when it is the first.
func (t *blockTable) row(header []string, cells ...string) error {
	if t.rows == 0 {
		row(t.tw, header...)
	}
	row(t.tw, cells...)
	if t.rows++; t.rows%checkFlushRows == 0 {
		return t.tw.Flush()
	}
	return nil
}

// flush writes the rows not written yet.
func (t *blockTable) flush() error { return t.tw.Flush() }

// checkJSON streams check's result as one JSON document (see jsonStream):
//
//	{"table": …, "index": …, "findings": [ … ], "summary": { … }}
//
// A check that fails part way ends the document with "error" instead of
// "summary", so what was printed stays valid JSON.
type checkJSON struct{ *jsonStream }

func newCheckJSON(w io.Writer, table, name string) checkJSON {
	return checkJSON{newJSONStream(w, "findings", jsonField{"table", table}, jsonField{"index", name})}
}

func (j checkJSON) finding(f indexes.Finding) error { return j.item(f) }

func (j checkJSON) summary(res indexes.CheckResult) error {
	return j.end("summary", checkSummary{CheckResult: res, Problems: res.Problems()})
}

func (j checkJSON) fail(err error) error { return j.end("error", err.Error()) }

// jsonStream writes one indented JSON document, as writeJSON would print
// it whole, without holding the items of its array:
//
//	{<the fields>, <key>: [ <item>, … ], <end key>: <end value>}
//
// so that a long listing streams, and one that fails part way can still
// end the document (with an "error", say) as valid JSON.
type jsonStream struct {
	w   io.Writer
	n   int   // items written
	err error // the first write error
}

// jsonField is one field of a JSON object.
type jsonField struct {
	name  string
	value any
}

// newJSONStream opens the document: fields, then the array key.
func newJSONStream(w io.Writer, key string, fields ...jsonField) *jsonStream {
	j := &jsonStream{w: w}
	j.printf("{\n")
	for _, f := range fields {
		v, err := indented(f.value, 1)
		if err != nil && j.err == nil {
			j.err = err
		}
		j.printf("  %s: %s,\n", jsonText(f.name), v)
	}
	j.printf("  %s: [", jsonText(key))
	return j
}

// printf writes to w, remembering the first error.
func (j *jsonStream) printf(format string, args ...any) {
	if j.err == nil {
		_, j.err = fmt.Fprintf(j.w, format, args...)
	}
}

// indented renders v as JSON indented to sit at depth levels.
func indented(v any, depth int) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent(strings.Repeat("  ", depth), "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// jsonText renders s as a JSON string.
func jsonText(s string) string {
	t, _ := indented(s, 0) // a string always encodes
	return t
}

// item writes one item of the array.
func (j *jsonStream) item(v any) error {
	s, err := indented(v, 2)
	if err != nil {
		return err
	}
	sep := ","
	if j.n == 0 {
		sep = ""
	}
	j.n++
	j.printf("%s\n    %s", sep, s)
	return j.err
}

// end closes the array and the document with key: v.
func (j *jsonStream) end(key string, v any) error {
	s, err := indented(v, 1)
	if err != nil {
		return err
	}
	if j.n > 0 {
		j.printf("\n  ")
	}
	j.printf("],\n  %s: %s\n}\n", jsonText(key), s)
	return j.err
}
