package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// exportSizes are the table sizes of -job export when -n is not given.
var exportSizes = []int{10_000, 100_000}

// exportRuns measures the exporter (tablepatterns/tableexport) on one store:
// for each size, a table of log rows is seeded (uncounted), exported with
// the default part size, and its throughput, peak heap above the heap
// before the export, and storage calls are printed. On localstore the
// parts go to a sink that keeps only their properties (sinkBlobs), so the
// heap figure is the exporter's own and not the in-process store's copy of
// the blobs; on Azurite they go to the emulator.
func (b bench) exportRuns(ctx context.Context, title string, store storeadapter.Store, latency time.Duration, sink bool) error {
	sizes := exportSizes
	if b.n > 0 {
		sizes = []int{b.n}
	}
	suffix := strings.ToLower(rand.Text()[:6])
	fmt.Printf("%s\n%9s %6s %9s %8s %10s %8s %13s %7s  %s\n", title,
		"entities", "parts", "MiB", "seconds", "entities/s", "MiB/s", "peak live MiB", "calls", "calls by operation")
	for _, n := range sizes {
		table := fmt.Sprintf("BenchExport%d%s", n, suffix)
		if err := seedLog(ctx, store.Tables(), table, n, b.conc); err != nil {
			return fmt.Errorf("seed %s: %w", table, err)
		}
		calls := &instrument.Counts{}
		st := instrumented(store, latency, calls)
		var blobs storeadapter.Blobs = st.Container("bench-export-" + suffix)
		if sink {
			blobs = instrument.Wrap(sinkStore{store, newSinkBlobs("bench-export-" + suffix)},
				instrument.Options{Latency: instrument.Fixed(latency), Observers: []instrument.Observer{calls}}).Container("bench-export-" + suffix)
		}
		o := tableexport.Options{Blobs: blobs, Prefix: "bench", OpID: "op-bench-export-" + table, CreateContainer: true,
			Checkpoints: idempotent.Checkpoints{Tables: st.Tables(), Table: "BenchCheckpoints" + suffix}}
		export := func(tables storeadapter.Tables) (tableexport.Manifest, error) {
			m, err := tableexport.Export(ctx, tables, storeadapter.Range{Table: table}, o)
			if err == nil && m.Entities != int64(n) {
				err = fmt.Errorf("wrote %d entities, want %d", m.Entities, n)
			}
			if err != nil {
				return m, fmt.Errorf("export %s: %w", table, err)
			}
			return m, nil
		}
		cpu0, start := cpuTime(), time.Now()
		m, err := export(st.Tables())
		took, cpu := time.Since(start), cpuTime()-cpu0
		if err != nil {
			return err
		}
		snap := calls.Snapshot()
		// The same export again under another operation id (other part
		// numbers), for its memory alone.
		var heap heapSampler
		sampled := instrument.Wrap(store, instrument.Options{Fault: heap.fault})
		o.OpID += "-memory"
		o.Blobs = sampled.Container(o.Blobs.Name())
		if sink {
			o.Blobs = instrument.Wrap(sinkStore{store, newSinkBlobs(o.Blobs.Name())}, instrument.Options{Fault: heap.fault}).Container("")
		}
		heap.start()
		if _, err := export(sampled.Tables()); err != nil {
			return err
		}
		peak := heap.peak
		mib := float64(m.Bytes) / (1 << 20)
		fmt.Printf("%9d %6d %9.1f %8.2f %10.0f %8.1f %13.1f %7d  %s\n", n, len(m.Parts), mib, took.Seconds(),
			float64(n)/took.Seconds(), mib/took.Seconds(), float64(peak)/(1<<20), snap.Total().Calls, opsLine(snap, 1))
		// The model: every call is a round trip on the critical path (the
		// page read ahead overlaps the CPU, not the other calls), and the
		// CPU is the process's (the in-process store's included on
		// localstore); the wall time cannot be below the larger.
		critical := time.Duration(snap.Total().Calls) * latency
		model := max(critical, cpu)
		fmt.Printf("%9d model: %.2f s (round trips %.2f s, CPU %.2f s); wall / model %.2f\n", n, model.Seconds(), critical.Seconds(), cpu.Seconds(), took.Seconds()/model.Seconds())
	}
	fmt.Println()
	return nil
}

// seedLog fills table with n log rows of about 300 bytes in 24 hourly
// partitions, in transactions of 100 sent by conc goroutines.
func seedLog(ctx context.Context, t storeadapter.Tables, table string, n, conc int) error {
	if err := idempotent.EnsureTable(ctx, t, table); err != nil {
		return err
	}
	const hours = 24
	perPK := (n + hours - 1) / hours
	type batch struct{ h, from, to int }
	var batches []batch
	for h := range hours {
		for from := h * perPK; from < min(n, (h+1)*perPK); from += storeadapter.MaxBatchOps {
			batches = append(batches, batch{h, from, min(from+storeadapter.MaxBatchOps, (h+1)*perPK, n)})
		}
	}
	at := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	return parallel(conc, len(batches), func(i int) error {
		bt := batches[i]
		ops := make([]storeadapter.TableOp, 0, bt.to-bt.from)
		for j := bt.from; j < bt.to; j++ {
			ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxUpsertReplace, Entity: storeadapter.Entity{
				PartitionKey: at.Add(time.Duration(bt.h) * time.Hour).Format("2006010215"), RowKey: fmt.Sprintf("%010d", j),
				Properties: map[string]any{
					"At":      at.Add(time.Duration(j) * time.Millisecond),
					"User":    fmt.Sprintf("user%05d@contoso.example", j%50000),
					"Address": fmt.Sprintf("10.%d.%d.%d", j%256, j/256%256, j/65536%256),
					"Outcome": []string{"ok", "bad password", "locked", "mfa"}[j%4],
					"Latency": float64(j%997) / 10,
					"Session": int64(j) << 33,
					"Agent":   "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
				}}})
		}
		return t.Transact(ctx, table, ops)
	})
}

