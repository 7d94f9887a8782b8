package deploy

// No image is built here: this machine cannot pull base images (golang,
// distroless), so a `docker build` would fail for reasons that say nothing
// about the Dockerfile. What can be checked is checked: the Dockerfile's
// stages, bases, user and entrypoint as docs/deploy.md promises them; that its
// go build line is the one `make build` runs; and that the binaries that
// line gives are static, trimmed and stamped (`make build`, then -version,
// debug/elf and debug/buildinfo on the result).

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const versionPkg = "github.com/tablekeeper/tablekeeper/internal/version"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
	line int
}

// stage is one FROM and the instructions after it.
type stage struct {
	from         instruction
	base, name   string
	instructions []instruction
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM (with
// their defaults) and the stages.
type dockerfile struct {
	globalArgs map[string]string
	stages     []stage
}

// parseDockerfile splits text into instructions the way the Dockerfile
// reference describes: '#' comment lines, '\' at the end of a line continues
// it, the first word is the instruction.
func parseDockerfile(t *testing.T, text string) dockerfile {
	t.Helper()
	df := dockerfile{globalArgs: map[string]string{}}
	var cur strings.Builder
	start := 0
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		cmd, args, _ := strings.Cut(s, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := stage{from: in, base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			df.stages = append(df.stages, st)
		case len(df.stages) == 0:
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile line %d: %s before the first FROM", in.line, in.cmd)
			}
			name, def, _ := strings.Cut(in.args, "=")
			df.globalArgs[name] = def
		default:
			last := &df.stages[len(df.stages)-1]
			last.instructions = append(last.instructions, in)
		}
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			start = i + 1
		} else if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return df
}

// expand replaces ${NAME} and $NAME by vars[NAME] (unknown names stay).
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return "${" + name + "}"
	})
}

// shellWords splits a simple shell command line into words: whitespace
// separates, double and single quotes group (no escapes are needed by the
// lines it reads, and one is refused).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '\\':
			t.Fatalf("shellWords: backslash escapes are not supported: %s", s)
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("shellWords: unterminated quote in %s", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// goBuild is a `VAR=value … go build args…` command line.
type goBuild struct {
	env  map[string]string
	args []string // after "go build", with the -o value replaced by "OUT"
}

func parseGoBuild(t *testing.T, line string) goBuild {
	t.Helper()
	words := shellWords(t, line)
	gb := goBuild{env: map[string]string{}}
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		k, v, _ := strings.Cut(words[i], "=")
		gb.env[k] = v
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		t.Fatalf("not a go build command line: %s", line)
	}
	gb.args = slices.Clone(words[i+2:])
	if j := slices.Index(gb.args, "-o"); j >= 0 && j+1 < len(gb.args) {
		gb.args[j+1] = "OUT"
	}
	return gb
}

// repoRoot is the module root (the parent of deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above deploy/: %v", err)
	}
	return root
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return parseDockerfile(t, string(b))
}

// buildRun returns the build stage's RUN holding "go build".
func buildRun(t *testing.T, df dockerfile) instruction {
	t.Helper()
	for _, in := range df.stages[0].instructions {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			return in
		}
	}
	t.Fatal("the build stage has no RUN with go build")
	return instruction{}
}

