package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// sdkTables returns the Azure SDK's own table service client on the
// emulator: the client of an application we did not write.
func sdkTables(t *testing.T) *aztables.ServiceClient {
	t.Helper()
	svc, err := aztables.NewServiceClientFromConnectionString(emulatorConnectionString, nil)
	if err != nil {
		// The SDK's error may quote the connection string: do not log it.
		t.Fatal("aztables: the emulator's connection string was refused")
	}
	return svc
}

// sdkCreate creates tables with the SDK and deletes them when the test
// ends.
func (e *env) sdkCreate(svc *aztables.ServiceClient, names ...string) {
	e.t.Helper()
	for _, name := range names {
		if _, err := svc.CreateTable(e.ctx, name, nil); err != nil {
			e.t.Fatalf("aztables: create table %s: %v", name, err)
		}
		e.t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			deleteTable(ctx, e.t, name)
		})
	}
}

// sdkList lists the tables whose names start with prefix, with the SDK.
func (e *env) sdkList(svc *aztables.ServiceClient, prefix string) []string {
	e.t.Helper()
	filter := fmt.Sprintf("TableName ge '%s' and TableName lt '%s{'", prefix, prefix)
	var names []string
	for pager := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &filter}); pager.More(); {
		page, err := pager.NextPage(e.ctx)
		if err != nil {
			e.t.Fatalf("aztables: list tables: %v", err)
		}
		for _, tp := range page.Tables {
			names = append(names, *tp.Name)
		}
	}
	slices.Sort(names)
	return names
}

// days returns prefix + YYYYMMDD for the n days up to today (UTC), oldest
// first.
func days(prefix string, n int) []string {
	today := time.Now().UTC()
	var out []string
	for i := n - 1; i >= 0; i-- {
		out = append(out, prefix+today.AddDate(0, 0, -i).Format("20060102"))
	}
	return out
}

// TestPurgeday: day tables created by the Azure SDK's own client are
// purged exactly (only expired real dates; tables whose suffix is not a
// real date, and another prefix's, untouched); the same message again is
// a no-op; a dry run prints its plan and deletes nothing; with exportTo
// every row of each expired day is in its verified export before the day
// is gone.
func TestPurgeday(t *testing.T) {
	e := setup(t, 4*time.Minute)
	svc := sdkTables(t)
	q := e.queue("purgeday")
	prefix := "LoginAttempts" + e.suffix
	if prefix[len(prefix)-1] >= '0' && prefix[len(prefix)-1] <= '9' {
		prefix += "x" // so that prefix + "2026" is not read as another prefix's day
	}
	all := days(prefix, 10)
	expired, kept := all[:6], all[6:] // keepDays 3 keeps today and the three days before
	others := []string{prefix + "Archive", prefix + "2026", prefix + "20261341", prefix + "20260230", prefix + "202611210",
		"Other" + e.suffix + "20200101"}
	e.sdkCreate(svc, append(slices.Clone(all), others...)...)
	before := e.sdkList(svc, prefix)

	// A dry run prints the plan and deletes nothing.
	out := e.enqueue("purgeday", "-queue", q, "-prefix", prefix, "-keep-days", "3", "-dry-run", "-id", "op-dry-"+e.suffix)
	if !strings.Contains(out, fmt.Sprintf("dry run: 6 of 10 day tables %s* are older than ", prefix)) {
		t.Errorf("dry run output:\n%s", out)
	}
	for _, name := range expired {
		if !strings.Contains(out, name) {
			t.Errorf("the dry run does not list %s:\n%s", name, out)
		}
	}
	for _, name := range append(slices.Clone(kept), others...) {
		if strings.Contains(out, name+" ") {
			t.Errorf("the dry run lists %s:\n%s", name, out)
		}
	}
	w := e.drainProc(q, 60*time.Second)
	if res := w.results(); len(res) != 1 || !strings.HasPrefix(res[0], "dry run: would delete 6 of 10 day tables") {
		t.Errorf("dry run results %q", res)
	}
	if now := e.sdkList(svc, prefix); !slices.Equal(now, before) {
		t.Errorf("the dry run changed the tables:\nbefore %q\nafter  %q", before, now)
	}

	// The purge deletes exactly the expired days.
	id := "op-purgeday-" + e.suffix
	e.enqueue("purgeday", "-queue", q, "-prefix", prefix, "-keep-days", "3", "-id", id)
	w = e.drainProc(q, 60*time.Second)
	if res := w.results(); len(res) != 1 || !strings.HasPrefix(res[0], "deleted 6 of 10 day tables") {
		t.Errorf("results %q", res)
	}
	want := slices.DeleteFunc(slices.Clone(before), func(n string) bool { return slices.Contains(expired, n) })
	after := e.sdkList(svc, prefix)
	if !slices.Equal(after, want) {
		t.Errorf("tables after the purge:\n got %q\nwant %q", after, want)
	}
	if other := e.sdkList(svc, "Other"+e.suffix); len(other) != 1 {
		t.Errorf("another prefix's table: %q", other)
	}

	// The same message again is a no-op.
	e.enqueue("purgeday", "-queue", q, "-prefix", prefix, "-keep-days", "3", "-id", id)
	w = e.drainProc(q, 60*time.Second)
	if res := w.results(); len(res) != 1 || !strings.HasPrefix(res[0], "nothing to delete: 0 of 4 day tables older than ") {
		t.Errorf("the redelivery's results %q", res)
	}
	if now := e.sdkList(svc, prefix); !slices.Equal(now, after) {
		t.Errorf("the redelivery changed the tables:\nbefore %q\nafter  %q", after, now)
	}
	if s := w.stats(); s.Poisoned != 0 || s.Retried != 0 {
		t.Errorf("worker counters %+v", s)
	}
	checkNoPoison(t, e, q)
}

