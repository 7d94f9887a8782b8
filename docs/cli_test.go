package docs

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated help blocks of docs/cli.md from the binaries")

// helps are the commands whose help docs/cli.md holds verbatim.
var helps = [][]string{
	{"enqueue", "help"},
	{"enqueue", "archive", "-h"},
	{"enqueue", "export", "-h"},
	{"enqueue", "export", "verify", "-h"},
	{"enqueue", "export", "clean", "-h"},
	{"enqueue", "restore", "-h"},
	{"enqueue", "export", "list", "-h"},
	{"enqueue", "export", "prune", "-h"},
	{"enqueue", "checkpoints", "prune", "-h"},
	{"enqueue", "purgeday", "-h"},
	{"enqueue", "purge", "-h"},
	{"enqueue", "copy", "-h"},
	{"enqueue", "raw", "-h"},
	{"enqueue", "blobsync", "-h"},
	{"enqueue", "blobsync", "offload", "-h"},
	{"enqueue", "blobsync", "attach", "-h"},
	{"enqueue", "blobsync", "reconcile", "-h"},
	{"enqueue", "blobsync", "get", "-h"},
	{"enqueue", "index", "-h"},
	{"enqueue", "index", "lookup", "-h"},
	{"enqueue", "index", "reconcile", "-h"},
	{"enqueue", "index", "rebuild", "-h"},
	{"enqueue", "index", "prune", "-h"},
	{"enqueue", "index", "check", "-h"},
	{"enqueue", "poison", "-h"},
	{"enqueue", "poison", "list", "-h"},
	{"enqueue", "poison", "show", "-h"},
	{"enqueue", "poison", "requeue", "-h"},
	{"enqueue", "poison", "delete", "-h"},
	{"enqueue", "poison", "purge", "-h"},
	{"enqueue", "outbox", "-h"},
	{"enqueue", "outbox", "check", "-h"},
	{"enqueue", "outbox", "purge", "-h"},
	{"enqueue", "stats", "-h"},
	{"enqueue", "console", "-h"},
	{"worker", "-h"},
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds enqueue and worker once, into a directory of their own.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tablekeeper-docs-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/enqueue", "./cmd/worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// render runs one help command in an empty environment (its defaults
// name no variable's value) and returns what it printed.
func render(t *testing.T, bin string, args []string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, args[0]), args[1:]...)
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("%s: %v; stderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "```") {
		t.Fatalf("%s: the help holds ```, which would end its code block", strings.Join(args, " "))
	}
	return out
}

// helpBlock is a generated block of docs/cli.md: the marker's command and
// the byte range of the content between the markers.
var helpBlock = regexp.MustCompile("(?m)^<!-- help: (.+?) -->\n((?s:.*?))^<!-- end help -->\n")

// TestCLIReference checks that docs/cli.md holds the help of every command
// verbatim, between <!-- help: CMD --> and <!-- end help --> markers, and
// that it documents every command enqueue's usage lists. With -update it
// rewrites the blocks instead.
func TestCLIReference(t *testing.T) {
	bin := binaries(t)
	want := map[string]string{}
	for _, args := range helps {
		want[strings.Join(args, " ")] = "```text\n" + render(t, bin, args) + "```\n"
	}

	// Every command enqueue's usage lists has its help here.
	usage := want["enqueue help"]
	_, cmds, _ := strings.Cut(usage, "\ncommands:\n")
	cmds, _, _ = strings.Cut(cmds, "\n\n")
	for _, line := range strings.Split(cmds, "\n") {
		if !regexp.MustCompile(`^  \S`).MatchString(line) {
			continue // a continuation line
		}
		found := false
		for _, args := range helps {
			name := strings.Join(args[1:len(args)-1], " ")
			if name != "" && strings.HasPrefix(line, "  "+name+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("enqueue's usage lists a command docs/cli.md does not document; add it to helps in docs_test.go and a block to cli.md:\n%s", line)
		}
	}

	path := filepath.Join(root, "docs", "cli.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	seen := map[string]bool{}
	var out strings.Builder
	last := 0
	for _, m := range helpBlock.FindAllStringSubmatchIndex(doc, -1) {
		cmd, content := doc[m[2]:m[3]], doc[m[4]:m[5]]
		w, ok := want[cmd]
		switch {
		case !ok:
			t.Errorf("docs/cli.md has a help block for %q, which the test does not render (see helps in docs_test.go)", cmd)
			continue
		case seen[cmd]:
			t.Errorf("docs/cli.md has two help blocks for %q", cmd)
			continue
		}
		seen[cmd] = true
		out.WriteString(doc[last:m[4]])
		out.WriteString(w)
		last = m[5]
		if content != w && !*update {
			t.Errorf("docs/cli.md: the help of %q differs from what the binary prints; run\n\tgo test ./docs -run TestCLIReference -update\n--- docs/cli.md\n%s--- %s\n%s", cmd, content, cmd, w)
		}
	}
	out.WriteString(doc[last:])
	for _, args := range helps {
		if cmd := strings.Join(args, " "); !seen[cmd] {
			t.Errorf("docs/cli.md has no help block for %q: add\n<!-- help: %s -->\n<!-- end help -->\nwhere it belongs, then run go test ./docs -run TestCLIReference -update", cmd, cmd)
		}
	}
	if *update && out.String() != doc {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("rewrote docs/cli.md")
	}
}
