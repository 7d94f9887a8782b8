package localstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// The benchmarks share one table of benchEntities entities of about 1 KiB
// each, in benchPartitions partitions, built once per test binary. The
// benchmarks that write leave it as they found it: the same keys, with
// entities of the same shape and size.
const (
	benchTable            = "Bench"
	benchPartitions       = 10
	benchRowsPerPartition = 10_000
	benchEntities         = benchPartitions * benchRowsPerPartition
)

// benchEpoch is the fake clock's time, so every run stores the same data.
var benchEpoch = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)

type benchKey struct{ pk, rk string }

type benchFixture struct {
	store  *Store
	tables storeadapter.Tables
	keys   []benchKey // every entity's keys, partition by partition, in key order
}

var (
	benchOnce sync.Once
	benchFix  *benchFixture
	benchErr  error
)

// benchKeys returns the keys of row i of partition p.
func benchKeys(p, i int) benchKey {
	return benchKey{pk: fmt.Sprintf("tenant%02d", p), rk: fmt.Sprintf("order%06d", i)}
}

// benchText returns n bytes of text unique to seed, so that entities do not
// share string memory (as entities decoded from the wire do not).
func benchText(n, seed int) string {
	var b strings.Builder
	b.Grow(n)
	fmt.Fprintf(&b, "%08d ", seed)
	for b.Len() < n {
		b.WriteString("lorem ipsum dolor sit amet ")
	}
	return b.String()[:n]
}

// benchEntity returns entity i: about 1 KiB of property data in typical
// properties (four strings of 32 + 32 + 160 + 480 bytes, an Int64, a
// DateTime and a 256-byte binary); EntitySize counts it as about 1.8 KiB
// because it counts strings in UTF-16.
func benchEntity(k benchKey, i int) storeadapter.Entity {
	payload := make([]byte, 256)
	for j := range payload {
		payload[j] = byte(i + j)
	}
	return storeadapter.Entity{
		PartitionKey: k.pk,
		RowKey:       k.rk,
		Properties: map[string]any{
			"Customer": benchText(32, i),
			"Email":    benchText(32, i+1),
			"Address":  benchText(160, i+2),
			"Notes":    benchText(480, i+3),
			"Amount":   int64(i) * 1000,
			"Placed":   benchEpoch.Add(time.Duration(i) * time.Second),
			"Payload":  payload,
		},
	}
}

// benchStore returns the shared fixture, building it on first use.
func benchStore(b *testing.B) *benchFixture {
	b.Helper()
	benchOnce.Do(func() { benchFix, benchErr = newBenchFixture() })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchFix
}

func newBenchFixture() (*benchFixture, error) {
	ctx := context.Background()
	s := New(Options{Clock: clock.NewFake(benchEpoch)})
	fx := &benchFixture{store: s, tables: s.Tables(), keys: make([]benchKey, 0, benchEntities)}
	if err := fx.tables.CreateTable(ctx, benchTable); err != nil {
		return nil, err
	}
	ops := make([]storeadapter.TableOp, 0, storeadapter.MaxBatchOps)
	for p := range benchPartitions {
		for i := range benchRowsPerPartition {
			k := benchKeys(p, i)
			fx.keys = append(fx.keys, k)
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: benchEntity(k, len(fx.keys))})
			if len(ops) == cap(ops) {
				if err := fx.tables.Transact(ctx, benchTable, ops); err != nil {
					return nil, fmt.Errorf("fill bench table: %w", err)
				}
				ops = ops[:0]
			}
		}
	}
	return fx, nil
}

// reportRate reports n units done in the benchmark's measured time.
func reportRate(b *testing.B, n int, unit string) {
	b.Helper()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)/s, unit)
	}
}

