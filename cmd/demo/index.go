package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
)

// demoChange is one change the index part of the demo makes to Employees,
// as an application would, before it enqueues the entity's index message.
type demoChange struct {
	id, pk, rk, what string
	set              map[string]any // properties to merge; nil deletes the entity
	unchanged        bool           // no write: the message alone (a repeat)
}

var demoChanges = []demoChange{
	{id: "op-demo-ix-email", pk: "Sales", rk: "000003", what: "Email changed to dev.jones@contoso.example",
		set: map[string]any{"Email": "dev.jones@contoso.example"}},
	{id: "op-demo-ix-out", pk: "Sales", rk: "000010", what: "LastName Jones renamed Smith", set: map[string]any{"LastName": "Smith"}},
	{id: "op-demo-ix-in", pk: "Marketing", rk: "000005", what: "LastName Okafor renamed Jones", set: map[string]any{"LastName": "Jones"}},
	{id: "op-demo-ix-del", pk: "Engineering", rk: "000024", what: "deleted (a Jones)"},
	{id: "op-demo-ix-same", pk: "Sales", rk: "000001", what: "not changed (the message repeated)", unchanged: true},
}

// runIndexDemo is the demo's index part, on the store the archive part
// left: a rebuild of Employees' indexes, lookups, a few changes each with
// its index message, and the same lookups again. Index jobs run one at a
// time, so that each job's storage calls can be told apart.
func runIndexDemo(ctx context.Context, out io.Writer, store *localstore.Store, log *slog.Logger, cfg runner.Config, kinds catalog.Config) error {
	x, err := indexes.Open(store, nil, kinds.Index) // the lookups read the store directly
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "indexes on %s, declared in the config's \"index\" section:\n", demoCurrent)
	for _, d := range demoIndexes {
		fmt.Fprintf(w, "  %s\t%s\n", d.Name, describeDecl(d))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	cl, err := demoClient(store)
	if err != nil {
		return err
	}
	if err := sendDemo(ctx, cl, "op-demo-rebuild", index.Rebuild(demoCurrent)); err != nil {
		return err
	}
	s, done, err := drainDemo(ctx, store, log, cfg, kinds)
	if err != nil {
		return err
	}
	if s.Succeeded != 1 {
		return fmt.Errorf("demo: the index rebuild did not succeed: %+v", done)
	}
	rb := done["op-demo-rebuild"]
	fmt.Fprintf(out, "\nop-demo-rebuild: index rebuild of %s\n  %s\n  storage calls: %s\n\n", demoCurrent, rb.result, formatCalls(rb.calls))
	if err := printLookups(ctx, out, x, "dev.3@contoso.example"); err != nil {
		return err
	}

	t := store.Tables()
	for _, c := range demoChanges {
		switch {
		case c.unchanged:
		case c.set == nil:
			err = t.DeleteEntity(ctx, demoCurrent, c.pk, c.rk, storeadapter.ETagAny)
		default:
			_, err = t.UpdateEntity(ctx, demoCurrent, storeadapter.Entity{PartitionKey: c.pk, RowKey: c.rk, Properties: c.set}, storeadapter.Merge, storeadapter.ETagAny)
		}
		if err != nil {
			return fmt.Errorf("demo: change %s/%s: %w", c.pk, c.rk, err)
		}
		if err := sendDemo(ctx, cl, c.id, index.Reconcile(demoCurrent, c.pk, c.rk)); err != nil {
			return err
		}
	}
	s, done, err = drainDemo(ctx, store, log, cfg, kinds)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nchanges, each followed by an index message {\"table\",\"pk\",\"rk\"}:")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	var all instrument.Snapshot
	for _, c := range demoChanges {
		j := done[c.id]
		fmt.Fprintf(w, "  %s/%s\t%s\t%s\t%d calls\n", c.pk, c.rk, c.what, cmp.Or(j.result, fmt.Sprint(j.err)), j.calls.Total().Calls)
		all = addCalls(all, j.calls)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "messages:  received %d  processed %d  retried %d  poisoned %d\n", s.Received, s.Succeeded, s.Retried, s.Poisoned)
	fmt.Fprintf(out, "storage calls of the %d reconciles: %s\n\n", len(demoChanges), formatCalls(all))
	if err := printLookups(ctx, out, x, "dev.jones@contoso.example", "dev.3@contoso.example"); err != nil {
		return err
	}
	return nil
}

// describeDecl says in a few words what an index declaration keeps.
func describeDecl(d indexes.Decl) string {
	switch d.Kind {
	case indexes.KindCopy:
		return fmt.Sprintf("copy of %s per %s, in the entity's partition", strings.Join(d.Properties, ", "), d.Property)
	case indexes.KindList:
		return fmt.Sprintf("list of the keys per %s, in table %s", d.Property, d.Table)
	default:
		return fmt.Sprintf("one row per %s and key, in table %s", d.Property, d.Table)
	}
}

