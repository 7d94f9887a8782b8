package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/poison"
)

// checkSelection refuses a -kind or -group that can select nothing because
// it names no kind or group (a typo), as a usage error that lists what
// exists with a did-you-mean, instead of letting the command report 0.
//
// A kind is known when it is registered (the catalog's) or a poisoned
// record has it. A group is known when it is "<kind>/<class>" of a known
// kind and one of poison.Classes, or a poisoned record's group (a record
// whose envelope did not decode has the class alone). A well-formed group
// with no record is no error: it selects nothing, and says so. The
// records are read (one query per 1,000) only when a name is not
// well-formed, to list what exists.
func (m *Main) checkSelection(ctx context.Context, ins *poison.Inspector, kind, group string) error {
	kinds := catalog.ArgsRegistry(nil).Kinds()
	kindOK := kind == "" || slices.Contains(kinds, kind)
	groupOK := group == "" || wellFormedGroup(group, kinds)
	if kindOK && groupOK {
		return nil
	}
	recs, err := ins.List(ctx, "")
	if err != nil {
		return err
	}
	groups := poison.GroupRecords(recs)
	var present []string
	for _, g := range groups {
		present = append(present, g.Name)
		if g.Kind != "" && !slices.Contains(kinds, g.Kind) {
			kinds = append(kinds, g.Kind)
		}
	}
	if !kindOK && !slices.Contains(kinds, kind) {
		return &usageError{err: fmt.Errorf("-kind: %w", cli.Unknown("kind", kind, kinds, "known kinds"))}
	}
	if groupOK || slices.Contains(present, group) || wellFormedGroup(group, kinds) {
		return nil
	}
	// Suggest among the groups present, else among every well-formed one.
	hint := cli.DidYouMean(group, present)
	if hint == "" {
		var all []string
		for _, k := range kinds {
			for _, c := range poison.Classes() {
				all = append(all, k+"/"+c)
			}
		}
		hint = cli.DidYouMean(group, all)
	}
	listed := make([]string, 0, len(groups))
	for _, g := range groups[:min(len(groups), 20)] {
		listed = append(listed, fmt.Sprintf("%s (%d)", g.Name, g.Count))
	}
	if len(groups) > 20 {
		listed = append(listed, fmt.Sprintf("and %d more", len(groups)-20))
	}
	have := "no poisoned messages"
	if len(listed) > 0 {
		have = "groups present: " + strings.Join(listed, ", ")
	}
	return usagef("-group: unknown group %q%s; %s; a group is <kind>/<class>, with a kind of %s and a class of %s",
		group, hint, have, strings.Join(kinds, ", "), strings.Join(poison.Classes(), ", "))
}

// wellFormedGroup reports whether group is "<kind>/<class>" with a kind of
// kinds and a class of poison.Classes.
func wellFormedGroup(group string, kinds []string) bool {
	k, c, ok := strings.Cut(group, "/")
	return ok && slices.Contains(kinds, k) && slices.Contains(poison.Classes(), c)
}