// TestDockerfile checks what docs/deploy.md says of the image: a multi-stage
// build from the Go image to distroless static nonroot, static trimmed
// binaries, a numeric non-root user, the worker as exec-form entrypoint,
// nothing run in the final stage, and the OCI labels.
func TestDockerfile(t *testing.T) {
	df := readDockerfile(t)
	if len(df.stages) != 2 {
		t.Fatalf("%d stages, want 2 (build, final)", len(df.stages))
	}
	build, final := df.stages[0], df.stages[len(df.stages)-1]

	if build.name != "build" {
		t.Errorf("first stage is named %q, want build", build.name)
	}
	if goImage := expand(build.base, df.globalArgs); !strings.HasPrefix(goImage, "golang:1.26") {
		t.Errorf("build stage base %s = %q, want golang:1.26*", build.base, goImage)
	}
	if strings.HasPrefix(build.from.args, "--") {
		t.Errorf("build stage FROM has a flag, which az acr build's FROM parser refuses (Azure/acr#697): FROM %s", build.from.args)
	}
	if base := expand(final.base, df.globalArgs); base != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final base %s = %q, want gcr.io/distroless/static-debian12:nonroot", final.base, base)
	}

	run := buildRun(t, df)
	gb := parseGoBuild(t, run.args)
	if gb.env["CGO_ENABLED"] != "0" {
		t.Errorf("build line (line %d) lacks CGO_ENABLED=0: %s", run.line, run.args)
	}
	if !slices.Contains(gb.args, "-trimpath") {
		t.Errorf("build line (line %d) lacks -trimpath: %s", run.line, run.args)
	}
	ld := ""
	if i := slices.Index(gb.args, "-ldflags"); i >= 0 && i+1 < len(gb.args) {
		ld = gb.args[i+1]
	}
	for _, want := range []string{"-s", "-w", "-X " + versionPkg + ".Version=${VERSION}", "-X " + versionPkg + ".Commit=${COMMIT}", "-X " + versionPkg + ".Date=${DATE}"} {
		if !strings.Contains(" "+ld+" ", " "+want+" ") {
			t.Errorf("-ldflags %q lacks %q", ld, want)
		}
	}
	for _, pkg := range []string{"./cmd/worker", "./cmd/enqueue"} {
		if !slices.Contains(gb.args, pkg) {
			t.Errorf("build line does not build %s", pkg)
		}
	}

	var user, entrypoint string
	copied := map[string]bool{}
	labels := ""
	for _, in := range final.instructions {
		switch in.cmd {
		case "RUN":
			t.Errorf("final stage line %d runs %q: the final image has no shell", in.line, in.args)
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from=build" {
				copied[f[2]] = true
			}
		case "LABEL":
			labels += " " + in.args
		case "CMD":
			t.Errorf("final stage line %d has CMD %s: the worker's flags come from the job definitions", in.line, in.args)
		}
	}
	uid, gid, ok := strings.Cut(user, ":")
	if u, err := strconv.Atoi(uid); err != nil || u == 0 {
		t.Errorf("USER %q: want a numeric non-zero uid", user)
	}
	if g, err := strconv.Atoi(gid); ok && (err != nil || g == 0) {
		t.Errorf("USER %q: want a numeric non-zero gid", user)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || !slices.Equal(ep, []string{"/worker"}) {
		t.Errorf(`ENTRYPOINT %s: want the exec form ["/worker"]`, entrypoint)
	}
	for _, bin := range []string{"/worker", "/enqueue"} {
		if !copied[bin] {
			t.Errorf("final stage does not COPY --from=build … %s", bin)
		}
	}
	for _, l := range []string{"org.opencontainers.image.source=", "org.opencontainers.image.version=\"${VERSION}\"", "org.opencontainers.image.revision=\"${COMMIT}\""} {
		if !strings.Contains(labels, l) {
			t.Errorf("LABELs lack %s: %s", l, labels)
		}
	}
}

// TestDockerignore: the context leaves out what must not reach the image
// builder (history, node_modules, local binaries).
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, want := range []string{".git", "**/node_modules", "test/azurite/node_modules", "bin/"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}

