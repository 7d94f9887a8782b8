package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tablekeeper/tablekeeper/jobs"
)

// IDs gives the jobs of an EnqueueMany their operation ids, one per
// job in order (ID is for one job). A retry of the jobs a failed
// EnqueueMany did not send passes the ids its results hold, so the retry
// repeats the same operations.
func IDs(ids ...string) Option { return func(o *options) { o.ids = ids } }

// ManyError is the error of an EnqueueMany that did not send every job.
// The results returned with it say which were sent (MessageID set) and
// hold every job's operation id; resend the others with those ids (see
// IDs): a job sent twice under one id runs as one operation.
type ManyError struct {
	// Errs maps the index of each job that was not sent to why; a job
	// not tried because an earlier send failed has the error that
	// stopped the run.
	Errs map[int]error
}

func (e *ManyError) Error() string {
	idx := e.Unsent()
	return fmt.Sprintf("client: %d jobs not sent; job %d: %v", len(idx), idx[0], e.Errs[idx[0]])
}

// Unwrap returns the errors of the jobs not sent.
func (e *ManyError) Unwrap() []error {
	var out []error
	for _, i := range e.Unsent() {
		out = append(out, e.Errs[i])
	}
	return out
}

// Unsent returns the indexes of the jobs not sent, in order.
func (e *ManyError) Unsent() []int {
	out := make([]int, 0, len(e.Errs))
	for i := range e.Errs {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// errNotTried stands for a job an EnqueueMany did not try to send.
var errNotTried = errors.New("not sent: the run stopped at an earlier failure")

// EnqueueMany sends one job per element of args (see Enqueue), at most
// Config.Concurrency at a time, with opts applied to each (their ids from
// IDs; ID is refused). Every job is checked before any is sent: an invalid
// one fails the call with nothing sent. A failed send stops the run: the
// jobs not yet tried are not sent either. It returns one Result per job,
// in order, each with its operation id and, when it was sent, its
// message id; when some were not sent, the error is a *ManyError naming
// them.
func (c *Client) EnqueueMany(ctx context.Context, args []jobs.Args, opts ...Option) ([]Result, error) {
	o, err := apply(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case o.id != "":
		return nil, errors.New("client: ID: gives one job's id; give EnqueueMany's ids with IDs")
	case o.ids != nil && len(o.ids) != len(args):
		return nil, fmt.Errorf("client: IDs: %d ids for %d jobs", len(o.ids), len(args))
	}
	results := make([]Result, len(args))
	texts := make([]string, len(args))
	for i, a := range args {
		one := o
		if o.ids != nil {
			one.id = o.ids[i]
		}
		env, res, err := c.envelope(ctx, a, one)
		if err == nil {
			texts[i], err = c.encode(env)
		}
		if err != nil {
			return nil, fmt.Errorf("client: job %d: %w", i, err)
		}
		results[i] = res
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	failed := map[int]error{}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(c.cfg.Concurrency, len(args)) {
		wg.Go(func() {
			for i := range work {
				sent, err := c.send(ctx, texts[i], sendOptions(o))
				mu.Lock()
				if err != nil {
					failed[i] = fmt.Errorf("send op %s: %w", results[i].OpID, err)
					cancel(failed[i])
				} else {
					results[i].MessageID = sent.ID
				}
				mu.Unlock()
			}
		})
	}
	for i := range args {
		if ctx.Err() != nil {
			break
		}
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	for i := range results {
		if results[i].MessageID == "" && failed[i] == nil {
			failed[i] = errNotTried
			if cause := context.Cause(ctx); cause != nil {
				failed[i] = fmt.Errorf("%w: %w", errNotTried, cause)
			}
		}
	}
	if len(failed) > 0 {
		return results, &ManyError{Errs: failed}
	}
	return results, nil
}
