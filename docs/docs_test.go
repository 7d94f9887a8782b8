package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, seen from this package.
const root = ".."

// pages returns the Markdown files the tests check, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// page is a Markdown file split into what the checks need.
type page struct {
	name string // relative to root, with slashes
	text string
	// prose is text with fenced code blocks and code spans blanked out
	// (newlines kept, so offsets give line numbers).
	prose string
	spans []span // inline code spans
	code  []span // lines of fenced code blocks
}

// span is a piece of a page: its text and where it starts.
type span struct {
	text   string
	offset int
}

func readPage(t *testing.T, name string) *page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	p := &page{name: name, text: string(b)}
	prose := []byte(p.text)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if prose[i] != '\n' {
				prose[i] = ' '
			}
		}
	}
	// Fenced code blocks: a line opening with ``` or ~~~ up to the line
	// that closes it with the same fence.
	fence := ""
	off := 0
	for _, line := range strings.SplitAfter(p.text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			blank(off, off+len(line))
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			blank(off, off+len(line))
		case fence != "":
			p.code = append(p.code, span{strings.TrimRight(line, "\n"), off})
			blank(off, off+len(line))
		}
		off += len(line)
	}
	// Code spans: a run of n backticks up to the next run of exactly n.
	s := string(prose)
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(s); {
			if s[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(s) && s[j+m] == '`' {
				m++
			}
			if m == n {
				end = j
				break
			}
			j += m
		}
		if end < 0 {
			i += n
			continue
		}
		text := strings.TrimSpace(strings.ReplaceAll(s[i+n:end], "\n", " "))
		p.spans = append(p.spans, span{text, i + n})
		blank(i, end+n)
		i = end + n
	}
	p.prose = string(prose)
	return p
}

// line returns the line number of offset in p.
func (p *page) line(offset int) int { return strings.Count(p.text[:offset], "\n") + 1 }

// at names a place in p for an error.
func (p *page) at(offset int) string { return fmt.Sprintf("%s:%d", p.name, p.line(offset)) }

var (
	// inlineLink is [text](target) or ![alt](target "title").
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink is a reference definition: [label]: target.
	refLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	// heading is an ATX heading.
	heading = regexp.MustCompile(`(?m)^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	// htmlID is an explicit anchor in HTML.
	htmlID = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// linkText reduces [text](target) to text in a heading.
	linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// goDoc is a go doc reference: go doc ./path [Symbol[.Member]].
	goDoc = regexp.MustCompile(`^go doc (\S+)(?: +(\S+))?$`)
	// goIdent is pkg.Name or pkg.Type.Member in a code span.
	goIdent = regexp.MustCompile(`(?:^|[^\w.])([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	// repoPath is a path in the repository written in a code span.
	repoPath = regexp.MustCompile(`^(?:cmd|jobs|storeadapter|tablepatterns|idempotent|localstore|poison|internal|deploy|test|docs)/[\w./-]*$`)
)

// anchors returns the GitHub anchors of p's headings (and explicit ids).
func anchors(p *page) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatchIndex(p.text, -1) {
		if strings.TrimSpace(p.prose[m[0]:m[1]]) == "" {
			continue // a line of a fenced code block
		}
		text := linkText.ReplaceAllString(p.text[m[4]:m[5]], "$1")
		slug := slugify(text)
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	for _, m := range htmlID.FindAllStringSubmatch(p.text, -1) {
		out[m[1]] = true
	}
	return out
}

// slugify makes GitHub's anchor of a heading: lower case, every character
// but letters, digits, spaces, hyphens and underscores dropped, spaces
// made hyphens.
func slugify(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// generatedPaths are where the tests write what they make (git-ignored, so
// missing from a fresh clone until a test runs): the pages may name them.
var generatedPaths = []string{"test/artifacts"}

// generated reports whether path is one of generatedPaths or below one.
func generated(path string) bool {
	path = strings.TrimSuffix(path, "/")
	for _, g := range generatedPaths {
		if path == g || strings.HasPrefix(path, g+"/") {
			return true
		}
	}
	return false
}

// TestLinks checks every relative link and anchor, every go doc
// reference, every Go identifier of the module's packages and every
// repository path written in the pages.
func TestLinks(t *testing.T) {
	pkgs := loadPackages(t)
	byName := map[string]*goPackage{} // package name -> package, nil when two share it
	for _, p := range pkgs {
		if p.name == "main" || strings.HasSuffix(p.name, "_test") {
			continue
		}
		if _, dup := byName[p.name]; dup {
			byName[p.name] = nil
			continue
		}
		byName[p.name] = p
	}
	pageCache := map[string]*page{}
	get := func(name string) *page {
		if p, ok := pageCache[name]; ok {
			return p
		}
		p := readPage(t, name)
		pageCache[name] = p
		return p
	}
	checked := 0
	for _, name := range pages(t) {
		p := get(name)
		var targets []span
		for _, m := range inlineLink.FindAllStringSubmatchIndex(p.prose, -1) {
			targets = append(targets, span{p.prose[m[2]:m[3]], m[2]})
		}
		for _, m := range refLink.FindAllStringSubmatchIndex(p.prose, -1) {
			targets = append(targets, span{p.prose[m[2]:m[3]], m[2]})
		}
		for _, l := range targets {
			target := l.text
			if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) {
				continue // https:, mailto: …
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			dest := p.name
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.name), file)))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s: link %s leaves the repository", p.at(l.offset), target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", p.at(l.offset), target, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not Markdown", p.at(l.offset), target)
				continue
			}
			if !anchors(get(dest))[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", p.at(l.offset), target, dest, anchor)
			}
		}

		refs := append(slices.Clone(p.spans), p.code...)
		for _, s := range refs {
			text := s.text
			if i := strings.Index(text, "go doc "); i >= 0 {
				ref := text[i:]
				if c := strings.Index(ref, " #"); c >= 0 {
					ref = ref[:c] // a shell comment after it
				}
				ref = strings.TrimRight(ref, " `);,.")
				checked++
				if err := resolveGoDoc(pkgs, ref); err != nil {
					t.Errorf("%s: %s: %v", p.at(s.offset), ref, err)
				}
			}
		}
		for _, s := range p.spans {
			if repoPath.MatchString(s.text) {
				checked++
				if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(s.text, "/"))); err != nil && !generated(s.text) {
					t.Errorf("%s: `%s` does not exist in the repository", p.at(s.offset), s.text)
				}
				continue
			}
			if strings.HasPrefix(s.text, "go doc ") || strings.Contains(s.text, "/") && !strings.Contains(s.text, " ") {
				continue // a path, a blob name, a URL
			}
			for _, m := range goIdent.FindAllStringSubmatch(s.text, -1) {
				pkg, ok := byName[m[1]]
				if !ok {
					continue // not one of the module's packages
				}
				checked++
				if pkg == nil {
					t.Errorf("%s: `%s`: more than one package is named %s; use go doc ./path", p.at(s.offset), s.text, m[1])
					continue
				}
				if err := pkg.resolve(m[2], m[3]); err != nil {
					t.Errorf("%s: `%s`: %v", p.at(s.offset), s.text, err)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d links and references: is the parser broken?", checked)
	}
}

