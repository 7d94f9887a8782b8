package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Every job a command sends goes through one client.Client, built over
// the store the command connected to and on its -queue: the client checks
// the job as the worker will, gives it its op id (client.NewOpID), encodes
// it and sends it. The command only words the client's errors as its own.

// connectClient connects (see connect) and returns the store and the
// client that sends the command's jobs over it; concurrency is a bulk
// send's -concurrency (0 for the client's default).
func (m *Main) connectClient(c *common, concurrency int) (*client.Client, storeadapter.Store, error) {
	store, err := m.connect(c)
	if err != nil {
		return nil, nil, err
	}
	cl, err := client.New(client.Config{Store: store, Queue: c.queue, Clock: m.Clock, Concurrency: concurrency})
	if err != nil {
		return nil, nil, err
	}
	return cl, store, nil
}

// sendKind sends the one job a describes under op id (a new one unless
// idGiven), checked as the worker will check it before anything connects
// (checkJob): an error of the args is a usage error, named by flags (field
// names to flags).
//
// Each of checks, if any, runs once connected and before the send: what
// the worker would otherwise find only when it runs the job (a container
// that does not exist), refused now, with nothing sent.
func (m *Main) sendKind(ctx context.Context, c *common, idGiven bool, id string, a jobs.Args, flags *strings.Replacer,
	checks ...func(context.Context, storeadapter.Store) error) error {
	if !idGiven {
		id = client.NewOpID(m.now())
	}
	if err := checkJob(ctx, a, id, flags); err != nil {
		return err
	}
	cl, store, err := m.connectClient(c, 0)
	if err != nil {
		return err
	}
	for _, check := range checks {
		if err := check(ctx, store); err != nil {
			return err
		}
	}
	return m.sendOne(ctx, c, cl, a, id)
}

// checkJob checks the job a under op id as the worker will
// (client.Check), calling no service. A refusal is a usage error in the
// worker's words, its fields renamed to the flags that set them by flags
// and the op id's rule put as -id's.
func checkJob(ctx context.Context, a jobs.Args, id string, flags *strings.Replacer) error {
	err := client.Check(ctx, a, client.ID(id))
	var ie *client.InvalidError
	if !errors.As(err, &ie) {
		return err
	}
	msg := ie.Err.Error()
	if rule, ok := strings.CutPrefix(msg, "ID: "); ok {
		return usagef("-id: %s", rule)
	}
	return usagef("%s", flags.Replace(msg))
}

// sendOne sends the job a under op id through cl and prints the op id and
// the message id.
func (m *Main) sendOne(ctx context.Context, c *common, cl *client.Client, a jobs.Args, id string) error {
	messageID, err := enqueue(ctx, cl, a, id)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(m.Stdout, struct {
			OpID      string `json:"opId"`
			MessageID string `json:"messageId"`
		}{id, messageID})
	}
	tw := newTable(m.Stdout)
	row(tw, "OP ID", "MESSAGE ID", "QUEUE")
	row(tw, id, messageID, cl.Queue())
	return tw.Flush()
}

// enqueue sends the job a under op id through cl (creating the queue when
// missing) and returns its message id; its error names the operation.
func enqueue(ctx context.Context, cl *client.Client, a jobs.Args, id string) (string, error) {
	res, err := cl.Enqueue(ctx, a, client.ID(id))
	if err != nil {
		return "", fmt.Errorf("op %s: %w", id, jobError(err, id))
	}
	return res.MessageID, nil
}

// jobError words an error of the client about the job of op id as the
// command reports it, where the command itself says which job it is (a
// line number, "op <id>: "): a refusal in the worker's words ("args.pk:
// …"), anything else without the client's "client: op <id>: " ("send to
// queue q: …"). errors.Is and As still see all it wraps.
func jobError(err error, id string) error {
	var ie *client.InvalidError
	if errors.As(err, &ie) {
		return ie.Err
	}
	return ownError{err, id}
}

// ownError is a client's error with its prefix left out (see jobError).
type ownError struct {
	err error
	id  string
}

func (e ownError) Error() string {
	s := e.err.Error()
	if rest, ok := strings.CutPrefix(s, "client: op "+e.id+": "); ok {
		return rest
	}
	return strings.TrimPrefix(s, "client: ")
}

func (e ownError) Unwrap() error { return e.err }

// containerExists returns a check (see sendKind) that the container of
// flag's value ("container" or "container/prefix") exists, with one call
// (the properties of a blob name no job writes: a missing blob is fine, a
// missing container is not).
func containerExists(flag, target string) func(context.Context, storeadapter.Store) error {
	return func(ctx context.Context, store storeadapter.Store) error {
		container, _, _ := strings.Cut(target, "/")
		_, err := store.Container(container).Properties(ctx, "~tk.container-check")
		switch {
		case err == nil, errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrContainerNotFound):
			return nil
		case errors.Is(err, storeadapter.ErrContainerNotFound):
			return fmt.Errorf("-%s: container %s does not exist: create it first, or check the name (nothing was sent)", flag, container)
		}
		return fmt.Errorf("-%s: check container %s: %w", flag, container, err)
	}
}
