package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// Environment variables the tests read.
const (
	EnvSkip      = "TABLEKEEPER_SKIP_BROWSER"
	EnvBinary    = "TABLEKEEPER_BROWSER"
	EnvArtifacts = "TABLEKEEPER_ARTIFACTS"
)

// Deadlines. A browser that has not answered StartTimeout after it was
// started, or a step (a navigation, a wait for an element, a click) that
// has not finished after StepTimeout, fails the test.
const (
	StartTimeout = 60 * time.Second
	StepTimeout  = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// ErrNotInstalled means no browser binary was found.
var ErrNotInstalled = errors.New("the headless browser is not installed: run `make browser` (apt-get install chromium-headless-shell), " +
	"or set " + EnvBinary + " to a Chromium binary, or set " + EnvSkip + "=1 to skip the tests that need it")

// candidates are where Debian's chromium-headless-shell puts the browser,
// the real binary first: /usr/bin/chromium-headless-shell is a shell script
// around it, and a script in between would outlive a killed test binary's
// death signal.
var candidates = []string{"/usr/lib/chromium/chromium-headless-shell", "chromium-headless-shell"}

// Skipped reports whether the caller asked to skip the browser tests.
func Skipped() bool { return os.Getenv(EnvSkip) == "1" }

// Binary returns the browser to run: EnvBinary when it is set (and then
// only it), else the first installed candidate. It returns an error
// wrapping ErrNotInstalled when there is none.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%w (%s=%s: %v)", ErrNotInstalled, EnvBinary, p, err)
		}
		return p, nil
	}
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// flags are the browser's command line: headless, without the sandbox (the
// tests run as root in a container) and so without the zygote, the
// process that forks renderers for the sandbox (its pipe broke once at a
// start, in a CI run, "zygote_linux.cc: write: Broken pipe"), the GPU or
// QUIC, and without the
// background connections to Google's services that this machine's closed
// network refuses (many at a time) and that only slow the start.
var flags = []chromedp.ExecAllocatorOption{
	chromedp.Flag("headless", true),
	chromedp.Flag("no-sandbox", true),
	chromedp.Flag("no-zygote", true),
	chromedp.Flag("disable-gpu", true),
	chromedp.Flag("disable-quic", true),
	chromedp.Flag("no-first-run", true),
	chromedp.Flag("no-default-browser-check", true),
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("disable-extensions", true),
	chromedp.Flag("disable-default-apps", true),
	chromedp.Flag("disable-breakpad", true),
	chromedp.Flag("hide-scrollbars", true),
	chromedp.Flag("mute-audio", true),
	chromedp.Flag("force-color-profile", "srgb"),
	chromedp.WindowSize(1280, 800),
}

// Tab is a browser tab of a test. Its methods fail the test (t.Fatal) when
// a step fails or outlasts StepTimeout, saving a screenshot of the page
// first; they must be called from the test's goroutine.
type Tab struct {
	t    testing.TB
	ctx  context.Context // the tab's chromedp context, without a deadline
	step time.Duration   // each step's deadline: StepTimeout
	log  string          // the browser's log file
}

