package main

import (
	"strings"
	"testing"
)

// TestArchiveBlobTargetChecks checks that the CLI refuses, before sending
// anything, a -to-blob prefix with dot segments and a blob name longer than
// Azure allows, with the archive args' own rules.
func TestArchiveBlobTargetChecks(t *testing.T) {
	for _, c := range []struct{ name, toBlob, want string }{
		{"parent segment", "archive/../x", `-to-blob: "archive/../x": the prefix must not hold "." or ".." path segments`},
		{"current segment", "archive/./x", `-to-blob: "archive/./x": the prefix must not hold`},
		{"escape", "archive/../../etc", "the prefix must not hold"},
		{"name too long", "archive/" + strings.Repeat("x", 1010), "-to-blob: the blobs would be named like xxx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			r := b.run("", "archive", "-table", "Employees", "-to-blob", c.toBlob, "-pk", "p", "-rk", "r")
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, c.want)
			}
			if n := b.count(b.queue); n != 0 {
				t.Errorf("the queue holds %d messages after a usage error, want 0", n)
			}
		})
	}
}
