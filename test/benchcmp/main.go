package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
)

func main() {
	base := flag.String("base", "", "git revision of the baseline (default: the merge base of HEAD and main, or HEAD~1 on main)")
	pkg := flag.String("pkg", "./localstore/", "the package whose benchmarks to run, relative to the module root")
	bench := flag.String("bench", ".", "which benchmarks to run (go test -bench)")
	count := flag.Int("count", 5, "rounds: each runs both binaries once")
	benchtime := flag.String("benchtime", "", "go test -benchtime (default the go command's)")
	flag.Parse()
	// An interrupt stops the running benchmark and still removes the
	// temporary tree.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *base, *pkg, *bench, *benchtime, *count)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, base, pkg, bench, benchtime string, count int) error {
	root, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	why := "-base"
	if base == "" {
		if base, why, err = defaultBase(root); err != nil {
			return err
		}
	}
	baseCommit, err := git(root, "rev-parse", "--short", base+"^{commit}")
	if err != nil {
		return err
	}
	head, err := git(root, "rev-parse", "--short", "HEAD")
	if err != nil {
		return err
	}
	dirty, err := git(root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "benchcmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	baseTree := filepath.Join(tmp, "base")
	if err := extract(root, baseCommit, baseTree); err != nil {
		return err
	}
	sides := []*side{
		{name: "base", dir: filepath.Join(baseTree, pkg), bin: filepath.Join(tmp, "base.test")},
		{name: "new", dir: filepath.Join(root, pkg), bin: filepath.Join(tmp, "new.test")},
	}
	for _, s := range sides {
		if err := s.build(ctx); err != nil {
			return err
		}
	}
	newDesc := "HEAD " + head
	if dirty != "" {
		newDesc += " with uncommitted changes"
	}
	fmt.Printf("benchmarks of %s: base %s (%s), new %s; rounds: %d, alternating\n", pkg, baseCommit, why, newDesc, count)
	fmt.Printf("load average before: %s\n", loadavg())
	args := []string{"-test.run", "^$", "-test.bench", bench, "-test.benchmem", "-test.count", "1"}
	if benchtime != "" {
		args = append(args, "-test.benchtime", benchtime)
	}
	for round := range count {
		order := sides
		if round%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, s := range order {
			if err := s.runOnce(ctx, args); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "round %d of %d done\n", round+1, count)
	}
	fmt.Printf("load average after: %s\n\n", loadavg())
	return report(os.Stdout, sides[0].results, sides[1].results)
}

// defaultBase returns where HEAD left main, or HEAD~1 when HEAD is on
// main (or there is no main), and which of the two it is.
func defaultBase(root string) (rev, why string, err error) {
	mb, err := git(root, "merge-base", "HEAD", "main")
	if err != nil {
		return "HEAD~1", "HEAD~1: no main branch", nil
	}
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return "", "", err
	}
	if mb == head {
		return "HEAD~1", "HEAD~1: HEAD is on main", nil
	}
	return mb, "where HEAD left main", nil
}

// git runs git in dir and returns its trimmed output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// extract writes the tree of commit into dir through git archive.
func extract(root, commit, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", commit)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	untarErr := untar(out, dir)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w", commit, err)
	}
	return untarErr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			return fmt.Errorf("git archive: entry %q outside the tree", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFile(name, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(name string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadavg returns the first three fields of /proc/loadavg, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ") + fmt.Sprintf(" (1, 5, 15 min) on %d cores", runtime.NumCPU())
	}
	return "unknown"
}

// side is one of the two trees: its test binary and what its runs printed.
type side struct {
	name, dir, bin string
	results        results
}

func (s *side) build(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", s.bin, ".")
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build the %s benchmarks in %s: %w", s.name, s.dir, err)
	}
	return nil
}

func (s *side) runOnce(ctx context.Context, args []string) error {
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		os.Stderr.Write(out)
		return fmt.Errorf("run the %s benchmarks: %w", s.name, err)
	}
	s.results.parse(string(out))
	return nil
}

// results holds every value the runs printed, by benchmark and unit, and
// the order in which benchmarks and units first appeared.
type results struct {
	names  []string
	units  map[string][]string
	values map[string]map[string][]float64
}

// parse reads the lines of `go test -bench` output.
func (r *results) parse(out string) {
	if r.values == nil {
		r.units = make(map[string][]string)
		r.values = make(map[string]map[string][]float64)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		if r.values[name] == nil {
			r.names = append(r.names, name)
			r.values[name] = make(map[string][]float64)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			unit := f[i+1]
			if r.values[name][unit] == nil {
				r.units[name] = append(r.units[name], unit)
			}
			r.values[name][unit] = append(r.values[name][unit], v)
		}
	}
}

// median returns the median of vs (the mean of the middle two of an even
// count), and their minimum and maximum.
func median(vs []float64) (med, lo, hi float64) {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// report prints, for each benchmark and unit, both medians with their
// ranges and new/base. Units whose name ends in "/s" are rates (higher is
// better); for the others (ns/op, B/op, allocs/op) lower is better.
func report(w io.Writer, base, next results) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tunit\tbase median\t(min–max)\tnew median\t(min–max)\tnew/base\t")
	names := slices.Clone(base.names)
	for _, n := range next.names {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, name := range names {
		units := slices.Clone(next.units[name])
		for _, u := range base.units[name] {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
		for _, unit := range units {
			b, n := base.values[name][unit], next.values[name][unit]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, unit, column(b), column(n), ratio(b, n))
		}
	}
	return tw.Flush()
}

func column(vs []float64) string {
	if len(vs) == 0 {
		return "—\t\t"
	}
	med, lo, hi := median(vs)
	return fmt.Sprintf("%s\t(%s–%s)", number(med), number(lo), number(hi))
}

func ratio(base, next []float64) string {
	if len(base) == 0 || len(next) == 0 {
		return "\t"
	}
	b, _, _ := median(base)
	n, _, _ := median(next)
	if b == 0 {
		return "\t"
	}
	return fmt.Sprintf("%.2f\t", n/b)
}

// number prints v with thousands separators, and two decimals below 10.
func number(v float64) string {
	if v < 10 && v != float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	digits := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
