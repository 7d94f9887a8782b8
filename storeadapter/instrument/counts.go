package instrument

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Counts is an Observer that counts calls, errors and total latency per Op.
// The zero value is ready to use; it is safe for concurrent use.
type Counts struct {
	ops sync.Map // Op -> *tally
}

type tally struct{ calls, errors, expected, nanos atomic.Int64 }

var _ Observer = (*Counts)(nil)

// Observe counts one call.
func (c *Counts) Observe(call Call, took time.Duration, err error) {
	v, ok := c.ops.Load(call.Op)
	if !ok {
		v, _ = c.ops.LoadOrStore(call.Op, new(tally))
	}
	t := v.(*tally)
	t.calls.Add(1)
	if err != nil {
		t.errors.Add(1)
		if Expected(err) {
			t.expected.Add(1)
		}
	}
	t.nanos.Add(int64(took))
}

// Stats are the figures of one Op, or of all of them.
type Stats struct {
	Calls  int64
	Errors int64 // calls that returned an error
	// Expected counts the Errors that were expected answers (see
	// Expected): Errors - Expected are the failures.
	Expected int64
	Latency  time.Duration // total time in calls, as their callers saw it
}

// Snapshot is what Counts held at one moment, by Op. An Op never called
// is absent (its zero Stats).
type Snapshot map[Op]Stats

// Snapshot returns the counts so far.
func (c *Counts) Snapshot() Snapshot {
	s := make(Snapshot)
	c.ops.Range(func(op, v any) bool {
		t := v.(*tally)
		s[op.(Op)] = Stats{Calls: t.calls.Load(), Errors: t.errors.Load(), Expected: t.expected.Load(), Latency: time.Duration(t.nanos.Load())}
		return true
	})
	return s
}

// Ops returns the operations called, in name order.
func (s Snapshot) Ops() []Op { return slices.Sorted(maps.Keys(s)) }

// Total returns the sums over every Op.
func (s Snapshot) Total() Stats {
	var t Stats
	for _, st := range s {
		t.Calls += st.Calls
		t.Errors += st.Errors
		t.Expected += st.Expected
		t.Latency += st.Latency
	}
	return t
}

// String renders the snapshot as a table: one line per Op in name order
// (calls, errors, of which expected answers, mean latency), then the total.
func (s Snapshot) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "op\tcalls\terrors\texpected\tmean latency")
	row := func(name string, st Stats) {
		var mean time.Duration
		if st.Calls > 0 {
			mean = st.Latency / time.Duration(st.Calls)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%v\n", name, st.Calls, st.Errors, st.Expected, mean.Round(time.Microsecond))
	}
	for _, op := range s.Ops() {
		row(string(op), s[op])
	}
	row("total", s.Total())
	w.Flush()
	return b.String()
}
