package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// not tried because the run stopped has ErrStopped, wrapping what
	// stopped it.
	Errs map[int]error
}

func (e *ManyError) Error() string {
	idx := e.Unsent()
	return fmt.Sprintf("client: %d jobs not sent; job %d: %s", len(idx), idx[0], strings.TrimPrefix(e.Errs[idx[0]].Error(), "client: "))
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

// EnqueueMany sends one job per element of args (see Enqueue), at most
// Config.Concurrency at a time (through a Stream), with opts applied to
// each (their ids from IDs; ID is refused). Every job is checked before
// any is sent: an invalid one fails the call with nothing sent. A failed
// send stops the run, unless the service refused that message alone (see
// Refused): the jobs not yet tried are not sent either. It returns one
// Result per job, in order, each with its operation id and, when it was
// sent, its message id; when some were not sent, the error is a
// *ManyError naming them.
func (c *Client) EnqueueMany(ctx context.Context, args []jobs.Args, opts ...Option) ([]Result, error) {
	o, err := apply(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case o.id != "":
		return nil, &InvalidError{Err: errors.New("ID: gives one job's id; give EnqueueMany's ids with IDs")}
	case o.ids != nil && len(o.ids) != len(args):
		return nil, &InvalidError{Err: fmt.Errorf("IDs: %d ids for %d jobs", len(o.ids), len(args))}
	}
	results := make([]Result, len(args))
	msgs := make([]Message, len(args))
	for i, a := range args {
		one := o
		if o.ids != nil {
			one.id = o.ids[i]
		}
		if msgs[i], err = c.Prepare(ctx, a, optionsOf(one)); err != nil {
			return nil, fmt.Errorf("client: job %d: %w", i, err)
		}
		results[i] = Result{OpID: msgs[i].OpID, ArgsRef: msgs[i].ArgsRef}
	}
	var mu sync.Mutex
	failed := map[int]error{}
	s := c.Stream(ctx)
	for i, m := range msgs {
		err := s.Send(m, func(res Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[i] = err
			} else {
				results[i].MessageID = res.MessageID
			}
		})
		if err != nil {
			break
		}
	}
	stopped := ErrStopped
	if stop := s.Close(); stop != nil {
		stopped = fmt.Errorf("%w: %w", ErrStopped, stop)
	}
	for i := range results {
		if results[i].MessageID == "" && failed[i] == nil {
			failed[i] = stopped
		}
	}
	if len(failed) > 0 {
		return results, &ManyError{Errs: failed}
	}
	return results, nil
}

// optionsOf is the Option that sets every option as o holds it.
func optionsOf(o options) Option { return func(p *options) { *p = o } }
