package tableexport_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// syntheticTable is a table of n generated entities of about 1 KiB,
// served page by page and never held: its Query makes each page on the
// spot (the continuation token is the next index).
type syntheticTable struct {
	storeadapter.Tables
	n int
}

func (s syntheticTable) Query(_ context.Context, _ string, q storeadapter.Query) (storeadapter.Page, error) {
	i, _ := strconv.Atoi(q.Continuation)
	top := q.Top
	if top == 0 {
		top = 1000
	}
	var page storeadapter.Page
	for ; i < s.n && len(page.Entities) < top; i++ {
		page.Entities = append(page.Entities, storeadapter.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%09d", i),
			ETag: `W/"x"`, Timestamp: exportTime, Properties: map[string]any{"Text": strings.Repeat("m", 1000), "N": int64(i)}})
	}
	if i < s.n {
		page.Next = strconv.Itoa(i)
	}
	return page, nil
}

// sinkBlobs keeps small blobs (the manifest) in a localstore container
// and discards the blocks of parts, keeping their size and metadata, and
// samples the live heap at every staged block.
type sinkBlobs struct {
	storeadapter.Blobs
	parts map[string]storeadapter.BlobProps
	size  map[string]int64
	peak  uint64
}

func (s *sinkBlobs) StageBlock(_ context.Context, name, _ string, data []byte) error {
	s.size[name] += int64(len(data))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.peak = max(s.peak, ms.HeapAlloc)
	return nil
}

func (s *sinkBlobs) CommitBlocks(_ context.Context, name string, _ []string, o storeadapter.PutOptions) (string, error) {
	s.parts[name] = storeadapter.BlobProps{Name: name, Size: s.size[name], Metadata: o.Metadata, ETag: "e"}
	return "e", nil
}

func (s *sinkBlobs) Properties(ctx context.Context, name string) (storeadapter.BlobProps, error) {
	if p, ok := s.parts[name]; ok {
		return p, nil
	}
	return s.Blobs.Properties(ctx, name)
}

// TestExportMemoryFlat: the live heap while a part is written does not
// grow with the number of entities exported: 10,000 and 40,000 entities
// (10 and 40 MB of lines) into one part each peak within 2 MiB of each
// other, so pages are streamed and the part is never held.
func TestExportMemoryFlat(t *testing.T) {
	peak := func(n int) uint64 {
		ctx := context.Background()
		store := localstore.New(localstore.Options{})
		c := store.Container("exports")
		if err := c.Create(ctx); err != nil {
			t.Fatal(err)
		}
		sink := &sinkBlobs{Blobs: c, parts: map[string]storeadapter.BlobProps{}, size: map[string]int64{}}
		m, err := tableexport.Export(ctx, syntheticTable{n: n}, storeadapter.Range{Table: "Synthetic"}, tableexport.Options{
			Blobs: sink, OpID: "op-mem", Checkpoints: idempotent.Checkpoints{Tables: store.Tables(), Table: "Checkpoints"},
			MaxPartBytes: tableexport.MaxMaxPartBytes, BlockSize: 256 << 10,
		})
		if err != nil {
			t.Fatal(err)
		}
		if m.Entities != int64(n) || len(m.Parts) != 1 {
			t.Fatalf("exported %d entities in %d parts, want %d in 1", m.Entities, len(m.Parts), n)
		}
		return sink.peak
	}
	small, large := peak(10_000), peak(40_000)
	t.Logf("peak live heap: %.1f MiB for 10,000 entities, %.1f MiB for 40,000", float64(small)/(1<<20), float64(large)/(1<<20))
	if large > small+2<<20 {
		t.Errorf("the peak heap grew from %d to %d bytes with 4 times the entities", small, large)
	}
}
