// Command bench measures the worker: archive moves per second through
// runner.Runner next to a tight loop that makes the same storage calls
// directly at the same concurrency (their ratio is the runner's overhead),
// storage calls per move (receives amortised) and process CPU time per
// message. Every storage call is counted by the store instrument
// (storeadapter/instrument).
//
// It makes two runs:
//
//   - local: localstore with an injected round trip per call (-latency,
//     10 ms by default, an Azure in-region figure), which takes CPU out of
//     the picture: it prints the limit concurrency / (calls per move ×
//     latency) next to both loops.
//
//   - azurite: azstore on Azurite against a direct Azure SDK loop. It starts
//     its own Azurite (see test/azurite) unless
//     TABLEKEEPER_AZURITE_CONNECTION_STRING names one. On a small machine
//     Azurite's Node core and the worker share the CPU.
//
//     go run ./test/bench -n 2000 -concurrency 16 -latency 10ms -runs local,azurite
//
// Keep -n to a few thousand: Azurite's receive slows down on deep queues.
//
// -concurrency takes a list: each run is made at each concurrency, and a
// summary prints per concurrency both loops' moves/s, the worker's calls
// per move, both CPU times per message and the worker/limit, direct/limit
// and worker/direct ratios, with the load average before each. Without -n
// a run moves 40 messages per slot (at least 1,000). The direct loops keep
// one receive of 32 in flight per 32 movers, as the runner may. With
// -cpuprofile prefix each loop's CPU profile is written to
// prefix.worker.c<concurrency> and prefix.direct.c<concurrency>:
//
//	go run ./test/bench -runs local -concurrency 16,64,256,512 -cpuprofile /tmp/bench
//
// With -job index it measures the index kind instead (index.go): for each
// of the six kinds of index, storage calls per reconcile of a new, an
// unchanged and a renamed value, and reconciles per second next to a
// direct loop that makes the same storage calls without the index logic,
// on the same two runs:
//
//	go run ./test/bench -job index -n 500 -concurrency 16 -v
//
// With -job rebuild it rebuilds the indexes of the table (-n
// entities, default 5,000, in 10 partitions: a partition copy, a table
// list, a rows index) from scratch and then archives and purges indexed
// entities, printing calls per entity and wall time (rebuild.go):
//
//	go run ./test/bench -job rebuild
//
// With -job export it measures the table-to-blob exporter (export.go):
// entities/s, MiB/s, peak heap and storage calls for a table of 10,000
// and of 100,000 log rows (or -n), on the same two runs. With -job blobsync
// it prints the storage calls per entity of each blobsync mode
// (blobsync.go), for -n entities (default 200). With -job purge it deletes
// one day of 10,000 and of 100,000 entities (or -n) three ways — as a day
// table (DeleteTable), by the purge kind (EGT batches) and one by one —
// and prints their storage calls and wall time side by side, with the
// purge's peak live heap (purge.go):
//
// With -job restore it measures the restore kind (restore.go): a day of
// 10,000 and of 100,000 login attempts (or -n) is exported, then restored
// by the kind's handler in replace and in insert mode, beside a loop of
// single upserts of up to 10,000 of the same rows (-concurrency at once);
// it prints rows/s, calls per 1,000 rows, each loop's ratio to its
// latency limit and the restore's peak live heap:
//
//	go run ./test/bench -job restore
//
//	go run ./test/bench -job export -latency 0
//	go run ./test/bench -job blobsync -n 200
//	go run ./test/bench -job purge
//
// With -job client it measures the producer (client.go): messages/s of
// client.EnqueueMany next to enqueue raw's path doing the same sends
// (in-process with its calls counted, and on Azurite the built enqueue
// binary too) for -n jobs (default 1,000); and the outbox's calls: -n/5
// jobs "write an entity, reconcile its index" sent plain and by Tx.Commit,
// 1 and 10 per commit, then run by the worker, producer and worker counted
// apart, with their difference by operation:
//
//	go run ./test/bench -job client
//
// It may import every package of the module and the Azure SDK (the direct
// loops it compares with); it must not import the test-only harnesses of
// other packages (their _test files), and nothing imports it.
package main