// TestPurgedayExport: with exportTo, each expired day (rows written by
// the SDK) is exported in several parts, verified, and then deleted; every
// row is in its day's parts, property by property, Timestamp and ETag
// included.
func TestPurgedayExport(t *testing.T) {
	e := setup(t, 4*time.Minute)
	svc := sdkTables(t)
	q := e.queue("purgedayx")
	c := e.container("purgeday")
	ckpt := e.table("PurgedayCkpt")
	prefix := "Logins" + e.suffix + "x"
	all := days(prefix, 7)
	expired := all[:3]
	e.sdkCreate(svc, all...)
	if err := store.Container(c).Create(e.ctx); err != nil {
		t.Fatal(err)
	}
	wants := map[string][]storeadapter.Entity{}
	for d, name := range all {
		client := svc.NewClient(name)
		for i := range 40 {
			row := map[string]any{
				"PartitionKey": fmt.Sprintf("user%02d", i%7), "RowKey": fmt.Sprintf("%s-%04d", name, i),
				"Attempt": i, "Ok": i%3 != 0, "Note": strings.Repeat("n", 60) + " 'quoted' ü",
				"Big": fmt.Sprint(int64(1)<<40 + int64(i)), "Big@odata.type": "Edm.Int64",
				"At": time.Date(2026, 11, 1+d, 10, i, 0, 0, time.UTC).Format(time.RFC3339), "At@odata.type": "Edm.DateTime",
			}
			data, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.AddEntity(e.ctx, data, nil); err != nil {
				t.Fatalf("aztables: add to %s: %v", name, err)
			}
		}
		wants[name] = e.entities(name, storeadapter.Filter{})
		if len(wants[name]) != 40 {
			t.Fatalf("%s holds %d rows, want 40", name, len(wants[name]))
		}
	}
	cfg := writeWorkerConfig(t, map[string]any{"purgeday": map[string]any{"checkpointTable": ckpt, "maxPartBytes": 4096, "timeBudget": "10m"}})

	id := "op-purgedayx-" + e.suffix
	e.enqueue("purgeday", "-queue", q, "-prefix", prefix, "-keep-days", "3", "-export-to", c+"/days", "-id", id)
	w := e.drainProc(q, 90*time.Second, "-config", cfg)
	if res := w.results(); len(res) != 1 || !strings.HasPrefix(res[0], "deleted 3 of 7 day tables") || !strings.Contains(res[0], "exported 3 first: 120 entities in ") {
		t.Errorf("results %q", res)
	}
	if now := e.sdkList(svc, prefix); !slices.Equal(now, all[3:]) {
		t.Errorf("tables after the purge: %q, want %q", now, all[3:])
	}
	for _, name := range expired {
		m := checkExport(t, e, c+"/days", id, name, false, wants[name])
		if len(m.Parts) < 2 {
			t.Errorf("%s: exported in %d parts, want several", name, len(m.Parts))
		}
	}
	for _, b := range e.listBlobs(c, "") {
		for _, name := range all[3:] {
			if strings.Contains(b.Name, "/"+name+"/") {
				t.Errorf("kept day %s was exported: %s", name, b.Name)
			}
		}
	}
	checkNoPoison(t, e, q)
}
