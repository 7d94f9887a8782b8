package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Tx is a transactional enqueue: the application's writes to one
// partition and the jobs to run after them, committed together or not at
// all. Build it with Client.Tx, add writes with Write and jobs with
// Enqueue, then Commit. A Tx is used by one goroutine and committed once.
type Tx struct {
	c         *Client
	table, pk string
	ops       []storeadapter.TableOp
	jobs      []txJob
	committed bool
}

// txJob is one job of a Tx as Enqueue took it.
type txJob struct {
	args jobs.Args
	opts []Option
}

// Tx starts a transactional enqueue on partition pk of table.
func (c *Client) Tx(table, pk string) *Tx { return &Tx{c: c, table: table, pk: pk} }

// Write adds the application's operations (insert, upsert, update or
// delete, If-Match where the action allows) on entities of the Tx's
// partition. They run in one entity group transaction with the jobs'
// outbox rows.
func (tx *Tx) Write(ops ...storeadapter.TableOp) { tx.ops = append(tx.ops, ops...) }

// Enqueue adds a job to run once the transaction has committed (and never
// if it does not). Its options are Enqueue's: ID, Delay (counted from the
// commit), TTL (longer than the window) and TraceParent.
func (tx *Tx) Enqueue(args jobs.Args, opts ...Option) { tx.jobs = append(tx.jobs, txJob{args, opts}) }

// TxResult is what a committed Tx did.
type TxResult struct {
	// Jobs are the jobs' results, in the order they were added.
	Jobs []Result
}

// ErrWindowSpent is Commit's error when half the commit window passed
// between the first message's send and the transaction's submission: the
// transaction is not submitted (its jobs' messages are deleted), so that
// it can never commit after the workers gave up on it.
var ErrWindowSpent = errors.New("half the commit window passed before the transaction could be submitted")

// Commit makes the writes and the jobs happen together or not at all:
//
//  1. It checks everything first: the table, the partition, every write
//     (on the Tx's partition, never on a reserved RowKey, which belong to
//     tablekeeper), every job (as Enqueue does; distinct operation ids),
//     and the transaction as Azure will (at most 100 operations, writes
//     and one outbox row per job; 4 MiB; each RowKey once). Nothing is
//     sent when a check fails.
//  2. It sends each job's message hidden for the commit window
//     (Config.Window) and the job's Delay, its envelope carrying an outbox reference
//     (jobs.OutboxRef): table, partition and the RowKey
//     ~tk.o.<operation id>. A failed send deletes the messages already
//     sent and returns the error.
//  3. It submits one entity group transaction: the writes, and an insert
//     of each job's outbox row (jobs.OutboxRow) — unless half the window
//     has passed since the first send (ErrWindowSpent).
//  4. Committed: it makes each message visible (after its Delay, if
//     any), with the pop receipt Send returned, so the common path waits
//     for nothing; a failure here only delays the job to the window's end.
//     A transaction that failed on an outbox row naming this commit's
//     own message committed after all (its reply was lost and the SDK's
//     retry found the rows): that is a commit.
//     Not committed: it deletes the messages (best effort) and returns
//     the transaction's error as it came (an If-Match failure stays
//     storeadapter.ErrPreconditionFailed). When the outcome is unknown (a
//     transient error or a timeout, after which the transaction may yet
//     have committed), it leaves the messages alone and returns the error:
//     the workers run the jobs if the outbox rows exist after the window,
//     and drop them (fencing the rows) if not.
//
// The worker's side — run the job once its row exists, delete the row
// when the job is done, drop the job when the row is still missing after
// the window — is jobs/runner's runOutbox; docs/client.md has the whole
// protocol and why a crash of either side at any step converges.
func (tx *Tx) Commit(ctx context.Context) (TxResult, error) {
	if tx.committed {
		return TxResult{}, errors.New("client: Tx: committed already")
	}
	tx.committed = true
	c := tx.c
	envs, texts, results, opts, err := tx.prepare(ctx)
	if err != nil {
		return TxResult{Jobs: results}, err
	}
	window := c.cfg.Window
	start := c.cfg.Clock.Now()
	sent := make([]storeadapter.Sent, 0, len(texts))
	for i, text := range texts {
		// Hidden for the window, and for the job's Delay on top: a message
		// the commit cannot make visible (its producer died) must not run
		// before its Delay either.
		s, err := c.send(ctx, text, storeadapter.SendOptions{VisibilityDelay: window + opts[i].delay, TTL: opts[i].ttl})
		if err != nil {
			c.unsend(results, sent)
			return TxResult{Jobs: results}, fmt.Errorf("client: Tx: op %s: %w", results[i].OpID, err)
		}
		sent = append(sent, s)
		results[i].MessageID = s.ID
	}
	ops := tx.ops
	for i, env := range envs {
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: jobs.OutboxRow(env, c.cfg.Queue, sent[i].ID)})
	}
	left := start.Add(window / 2).Sub(c.cfg.Clock.Now())
	if left <= 0 {
		c.unsend(results, sent)
		return TxResult{Jobs: results}, fmt.Errorf("client: Tx: %w (%v window)", ErrWindowSpent, window)
	}
	tctx, cancel := context.WithTimeout(ctx, left)
	err = c.cfg.Store.Tables().Transact(tctx, tx.table, ops)
	cancel()
	if err != nil && tx.landed(ctx, envs, sent) {
		// The transaction committed and its reply was lost: the SDK's retry
		// of the same request then finds the outbox rows it wrote.
		err = nil
	}
	if err != nil {
		if !storeadapter.IsTransient(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.unsend(results, sent)
		}
		return TxResult{Jobs: results}, tx.explain(err)
	}
	for i, s := range sent {
		// Best effort: a message left hidden runs at the window's end.
		_, _ = c.queue.Update(ctx, s.ID, s.PopReceipt, texts[i], opts[i].delay)
	}
	return TxResult{Jobs: results}, nil
}

