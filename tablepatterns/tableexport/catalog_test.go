package tableexport_test

import (
	"context"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestListAndPrune: List finds every export under a prefix with its
// scope; PlanPrune keeps what finished after the cut, the full export the
// kept exports start from and the chain after it, the newest full export
// of a scope, and a scope without a full export; DeleteExport removes the
// parts (strays too) and then the manifest, and again finds them gone.
func TestListAndPrune(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 20, 2, 100)
	ctx := context.Background()
	day0 := time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)
	pk := "p0"
	var last tableexport.Manifest
	export := func(op string, day int, full bool, src storeadapter.Range) tableexport.Manifest {
		t.Helper()
		o := b.options(op)
		o.Clock = clock.NewFake(day0.Add(time.Duration(day) * 24 * time.Hour))
		o.MaxPartBytes, o.Mark = 1024, true
		if !full {
			o.After = &tableexport.ManifestRef{Blobs: b.store.Container("exports"), Name: last.Name}
		}
		m, err := tableexport.Export(ctx, b.store.Tables(), src, o)
		if err != nil {
			t.Fatal(err)
		}
		last = m
		return m
	}
	logs := storeadapter.Range{Table: "Logs"}
	names := map[string]string{}
	for _, e := range []struct {
		op   string
		day  int
		full bool
	}{{"f1", 0, true}, {"i1", 1, false}, {"i2", 2, false}, {"f2", 7, true}, {"i3", 8, false}, {"i4", 9, false}} {
		names[export(e.op, e.day, e.full, logs).Name] = e.op
	}
	// A scope of increments only (the first from since).
	o := b.options("s1")
	o.Since, o.Mark = day0, true
	o.Clock = clock.NewFake(day0)
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs", PK: &pk}, o)
	if err != nil {
		t.Fatal(err)
	}
	names[m.Name] = "s1"
	// An unreadable manifest.
	if _, err := b.raw.Container("exports").Put(ctx, "logs/Logs/manifest-broken.json", []byte("{"), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	names["logs/Logs/manifest-broken.json"] = "broken"

	entries, err := tableexport.List(ctx, b.store.Container("exports"), "logs")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, names[e.Name])
	}
	// "table Logs" before `table Logs pk "p0"`; the broken one has an
	// empty scope and comes first.
	if want := []string{"broken", "f1", "i1", "i2", "f2", "i3", "i4", "s1"}; !slices.Equal(got, want) {
		t.Fatalf("List order %v, want %v", got, want)
	}
	if entries[0].Problem == "" || entries[2].Manifest.Since != entries[1].Manifest.Mark || entries[7].Manifest.Scope() != `table Logs pk "p0"` {
		t.Fatalf("entries: %+v", entries)
	}
	plan := func(cutDay float64) (del []string) {
		for _, d := range tableexport.PlanPrune(entries, day0.Add(time.Duration(cutDay*24)*time.Hour)) {
			if d.Reason == "" {
				t.Errorf("%s: no reason", d.Name)
			}
			if d.Delete {
				del = append(del, names[d.Name])
			}
		}
		slices.Sort(del)
		return del
	}
	for _, c := range []struct {
		cut  float64
		want []string
	}{
		{1.5, nil},                        // i2 is kept, and it starts from f1
		{7.5, []string{"f1", "i1", "i2"}}, // i3 is kept: f2 and the chain after it stay
		{30, []string{"f1", "i1", "i2"}},  // nothing finished after the cut: the newest full export and its chain stay
	} {
		if got := plan(c.cut); !slices.Equal(got, c.want) {
			t.Errorf("cut day %v: deletes %v, want %v", c.cut, got, c.want)
		}
	}

	// A stray part of f1 (a superseded run's) goes with it; another
	// export's part in its folder stays.
	f1 := entries[1].Manifest
	for name, op := range map[string]string{"000099.jsonl": "f1", "000098.jsonl": "other"} {
		if _, err := b.raw.Container("exports").Put(ctx, path.Join(f1.Folder, name), []byte("{}\n"), storeadapter.PutOptions{Metadata: map[string]string{tableexport.MetaOp: op}}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := tableexport.DeleteExport(ctx, b.store.Container("exports"), f1)
	if err != nil || d.Parts != len(f1.Parts)+1 || !d.Manifest || d.Gone != 0 {
		t.Fatalf("DeleteExport = %+v, %v; want %d parts and the manifest", d, err, len(f1.Parts)+1)
	}
	left := map[string]bool{}
	for name := range b.blobs(t) {
		left[name] = true
	}
	if left[f1.Name] || left[f1.Parts[0].Name] || left[path.Join(f1.Folder, "000099.jsonl")] || !left[path.Join(f1.Folder, "000098.jsonl")] {
		t.Errorf("after DeleteExport: %v", left)
	}
	d, err = tableexport.DeleteExport(ctx, b.store.Container("exports"), f1)
	if err != nil || d.Parts != 0 || d.Manifest || d.Gone != len(f1.Parts)+1 {
		t.Errorf("DeleteExport again = %+v, %v; want everything gone already", d, err)
	}
}
