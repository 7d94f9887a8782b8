package cli

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for s, want := range map[string]time.Duration{
		"90m": 90 * time.Minute, "36h": 36 * time.Hour, "1h30m": 90 * time.Minute, "7d": 7 * day, "1d12h": 36 * time.Hour,
		"0": 0, "0d": 0, "-1h": -time.Hour, "-2d": -2 * day, "30s": 30 * time.Second, "1.5h": 90 * time.Minute,
	} {
		if got, err := ParseDuration(s); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"7":      `must be a duration such as 90m, 36h or 7d, got "7" (a unit is needed: 7s, 7m or 7d)`,
		"abc":    `got "abc"`,
		"d":      `got "d"`,
		"1.5d":   `got "1.5d"`,
		"7dd":    `got "7dd"`,
		"1d-1h":  `got "1d-1h"`,
		"":       `got ""`,
		"99999d": `got "99999d"`,
	} {
		if _, err := ParseDuration(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, want an error with %q", s, err, want)
		}
	}
	var d time.Duration
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	DurationVar(fs, &d, "older-than", time.Hour, "")
	if err := fs.Parse([]string{"-older-than", "7d"}); err != nil || d != 7*day {
		t.Errorf("-older-than 7d: %v, %v", d, err)
	}
}
