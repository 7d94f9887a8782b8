package imports

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tablekeeper/tablekeeper/"

// The layers, lowest first; docs/architecture.md draws them.
var (
	// leaves import the standard library only.
	leaves = []string{"internal/clock", "internal/text", "internal/version", "cmd/internal/stopsignal"}
	// kinds are the job kinds: each is its worker and its args.
	kinds = []string{"jobs/archive", "jobs/blobsync", "jobs/export", "jobs/index", "jobs/purge", "jobs/purgeday", "jobs/restore", "jobs/copy"}
	// libraries are what the kinds are built from and applications may
	// use directly.
	libraries = []string{"storeadapter", "idempotent", "jobs", "tablepatterns/...", "poison", "localstore", "storeadapter/instrument"}
)

// rule: no package matching from (unless it matches except) may depend,
// directly or not, on a package matching not (unless it matches allow).
// Patterns are module-relative; "dir/..." matches a subtree.
type rule struct {
	why    string
	from   []string
	except []string
	not    []string
	allow  []string
}

var rules = []rule{
	{why: "the Azure SDK stays behind the storage ports: only azstore, the client (Connect), the commands and the test harnesses use it",
		from: []string{"..."}, not: []string{"AZURE"}, except: []string{"storeadapter/azstore", "client", "cmd/...", "test/..."}},
	{why: "the client produces work: it never links the runner, the poison queue's code or the in-process store",
		from: []string{"client"}, not: []string{"jobs/runner", "poison", "localstore"}},
	{why: "the leaves depend on the standard library alone",
		from: leaves, not: []string{"...", "EXTERNAL"}},
	{why: "storeadapter is the ports and types: it depends on nothing of the module but the text helper",
		from: []string{"storeadapter"}, not: []string{"..."}, allow: []string{"internal/text"}},
	{why: "a kind never depends on another kind: what kinds share lives in jobs/kit and tablepatterns",
		from: kinds, not: kinds},
	{why: "the libraries never depend on a kind, the kit, the catalog, the runner or a command",
		from: libraries, not: append([]string{"jobs/kit", "jobs/catalog", "jobs/runner", "cmd/...", "test/..."}, kinds...)},
	{why: "jobs (the contract) never depends on a kind, and neither does the runner: it runs what the catalog registers",
		from: []string{"jobs", "jobs/runner"}, not: append([]string{"jobs/catalog", "jobs/kit", "tablepatterns/..."}, kinds...)},
	{why: "the catalog lists the kinds; it does not run them",
		from: []string{"jobs/catalog"}, not: []string{"jobs/runner", "poison"}},
	{why: "the table patterns are storage libraries: they know no queue message, no poison queue",
		from: []string{"tablepatterns/..."}, not: append([]string{"poison", "jobs/kit", "jobs/catalog", "jobs/runner"}, kinds...)},
	{why: "the console shows storage through the ports and the libraries: it knows no kind and no SDK (the command hands it a store)",
		from: []string{"cmd/internal/console"}, not: append([]string{"jobs/catalog", "jobs/kit", "AZURE"}, kinds...)},
	{why: "the harnesses of Azurite and the browser stay below every package whose tests use them: nothing of the module but the module's root (test/azurite)",
		from: []string{"test/azurite", "test/browser", "test/netfault", "test/syncbuf"}, not: []string{"..."}, allow: []string{"test/azurite"}},
	{why: "production code never links the in-process store or the test helpers",
		from: []string{"..."}, not: []string{"localstore", "storeadapter/storetest", "cmd/internal/cli/clitest", "test/...", "TESTING"},
		except: []string{"localstore", "storeadapter/storetest", "cmd/internal/cli/clitest", "cmd/demo", "test/..."}},
}

