package tableexport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exportUntilDone calls Export until it returns something other than a
// stop (at most 200 times) and returns the result with the number of
// calls and the stops' totals.
func exportUntilDone(t *testing.T, b *bundle, o tableexport.Options) (tableexport.Manifest, int, []tableexport.Stopped, error) {
	t.Helper()
	var stops []tableexport.Stopped
	for n := 1; n <= 200; n++ {
		m, err := tableexport.Export(context.Background(), b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
		var st *tableexport.Stopped
		if !errors.As(err, &st) {
			return m, n, stops, err
		}
		if !errors.Is(err, tableexport.ErrStopped) {
			t.Fatalf("a *Stopped error %v is not ErrStopped", err)
		}
		stops = append(stops, *st)
	}
	t.Fatal("the export did not finish in 200 calls")
	return tableexport.Manifest{}, 0, nil, nil
}

// TestExportStops: an export whose Stop always says stop writes one part
// per call, asks Stop only once the part is registered in the checkpoint,
// reports its totals so far, and finishes with the parts and manifest an
// export that never stopped writes.
func TestExportStops(t *testing.T) {
	ctx := context.Background()
	ref := newBundle(t)
	ref.seed(t, 60, 3, 150)
	o := ref.options("op-stop")
	o.MaxPartBytes = 1024
	want, err := tableexport.Export(ctx, ref.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatal(err)
	}
	wantBlobs := ref.blobs(t)

	b := newBundle(t)
	b.seed(t, 60, 3, 150)
	o = b.options("op-stop")
	o.MaxPartBytes = 1024
	asked := 0
	o.Stop = func() bool {
		asked++
		// The part is registered: the checkpoint counts it.
		tok, _, err := o.Checkpoints.LoadETag(ctx, "op-stop", "export")
		var st struct{ PartCount, LastPart int }
		if err != nil || json.Unmarshal([]byte(tok), &st) != nil || st.PartCount != asked || st.LastPart != asked {
			t.Errorf("Stop asked (%d) with the checkpoint %s, %v; want the part registered", asked, tok, err)
		}
		return true
	}
	got, calls, stops, err := exportUntilDone(t, b, o)
	if err != nil {
		t.Fatal(err)
	}
	if calls != len(want.Parts)+1 || len(stops) != len(want.Parts) || asked != len(want.Parts) {
		t.Errorf("%d calls, %d stops, Stop asked %d times; want one part per call: %d parts, then the call that marks it done", calls, len(stops), asked, len(want.Parts))
	}
	var total int64
	for i, s := range stops {
		total += want.Parts[i].Entities
		if s.Parts != i+1 || s.Entities != total {
			t.Errorf("stop %d says %+v; want %d parts and %d entities so far", i+1, s, i+1, total)
		}
	}
	if got.Entities != want.Entities || len(got.Parts) != len(want.Parts) {
		t.Errorf("manifest %d entities in %d parts, want %d in %d", got.Entities, len(got.Parts), want.Entities, len(want.Parts))
	}
	gotBlobs := b.blobs(t)
	if !maps.EqualFunc(gotBlobs, wantBlobs, func(g, w blob) bool { return bytes.Equal(g.data, w.data) && maps.Equal(g.md, w.md) }) {
		t.Errorf("the stopped export's blobs differ from the export that never stopped")
	}
	verifyOK(t, b.store.Container("exports"), got)
}

// TestExportStopsAndCrashes: with Stop always saying stop, a crash at any
// one storage call of the whole sequence of calls still ends, call after
// call, in the blobs of an export that neither stopped nor crashed.
func TestExportStopsAndCrashes(t *testing.T) {
	ctx := context.Background()
	ref := newBundle(t)
	ref.seed(t, 40, 2, 150)
	o := ref.options("op-stop")
	o.MaxPartBytes = 1024
	if _, err := tableexport.Export(ctx, ref.store.Tables(), storeadapter.Range{Table: "Logs"}, o); err != nil {
		t.Fatal(err)
	}
	wantBlobs := ref.blobs(t)
	probe := newBundle(t)
	probe.seed(t, 40, 2, 150)
	po := probe.options("op-stop")
	po.MaxPartBytes, po.Stop = 1024, func() bool { return true }
	probe.calls = 0
	if _, _, _, err := exportUntilDone(t, probe, po); err != nil {
		t.Fatal(err)
	}
	total := probe.calls
	for k := 1; k <= total; k++ {
		b := newBundle(t)
		b.seed(t, 40, 2, 150)
		o := b.options("op-stop")
		o.MaxPartBytes, o.Stop = 1024, func() bool { return true }
		b.calls = 0
		var failed instrument.Call
		b.fault = func(n int, c instrument.Call) error {
			if n == k {
				failed = c
				return fmt.Errorf("crash at call %d: %w", k, storeadapter.ErrUnavailable)
			}
			return nil
		}
		_, _, _, err := exportUntilDone(t, b, o)
		// A failed query may be the page a stopped delivery read ahead
		// and never used: then nothing went wrong.
		if err == nil && failed.Op != instrument.OpQuery {
			t.Fatalf("call %d (%s) failed, and the export finished without an error", k, failed.Op)
		}
		m, _, _, err := exportUntilDone(t, b, o)
		if err != nil {
			t.Fatalf("after a crash at call %d: %v", k, err)
		}
		gotBlobs := b.blobs(t)
		if !maps.EqualFunc(gotBlobs, wantBlobs, func(g, w blob) bool { return bytes.Equal(g.data, w.data) && maps.Equal(g.md, w.md) }) {
			t.Fatalf("after a crash at call %d the blobs differ from the export that never stopped", k)
		}
		verifyOK(t, b.store.Container("exports"), m)
	}
}
