package docs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exitTable is the table of examples in operations.md's "Exit codes".
var exitTable = regexp.MustCompile("(?s)<!-- exit codes -->\n(.*?)<!-- end exit codes -->")

// exitRow is one row of it: the command, the exit status and, when the
// third cell is code, what its output says.
var exitRow = regexp.MustCompile("^\\| `([^`]+)` \\| ([0-9]) \\| (.*) \\|$")

// TestExitCodes runs every example of operations.md's exit-code table
// against the built binaries, with no credentials in the environment and
// a bad.json that holds an unknown key, and checks the exit status and what
// the output says. A usage error (2) must also print the one-line hint and
// never the flag list.
func TestExitCodes(t *testing.T) {
	bin := binaries(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := exitTable.FindSubmatch(page)
	if m == nil {
		t.Fatal("operations.md has no <!-- exit codes --> table")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"runner": {"concurency": 3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[int]bool{"worker": {}, "enqueue": {}}
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n")[2:] {
		r := exitRow.FindStringSubmatch(line)
		if r == nil {
			t.Errorf("operations.md: exit-code row %q is not | `command` | code | says |", line)
			continue
		}
		args := strings.Fields(r[1])
		want, _ := strconv.Atoi(r[2])
		says := ""
		if c := regexp.MustCompile("^`([^`]*)`").FindStringSubmatch(r[3]); c != nil {
			says = c[1]
		}
		cmd := exec.Command(filepath.Join(bin, args[0]), args[1:]...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + dir}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", r[1], err)
		}
		seen[args[0]][code] = true
		if code != want {
			t.Errorf("%s: exit %d, operations.md says %d; output:\n%s", r[1], code, want, out.String())
		}
		if says != "" && !strings.Contains(out.String(), says) {
			t.Errorf("%s: output lacks %q:\n%s", r[1], says, out.String())
		}
		if want == 2 && (!strings.Contains(out.String(), " -h' for usage.") || strings.Contains(out.String(), "\nflags:\n") || strings.Count(out.String(), "\n") > 2) &&
			!strings.Contains(out.String(), "Run 'enqueue help'") {
			t.Errorf("%s: a usage error must print the error and a one-line hint, no flag list:\n%s", r[1], out.String())
		}
	}
	for prog, codes := range seen {
		for _, c := range []int{0, 1, 2} {
			if !codes[c] {
				t.Errorf("operations.md's exit-code table has no %s example exiting %d", prog, c)
			}
		}
	}
}