// Start starts a headless browser for t, opens a tab and returns it. The
// browser stops when t ends. When EnvSkip is 1 Start skips t, installed
// browser or not, as the Azurite-backed tests do; otherwise a missing
// browser, or one that does not start within StartTimeout, fails t.
func Start(t testing.TB) *Tab {
	t.Helper()
	if Skipped() {
		t.Skip(EnvSkip + "=1: browser tests skipped on request")
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	art, err := ArtifactsDir(t)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := createLog(art)
	if err != nil {
		t.Fatal(err)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logFile, format+"\n", args...) } // errors once closed: dropped
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.CombinedOutput(logFile),
	}, flags...)
	begin := time.Now()
	var allocCtx, ctx context.Context
	var allocCancel, cancel context.CancelFunc
	// A start that fails is tried once more: the browser's own processes
	// can fail to come up on a loaded machine (a broken pipe between
	// them), which says nothing of the pages under test.
	for attempt := 1; ; attempt++ {
		allocCtx, allocCancel = chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel = chromedp.NewContext(allocCtx, chromedp.WithErrorf(logf), chromedp.WithLogf(logf))
		// The first Run starts the browser and ties it to the context it
		// is given, so it gets one without a deadline and the wait is
		// bounded here.
		started := make(chan error, 1)
		go func() { started <- chromedp.Do(ctx) }()
		select {
		case err = <-started:
		case <-time.After(StartTimeout):
			err = fmt.Errorf("no answer after %v", StartTimeout)
		}
		if err == nil {
			break
		}
		cancel()
		allocCancel() // kills the browser and waits for it
		if attempt == 2 {
			logFile.Close()
			t.Fatalf("browser: start %s (twice): %v\n%s", bin, err, tail(logFile.Name()))
		}
		t.Logf("browser: start %s failed, trying once more: %v\n%s", bin, err, tail(logFile.Name()))
	}
	t.Cleanup(func() {
		// A graceful close first, so the profile is written and closed
		// before t.TempDir removes it; then the allocator kills whatever
		// is left and waits for the process.
		cctx, ccancel := context.WithTimeout(ctx, stopTimeout)
		if err := chromedp.Cancel(cctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("browser: stop: %v", err)
		}
		ccancel()
		cancel()
		allocCancel()
		logFile.Close()
	})
	vctx, vcancel := context.WithTimeout(ctx, StepTimeout)
	defer vcancel()
	v, err := chromedp.CallBrowser(vctx, browser.GetVersion, cdp.Empty{})
	if err != nil {
		t.Fatalf("browser: version: %v", err)
	}
	t.Logf("browser: %s (%s) ready in %v; its output (the page's console too): %s",
		v.Product, bin, time.Since(begin).Round(time.Millisecond), logFile.Name())
	return &Tab{t: t, ctx: ctx, step: StepTimeout, log: logFile.Name()}
}

// Context returns the tab's chromedp context, for what the methods below do
// not cover. It has no deadline: bound each call with context.WithTimeout,
// or use Do.
func (b *Tab) Context() context.Context { return b.ctx }

// Do runs chromedp actions in order within StepTimeout. When one fails it
// saves a screenshot and fails the test, naming the step by what.
func (b *Tab) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// Navigate loads url and waits for the page. It fails the test when the
// page does not load or answers with a status outside 200–299; use Status
// for a page expected to answer otherwise.
func (b *Tab) Navigate(url string) {
	b.t.Helper()
	if s := b.Status(url); s < 200 || s > 299 {
		b.fail("navigate to "+url, fmt.Errorf("HTTP status %d", s))
	}
}

// Status loads url, waits for the page and returns its HTTP status. It
// fails the test only when the page does not load.
func (b *Tab) Status(url string) int {
	b.t.Helper()
	return b.load("navigate to "+url, chromedp.Navigate(url))
}

// ClickAndLoad clicks the element of the CSS selector sel (a link, or a
// button that submits a form) once it is visible, and waits for the page
// the click loads. It fails the test when no page loads within StepTimeout,
// or when it answers with a status outside 200–299.
func (b *Tab) ClickAndLoad(sel string) {
	b.t.Helper()
	what := "click " + sel + " and load the next page"
	if s := b.load(what, chromedp.Click(chromedp.CSS(sel))); s < 200 || s > 299 {
		b.fail(what, fmt.Errorf("HTTP status %d", s))
	}
}

