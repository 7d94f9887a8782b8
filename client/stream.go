package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ErrStopped is the error of a message a Stream (or an EnqueueMany) did
// not send because the run had stopped; it wraps the reason (the failure
// that stopped the run, or the context's cause).
var ErrStopped = errors.New("not sent: the run stopped")

// Refused reports whether err says the queue service refused a message
// itself (invalid input, too large): sending it again cannot succeed, but
// other messages still can. A Stream goes on past such a send; any other
// failure stops it.
func Refused(err error) bool {
	return errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge)
}

// Stream sends prepared jobs as they come, Config.Concurrency at a time,
// for a producer with more jobs than it should hold at once (the enqueue
// command's JSON lines): Send blocks while every sender is busy, so its
// memory stays bounded whatever the number of jobs. Each job's outcome is
// reported to the function Send was given. Make one with Client.Stream,
// Send from one goroutine or several, then Close it.
//
// A send the service refused (see Refused) fails that job alone. Any other
// failed send stops the stream — every later send would fail the same
// way — as does the end of its context: the jobs not yet sent are not
// sent (ErrStopped), and Send refuses more.
type Stream struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelCauseFunc
	work   chan streamJob
	wg     sync.WaitGroup
	closed atomic.Bool
	// mu makes one failed send, the first, the one that stops the stream.
	mu sync.Mutex
}

// streamJob is one job handed to a Stream.
type streamJob struct {
	m    Message
	done func(Result, error)
}

// Stream starts a stream of sends under ctx (see Stream).
func (c *Client) Stream(ctx context.Context) *Stream {
	s := &Stream{c: c, work: make(chan streamJob, c.cfg.Concurrency)}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	for range c.cfg.Concurrency {
		s.wg.Go(s.sender)
	}
	return s
}

// Send hands m to the stream's senders, waiting while they are all busy.
// done is called once, from a sender, with m's result and:
//
//   - nil when m was sent;
//   - an error that Refused reports when the service refused m; the
//     stream goes on;
//   - the error that stopped the stream, when m's send failed otherwise
//     (Close returns it too);
//   - ErrStopped (wrapped) when m was not sent because the stream had
//     stopped.
//
// When the stream has stopped or is closed, Send returns an error (the
// stream's, wrapped in ErrStopped) and does not call done.
func (s *Stream) Send(m Message, done func(Result, error)) error {
	if s.closed.Load() {
		return errors.New("client: Stream.Send after Close")
	}
	if s.ctx.Err() != nil {
		return s.stopped()
	}
	select {
	case s.work <- streamJob{m, done}:
		return nil
	case <-s.ctx.Done():
		return s.stopped()
	}
}

// Err returns what stopped the stream (see Close), or nil while it runs:
// a producer that reads its jobs from somewhere stops reading when it is
// set. After Close, Close's result is the one to read.
func (s *Stream) Err() error { return context.Cause(s.ctx) }

// Close waits for the sends under way and returns what stopped the
// stream: the failed send's error (as the job's done got it), the
// context's cause, or nil when nothing did. Call it once, after the last
// Send.
func (s *Stream) Close() error {
	if s.closed.Swap(true) {
		return errors.New("client: Stream closed twice")
	}
	close(s.work)
	s.wg.Wait()
	err := context.Cause(s.ctx)
	s.cancel(nil)
	return err
}

// stopped is the error of a job not sent because the stream stopped.
func (s *Stream) stopped() error {
	return fmt.Errorf("%w: %w", ErrStopped, context.Cause(s.ctx))
}

// sender sends the jobs handed to the stream until it is closed.
func (s *Stream) sender() {
	for j := range s.work {
		if s.ctx.Err() != nil {
			j.done(Result{OpID: j.m.OpID, ArgsRef: j.m.ArgsRef}, s.stopped())
			continue
		}
		res, err := s.c.Send(s.ctx, j.m)
		if err != nil && !Refused(err) {
			s.mu.Lock()
			if s.ctx.Err() == nil {
				s.cancel(err) // this send stops the stream; done gets err
			} else {
				err = s.stopped() // stopping anyway: not this job's fault
			}
			s.mu.Unlock()
		}
		j.done(res, err)
	}
}
