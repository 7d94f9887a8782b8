package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// The poison figures (-job poison), on each run: b.n archive jobs of rows
// that do not exist (the operator trial's archive/not-found group: each is
// poisoned on its first delivery) are drained by the worker, which poisons
// them all; then poison requeue -all sends them back (timed, calls
// counted); the worker drains and poisons them again, into a table that
// already holds b.n records; every poison message is received once (as an
// earlier sweep or another consumer would), so the receipts the records
// note go stale and a second requeue -all needs the sweep; the worker
// poisons them a third time; then poison purge removes every record (2 ×
// b.n requeued, b.n poisoned, with b.n poison messages). Each phase prints its
// messages (records) per second and storage calls per message, with the
// calls that returned an expected answer (not found, already exists,
// precondition failed: instrument.Expected) apart from the failures.

// poisonRuns prints the poison figures on store, every counted call
// delayed by latency.
func (b bench) poisonRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration) error {
	suffix := strings.ToLower(rand.Text()[:6])
	queue, table := "bench-poison-"+suffix, "BenchPoison"+suffix
	for _, t := range []string{table, table + "Archive"} {
		if err := idempotent.EnsureTable(ctx, store.Tables(), t); err != nil {
			return err
		}
	}
	if err := store.Queue(queue).Create(ctx); err != nil {
		return err
	}
	send := func(round int) error {
		c, err := client.New(client.Config{Store: store, Queue: queue, Concurrency: 16})
		if err != nil {
			return err
		}
		args, ids := make([]jobs.Args, b.n), make([]string, b.n)
		for i := range b.n {
			args[i] = archive.Args{Table: table, To: table + "Archive", PK: to.Ptr("P"), RK: to.Ptr(fmt.Sprintf("%08d", i))}
			ids[i] = fmt.Sprintf("op-bench-poison-%d-%d", round, i)
		}
		_, err = c.EnqueueMany(ctx, args, client.IDs(ids...))
		return err
	}
	poisonRound := func(name string) (result, error) {
		calls := &instrument.Counts{}
		r, err := benchRunner(instrumented(store, latency, calls), queue, catalog.Config{Archive: archive.Config{CheckpointTable: "BenchCheckpoints"}}, b.conc)
		if err != nil {
			return result{}, err
		}
		res, err := measure(name, calls, func() error { return r.Run(ctx) })
		if err != nil {
			return result{}, err
		}
		if s := r.Stats(); s.Poisoned != int64(b.n) {
			return result{}, fmt.Errorf("%s: poisoned %d of %d (stats %+v)", name, s.Poisoned, b.n, s)
		}
		return res, nil
	}
	inspector := func(calls *instrument.Counts) (*poison.Inspector, error) {
		st := instrumented(store, latency, calls)
		return poison.NewInspector(poison.Config{Tables: st.Tables(), Source: st.Queue(queue),
			Poison: st.Queue(queue + "-poison"), Blobs: st.Container(queue + "-poison"), Host: "bench"})
	}

	var rows []result
	if err := send(1); err != nil {
		return err
	}
	first, err := poisonRound("poison (worker), empty table")
	if err != nil {
		return err
	}
	rows = append(rows, first)

	// requeueAll times a requeue of every record and checks that it left
	// no poison message.
	requeueAll := func(name string) (result, error) {
		calls := &instrument.Counts{}
		in, err := inspector(calls)
		if err != nil {
			return result{}, err
		}
		res, err := measure(name, calls, func() error {
			recs, err := in.Requeue(ctx, poison.RequeueOptions{All: true, Concurrency: b.conc})
			if err == nil && len(recs) != b.n {
				err = fmt.Errorf("requeued %d of %d", len(recs), b.n)
			}
			return err
		})
		if err != nil {
			return result{}, err
		}
		if n, err := store.Queue(queue + "-poison").ApproximateCount(ctx); err != nil || n != 0 {
			return result{}, fmt.Errorf("%s: the poison queue holds %d messages after it (%v), want 0", name, n, err)
		}
		return res, nil
	}
	requeue, err := requeueAll("requeue -all")
	if err != nil {
		return err
	}
	rows = append(rows, requeue)

	second, err := poisonRound(fmt.Sprintf("poison again, %d in table", b.n))
	if err != nil {
		return err
	}
	rows = append(rows, second)

	// The receipts the records note go stale when anything receives the
	// poison messages (an earlier sweep, another consumer): then only a
	// sweep finds them. Receive each once and make it visible again, as
	// a sweep does, uncounted.
	if err := touchAll(ctx, store.Queue(queue+"-poison"), b.n); err != nil {
		return err
	}
	requeueSweep, err := requeueAll("requeue, stale receipts: sweep")
	if err != nil {
		return err
	}
	rows = append(rows, requeueSweep)
	third, err := poisonRound(fmt.Sprintf("poison again, %d in table", 2*b.n))
	if err != nil {
		return err
	}
	rows = append(rows, third)

	calls := &instrument.Counts{}
	in, err := inspector(calls)
	if err != nil {
		return err
	}
	purge, err := measure("purge (3 records per message)", calls, func() error {
		res, err := in.Purge(ctx, poison.PurgeOptions{Concurrency: b.conc})
		if err == nil && len(res.Records) != 3*b.n {
			err = fmt.Errorf("purged %d of %d records", len(res.Records), 3*b.n)
		}
		return err
	})
	if err != nil {
		return err
	}
	rows = append(rows, purge)
	if n, err := store.Queue(queue + "-poison").ApproximateCount(ctx); err != nil || n != 0 {
		return fmt.Errorf("after the purge the poison queue holds %d messages (%v), want 0", n, err)
	}

	fmt.Printf("%s: %d archive jobs of missing rows, concurrency %d (worker, requeue and purge)\n", title, b.n, b.conc)
	fmt.Printf("%-30s %8s %8s %10s %10s %10s  %s\n", "", "seconds", "msgs/s", "calls/msg", "expected", "failures", "calls per message by operation")
	for _, r := range rows {
		tot := r.calls.Total()
		fmt.Printf("%-30s %8.2f %8.0f %10.2f %10.2f %10.2f  %s\n", r.name, r.took.Seconds(), r.movesPerSec(b.n), r.callsPerMove(b.n),
			float64(tot.Expected)/float64(b.n), float64(tot.Errors-tot.Expected)/float64(b.n), opsLine(r.calls, b.n))
	}
	fmt.Println("(the purge removes 3 records per message: two requeued, one poisoned with its poison message)")
	if b.verbose {
		for _, r := range rows {
			fmt.Printf("\n%s, calls by operation:\n%v", r.name, r.calls)
		}
	}
	fmt.Println()
	for _, t := range []string{table, table + "Archive", poison.TableName(queue)} {
		if err := store.Tables().DeleteTable(ctx, t); err != nil && !errors.Is(err, storeadapter.ErrNotFound) {
			return err
		}
	}
	return nil
}

// touchAll receives every one of the n messages of q once and makes it
// visible again at once, as a sweep does, which leaves stale every pop
// receipt handed out before.
func touchAll(ctx context.Context, q storeadapter.Queue, n int) error {
	seen := map[string]bool{}
	for len(seen) < n {
		msgs, err := q.Receive(ctx, storeadapter.MaxReceiveCount, time.Minute)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("touch: saw %d of %d poison messages", len(seen), n)
		}
		for _, m := range msgs {
			seen[m.ID] = true
			if _, err := q.Update(ctx, m.ID, m.PopReceipt, m.Text, 0); err != nil {
				return err
			}
		}
	}
	return nil
}
