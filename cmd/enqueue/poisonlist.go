package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
)

// defaultLimit is how many records a table lists unless -limit says
// otherwise; -o json lists every one.
const defaultLimit = 50

// detailFlags are -details and -limit of the commands that select many
// records: a summary by group first, the records on request.
type detailFlags struct {
	details bool
	limit   int
}

// register adds -limit (and -details when details is set) to fs; what
// names the rows ("records", "messages").
func (d *detailFlags) register(fs *flag.FlagSet, details bool, what string) {
	if details {
		fs.BoolVar(&d.details, "details", false, "list the "+what+" one per line after the summary (at most -limit)")
	}
	fs.IntVar(&d.limit, "limit", defaultLimit, fmt.Sprintf("list at most this many %s in a table (0: all); -o json lists all unless -limit is given", what))
}

// check refuses a negative -limit and, for -o json without -limit, lifts
// the limit: scripts get every record.
func (d *detailFlags) check(fs *flag.FlagSet, c *common) error {
	if d.limit < 0 {
		return usagef("-limit: must be 0 (all) or more, got %d", d.limit)
	}
	if c.json() && !isSet(fs, "limit") {
		d.limit = 0
	}
	return nil
}

// cut returns how many of n rows to show and how many that leaves out.
func (d *detailFlags) cut(n int) (show, more int) {
	if d.limit > 0 && n > d.limit {
		return d.limit, n - d.limit
	}
	return n, 0
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// groupFlag is list's -group: alone, it lists the groups; with a value
// (-group=G, or -group G: the argument that follows), the records of
// group G.
type groupFlag struct {
	on   bool
	name string
}

func (g *groupFlag) String() string   { return g.name }
func (g *groupFlag) IsBoolFlag() bool { return true }

// Set takes "true" (the flag alone), "false", or a group name.
func (g *groupFlag) Set(s string) error {
	switch s {
	case "true":
		g.on = true
	case "false":
		g.on, g.name = false, ""
	default:
		g.on, g.name = true, s
	}
	return nil
}

// poisonList prints the poisoned records, newest first, after a summary
// by group; or the groups alone; or the records of one group.
func (m *Main) poisonList(ctx context.Context, args []string) error {
	var (
		c     common
		group groupFlag
		kind  string
		d     detailFlags
	)
	fs := m.newFlagSet("poison list", "poison list [-group [G]] [-kind K] [-limit N] [flags]",
		"Lists the poisoned messages of the work queue: how many in each group (the messages that share\n"+
			"a kind and a failure class: validation, not-found, unavailable, too-large, forbidden, conflict,\n"+
			"panic, dequeue-count, other), then the newest, one per line, at most -limit. Nothing is changed.\n"+
			"-group alone lists the groups only; -group G lists the messages of group G (requeue, delete and\n"+
			"purge take it too). A -kind or -group that names nothing known is refused, listing what exists.", &c)
	fs.Var(&group, "group", "alone: list the groups with counts; with a group G (-group G or -group=G): the messages of G")
	fs.StringVar(&kind, "kind", "", "only messages of this job kind")
	d.register(fs, false, "messages or groups")
	pos, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if group.on && group.name == "" && len(pos) == 1 {
		group.name, pos = pos[0], nil // -group G
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (this command takes flags only)", pos[0])
	}
	if err := d.check(fs, &c); err != nil {
		return err
	}
	ins, err := m.inspector(ctx, &c)
	if err != nil {
		return err
	}
	if err := m.checkSelection(ctx, ins, kind, group.name); err != nil {
		return err
	}
	recs, err := ins.List(ctx, kind)
	if err != nil {
		return err
	}
	if group.name != "" {
		recs = slices.DeleteFunc(recs, func(r poison.Record) bool { return poison.GroupName(r) != group.name })
	}

	if group.on && group.name == "" {
		groups := poison.GroupRecords(recs)
		n, more := d.cut(len(groups))
		if c.json() {
			out := make([]groupJSON, 0, n)
			for _, g := range groups[:n] {
				out = append(out, groupJSON{Group: g.Name, Kind: g.Kind, Class: g.Class, Count: g.Count, Newest: g.Newest, Example: g.Example})
			}
			return writeJSON(m.Stdout, out)
		}
		if len(groups) == 0 {
			fmt.Fprintf(m.Stdout, "no poisoned messages for queue %s\n", c.queue)
			return nil
		}
		tw := newTable(m.Stdout)
		writeGroups(tw, groups[:n])
		return m.flushMore(tw, more, "groups")
	}

	n, more := d.cut(len(recs))
	if c.json() {
		out := make([]recordJSON, 0, n)
		for _, r := range recs[:n] {
			out = append(out, toRecordJSON(r))
		}
		return writeJSON(m.Stdout, out)
	}
	if len(recs) == 0 {
		if group.name != "" {
			fmt.Fprintf(m.Stdout, "no poisoned messages in group %s for queue %s\n", group.name, c.queue)
		} else {
			fmt.Fprintf(m.Stdout, "no poisoned messages for queue %s\n", c.queue)
		}
		return nil
	}
	tw := newTable(m.Stdout)
	if group.name == "" {
		groups := poison.GroupRecords(recs)
		fmt.Fprintf(m.Stdout, "%d poisoned messages in %d groups:\n", len(recs), len(groups))
		writeGroups(tw, groups)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "\nNewest first:\n")
	}
	row(tw, "MESSAGE ID", "OP ID", "KIND", "DELIVERIES", "LAST ATTEMPT", "GROUP", "REASON")
	for _, r := range recs[:n] {
		row(tw, r.MessageID, r.OpID, r.Kind, strconv.FormatInt(r.DequeueCount, 10), timeCell(r.LastAttempt), poison.GroupName(r), cell(r.Reason, reasonChars))
	}
	return m.flushMore(tw, more, "messages")
}