// heapSampler measures the live heap of a single-goroutine job at each of
// its storage calls: its fault hook (instrument.Options.Fault), which runs
// on the job's goroutine before each call, collects garbage and reads the
// heap while the job is stopped there. So the figure is what the job holds
// (its page of entities, its block buffer), neither floating garbage nor
// the garbage a collector lets pile up in proportion to the process's other
// live data (on localstore, the table itself). The collections slow the
// job down: time a separate run.
type heapSampler struct {
	base, peak uint64
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// start records the live heap before the job.
func (h *heapSampler) start() { h.base, h.peak = liveHeap(), 0 }

// fault is the instrument hook.
func (h *heapSampler) fault(context.Context, instrument.Call) error {
	if live := liveHeap(); live > h.base && live-h.base > h.peak {
		h.peak = live - h.base
	}
	return nil
}

// sinkStore is a store whose one container is a sinkBlobs.
type sinkStore struct {
	storeadapter.Store
	blobs *sinkBlobs
}

func (s sinkStore) Container(string) storeadapter.Blobs { return s.blobs }

// sinkBlobs stands in for a blob service that keeps the exported bytes
// elsewhere: it keeps each blob's properties and the content of small
// blobs (the manifest), and counts and drops the blocks of large ones.
// What the exporter reads back from it (a part's properties, the
// manifest) is what a real container would give.
type sinkBlobs struct {
	name   string
	mu     sync.Mutex
	blobs  map[string]sinkBlob
	staged map[string]map[string]int // blob name → block ID → size
	tag    int
}

type sinkBlob struct {
	props storeadapter.BlobProps
	data  []byte // nil for parts
}

func newSinkBlobs(name string) *sinkBlobs {
	return &sinkBlobs{name: name, blobs: map[string]sinkBlob{}, staged: map[string]map[string]int{}}
}

var errSinkNoContent = errors.New("the benchmark's blob sink keeps no content of parts")

func (s *sinkBlobs) Name() string                 { return s.name }
func (s *sinkBlobs) Create(context.Context) error { return nil }

// write records a blob's new version under the conditions of o.
func (s *sinkBlobs) write(name string, size int64, data []byte, o storeadapter.PutOptions) (string, error) {
	cur, exists := s.blobs[name]
	switch {
	case o.IfNoneMatchAny && exists:
		return "", storeadapter.ErrAlreadyExists
	case o.IfMatch != "" && (!exists || cur.props.ETag != o.IfMatch):
		return "", storeadapter.ErrPreconditionFailed
	}
	s.tag++
	p := storeadapter.BlobProps{Name: name, ETag: fmt.Sprintf(`"0x%X"`, s.tag), Size: size, ContentType: o.ContentType,
		LastModified: time.Now().UTC(), Metadata: storeadapter.LowerMetadata(o.Metadata)}
	s.blobs[name] = sinkBlob{props: p, data: data}
	return p.ETag, nil
}

func (s *sinkBlobs) Put(_ context.Context, name string, data []byte, o storeadapter.PutOptions) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(name, int64(len(data)), slices.Clone(data), o)
}

func (s *sinkBlobs) Get(ctx context.Context, name string) ([]byte, storeadapter.BlobProps, error) {
	r, p, err := s.Open(ctx, name)
	if err != nil {
		return nil, p, err
	}
	data, err := io.ReadAll(r)
	return data, p, err
}

func (s *sinkBlobs) Properties(_ context.Context, name string) (storeadapter.BlobProps, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	if !ok {
		return storeadapter.BlobProps{}, storeadapter.ErrNotFound
	}
	p := b.props
	p.Metadata = maps.Clone(p.Metadata)
	return p, nil
}

func (s *sinkBlobs) Delete(_ context.Context, name, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.blobs[name]; !ok {
		return storeadapter.ErrNotFound
	}
	delete(s.blobs, name)
	return nil
}

func (s *sinkBlobs) List(_ context.Context, prefix, _ string) (storeadapter.BlobPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var page storeadapter.BlobPage
	for _, name := range slices.Sorted(maps.Keys(s.blobs)) {
		if strings.HasPrefix(name, prefix) {
			p := s.blobs[name].props
			p.Metadata = nil
			page.Blobs = append(page.Blobs, p)
		}
	}
	return page, nil
}

func (s *sinkBlobs) StageBlock(_ context.Context, name, blockID string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staged[name] == nil {
		s.staged[name] = map[string]int{}
	}
	s.staged[name][blockID] = len(data)
	return nil
}

func (s *sinkBlobs) CommitBlocks(_ context.Context, name string, ids []string, o storeadapter.PutOptions) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var size int64
	for _, id := range ids {
		n, ok := s.staged[name][id]
		if !ok {
			return "", fmt.Errorf("sink: block %s of %s was not staged: %w", id, name, storeadapter.ErrInvalidInput)
		}
		size += int64(n)
	}
	delete(s.staged, name)
	return s.write(name, size, nil, o)
}

func (s *sinkBlobs) Open(_ context.Context, name string) (io.ReadCloser, storeadapter.BlobProps, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	switch {
	case !ok:
		return nil, storeadapter.BlobProps{}, storeadapter.ErrNotFound
	case b.data == nil:
		return nil, b.props, fmt.Errorf("open %s: %w", name, errSinkNoContent)
	}
	return io.NopCloser(strings.NewReader(string(b.data))), b.props, nil
}
