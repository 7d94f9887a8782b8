package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// durationValue is a flag.Value for a non-negative duration written as Go
// writes durations ("90m", "36h") or as whole days ("7d").
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Set parses s.
func (d *durationValue) Set(s string) error {
	var v time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return fmt.Errorf("must be a duration such as 90m, 36h or 7d, got %q", s)
		}
		v = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if v, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("must be a duration such as 90m, 36h or 7d, got %q", s)
		}
	}
	if v < 0 {
		return fmt.Errorf("must not be negative, got %q", s)
	}
	*d = durationValue(v)
	return nil
}
