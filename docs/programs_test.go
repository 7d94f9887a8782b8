package docs

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is a fenced Go block of a page.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestProgramsBuild builds every whole program (a Go block that starts
// with "package main") in the pages, as a package of the module placed by
// an overlay, so a program an application developer pastes from the docs
// compiles against the code as it is.
func TestProgramsBuild(t *testing.T) {
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, page := range pages(t) {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range goBlock.FindAllStringSubmatch(string(src), -1) {
			if !strings.HasPrefix(m[1], "package main\n") {
				continue
			}
			n++
			file := filepath.Join(t.TempDir(), "main.go")
			if err := os.WriteFile(file, []byte(m[1]), 0o644); err != nil {
				t.Fatal(err)
			}
			// A directory that does not exist: the overlay alone makes it a
			// package of the module.
			pkg := filepath.Join(abs, "docs", "program-under-test")
			overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): file}})
			if err != nil {
				t.Fatal(err)
			}
			ov := filepath.Join(t.TempDir(), "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "build", "-overlay", ov, "-o", os.DevNull, "./docs/program-under-test")
			cmd.Dir = abs
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: Go program %d does not build: %v\n%s", page, i+1, err, out)
			}
		}
	}
	if n == 0 {
		t.Error("no whole Go program found in the pages; the README's producer example is one")
	}
}
