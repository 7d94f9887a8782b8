package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/tablekeeper/tablekeeper", Version: "v0.0.0-20261123100000-0123456789ab+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "-trimpath", Value: "true"},
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
				{Key: "vcs.time", Value: "2026-11-23T10:00:00Z"},
				{Key: "vcs.modified", Value: modified},
			},
		}
	}
	tests := []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{
			name:    "stamped values win over the build information",
			version: "v1.2.3", commit: "fedcba9876543210fedcba9876543210fedcba98", date: "2026-11-20T08:00:00Z",
			bi:   vcs("true"),
			want: Info{"v1.2.3", "fedcba9876543210fedcba9876543210fedcba98", "2026-11-20T08:00:00Z", "go1.26.8", platform},
		},
		{
			name: "unstamped: module version and vcs settings, modified tree",
			bi:   vcs("true"),
			want: Info{"v0.0.0-20261123100000-0123456789ab+dirty", "0123456789abcdef0123456789abcdef01234567-dirty", "2026-11-23T10:00:00Z", "go1.26.8", platform},
		},
		{
			name: "unstamped, clean tree",
			bi:   vcs("false"),
			want: Info{"v0.0.0-20261123100000-0123456789ab+dirty", "0123456789abcdef0123456789abcdef01234567", "2026-11-23T10:00:00Z", "go1.26.8", platform},
		},
		{
			name:    "only the version stamped: the rest from vcs",
			version: "v2.0.0",
			bi:      vcs("false"),
			want:    Info{"v2.0.0", "0123456789abcdef0123456789abcdef01234567", "2026-11-23T10:00:00Z", "go1.26.8", platform},
		},
		{
			name: "no vcs (go run, or a tree without .git): devel and unknown",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: Info{"(devel)", "unknown", "unknown", "go1.26.8", platform},
		},
		{
			name: "no build information at all",
			want: Info{"(devel)", "unknown", "unknown", runtime.Version(), platform},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve(tt.version, tt.commit, tt.date, tt.bi)
			if got != tt.want {
				t.Errorf("resolve:\n got  %+v\n want %+v", got, tt.want)
			}
		})
	}
}

func TestInfoString(t *testing.T) {
	i := Info{"v1.2.3", "0123456789abcdef0123456789abcdef01234567-dirty", "2026-11-23T10:00:00Z", "go1.26.8", "linux/amd64"}
	want := "worker v1.2.3 (commit 0123456789ab-dirty, built 2026-11-23T10:00:00Z, go1.26.8 linux/amd64)"
	if got := i.String("worker"); got != want {
		t.Errorf("String:\n got  %s\n want %s", got, want)
	}
	for _, c := range []string{"unknown", "abc1234", "not-hex-at-all-but-long-enough"} {
		if got := shortCommit(c); got != c {
			t.Errorf("shortCommit(%q) = %q, want it unchanged", c, got)
		}
	}
}

func TestGetInTestBinary(t *testing.T) {
	// A test binary is not stamped: Get must still fill every field.
	got := String("version.test")
	for _, part := range []string{"version.test ", "(commit ", ", built ", runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(got, part) {
			t.Errorf("String = %q, missing %q", got, part)
		}
	}
}
