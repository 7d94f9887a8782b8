package main

import (
	"strings"
)

// listFlag is a repeatable string flag (-manifest, -metrics, -exports):
// each use adds one value.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}
