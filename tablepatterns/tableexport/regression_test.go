package tableexport_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestExportCheckpointStaysSmallWhenOpsInterleave (regression): another
// export owns every odd part number of the shared minute folder (exports
// of one table running at once alternate numbers). The checkpoint used to
// hold the set of our numbers ("2,4,6,..."), which past the 32,768
// character limit of a string property made every save fail (about 7,000
// parts). Now it holds the last link of the chain of parts: its size does
// not grow with the parts, and the manifest lists them all in order.
func TestExportCheckpointStaysSmallWhenOpsInterleave(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	const n = 300
	c := b.raw.Container("exports")
	for i := 1; i <= 2*n+1; i += 2 {
		name := fmt.Sprintf("logs/Logs/2026/11/21/1030/%06d.jsonl", i)
		if _, err := c.Put(ctx, name, []byte("{}\n"), storeadapter.PutOptions{Metadata: map[string]string{"op": "other"}}); err != nil {
			t.Fatal(err)
		}
	}
	b.seed(t, n, 1, 900) // one line (about 1 KB) per part
	o := b.options("op-x")
	o.MaxPartBytes = 1024
	o.PageSize, o.BlockSize = 0, 0
	m, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Logs"}, o)
	if err != nil {
		t.Fatalf("export of %d rows in a folder shared with another export: %v", n, err)
	}
	if len(m.Parts) != n || m.Entities != n {
		t.Fatalf("%d parts and %d entities, want %d of each", len(m.Parts), m.Entities, n)
	}
	for i, p := range m.Parts {
		if want := fmt.Sprintf("logs/Logs/2026/11/21/1030/%06d.jsonl", 2*i+2); p.Name != want {
			t.Fatalf("part %d is %s, want %s", i, p.Name, want)
		}
	}
	tok, err := o.Checkpoints.Load(ctx, "op-x", "export")
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) > 400 {
		t.Errorf("checkpoint of %d parts is %d bytes (%s), want it small and independent of the part count", n, len(tok), tok)
	}
	if r, err := tableexport.Verify(ctx, c, m.Name); err != nil || !r.OK() {
		t.Errorf("Verify: %v %q", err, r.Problems)
	}
}