// prepare checks the Tx (Commit's step 1) and returns each job's
// envelope, message text, result and options.
func (tx *Tx) prepare(ctx context.Context) ([]jobs.Envelope, []string, []Result, []options, error) {
	c := tx.c
	if err := storeadapter.ValidateTableName(tx.table); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("client: Tx: table: %w", err)
	}
	if err := storeadapter.ValidateKey("pk", tx.pk); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("client: Tx: %w", err)
	}
	for i, op := range tx.ops {
		switch {
		case op.Entity.PartitionKey != tx.pk:
			return nil, nil, nil, nil, fmt.Errorf("client: Tx: write %d: PartitionKey %q is not the Tx's partition %q", i, op.Entity.PartitionKey, tx.pk)
		case storeadapter.IsReserved(op.Entity.RowKey):
			return nil, nil, nil, nil, fmt.Errorf("client: Tx: write %d: RowKey %q: RowKeys starting with %q belong to tablekeeper", i, op.Entity.RowKey, storeadapter.ReservedPrefix)
		}
	}
	if len(tx.ops)+len(tx.jobs) == 0 {
		return nil, nil, nil, nil, errors.New("client: Tx: nothing to commit: no write and no job")
	}
	var (
		envs    []jobs.Envelope
		texts   []string
		results []Result
		opts    []options
		ids     = map[string]int{}
	)
	ops := tx.ops
	for i, j := range tx.jobs {
		o, err := apply(j.opts)
		if err == nil && o.ttl != 0 && o.ttl != storeadapter.NeverExpire && o.ttl <= c.cfg.Window+o.delay {
			err = fmt.Errorf("client: TTL: must be longer than the commit window and Delay (%v), got %v", c.cfg.Window+o.delay, o.ttl)
		}
		var env jobs.Envelope
		var res Result
		if err == nil {
			env, res, err = c.envelope(ctx, j.args, o)
		}
		if err == nil {
			if prev, dup := ids[res.OpID]; dup {
				err = fmt.Errorf("client: ID: %s is job %d's too: one operation per job", res.OpID, prev)
			}
			ids[res.OpID] = i
		}
		if err == nil {
			env.Outbox = &jobs.OutboxRef{Table: tx.table, PK: tx.pk, RK: jobs.OutboxPrefix + res.OpID, Window: jobs.Duration(c.cfg.Window)}
			if err = check(ctx, c.reg, env); err == nil {
				var text string
				if text, err = c.encode(env); err == nil {
					texts = append(texts, text)
				}
			}
		}
		results = append(results, res)
		if err != nil {
			return nil, nil, results, nil, fmt.Errorf("client: Tx: job %d: %w", i, err)
		}
		envs, opts = append(envs, env), append(opts, o)
		// The row as it will be written, with a message id of the
		// service's length, for the transaction's size check.
		ops = append(ops, storeadapter.TableOp{Action: storeadapter.TxInsert, Entity: jobs.OutboxRow(env, c.cfg.Queue, strings.Repeat("0", 36))})
	}
	if err := storeadapter.ValidateTransaction(ops); err != nil {
		return nil, nil, results, nil, fmt.Errorf("client: Tx: %w", err)
	}
	return envs, texts, results, opts, nil
}

// landed reports whether the transaction committed after all: whether
// the first job's outbox row exists and names the message this commit
// sent. A transaction whose reply was lost and which the SDK retried
// fails with "already exists" on a row it wrote itself; deleting its
// messages then would lose jobs whose transaction committed.
func (tx *Tx) landed(ctx context.Context, envs []jobs.Envelope, sent []storeadapter.Sent) bool {
	if len(envs) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := jobs.ReadOutbox(ctx, tx.c.cfg.Store.Tables(), envs[0].Outbox)
	return err == nil && e.State == jobs.OutboxCommitted && e.Row.Properties[jobs.OutboxMessage] == sent[0].ID
}

// explain adds to a transaction's error, when it failed on a job's outbox
// row that exists already, what that means; the error still wraps what it
// wrapped (errors.Is sees storeadapter.ErrAlreadyExists).
func (tx *Tx) explain(err error) error {
	var te *storeadapter.TransactionError
	if errors.As(err, &te) && te.Index >= len(tx.ops) && errors.Is(err, storeadapter.ErrAlreadyExists) {
		return fmt.Errorf("client: Tx: job %d's outbox row exists already: an earlier commit of the same operation id landed (its job has not finished), or a worker fenced it after that commit's window: %w",
			te.Index-len(tx.ops), err)
	}
	return err
}

// unsend deletes the messages of a Tx that will not commit, best effort:
// one left behind is dropped by the worker after the window, as its
// outbox row never appears. Their results lose their message ids.
func (c *Client) unsend(results []Result, sent []storeadapter.Sent) {
	for i, s := range sent {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.queue.DeleteMessage(ctx, s.ID, s.PopReceipt); err == nil {
			results[i].MessageID = ""
		}
		cancel()
	}
}