// writeGroups writes a table of groups: name, count, newest, example.
func writeGroups(tw io.Writer, groups []poison.Group) {
	row(tw, "GROUP", "COUNT", "NEWEST", "EXAMPLE REASON")
	for _, g := range groups {
		row(tw, g.Name, strconv.Itoa(g.Count), timeCell(g.Newest), cell(g.Example, reasonChars))
	}
}

// flushMore flushes a table and says how many rows -limit left out.
func (m *Main) flushMore(tw *tabwriter.Writer, more int, what string) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(m.Stdout, "%d more %s (use -limit 0 for all)\n", more, what)
	}
	return nil
}

// groupCount is one row of a summary by group (and state).
type groupCount struct {
	group, state string
	count        int
	oldest       time.Time // the earliest LastAttempt
}

// summarize counts records by group and, when byState, state; the
// largest first.
func summarize(recs []poison.Record, byState bool) []groupCount {
	idx := map[[2]string]int{}
	var out []groupCount
	for _, r := range recs {
		k := [2]string{poison.GroupName(r), ""}
		if byState {
			k[1] = r.State
		}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, groupCount{group: k[0], state: k[1], oldest: r.LastAttempt})
		}
		out[i].count++
		if r.LastAttempt.Before(out[i].oldest) {
			out[i].oldest = r.LastAttempt
		}
	}
	slices.SortStableFunc(out, func(a, b groupCount) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.group, b.group), cmp.Compare(a.state, b.state))
	})
	return out
}

// writeSummary writes a table of recs counted by group (and, when
// byState, state), the largest first, and flushes it.
func writeSummary(tw *tabwriter.Writer, recs []poison.Record, byState bool) error {
	if byState {
		row(tw, "GROUP", "STATE", "COUNT", "OLDEST LAST ATTEMPT")
	} else {
		row(tw, "GROUP", "COUNT", "OLDEST LAST ATTEMPT")
	}
	for _, g := range summarize(recs, byState) {
		if byState {
			row(tw, g.group, g.state, strconv.Itoa(g.count), timeCell(g.oldest))
		} else {
			row(tw, g.group, strconv.Itoa(g.count), timeCell(g.oldest))
		}
	}
	return tw.Flush()
}

// writeSelected prints the counts of recs by group (and state) and, with
// -details, a table of head with one row of cells per record, at most
// -limit, and how many more (what names them).
func (m *Main) writeSelected(recs []poison.Record, byState bool, d detailFlags, head []string, what string, cells func(poison.Record) []string) error {
	if len(recs) == 0 {
		return nil
	}
	tw := newTable(m.Stdout)
	if err := writeSummary(tw, recs, byState); err != nil {
		return err
	}
	if !d.details {
		return nil
	}
	fmt.Fprintln(m.Stdout)
	row(tw, head...)
	n, more := d.cut(len(recs))
	for _, r := range recs[:n] {
		row(tw, cells(r)...)
	}
	return m.flushMore(tw, more, what)
}