// TestImportRules checks every rule against the import graph of every
// package of the module (tests' imports excluded: a test may use any
// harness), naming the package, the dependency and the rule it breaks.
func TestImportRules(t *testing.T) {
	graph := load(t)
	if len(graph) < 30 {
		t.Fatalf("go list found %d packages; is the test run from inside the module?", len(graph))
	}
	for _, r := range rules {
		for _, p := range slices.Sorted(maps.Keys(graph)) {
			if !matchAny(p, r.from) || matchAny(p, r.except) {
				continue
			}
			for _, d := range graph[p] {
				if d != p && matchAny(d, r.not) && !matchAny(d, r.allow) {
					t.Errorf("%s depends on %s: %s", p, d, r.why)
				}
			}
		}
	}
}

// TestRulesBite: each rule matches some package and forbids a
// dependency some other package has, so none of them is vacuous.
func TestRulesBite(t *testing.T) {
	graph := load(t)
	all := map[string]bool{}
	for p, deps := range graph {
		all[p] = true
		for _, d := range deps {
			all[d] = true
		}
	}
	for _, r := range rules {
		from, not := false, false
		for p := range graph {
			from = from || matchAny(p, r.from) && !matchAny(p, r.except)
		}
		for d := range all {
			not = not || matchAny(d, r.not) && !matchAny(d, r.allow)
		}
		if !from || !not {
			t.Errorf("rule %q: matches a package %v, matches a dependency %v; want both", r.why, from, not)
		}
	}
}

// load returns each package of the module (module-relative) with its
// dependencies, direct and indirect: the module's own module-relative,
// the Azure SDK as "AZURE", the testing package as "TESTING", other
// modules as "EXTERNAL", the rest of the standard library left out.
func load(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps,Dir,GoFiles", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath, Dir string
			Deps, GoFiles   []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		for _, f := range p.GoFiles {
			// go test caches a result by the files the test itself looked
			// at: stat the sources so an edited import is tested again.
			if _, err := os.Stat(filepath.Join(p.Dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		name, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		var deps []string
		for _, d := range p.Deps {
			switch {
			case strings.HasPrefix(d, module):
				deps = append(deps, strings.TrimPrefix(d, module))
			case strings.HasPrefix(d, "github.com/Azure/"):
				deps = append(deps, "AZURE", "EXTERNAL")
			case d == "testing":
				deps = append(deps, "TESTING")
			case strings.Contains(strings.Split(d, "/")[0], "."):
				deps = append(deps, "EXTERNAL")
			}
		}
		slices.Sort(deps)
		graph[name] = slices.Compact(deps)
	}
	return graph
}

// matchAny reports whether p matches one of the patterns: equal, or under
// a "dir/..." subtree ("..." alone matches every package of the module,
// not the pseudo-packages AZURE, TESTING and EXTERNAL).
func matchAny(p string, patterns []string) bool {
	for _, pat := range patterns {
		switch {
		case pat == "...":
			if p != "AZURE" && p != "TESTING" && p != "EXTERNAL" {
				return true
			}
		case strings.HasSuffix(pat, "/..."):
			dir := strings.TrimSuffix(pat, "/...")
			if p == dir || strings.HasPrefix(p, dir+"/") {
				return true
			}
		case p == pat:
			return true
		}
	}
	return false
}

// TestEveryPackageSaysWhatItIs: every package of the module has a doc.go
// whose package comment says what the package is for and what it must not
// import (docs/architecture.md collects the rules; TestImportRules holds
// them).
func TestEveryPackageSaysWhatItIs(t *testing.T) {
	for _, p := range slices.Sorted(maps.Keys(load(t))) {
		dir := filepath.Join("..", "..", filepath.FromSlash(p))
		src, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("%s: no doc.go: %v", p, err)
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), "doc.go", src, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s/doc.go: %v", p, err)
			continue
		}
		doc := ""
		if f.Doc != nil {
			doc = f.Doc.Text()
		}
		switch {
		case len(doc) < 100:
			t.Errorf("%s/doc.go: the package comment (%d bytes) does not say what the package is for", p, len(doc))
		case !strings.Contains(strings.Join(strings.Fields(doc), " "), "must not import"):
			t.Errorf("%s/doc.go: the package comment does not say what the package must not import", p)
		}
	}
}
