package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs/index"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// envConnectionString names the variable the connection string comes
// from, as for the worker and enqueue.
const envConnectionString = "AZURE_STORAGE_CONNECTION_STRING"

// lastNames are the values of the indexed LastName: few, so that lists
// are shared, and some that keys and blob names must escape.
var lastNames = []string{"Jones", "Smith", "O'Brien", "García", "Lee/Park", "Nguyen", "Ng😀", "Brown"}

func main() {
	queue := flag.String("queue", "", "work queue (required)")
	table := flag.String("table", "", "the employees' table (required; created when missing)")
	partitions := flag.String("partitions", "", "comma-separated partitions, one writer each (required)")
	employees := flag.Int("employees", 6, "employees per partition")
	window := flag.Duration("window", 3*time.Second, "the commit window of every Tx")
	pause := flag.Duration("pause", 20*time.Millisecond, "at most this long between one writer's Txs (a random part of it)")
	seed := flag.Uint64("seed", 1, "seed of the random choices")
	flag.Parse()
	pks := strings.Split(*partitions, ",")
	if *queue == "" || *table == "" || *partitions == "" || *employees < 1 || *employees > 1000 {
		fmt.Fprintln(os.Stderr, "producer: -queue, -table and -partitions are required, and -employees must be 1-1000")
		os.Exit(2)
	}
	out := &lines{w: os.Stdout}
	st, err := client.Account{ConnectionString: os.Getenv(envConnectionString)}.Store()
	if err != nil {
		// Account's errors never quote the credential.
		fmt.Fprintf(os.Stderr, "producer: %s: %v\n", envConnectionString, err)
		os.Exit(2)
	}
	c, err := client.New(client.Config{Store: st, Queue: *queue, Window: *window})
	if err != nil {
		fmt.Fprintf(os.Stderr, "producer: %v\n", err)
		os.Exit(2)
	}
	ctx := context.Background()
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := st.Tables().CreateTable(cctx, *table)
		cancel()
		if err == nil || errors.Is(err, storeadapter.ErrAlreadyExists) {
			break
		}
		out.printf("fail create table %s: %v", *table, err)
		time.Sleep(200 * time.Millisecond)
	}
	out.printf("started seed %d", *seed)
	var wg sync.WaitGroup
	for i, pk := range pks {
		w := &writer{c: c, tables: st.Tables(), table: *table, pk: pk, employees: *employees, pause: *pause,
			rng: rand.New(rand.NewPCG(*seed, uint64(i))), out: out}
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait() // never: the writers run until the process is killed
}

// lines writes whole lines from many goroutines.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// writer is the application's writer of one partition.
type writer struct {
	c          *client.Client
	tables     storeadapter.Tables
	table, pk  string
	employees  int
	pause      time.Duration
	rng        *rand.Rand
	out        *lines
	generation int // makes each write's Email new
}

// run writes until the process ends.
func (w *writer) run(ctx context.Context) {
	for {
		w.once(ctx)
		if w.pause > 0 {
			time.Sleep(time.Duration(w.rng.Int64N(int64(w.pause))))
		}
	}
}

// once commits one Tx of one to three employees, printing what it did.
func (w *writer) once(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tx := w.c.Tx(w.table, w.pk)
	var did []string
	for _, i := range w.rng.Perm(w.employees)[:1+w.rng.IntN(min(3, w.employees))] {
		rk := fmt.Sprintf("e%03d", i)
		op, err := w.write(ctx, rk)
		if err != nil {
			w.out.printf("fail %s/%s read: %v", w.pk, rk, err)
			return
		}
		tx.Write(op)
		tx.Enqueue(index.Reconcile(w.table, w.pk, rk))
		did = append(did, fmt.Sprintf("%s=%s", rk, action(op.Action)))
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		w.out.printf("fail %s %s: %v", w.pk, strings.Join(did, " "), err)
		return
	}
	ids := make([]string, len(res.Jobs))
	for i, j := range res.Jobs {
		ids[i] = j.OpID
	}
	w.out.printf("commit %s %s ops %s", w.pk, strings.Join(did, " "), strings.Join(ids, ","))
}

// write reads employee rk and returns the write to make: an insert when
// it is missing; else a merge (new LastName, sometimes a new Email), a
// replace or a delete, If-Match the ETag read.
func (w *writer) write(ctx context.Context, rk string) (storeadapter.TableOp, error) {
	w.generation++
	props := map[string]any{"LastName": lastNames[w.rng.IntN(len(lastNames))]}
	email := fmt.Sprintf("%s.%s.%d.%d@contoso.example", strings.ToLower(strings.ReplaceAll(w.pk, " ", "")), rk, w.rng.Uint32(), w.generation)
	en, err := w.tables.GetEntity(ctx, w.table, w.pk, rk)
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		props["Email"], props["FirstName"] = email, "Ana"
		return storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: storeadapter.Entity{PartitionKey: w.pk, RowKey: rk, Properties: props}}, nil
	case err != nil:
		return storeadapter.TableOp{}, err
	}
	key := storeadapter.Entity{PartitionKey: w.pk, RowKey: rk, Properties: props}
	switch r := w.rng.IntN(10); {
	case r < 6:
		if w.rng.IntN(2) == 0 {
			props["Email"] = email
		}
		return storeadapter.TableOp{Action: storeadapter.TxUpdateMerge, Entity: key, IfMatch: en.ETag}, nil
	case r < 8:
		props["Email"], props["FirstName"] = email, "Ben"
		return storeadapter.TableOp{Action: storeadapter.TxUpdateReplace, Entity: key, IfMatch: en.ETag}, nil
	}
	key.Properties = nil
	return storeadapter.TableOp{Action: storeadapter.TxDelete, Entity: key, IfMatch: en.ETag}, nil
}

// action names a write in the printed lines.
func action(a storeadapter.TxAction) string {
	switch a {
	case storeadapter.TxInsert:
		return "insert"
	case storeadapter.TxUpdateMerge:
		return "merge"
	case storeadapter.TxUpdateReplace:
		return "replace"
	case storeadapter.TxDelete:
		return "delete"
	}
	return fmt.Sprint(a)
}