// TestVerifyRejectsBadLines (regression): a part with matching metadata
// and hash (as a buggy writer would leave it) whose lines are not
// exported entities passed Verify: "null", "{}" and an object followed by
// garbage all "parsed". Each bad line, a part listed twice and a part
// number that disagrees with the part's metadata must be reported.
func TestVerifyRejectsBadLines(t *testing.T) {
	good := `{"PartitionKey":"p","RowKey":"r","Timestamp":"2026-11-21T10:30:00.0000000Z","Timestamp@odata.type":"Edm.DateTime","odata.etag":"W/\"1\""}`
	for _, tc := range []struct {
		name, data, want string
		twice            bool
		part             string
	}{
		{name: "good", data: good + "\n"},
		{name: "null", data: "null\n", want: "not exactly one JSON object"},
		{name: "empty object", data: "{}\n", want: "PartitionKey: missing"},
		{name: "trailing garbage", data: good + " trailing garbage {\n", want: "not exactly one JSON object"},
		{name: "two objects", data: good + good + "\n", want: "not exactly one JSON object"},
		{name: "no etag", data: strings.Replace(good, `,"odata.etag":"W/\"1\""`, "", 1) + "\n", want: "odata.etag: missing"},
		{name: "number key", data: strings.Replace(good, `"RowKey":"r"`, `"RowKey":7`, 1) + "\n", want: "RowKey: missing or not a string"},
		{name: "listed twice", data: good + "\n", twice: true, want: "listed twice"},
		{name: "part mismatch", data: good + "\n", part: "2", want: `metadata part is "2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t)
			ctx := context.Background()
			c := b.raw.Container("exports")
			data := []byte(tc.data)
			sum := sha256.Sum256(data)
			h := hex.EncodeToString(sum[:])
			folder := "logs/Logs/2026/11/21/1030"
			part := folder + "/000001.jsonl"
			ts := "2026-11-21T10:30:00.0000000Z"
			md := map[string]string{"op": "op-bad", "table": "Logs", "entitycount": "1", "sha256": h,
				"starttime": ts, "endtime": ts, "part": "1", "prev": "0", "pass": "1"}
			if tc.part != "" {
				md["part"] = tc.part
			}
			if _, err := c.Put(ctx, part, data, storeadapter.PutOptions{Metadata: md}); err != nil {
				t.Fatal(err)
			}
			mp := tableexport.ManifestPart{Name: part, Entities: 1, Bytes: int64(len(data)), SHA256: h, StartTime: ts, EndTime: ts}
			m := tableexport.Manifest{Version: 1, Op: "op-bad", Table: "Logs", Container: "exports", Folder: folder,
				Entities: 1, Bytes: int64(len(data)), Parts: []tableexport.ManifestPart{mp}}
			if tc.twice {
				m.Parts = append(m.Parts, mp)
				m.Entities, m.Bytes = 2, 2*m.Bytes
			}
			raw, _ := json.Marshal(m)
			if _, err := c.Put(ctx, folder+"/manifest-op-bad.json", raw, storeadapter.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			r, err := tableexport.Verify(ctx, c, folder+"/manifest-op-bad.json")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && !r.OK():
				t.Fatalf("problems in a good part: %q", r.Problems)
			case tc.want != "" && !strings.Contains(strings.Join(r.Problems, "\n"), tc.want):
				t.Fatalf("problems %q, want one saying %q", r.Problems, tc.want)
			}
		})
	}
}

// TestExportCommitLossesAreBounded: a commit that keeps losing its number
// (a store answering ErrAlreadyExists while the blob never shows up) used
// to loop for ever; it now fails after a few rounds, retryable.
func TestExportCommitLossesAreBounded(t *testing.T) {
	b := newBundle(t)
	b.seed(t, 5, 1, 10)
	commits := 0
	b.fault = func(_ int, c instrument.Call) error {
		if (c.Op == instrument.OpPut || c.Op == instrument.OpCommitBlocks) && strings.HasSuffix(c.Blob, ".jsonl") {
			commits++
			return fmt.Errorf("injected: %w", storeadapter.ErrAlreadyExists)
		}
		return nil
	}
	_, err := tableexport.Export(context.Background(), b.store.Tables(), storeadapter.Range{Table: "Logs"}, b.options("op-l"))
	if err == nil || !strings.Contains(err.Error(), "lost the commit") {
		t.Fatalf("Export = %v, want it to give up on the lost commits", err)
	}
	if commits > 10 {
		t.Errorf("%d commits tried, want a small bound", commits)
	}
}

// TestReadPartCapsLongLines: a blob without a newline is not gathered
// without bound: past MaxLineBytes the read fails naming the line.
func TestReadPartCapsLongLines(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	c := b.raw.Container("exports")
	if _, err := c.Put(ctx, "x/000001.jsonl", bytes.Repeat([]byte("x"), tableexport.MaxLineBytes+1), storeadapter.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	err := tableexport.ReadPart(ctx, c, "x/000001.jsonl", func(storeadapter.Entity) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Fatalf("ReadPart = %v, want the long line reported", err)
	}
}

// TestExportRefusesLinesItsReadersRefuse: a row whose line a Transform
// makes longer than MaxLineBytes (the offloaded values an export embeds)
// fails the export naming the row, before any part holds it: an export
// never writes a line ReadPart would refuse.
func TestExportRefusesLinesItsReadersRefuse(t *testing.T) {
	b := newBundle(t)
	ctx := context.Background()
	if err := b.raw.Tables().CreateTable(ctx, "Big"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.raw.Tables().InsertEntity(ctx, "Big", storeadapter.Entity{PartitionKey: "p", RowKey: "huge"}); err != nil {
		t.Fatal(err)
	}
	o := b.options("op-big")
	o.Transform = func(_ context.Context, e storeadapter.Entity) (storeadapter.Entity, error) {
		e = e.Clone()
		e.Properties["Blob"] = bytes.Repeat([]byte{7}, tableexport.MaxLineBytes)
		return e, nil
	}
	_, err := tableexport.Export(ctx, b.store.Tables(), storeadapter.Range{Table: "Big"}, o)
	if !errors.Is(err, storeadapter.ErrTooLarge) || !strings.Contains(err.Error(), "p/huge") {
		t.Fatalf("Export = %v, want ErrTooLarge naming p/huge", err)
	}
}