// printLookups prints who is called Jones (by both LastName indexes) and
// the email copies of the given addresses in Sales.
func printLookups(ctx context.Context, out io.Writer, x *indexes.Set, emails ...string) error {
	list, err := x.Lookup(ctx, demoCurrent, "lastName", "Jones", indexes.LookupOptions{})
	if err != nil {
		return err
	}
	rows, err := x.Lookup(ctx, demoCurrent, "lastNameRows", "Jones", indexes.LookupOptions{})
	if err != nil {
		return err
	}
	same := "lastNameRows says the same"
	if !slices.Equal(list, rows) {
		same = "lastNameRows differs: " + formatKeys(rows)
	}
	fmt.Fprintf(out, "lookup lastName \"Jones\": %s (%s)\n", formatKeys(list), same)
	sales := "Sales"
	for _, email := range emails {
		ms, err := x.Lookup(ctx, demoCurrent, "email", email, indexes.LookupOptions{PK: &sales, Entities: true})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "lookup email %q in Sales: ", email)
		if len(ms) == 0 {
			fmt.Fprintln(out, "none")
		}
		for _, m := range ms {
			fmt.Fprintf(out, "%s/%s, the copy holds", m.PK, m.RK)
			if m.Entity != nil {
				for _, p := range demoIndexes[0].Properties {
					fmt.Fprintf(out, " %s=%v", p, m.Entity.Properties[p])
				}
			}
			fmt.Fprintln(out)
		}
	}
	return nil
}

// formatKeys lists keys grouped by partition: "Sales 000003 000017; ...".
func formatKeys(ms []indexes.Match) string {
	if len(ms) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, m := range ms {
		switch {
		case i == 0:
			b.WriteString(m.PK)
		case m.PK != ms[i-1].PK:
			b.WriteString("; " + m.PK)
		}
		b.WriteString(" " + m.RK)
	}
	return b.String()
}

// demoJob is what one index job did.
type demoJob struct {
	result string
	err    error
	calls  instrument.Snapshot // its table and blob calls
}

// drainDemo runs the worker until the queue is drained, one job at a time,
// and returns what each job did by operation id. The queue's calls
// (receive, lease renewals, delete) are not counted: a job's calls are
// those between its start and its end.
func drainDemo(ctx context.Context, store *localstore.Store, log *slog.Logger, cfg runner.Config, kinds catalog.Config) (runner.Stats, map[string]demoJob, error) {
	counts := &instrument.Counts{}
	ins := instrument.Wrap(store, instrument.Options{Observers: []instrument.Observer{instrument.ObserverFunc(func(c instrument.Call, took time.Duration, err error) {
		if !queueOps[c.Op] {
			counts.Observe(c, took, err)
		}
	})}})
	var mu sync.Mutex
	done := map[string]demoJob{}
	var before instrument.Snapshot
	cfg.Concurrency = 1
	cfg.Observers = append(slices.Clip(cfg.Observers), runner.ObserverFunc(func(_ context.Context, e runner.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Type {
		case runner.Started:
			before = counts.Snapshot()
		case runner.Finished:
			done[e.Envelope.ID] = demoJob{result: e.Result, err: e.Err, calls: subCalls(counts.Snapshot(), before)}
		}
	}))
	r, err := cli.NewRunner(ins, demoQueue, cfg, kinds, log)
	if err != nil {
		return runner.Stats{}, nil, err
	}
	if err := r.Run(ctx); err != nil {
		return runner.Stats{}, nil, err
	}
	return r.Stats(), done, nil
}

// queueOps are the instrument's queue operations.
var queueOps = map[instrument.Op]bool{
	instrument.OpCreateQueue: true, instrument.OpDeleteQueue: true, instrument.OpSend: true, instrument.OpReceive: true,
	instrument.OpUpdate: true, instrument.OpDeleteMessage: true, instrument.OpPeek: true, instrument.OpClear: true,
	instrument.OpApproximateCount: true,
}

// subCalls returns the calls made between two snapshots.
func subCalls(after, before instrument.Snapshot) instrument.Snapshot {
	d := instrument.Snapshot{}
	for op, st := range after {
		if n := st.Calls - before[op].Calls; n > 0 {
			d[op] = instrument.Stats{Calls: n, Errors: st.Errors - before[op].Errors, Latency: st.Latency - before[op].Latency}
		}
	}
	return d
}

// addCalls returns the sum of two snapshots.
func addCalls(a, b instrument.Snapshot) instrument.Snapshot {
	s := instrument.Snapshot{}
	for _, x := range []instrument.Snapshot{a, b} {
		for op, st := range x {
			t := s[op]
			t.Calls, t.Errors, t.Latency = t.Calls+st.Calls, t.Errors+st.Errors, t.Latency+st.Latency
			s[op] = t
		}
	}
	return s
}

// formatCalls renders a snapshot on one line: "12 (GetEntity 6, Query 2, ...)".
func formatCalls(s instrument.Snapshot) string {
	var parts []string
	for _, op := range s.Ops() {
		parts = append(parts, fmt.Sprintf("%s %d", op, s[op].Calls))
	}
	return fmt.Sprintf("%d (%s)", s.Total().Calls, strings.Join(parts, ", "))
}
