package browser

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// page is a small stand-in for a console page: a table, and a form that
// posts with a token, answered by a result page.
var page = template.Must(template.New("").Parse(`<!doctype html>
<html><head><title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:2em} td,th{border:1px solid #888;padding:.3em .8em} #result{color:#060}</style>
</head><body><h1 id="title">{{.Title}}</h1>
{{if .Result}}<p id="result">{{.Result}}</p><a id="back" href="/">back</a>
<script>throw new Error("result page script failed")</script>{{else}}
<script>console.log("page script ran", 1)</script>
<table><tr><th>group</th><th>count</th></tr>
<tr><td>archive/not-found</td><td class="count">3</td></tr>
<tr><td>index/conflict</td><td class="count">12</td></tr></table>
<form method="post" action="/requeue">
<input type="hidden" name="token" value="t0k3n">
<label>group <input id="group" name="group" value="all"></label>
<button id="requeue" type="submit">Requeue</button>
</form>{{end}}
</body></html>`))

// server serves page at / and its result at POST /requeue, and records
// the forms it was posted.
type server struct {
	mu    sync.Mutex
	posts []string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/" && r.Method == http.MethodGet:
		page.Execute(w, map[string]string{"Title": "Poison"})
	case r.URL.Path == "/requeue" && r.Method == http.MethodPost:
		if err := r.ParseForm(); err != nil || r.PostForm.Get("token") != "t0k3n" {
			http.Error(w, "bad form", http.StatusForbidden)
			return
		}
		s.mu.Lock()
		s.posts = append(s.posts, r.PostForm.Encode())
		s.mu.Unlock()
		page.Execute(w, map[string]string{"Title": "Requeued", "Result": "requeued 3 of " + r.PostForm.Get("group")})
	default:
		http.NotFound(w, r)
	}
}

// TestForm uses a page as a person would: reads it, fills in the form,
// submits it with its button and reads the result page; the server must
// have received that one form, and each screenshot must be a PNG of the
// page with something drawn on it.
func TestForm(t *testing.T) {
	srv := &server{}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	tab := Start(t)
	begin := time.Now()
	tab.Navigate(ts.URL)
	t.Logf("first navigation: %v", time.Since(begin).Round(time.Millisecond))

	if got := tab.Text("#title"); got != "Poison" {
		t.Errorf("title: got %q, want Poison", got)
	}
	if got, want := tab.Texts("td.count"), []string{"3", "12"}; !slices.Equal(got, want) {
		t.Errorf("counts: got %q, want %q", got, want)
	}
	if got := tab.Texts("td.missing"); len(got) != 0 {
		t.Errorf("texts of a selector matching nothing: got %q, want none", got)
	}
	tab.Fill("#group", "archive/not-found")
	form := tab.Screenshot("form")
	tab.ClickAndLoad("#requeue")
	if got, want := tab.Text("#result"), "requeued 3 of archive/not-found"; got != want {
		t.Errorf("result: got %q, want %q", got, want)
	}
	result := tab.Screenshot("result")

	srv.mu.Lock()
	posts := slices.Clone(srv.posts)
	srv.mu.Unlock()
	if want := []string{"group=archive%2Fnot-found&token=t0k3n"}; !slices.Equal(posts, want) {
		t.Errorf("forms posted: got %q, want %q", posts, want)
	}

	begin = time.Now()
	tab.ClickAndLoad("#back")
	t.Logf("a link to the first page: %v", time.Since(begin).Round(time.Millisecond))
	tab.WaitVisible("#requeue")

	for _, p := range []string{form, result} {
		checkPNG(t, p)
	}
	waitLog(t, tab, "page script ran", "result page script failed")
	if !strings.HasSuffix(form, "01-form.png") || !strings.HasSuffix(result, "02-result.png") {
		t.Errorf("screenshots %s, %s: want them numbered in order", form, result)
	}
}

// waitLog waits until the browser's log has each of lines.
func waitLog(t *testing.T, tab *Tab, lines ...string) {
	t.Helper()
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ = os.ReadFile(tab.log)
		missing := slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return bytes.Contains(b, []byte(l)) })
		if len(missing) == 0 {
			return
		}
	}
	t.Errorf("%s: want lines %q, got:\n%s", tab.log, lines, b)
}

