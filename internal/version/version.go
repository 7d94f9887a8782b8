package version

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set by the linker: go build -ldflags "-X
// github.com/tablekeeper/tablekeeper/internal/version.Version=v1.2.3 …".
// They are variables (not constants) only so that -X can set them; nothing
// else writes them. Empty means "not stamped": Get falls back to the build
// information.
var (
	// Version is the release, such as v1.2.3 (git describe).
	Version string
	// Commit is the full git commit hash, with "-dirty" when the tree had
	// uncommitted changes.
	Commit string
	// Date is the commit's time, RFC 3339 in UTC (the commit's, not the
	// build's, so that one commit always gives the same binary).
	Date string
)

// Info is one build's identity.
type Info struct {
	// Version is the release (v1.2.3), the module's pseudo-version, or
	// "(devel)" when nothing says.
	Version string
	// Commit is the git commit, "-dirty" appended when the tree had
	// uncommitted changes; "unknown" when nothing says.
	Commit string
	// Date is the commit's time (RFC 3339, UTC); "unknown" when nothing says.
	Date string
	// GoVersion is the toolchain that built the binary, such as go1.26.8.
	GoVersion string
	// Platform is GOOS/GOARCH, such as linux/amd64.
	Platform string
}

// Get returns this binary's Info: the linker-stamped values, each missing
// one filled from debug.ReadBuildInfo.
var Get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	return resolve(Version, Commit, Date, bi)
})

// String returns the one-line identity of program, as -version prints it:
//
//	worker v1.2.3 (commit 0123456789ab, built 2026-11-23T10:00:00Z, go1.26.8 linux/amd64)
//
// The commit is shortened to 12 hex digits (as Go pseudo-versions do),
// keeping a "-dirty" suffix.
func String(program string) string {
	return Get().String(program)
}

// String formats i for program; see the package-level String.
func (i Info) String(program string) string {
	return fmt.Sprintf("%s %s (commit %s, built %s, %s %s)", program, i.Version, shortCommit(i.Commit), i.Date, i.GoVersion, i.Platform)
}

// resolve combines the stamped values with the build information bi (nil
// when there is none): a stamped value wins; an unstamped one comes from
// the module version or the vcs.* settings.
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, Date: date, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		var revision, vcsTime string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" && revision != "" {
			info.Commit = revision
			if modified {
				info.Commit += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = vcsTime
		}
	}
	info.Version = cmp.Or(info.Version, "(devel)")
	info.Commit = cmp.Or(info.Commit, "unknown")
	info.Date = cmp.Or(info.Date, "unknown")
	info.GoVersion = cmp.Or(info.GoVersion, runtime.Version())
	return info
}

// shortCommit shortens a hex commit hash to 12 digits, keeping a suffix
// such as "-dirty"; anything else is returned as it is.
func shortCommit(c string) string {
	hash, suffix, _ := strings.Cut(c, "-")
	if len(hash) <= 12 || strings.Trim(hash, "0123456789abcdef") != "" {
		return c
	}
	if suffix != "" {
		suffix = "-" + suffix
	}
	return hash[:12] + suffix
}
