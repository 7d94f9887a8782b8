package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
)

// durationValue is a flag.Value for a non-negative duration in the
// commands' one syntax: Go's ("90m", "36h") or days ("7d", "1d12h"); see
// cli.ParseDuration.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Get returns the duration (flag.Getter).
func (d *durationValue) Get() any { return time.Duration(*d) }

// Set parses s.
func (d *durationValue) Set(s string) error {
	v, err := cli.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("must not be negative, got %q", s)
	}
	*d = durationValue(v)
	return nil
}

// listFlag is a repeatable string flag (-manifest, -metrics, -exports):
// each use adds one value.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}