// checkPNG: the file is a PNG at least as large as the window, and not
// blank.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	r := img.Bounds()
	if r.Dx() < 1280 || r.Dy() < 600 {
		t.Errorf("%s: %v, want at least the window (1280 wide)", path, r)
	}
	drawn := 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			if cr, cg, cb, _ := img.At(x, y).RGBA(); cr < 0x8000 && cg < 0x8000 && cb < 0x8000 {
				drawn++
			}
		}
	}
	if drawn < 100 {
		t.Errorf("%s: %d dark pixels: the page's text was not drawn", path, drawn)
	}
}

// fatal is a testing.TB that records the first Fatal instead of failing
// the test, and ends the goroutine that called it as t.Fatal would.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// expectFatal runs step with a Tab that records its failure, and returns
// the failure's message; no failure fails t.
func expectFatal(t *testing.T, tab *Tab, step func(*Tab)) string {
	t.Helper()
	f := &fatal{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := *tab
		c.t, c.step = f, 2*time.Second
		step(&c)
	}()
	<-done
	if f.msg == "" {
		t.Fatal("the step did not fail")
	}
	return f.msg
}

// TestStepFails: a step that fails, or waits for what never comes, stops
// the test within its deadline, saying what it did, on which page, and
// where the screenshot of that page is.
func TestStepFails(t *testing.T) {
	ts := httptest.NewServer(&server{})
	defer ts.Close()
	tab := Start(t)
	tab.Navigate(ts.URL)

	begin := time.Now()
	msg := expectFatal(t, tab, func(b *Tab) { b.Text("#missing") })
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("a missing element failed after %v, want about the 2 s step deadline", took)
	}
	for _, want := range []string{"read the text of #missing", "not done within 2s", "page: " + ts.URL, "failed.png", "log: " + tab.log} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q: want it to say %q", msg, want)
		}
	}
	_, shot, _ := strings.Cut(msg, "screenshot: ")
	shot, _, _ = strings.Cut(shot, "\n")
	checkPNG(t, shot)
	t.Logf("a failed step says: %s", msg)

	msg = expectFatal(t, tab, func(b *Tab) { b.Navigate(ts.URL + "/nowhere") })
	if !strings.Contains(msg, "navigate to "+ts.URL+"/nowhere: HTTP status 404") {
		t.Errorf("failure %q: want it to name the page and its status", msg)
	}
	if got := tab.Status(ts.URL + "/nowhere"); got != http.StatusNotFound {
		t.Errorf("Status: got %d, want 404", got)
	}
}

// envChild marks the run of this test binary by TestMissingBrowser.
const envChild = "TABLEKEEPER_BROWSER_TEST_CHILD"

// TestStartChild only runs as TestMissingBrowser's child: it calls Start.
func TestStartChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("run by TestMissingBrowser")
	}
	Start(t)
	t.Log("started")
}

// TestMissingBrowser: with EnvBinary naming a file that is not there, a
// test that starts the browser fails, saying how to install it; with
// EnvSkip=1 it is skipped instead. It runs this test binary again with
// those environments, since go test reports what a test did only once it
// has ended.
func TestMissingBrowser(t *testing.T) {
	for _, tc := range []struct {
		skip     string
		exitCode int
		want     []string
	}{
		{skip: "", exitCode: 1, want: []string{"--- FAIL: TestStartChild", "make browser", EnvBinary + "=/nonexistent/chromium"}},
		{skip: "1", exitCode: 0, want: []string{"--- SKIP: TestStartChild", EnvSkip + "=1: browser tests skipped on request"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStartChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"=1", EnvBinary+"=/nonexistent/chromium", EnvSkip+"="+tc.skip)
		out, err := cmd.CombinedOutput()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.exitCode {
			t.Errorf("%s=%q: exit code %d, want %d\n%s", EnvSkip, tc.skip, code, tc.exitCode, out)
		}
		for _, w := range tc.want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s=%q: output does not say %q:\n%s", EnvSkip, tc.skip, w, out)
			}
		}
		if bytes.Contains(out, []byte("started")) {
			t.Errorf("%s=%q: the child started a browser:\n%s", EnvSkip, tc.skip, out)
		}
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"form":            "form",
		"a b/c":           "a_b_c",
		"..":              "___",
		".":               "__",
		"":                "_",
		"v1.2-x_y":        "v1.2-x_y",
		"group=archive/é": "group_archive__",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}