// make runs make in the repository root and returns its stdout.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed to run the Makefile's build target: %v", err)
	}
	cmd := exec.Command(mk, append([]string{"-s", "-C", repoRoot(t)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestMakeBuildIsTheDockerfileBuild: `make build` and the Dockerfile run
// the same go build (flags, ldflags, packages), so what the next test
// checks of `make build` holds for the image.
func TestMakeBuildIsTheDockerfileBuild(t *testing.T) {
	vars := map[string]string{"VERSION": "v9.8.7", "COMMIT": "c0ffee", "DATE": "2026-11-23T10:00:00Z"}
	printed := runMake(t, "-n", "build", "BIN=/out", "VERSION="+vars["VERSION"], "COMMIT="+vars["COMMIT"], "DATE="+vars["DATE"])
	mk := parseGoBuild(t, strings.TrimSpace(printed))
	docker := parseGoBuild(t, expand(buildRun(t, readDockerfile(t)).args, vars))
	if !slices.Equal(mk.args, docker.args) {
		t.Errorf("go build arguments differ:\n make build: %q\n Dockerfile: %q", mk.args, docker.args)
	}
	if mk.env["CGO_ENABLED"] != "0" {
		t.Errorf("make build does not set CGO_ENABLED=0: %s", printed)
	}
}

// TestStaticStampedBinaries runs `make build` (the Dockerfile's flags, see
// above) into a temporary directory and checks both binaries: -version
// prints the stamped values, the ELF file has no interpreter and needs no
// shared library (it runs on distroless static or scratch), and the build
// information records -trimpath and CGO_ENABLED=0.
func TestStaticStampedBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both commands: not in -short")
	}
	dir := t.TempDir()
	const (
		ver    = "v9.8.7-test"
		commit = "0123456789abcdef0123456789abcdef01234567"
		date   = "2026-11-23T10:00:00Z"
	)
	runMake(t, "build", "BIN="+dir, "VERSION="+ver, "COMMIT="+commit, "DATE="+date)
	for _, prog := range []string{"worker", "enqueue"} {
		t.Run(prog, func(t *testing.T) {
			bin := filepath.Join(dir, prog)
			want := prog + " " + ver + " (commit 0123456789ab, built " + date + ", "
			if runtime.GOOS == "linux" {
				out, err := exec.Command(bin, "-version").Output()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("%s -version: %v\n%s", prog, err, ee.Stderr)
				} else if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(out), want) || !strings.HasSuffix(string(out), runtime.GOOS+"/"+runtime.GOARCH+")\n") {
					t.Errorf("%s -version = %q, want %q…%s/%s)", prog, out, want, runtime.GOOS, runtime.GOARCH)
				}
			}
			checkStatic(t, bin)
			bi, err := buildinfo.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
				t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
			}
			// -ldflags is not recorded with -trimpath; -version above shows
			// the -X values arrived, and a stripped binary has no symbols:
			if syms, err := elfSymbols(bin); err == nil && len(syms) > 0 {
				t.Errorf("%s has %d symbols: -s -w did not strip it", prog, len(syms))
			}
		})
	}
}

// checkStatic fails unless the ELF file at path is statically linked: no
// PT_INTERP program header (no dynamic loader) and no DT_NEEDED entry.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		if runtime.GOOS != "linux" {
			t.Skipf("%s is not ELF on %s", path, runtime.GOOS)
		}
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header: dynamically linked", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", path, libs)
	}
	if f.Section(".interp") != nil || f.Section(".dynamic") != nil {
		t.Errorf("%s has an .interp or .dynamic section", path)
	}
}

// elfSymbols returns the symbol table of the ELF file at path.
func elfSymbols(path string) ([]elf.Symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, nil
	}
	return syms, err
}

// TestVersionTimeFormat guards the Makefile's DATE: the commit's time,
// RFC 3339 in UTC.
func TestVersionTimeFormat(t *testing.T) {
	if err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Run(); err != nil {
		t.Skipf("not a git checkout (%v): make build has no DATE to take", err)
	}
	printed := runMake(t, "-n", "build", "BIN=/out")
	m := regexp.MustCompile(regexp.QuoteMeta(versionPkg) + `\.Date=(\S+?)"?\s`).FindStringSubmatch(printed + " ")
	if m == nil {
		t.Fatalf("no Date in %s", printed)
	}
	if _, err := time.Parse(time.RFC3339, m[1]); err != nil || !strings.HasSuffix(m[1], "Z") {
		t.Errorf("make build's DATE %q is not RFC 3339 UTC", m[1])
	}
}