func BenchmarkGetEntity(b *testing.B) {
	fx := benchStore(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	for b.Loop() {
		k := fx.keys[rng.IntN(len(fx.keys))]
		if _, err := fx.tables.GetEntity(ctx, benchTable, k.pk, k.rk); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRate(b, n, "ops/s")
}

func BenchmarkUpsertEntity(b *testing.B) {
	fx := benchStore(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	e := benchEntity(benchKey{}, 0)
	n := 0
	for b.Loop() {
		k := fx.keys[rng.IntN(len(fx.keys))]
		e.PartitionKey, e.RowKey = k.pk, k.rk
		if _, err := fx.tables.UpsertEntity(ctx, benchTable, e, storeadapter.Replace); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRate(b, n, "ops/s")
}

func BenchmarkDeleteEntity(b *testing.B) {
	fx := benchStore(b)
	ctx := context.Background()
	order := rand.New(rand.NewPCG(5, 6)).Perm(len(fx.keys))
	e := benchEntity(benchKey{}, 0)
	// Deleted entities are put back 1,000 at a time with the timer stopped,
	// so every delete meets an existing entity in a full table.
	const refill = 1000
	deleted := make([]benchKey, 0, refill)
	putBack := func() {
		for _, k := range deleted {
			e.PartitionKey, e.RowKey = k.pk, k.rk
			if _, err := fx.tables.InsertEntity(ctx, benchTable, e); err != nil {
				b.Fatal(err)
			}
		}
		deleted = deleted[:0]
	}
	n := 0
	for b.Loop() {
		if len(deleted) == refill {
			b.StopTimer()
			putBack()
			b.StartTimer()
		}
		k := fx.keys[order[n%len(order)]]
		if err := fx.tables.DeleteEntity(ctx, benchTable, k.pk, k.rk, storeadapter.ETagAny); err != nil {
			b.Fatal(err)
		}
		deleted = append(deleted, k)
		n++
	}
	putBack()
	reportRate(b, n, "ops/s")
}

func BenchmarkQueryRange1000(b *testing.B) {
	fx := benchStore(b)
	ctx := context.Background()
	from, to := benchKeys(0, 2000).rk, benchKeys(0, 3000).rk
	queries := make([]storeadapter.Query, benchPartitions)
	for p := range queries {
		queries[p] = storeadapter.Query{Filter: storeadapter.RowRange(benchKeys(p, 0).pk, from, to)}
	}
	n, i := 0, 0
	for b.Loop() {
		page, err := fx.tables.Query(ctx, benchTable, queries[i%len(queries)])
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Entities) != 1000 || page.Next != "" {
			b.Fatalf("query returned %d entities and next %q, want 1000 and none", len(page.Entities), page.Next)
		}
		n += len(page.Entities)
		i++
	}
	reportRate(b, n, "entities/s")
}

func BenchmarkTransact100(b *testing.B) {
	fx := benchStore(b)
	ctx := context.Background()
	// One batch per block of 100 consecutive rows of a partition, built
	// before timing; batches reuse one entity's properties.
	e := benchEntity(benchKey{}, 0)
	var batches [][]storeadapter.TableOp
	for start := 0; start < 20*storeadapter.MaxBatchOps; start += storeadapter.MaxBatchOps {
		ops := make([]storeadapter.TableOp, storeadapter.MaxBatchOps)
		for j := range ops {
			k := benchKeys(start/benchRowsPerPartition%benchPartitions+3, start%benchRowsPerPartition+j)
			ops[j] = storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: e}
			ops[j].Entity.PartitionKey, ops[j].Entity.RowKey = k.pk, k.rk
		}
		batches = append(batches, ops)
	}
	n, i := 0, 0
	for b.Loop() {
		ops := batches[i%len(batches)]
		if err := fx.tables.Transact(ctx, benchTable, ops); err != nil {
			b.Fatal(err)
		}
		n += len(ops)
		i++
	}
	reportRate(b, n, "entities/s")
}

func BenchmarkQueueReceiveDelete(b *testing.B) {
	ctx := context.Background()
	s := New(Options{Clock: clock.NewFake(benchEpoch)})
	q := s.Queue("bench-queue")
	if err := q.Create(ctx); err != nil {
		b.Fatal(err)
	}
	// The queue holds at most a few thousand messages, refilled with the
	// timer stopped; the clock stands still, so received messages stay
	// hidden until they are deleted.
	const backlog = 4096
	text := benchText(200, 0) // about the size of a base64 job envelope
	visible := 0
	fill := func() {
		for visible < backlog {
			if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
				b.Fatal(err)
			}
			visible++
		}
	}
	fill()
	n := 0
	for b.Loop() {
		if visible < storeadapter.MaxReceiveCount {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		msgs, err := q.Receive(ctx, storeadapter.MaxReceiveCount, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) != storeadapter.MaxReceiveCount {
			b.Fatalf("received %d messages, want %d", len(msgs), storeadapter.MaxReceiveCount)
		}
		for _, m := range msgs {
			if err := q.DeleteMessage(ctx, m.ID, m.PopReceipt); err != nil {
				b.Fatal(err)
			}
		}
		visible -= len(msgs)
		n += len(msgs)
	}
	reportRate(b, n, "msgs/s")
}

// BenchmarkMemoryPerEntity fills a fresh table with benchMemoryEntities
// entities per iteration and reports the heap they keep alive, per entity,
// measured after a garbage collection before and after the fill.
func BenchmarkMemoryPerEntity(b *testing.B) {
	const benchMemoryEntities = 20_000
	ctx := context.Background()
	clock := clock.NewFake(benchEpoch)
	var total float64
	iterations := 0
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Options{Clock: clock})
		tables := s.Tables()
		if err := tables.CreateTable(ctx, "Memory"); err != nil {
			b.Fatal(err)
		}
		for i := range benchMemoryEntities {
			if _, err := tables.InsertEntity(ctx, "Memory", benchEntity(benchKeys(i%benchPartitions, i), i)); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		total += (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / benchMemoryEntities
		iterations++
	}
	b.ReportMetric(total/float64(iterations), "bytes/entity")
}
