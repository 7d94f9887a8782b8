package imports

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// envelopeMakers are the packages that may build a jobs.Envelope: the
// contract itself, and the client, the one producer (it checks a job as
// the worker will before it sends it). The runner re-sends envelopes it
// received; nothing else makes one.
var envelopeMakers = []string{"jobs", "client"}

// TestOnlyTheClientBuildsEnvelopes: no non-test Go file of the module
// outside envelopeMakers writes a jobs.Envelope composite literal (alone,
// behind &, or as the elided elements of a slice, array or map of them),
// so every producer goes through package client. It reads the sources
// with go/parser (no type checking: an envelope built as a zero value and
// then assigned field by field is not seen).
func TestOnlyTheClientBuildsEnvelopes(t *testing.T) {
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "node_modules" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if matchAny(filepath.ToSlash(rel), envelopeMakers) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, at := range envelopeLiterals(t, path, src) {
			t.Errorf("%s builds a jobs.Envelope by hand: send jobs through package client (Enqueue, PrepareEnvelope), or make a worker's Job with jobs.NewJob", at)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files; is the test run from test/imports?", files)
	}
}

// TestEnvelopeLiteralsFound: the search of TestOnlyTheClientBuildsEnvelopes
// finds each way of writing the literal, under any import name, and
// nothing else.
func TestEnvelopeLiteralsFound(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{`import "github.com/tablekeeper/tablekeeper/jobs"; var e = jobs.Envelope{V: 1}`, 1},
		{`import j "github.com/tablekeeper/tablekeeper/jobs"; var e = &j.Envelope{}`, 1},
		{`import "github.com/tablekeeper/tablekeeper/jobs"; var e = []jobs.Envelope{{V: 1}, {V: 2}}`, 2},
		{`import "github.com/tablekeeper/tablekeeper/jobs"; var e = map[string]*jobs.Envelope{"a": {V: 1}}, []jobs.Envelope{}`, 1},
		{`import "github.com/tablekeeper/tablekeeper/jobs"; func f() { _ = jobs.Job[A]{Envelope: jobs.Envelope{ID: "x"}} }`, 1},
		{`import "github.com/tablekeeper/tablekeeper/jobs"; var e jobs.Envelope; var o = jobs.OutboxRef{}`, 0},
		{`import jobs "example.com/other/jobs"; var e = jobs.Envelope{}`, 0},
	} {
		if got := envelopeLiterals(t, "x.go", []byte("package x; "+c.src)); len(got) != c.want {
			t.Errorf("%s: found %d literals %v, want %d", c.src, len(got), got, c.want)
		}
	}
}

// envelopeLiterals returns the positions of the jobs.Envelope composite
// literals of one Go file.
func envelopeLiterals(t *testing.T, path string, src []byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var names []string // the file's names of package jobs
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == module+"jobs" {
			name := "jobs"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	// isEnvelope reports whether a type expression is jobs.Envelope or a
	// pointer to it.
	isEnvelope := func(e ast.Expr) bool {
		if s, ok := e.(*ast.StarExpr); ok {
			e = s.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Envelope" {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && slices.Contains(names, x.Name)
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		var elem ast.Expr // the type of elided element literals
		switch ty := lit.Type.(type) {
		case *ast.ArrayType:
			elem = ty.Elt
		case *ast.MapType:
			elem = ty.Value
		}
		if isEnvelope(lit.Type) {
			found = append(found, fset.Position(lit.Pos()).String())
		}
		if elem != nil && isEnvelope(elem) {
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					el = kv.Value
				}
				if c, ok := el.(*ast.CompositeLit); ok && c.Type == nil {
					found = append(found, fset.Position(c.Pos()).String())
				}
			}
		}
		return true
	})
	return found
}