// goPackage is what the checks know of a package of the module: its
// exported top-level names and each type's members.
type goPackage struct {
	dir     string // relative to root, with slashes
	name    string
	names   map[string]bool
	members map[string]map[string]bool // type -> methods and fields
}

// loadPackages parses every package of the module (non-test files only).
func loadPackages(t *testing.T) map[string]*goPackage {
	t.Helper()
	pkgs := map[string]*goPackage{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		p := pkgs[rel]
		if p == nil {
			p = &goPackage{dir: rel, name: f.Name.Name, names: map[string]bool{}, members: map[string]map[string]bool{}}
			pkgs[rel] = p
		}
		p.add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// add records the top-level names of f and the members of its types.
func (p *goPackage) add(f *ast.File) {
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				p.names[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			for {
				switch x := typ.(type) {
				case *ast.StarExpr:
					typ = x.X
					continue
				case *ast.IndexExpr:
					typ = x.X
					continue
				case *ast.IndexListExpr:
					typ = x.X
					continue
				}
				break
			}
			if id, ok := typ.(*ast.Ident); ok {
				member(id.Name, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.names[n.Name] = true
					}
				case *ast.TypeSpec:
					p.names[s.Name.Name] = true
					var fields *ast.FieldList
					switch x := s.Type.(type) {
					case *ast.StructType:
						fields = x.Fields
					case *ast.InterfaceType:
						fields = x.Methods
					}
					if fields == nil {
						continue
					}
					for _, fl := range fields.List {
						for _, n := range fl.Names {
							member(s.Name.Name, n.Name)
						}
						if len(fl.Names) == 0 { // embedded: its name is a member
							typ := fl.Type
							if st, ok := typ.(*ast.StarExpr); ok {
								typ = st.X
							}
							switch x := typ.(type) {
							case *ast.Ident:
								member(s.Name.Name, x.Name)
							case *ast.SelectorExpr:
								member(s.Name.Name, x.Sel.Name)
							}
						}
					}
				}
			}
		}
	}
}

// resolve checks that the exported name (and member, if any) exists.
func (p *goPackage) resolve(name, member string) error {
	if !p.names[name] {
		return fmt.Errorf("package %s (%s) has no %s", p.name, p.dir, name)
	}
	if member != "" && !p.members[name][member] {
		return fmt.Errorf("%s.%s (%s) has no method or field %s", p.name, name, p.dir, member)
	}
	return nil
}

// resolveGoDoc checks a "go doc ./path [Symbol[.Member]]" reference.
func resolveGoDoc(pkgs map[string]*goPackage, ref string) error {
	m := goDoc.FindStringSubmatch(ref)
	if m == nil {
		return fmt.Errorf("not of the form go doc ./path [Symbol[.Member]]")
	}
	if !strings.HasPrefix(m[1], "./") {
		return fmt.Errorf("the package must be a path in the module, starting with ./")
	}
	dir := strings.TrimSuffix(strings.TrimPrefix(m[1], "./"), "/")
	p := pkgs[dir]
	if p == nil {
		return fmt.Errorf("%s is not a package of the module", m[1])
	}
	if m[2] == "" {
		return nil
	}
	name, member, _ := strings.Cut(m[2], ".")
	if !ast.IsExported(name) || member != "" && !ast.IsExported(member) {
		return fmt.Errorf("%s is not exported: go doc shows it only with -u", m[2])
	}
	return p.resolve(name, member)
}

// TestGeneratedPathsAreIgnored: the paths the pages may name without their
// being in the repository are the tests' outputs, which .gitignore keeps
// out of it.
func TestGeneratedPathsAreIgnored(t *testing.T) {
	ignore, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range generatedPaths {
		if !slices.Contains(strings.Split(string(ignore), "\n"), "/"+g+"/") {
			t.Errorf("%s is allowed as a generated path but .gitignore does not list /%s/", g, g)
		}
	}
}
