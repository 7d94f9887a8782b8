package idempotent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Cell is one operation's checkpoint holding a state S as JSON, written
// only by compare-and-swap: the first write is an insert, every later one
// If-Match the ETag this cell last read or wrote. Of two deliveries of one
// operation writing at once, one wins each write; the other writes
// nothing, reads the winner's state and goes on from it, so the state
// never moves back. The kinds whose progress is one state (purge, copy)
// keep it in a Cell.
type Cell[S any] struct {
	Checkpoints Checkpoints
	Op, Step    string
	// Check refuses a state read back (of another version, or written for
	// other arguments: see Digest) with the error the caller returns; nil
	// accepts every state that parses.
	Check func(S) error

	etag string
}

// Load reads the state; found is false when the operation has none yet.
func (c *Cell[S]) Load(ctx context.Context) (st S, found bool, err error) {
	tok, etag, err := c.Checkpoints.LoadETag(ctx, c.Op, c.Step)
	if err != nil || tok == "" {
		return st, false, err
	}
	if st, err = c.decode(tok); err != nil {
		return st, false, err
	}
	c.etag = etag
	return st, true, nil
}

// Put writes st (an insert when the cell has neither read nor written a
// state, else If-Match) and returns the state the checkpoint holds after
// it: st, won true; or, when another delivery's write came first (the
// insert found a checkpoint, the If-Match failed), that delivery's state,
// read again, won false.
func (c *Cell[S]) Put(ctx context.Context, st S) (now S, won bool, err error) {
	b, err := json.Marshal(st)
	if err != nil {
		return st, false, err
	}
	var etag string
	if c.etag == "" {
		etag, err = c.Checkpoints.Create(ctx, c.Op, c.Step, string(b))
	} else {
		etag, err = c.Checkpoints.SaveIfMatch(ctx, c.Op, c.Step, string(b), c.etag)
	}
	switch {
	case err == nil:
		c.etag = etag
		return st, true, nil
	case !Lost(err): // Lost includes the insert's ErrAlreadyExists
		return st, false, err
	}
	now, found, err := c.Load(ctx)
	switch {
	case err != nil:
		return st, false, err
	case !found:
		return st, false, fmt.Errorf("checkpoint %s/%s vanished while the operation ran (cleared by another process); the redelivery starts again", c.Op, c.Step)
	}
	return now, false, nil
}

// ETag is the checkpoint's ETag as this cell last read or wrote it ("" for
// none): a delivery that ends with the ETag it loaded changed nothing.
func (c *Cell[S]) ETag() string { return c.etag }

func (c *Cell[S]) decode(tok string) (S, error) {
	var st S
	if err := json.Unmarshal([]byte(tok), &st); err != nil {
		return st, fmt.Errorf("checkpoint %s/%s: %w", c.Op, c.Step, err)
	}
	if c.Check != nil {
		if err := c.Check(st); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Digest is the hex SHA-256 of v's JSON (a struct's fields in declaration
// order). A checkpoint keeps its arguments' digest, so that a message that
// reuses an operation id with other arguments is refused instead of
// resuming another operation. v must marshal (plain fields).
func Digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("idempotent.Digest: %v", err)) // a programming error
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
