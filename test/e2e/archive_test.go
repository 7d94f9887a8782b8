package e2e

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// edmProperties returns a property of every EDM type at extreme values,
// plus a Row property that tells the entities apart.
func edmProperties(row string) map[string]any {
	bin := make([]byte, storeadapter.MaxBinaryBytes) // 64 KiB, the largest binary property
	for i := range bin {
		bin[i] = byte(i*7 + 3)
	}
	guid, err := storeadapter.ParseGUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
	if err != nil {
		panic(err)
	}
	return map[string]any{
		"Row":       row,
		"Str":       `it's "quoted" '' \ / # ? % & <xml> 😀🎉 日本語`,
		"BoolTrue":  true,
		"BoolFalse": false,
		"I32Min":    int32(math.MinInt32),
		"I32Max":    int32(math.MaxInt32),
		"I64Big":    int64(1<<62 + 1),
		"I64Min":    int64(math.MinInt64),
		"I64Small":  int64(1), // stays Int64 though it fits Int32
		"DblHalf":   0.5,
		"DblTwo":    2.0, // integral: Azurite alone would read it back as Int32
		"DblNaN":    math.NaN(),
		"DblPosInf": math.Inf(1),
		"DtMax":     time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC),
		"DtMin":     time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC),
		"Guid":      guid,
		"Bin64K":    bin,
	}
}

// archiveOutput is what `enqueue archive -o json` prints.
type archiveOutput struct {
	OpID      string `json:"opId"`
	MessageID string `json:"messageId"`
}

// TestArchiveKeepsEveryEDMType enqueues a single-entity and a range archive
// with the CLI, drains the queue with the worker, and checks that exactly
// the selected entities moved, with every type and value intact and no
// property added, and that the entities around them were left alone.
func TestArchiveKeepsEveryEDMType(t *testing.T) {
	t.Parallel()
	e := setup(t, 60*time.Second)
	src, arc := e.table("EdmSrc"), e.table("EdmArc")
	q := e.queue("edm")

	// A PartitionKey with a quote and a non-ASCII character exercises the
	// OData escaping of the range query.
	const pk, other = "O'Brien ✓", "other"
	var seeded []storeadapter.Entity
	for _, k := range []struct{ pk, rk string }{
		{pk, "a1"}, {pk, "q9"}, {pk, "r1"}, {pk, "r2"}, {pk, "r3"}, {pk, "s1"},
		{other, "a1"}, {other, "r1"}, {other, "r2"},
	} {
		seeded = append(seeded, storeadapter.Entity{PartitionKey: k.pk, RowKey: k.rk, Properties: edmProperties(k.pk + "/" + k.rk)})
	}
	e.seed(src, seeded)
	var single, ranged archiveOutput
	opID := "op-edm-" + e.suffix
	e.enqueueJSON(&single, "archive", "-queue", q, "-table", src, "-to", arc, "-pk", pk, "-rk", "a1", "-id", opID)
	if single.OpID != opID || single.MessageID == "" {
		t.Errorf("enqueue archive -id %s printed %+v, want that op id and a message id", opID, single)
	}
	e.enqueueJSON(&ranged, "archive", "-queue", q, "-table", src, "-to", arc, "-pk", pk, "-rk-from", "r1", "-rk-to", "r3")
	if !strings.HasPrefix(ranged.OpID, "op-") || ranged.MessageID == "" || ranged.OpID == opID {
		t.Errorf("enqueue archive without -id printed %+v, want a generated op id and a message id", ranged)
	}

	stats := e.drain(q, 45*time.Second)
	if stats.Succeeded != 2 || stats.Poisoned != 0 || stats.Retried != 0 {
		t.Errorf("worker counters = %+v, want 2 succeeded, none retried or poisoned", stats)
	}

	moved := map[string]bool{pk + "/a1": true, pk + "/r1": true, pk + "/r2": true}
	var wantArchived, wantLeft []storeadapter.Entity
	for _, en := range seeded {
		if moved[en.PartitionKey+"/"+en.RowKey] {
			wantArchived = append(wantArchived, en)
		} else {
			wantLeft = append(wantLeft, en)
		}
	}
	checkTable(t, e, "archive table", arc, wantArchived)
	checkTable(t, e, "source table", src, wantLeft)

	if n := e.count(q); n != 0 {
		t.Errorf("work queue holds %d messages after the drain, want 0", n)
	}
	if n := e.count(poison.QueueName(q)); n != 0 {
		t.Errorf("poison queue holds %d messages, want 0", n)
	}
}

// checkTable checks that a table holds exactly the entities want (in any
// order), each with the same properties, types and values.
func checkTable(t *testing.T, e *env, what, table string, want []storeadapter.Entity) {
	t.Helper()
	got := e.entities(table, storeadapter.Filter{})
	wantKeys, gotKeys := keys(want), keys(got)
	slices.Sort(wantKeys)
	slices.Sort(gotKeys)
	if !slices.Equal(wantKeys, gotKeys) {
		t.Errorf("%s %s holds %q, want %q", what, table, gotKeys, wantKeys)
	}
	byKey := map[string]storeadapter.Entity{}
	for _, en := range got {
		byKey[en.PartitionKey+"/"+en.RowKey] = en
	}
	for _, w := range want {
		g, ok := byKey[w.PartitionKey+"/"+w.RowKey]
		if !ok {
			continue
		}
		if d := diffProperties(w.Properties, g.Properties); len(d) > 0 {
			t.Errorf("%s %s, entity %s/%s differs:\n%s", what, table, w.PartitionKey, w.RowKey, strings.Join(d, "\n"))
		}
	}
}
