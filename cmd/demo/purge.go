package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/jobs/purge"
	"github.com/tablekeeper/tablekeeper/jobs/purgeday"
	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/daytable"
)

// The demo's high-volume delete part: the same week of login attempts is
// written twice, as the design guide recommends (one table per day, named
// by daytable.Name, created by daytable.Ensure) and as a table not
// designed for it (one table, a partition per day). Then the days older
// than demoKeepDays go: by one purgeday message (one DeleteTable per day)
// and by purge messages, one per expired day's partition (a query page and
// EGT batches of 100 deletes), and the storage calls of both are printed
// side by side.
const (
	demoDayPrefix  = "LoginAttempts"
	demoFlatTable  = "LoginAttemptsAll" // not a day table: its suffix is no date
	demoDays       = 7
	demoKeepDays   = 3
	demoUsers      = 10
	demoPerUserDay = 100 // attempts per user and day
)

// runPurgeDemo seeds a fresh store, purges both ways and reports.
func runPurgeDemo(ctx context.Context, out io.Writer, log *slog.Logger, cfg runner.Config, kinds catalog.Config) error {
	store := localstore.New(localstore.Options{})
	today := time.Now().UTC().Truncate(24 * time.Hour)
	var days []string // oldest first
	for d := demoDays - 1; d >= 0; d-- {
		name, err := seedDemoDay(ctx, store.Tables(), today.AddDate(0, 0, -d))
		if err != nil {
			return fmt.Errorf("demo: seed day tables: %w", err)
		}
		days = append(days, name)
	}
	if err := store.Queue(demoQueue).Create(ctx); err != nil {
		return err
	}

	cl, err := demoClient(store)
	if err != nil {
		return err
	}
	keep := demoKeepDays
	if err := sendDemo(ctx, cl, "op-demo-purgeday", purgeday.Args{Prefix: demoDayPrefix, KeepDays: &keep}); err != nil {
		return err
	}
	_, byDay, err := drainDemo(ctx, store, log, cfg, kinds)
	if err != nil {
		return err
	}
	// The fallback: the same days, each a partition of one table.
	expired := days[:demoDays-demoKeepDays-1]
	for _, table := range expired {
		pk := table[len(demoDayPrefix):]
		if err := sendDemo(ctx, cl, "op-demo-purge-"+pk, purge.Args{Table: demoFlatTable, PK: &pk}); err != nil {
			return err
		}
	}
	_, byPurge, err := drainDemo(ctx, store, log, cfg, kinds)
	if err != nil {
		return err
	}

	rows := len(expired) * demoUsers * demoPerUserDay
	fmt.Fprintf(out, "\nhigh-volume delete: %d days of %d login attempts each; the days before today-%d go (keepDays %d)\n",
		demoDays, demoUsers*demoPerUserDay, demoKeepDays, demoKeepDays)
	pd := byDay["op-demo-purgeday"]
	if pd.err != nil {
		return fmt.Errorf("demo: purgeday: %w", pd.err)
	}
	var all instrument.Snapshot
	for _, table := range expired {
		j := byPurge["op-demo-purge-"+table[len(demoDayPrefix):]]
		if j.err != nil {
			return fmt.Errorf("demo: purge of %s: %w", table, j.err)
		}
		all = addCalls(all, j.calls)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  design\tstorage calls\tresult\n")
	fmt.Fprintf(w, "  a table per day, 1 purgeday message\t%s\t%s\n", formatCalls(pd.calls), pd.result)
	fmt.Fprintf(w, "  one table, %d purge messages (a partition per day)\t%s\t%d entities deleted in EGT batches\n", len(expired), formatCalls(all), rows)
	if err := w.Flush(); err != nil {
		return err
	}
	left, _, err := store.Tables().ListTables(ctx, demoDayPrefix, "")
	if err != nil {
		return err
	}
	n, err := countEntities(ctx, store.Tables(), demoFlatTable)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  left: tables %v; %s holds %d entities\n", left, demoFlatTable, n)
	return nil
}

// seedDemoDay writes one day's attempts to its day table (created as a
// writer would, with daytable.Ensure) and to the day's partition of the
// flat table, in EGT batches of 100 (one user's day).
func seedDemoDay(ctx context.Context, t storeadapter.Tables, day time.Time) (string, error) {
	name, err := daytable.Ensure(ctx, t, demoDayPrefix, day)
	if err != nil {
		return "", err
	}
	pk := day.Format("20060102")
	for u := range demoUsers {
		var dayOps, flatOps []storeadapter.TableOp
		for i := range demoPerUserDay {
			at := day.Add(time.Duration(i) * 14 * time.Minute)
			props := map[string]any{"User": fmt.Sprintf("user%02d", u), "At": at, "OK": i%7 != 0}
			dayOps = append(dayOps, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{
				PartitionKey: fmt.Sprintf("user%02d", u), RowKey: at.Format("150405"), Properties: props}})
			flatOps = append(flatOps, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{
				PartitionKey: pk, RowKey: fmt.Sprintf("user%02d-%s", u, at.Format("150405")), Properties: props}})
		}
		if err := t.Transact(ctx, name, dayOps); err != nil {
			return "", err
		}
		if err := idempotent.Transact(ctx, t, demoFlatTable, flatOps); err != nil {
			return "", err
		}
	}
	return name, nil
}