// Click clicks the element of the CSS selector sel once it is visible,
// without waiting for anything after: use ClickAndLoad when the click loads
// a page.
func (b *Tab) Click(sel string) {
	b.t.Helper()
	b.Do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// Fill types value into the form field of the CSS selector sel, as a person
// would, after clearing it.
func (b *Tab) Fill(sel, value string) {
	b.t.Helper()
	b.Do("fill "+sel, chromedp.Clear(chromedp.CSS(sel), chromedp.NodeVisible), chromedp.SendKeys(chromedp.CSS(sel), value, chromedp.NodeVisible))
}

// WaitVisible waits until the element of the CSS selector sel is visible.
func (b *Tab) WaitVisible(sel string) {
	b.t.Helper()
	b.Do("wait for "+sel+" to be visible", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// Text waits until the element of the CSS selector sel is visible and
// returns its text as rendered (innerText), trimmed.
func (b *Tab) Text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		b.fail("read the text of "+sel, err)
	}
	return strings.TrimSpace(s)
}

// Texts returns the rendered text of every element the CSS selector sel
// matches now, trimmed, in document order (none: an empty slice). It does
// not wait: call WaitVisible first when the page builds them late.
func (b *Tab) Texts(sel string) []string {
	b.t.Helper()
	q, _ := json.Marshal(sel) // a string always marshals
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		"Array.from(document.querySelectorAll("+string(q)+"), e => e.innerText.trim())"))
	if err != nil {
		b.fail("read the texts of "+sel, err)
	}
	return s
}

// load runs a step that loads a page, waits for it and returns the HTTP
// status of its document.
func (b *Tab) load(what string, step chromedp.Action[chromedp.Void]) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, step)
	if err != nil {
		b.fail(what, err)
	}
	return int(resp.Status)
}

// fail fails the test for a step, with the page's address and a screenshot
// of what it showed.
func (b *Tab) fail(what string, err error) {
	b.t.Helper()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("not done within %v: %w", b.step, err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	where, lerr := chromedp.Run(ctx, chromedp.Location())
	if lerr != nil {
		where = "unknown (" + lerr.Error() + ")"
	}
	shot, serr := b.save(ctx, "failed")
	if serr != nil {
		shot = "none (" + serr.Error() + ")"
	}
	b.t.Fatalf("browser: %s: %v\n\tpage: %s\n\tscreenshot: %s\n\tlog: %s", what, err, where, shot, b.log)
}

// Screenshot saves a PNG of the whole page (beyond the window too) as
// name.png in the test's artifacts folder, numbered in the order the test
// took them (01-name.png, 02-…), logs its path and returns it.
func (b *Tab) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	path, err := b.save(ctx, name)
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

func (b *Tab) save(ctx context.Context, name string) (string, error) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		return "", err
	}
	dir, err := ArtifactsDir(b.t)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%02d-%s.png", nextShot(b.t.Name()), clean(name)))
	return path, os.WriteFile(path, png, 0o644)
}

var (
	artifactsMu sync.Mutex
	shots       = map[string]int{}  // each test's screenshots so far, by test name
	emptied     = map[string]bool{} // the artifacts folders emptied by this process
)

func nextShot(test string) int {
	artifactsMu.Lock()
	defer artifactsMu.Unlock()
	shots[test]++
	return shots[test]
}

// ArtifactsDir returns the folder of t's artifacts, creating it:
// EnvArtifacts, or test/artifacts under the module's root, then t's name
// (a subtest is a subfolder). The first call of a test in a process
// empties it, so it holds one run's files.
func ArtifactsDir(t testing.TB) (string, error) {
	root := os.Getenv(EnvArtifacts)
	if root == "" {
		mod, err := azurite.ModuleRoot()
		if err != nil {
			return "", err
		}
		root = filepath.Join(mod, "test", "artifacts")
	}
	var parts []string
	for _, p := range strings.Split(t.Name(), "/") {
		parts = append(parts, clean(p))
	}
	dir := filepath.Join(append([]string{root}, parts...)...)
	artifactsMu.Lock()
	defer artifactsMu.Unlock()
	if !emptied[dir] {
		emptied[dir] = true
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// clean makes name one safe file name: letters, digits, '.', '-' and '_',
// anything else '_', never "." or "..".
func clean(name string) string {
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
	if strings.Trim(s, ".") == "" {
		s = strings.ReplaceAll(s, ".", "_") + "_"
	}
	return s
}

// createLog creates the browser's log in dir: browser.log, or
// browser-2.log and so on for a test's later browsers.
func createLog(dir string) (*os.File, error) {
	for i := 1; ; i++ {
		name := "browser.log"
		if i > 1 {
			name = fmt.Sprintf("browser-%d.log", i)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// tail returns the last lines of the browser's output, for a failed start.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	if s == "" {
		return "(the browser printed nothing)"
	}
	return s
}
