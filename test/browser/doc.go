// Package browser drives a real headless Chromium from tests, so that a web
// page is tested as a person uses it: load it, read what it shows, click,
// submit its forms, and keep a screenshot of each step as a test artifact.
//
// The browser is Debian's chromium-headless-shell, installed by `make
// browser` (which `make test` runs), and driven with chromedp over a pipe: no
// debugging port is opened. Start runs one browser per call, with a fresh
// profile under the test's temporary directory and the flags this machine's
// closed network needs, and stops it when the test ends. Every step has a
// deadline; a step that fails stops the test with what it waited for, the
// page's address and a screenshot of what the page showed.
//
// A test reads like what a person does:
//
//	tab := browser.Start(t)
//	tab.Navigate(srv.URL + "/poison")
//	if got := tab.Text("#total"); got != "3 poisoned" {
//		t.Errorf("total: got %q", got)
//	}
//	tab.Screenshot("poison")
//	tab.Fill("#group", "archive/not-found")
//	tab.ClickAndLoad("button#requeue")
//	tab.WaitVisible("#done")
//
// Selectors are CSS. Tab.Do runs any other chromedp action with the same
// deadline and failure report, and Tab.Context gives the chromedp context.
//
// Tests that need the browser fail when it is not installed.
// TABLEKEEPER_SKIP_BROWSER=1 turns that failure into an explicit skip,
// TABLEKEEPER_BROWSER names the binary to run instead of the installed one,
// and TABLEKEEPER_ARTIFACTS is where screenshots go (default
// test/artifacts, git-ignored), one folder per test.
//
// It must not import anything of the module but test/azurite, for the
// module's root: the tests of any package with a web page may use it.
package browser
