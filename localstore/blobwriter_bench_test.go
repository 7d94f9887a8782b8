package localstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// benchBlobBytes is the size of the blob BenchmarkBlobWrite writes, in
// chunks of benchChunkBytes (a page of entities turned into JSON lines).
const (
	benchBlobBytes  = 64 << 20
	benchChunkBytes = 64 << 10
)

// BenchmarkBlobWrite writes a 64 MiB blob to localstore through a
// BlobWriter of two block sizes, and, for comparison, by buffering the
// whole blob and calling Put. MB/s is the write's throughput. extra-B/op is
// what the write allocated beyond the 64 MiB copy the store keeps: about
// one block for a BlobWriter, whatever the blob's size; several times the
// blob for the buffered Put.
func BenchmarkBlobWrite(b *testing.B) {
	line := []byte(`{"PartitionKey":"p","RowKey":"r","Value":42}` + "\n")
	chunk := bytes.Repeat(line, benchChunkBytes/len(line)+1)[:benchChunkBytes]
	writeAll := func(w io.Writer) {
		for range benchBlobBytes / benchChunkBytes {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(b *testing.B, write func(ctx context.Context, c storeadapter.Blobs)) {
		ctx := context.Background()
		b.SetBytes(benchBlobBytes)
		b.ReportAllocs()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for b.Loop() {
			c := New(Options{}).Container("bench")
			if err := c.Create(ctx); err != nil {
				b.Fatal(err)
			}
			write(ctx, c)
			if p, err := c.Properties(ctx, "day.jsonl"); err != nil || p.Size != benchBlobBytes {
				b.Fatalf("blob: %+v, %v; want %d bytes", p, err, benchBlobBytes)
			}
		}
		runtime.ReadMemStats(&after)
		perOp := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
		b.ReportMetric(perOp-benchBlobBytes, "extra-B/op")
	}
	for _, block := range []int{storeadapter.DefaultBlockSize, 256 << 10} {
		b.Run(fmt.Sprintf("BlobWriter/block=%dKiB", block>>10), func(b *testing.B) {
			run(b, func(ctx context.Context, c storeadapter.Blobs) {
				w := storeadapter.NewBlobWriter(ctx, c, "day.jsonl", storeadapter.BlobWriterOptions{BlockSize: block})
				writeAll(w)
				if _, err := w.Commit(); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
	b.Run("BufferThenPut", func(b *testing.B) {
		run(b, func(ctx context.Context, c storeadapter.Blobs) {
			var buf bytes.Buffer
			writeAll(&buf)
			if _, err := c.Put(ctx, "day.jsonl", buf.Bytes(), storeadapter.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		})
	})
}
