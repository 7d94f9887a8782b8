package idempotent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Defaults of CASOptions.
const (
	DefaultCASTries = 5
	DefaultCASPause = 20 * time.Millisecond
)

// CASOptions tune UpdateCAS. The zero value merges, tries DefaultCASTries
// times and pauses about DefaultCASPause, doubling, between tries.
type CASOptions struct {
	// Mode is how a write to an existing entity applies: storeadapter.Merge
	// (the default) or storeadapter.Replace.
	Mode storeadapter.UpdateMode
	// Tries bounds the rounds of read, modify and write; 0 means
	// DefaultCASTries.
	Tries int
	// Pause is the pause after the first lost round; it doubles after each
	// later one, and each pause is drawn at random from [0.5, 1.5) times
	// that, so writers that keep colliding fall out of step. 0 means
	// DefaultCASPause.
	Pause time.Duration
	// Sleep waits between rounds; nil waits on a timer and returns early
	// with ctx's error when ctx ends. Tests put a recorder here.
	Sleep func(ctx context.Context, d time.Duration) error
	// Start, when set, is the entity as the caller last read it (with its
	// ETag): the first round modifies it instead of reading it again.
	Start *storeadapter.Entity
	// Absent, when Start is nil, says the caller knows (or expects) the
	// entity to be missing: the first round calls modify with nil and
	// inserts without reading first. When the entity is there after all,
	// the insert loses the round (ErrAlreadyExists) and the next one reads
	// it, so a wrong guess costs one call, a right one saves the read.
	Absent bool
}

// UpdateCAS changes one entity by compare-and-swap. Each round reads the
// entity (ETag included), calls modify with it (nil when the entity or its
// table is missing) and writes what modify returns: with If-Match of the
// ETag read when the entity existed, as an insert when it did not. A round
// is lost when another writer came between the read and the write (the
// ETag changed, the entity appeared or vanished): UpdateCAS pauses (see
// CASOptions.Pause) and tries again, at most CASOptions.Tries rounds, so a
// concurrent update is never overwritten.
//
// modify decides everything else. It returns the entity to write (its
// keys must be pk and rk; with Merge only the properties to change), nil to
// write nothing, or an error that ends UpdateCAS at once, returned as it is.
// So the caller chooses what a missing entity means: create it (return an
// entity), nothing to do (return nil) or an error (return one, for example
// wrapping storeadapter.ErrNotFound). modify may run several times, each
// time on a fresh read: it must not have effects of its own. It must not
// keep cur: UpdateCAS passes a copy it may change.
//
// It returns the entity as it now stands after its write (the current
// properties merged or replaced, with the new ETag), cur when modify asked
// for no write (the zero Entity when the entity is missing), or, when every
// round was lost, an error wrapping the last conflict
// (storeadapter.ErrPreconditionFailed, ErrAlreadyExists or ErrNotFound).
// Other storage errors end it at once, wrapped; a missing table on insert
// wraps storeadapter.ErrTableNotFound (see CreateOnMissing).
func UpdateCAS(ctx context.Context, t storeadapter.Tables, table, pk, rk string,
	modify func(cur *storeadapter.Entity) (*storeadapter.Entity, error), o CASOptions) (storeadapter.Entity, error) {
	tries := cmp.Or(o.Tries, DefaultCASTries)
	pause := cmp.Or(o.Pause, DefaultCASPause)
	mode := cmp.Or(o.Mode, storeadapter.Merge)
	sleep := o.Sleep
	if sleep == nil {
		sleep = func(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, nil, d) }
	}
	start, absent := o.Start, o.Start == nil && o.Absent
	for try := 1; ; try++ {
		var cur *storeadapter.Entity
		switch {
		case start != nil:
			c := start.Clone()
			cur, start = &c, nil
		case absent:
			absent = false
		default:
			e, err := t.GetEntity(ctx, table, pk, rk)
			switch {
			case err == nil:
				cur = &e
			case !errors.Is(err, storeadapter.ErrNotFound):
				return storeadapter.Entity{}, fmt.Errorf("idempotent: update %s %s/%s: read: %w", table, pk, rk, err)
			}
		}
		next, err := modify(cur)
		if err != nil {
			return storeadapter.Entity{}, err
		}
		if next == nil {
			if cur == nil {
				return storeadapter.Entity{}, nil
			}
			return *cur, nil
		}
		written := next.Clone()
		if cur != nil {
			written.ETag, err = t.UpdateEntity(ctx, table, *next, mode, cur.ETag)
			if mode == storeadapter.Merge {
				written.Properties = cur.Merge(*next).Properties
			}
		} else {
			written.ETag, err = t.InsertEntity(ctx, table, *next)
		}
		if err == nil {
			return written, nil
		}
		if !Lost(err) {
			return storeadapter.Entity{}, fmt.Errorf("idempotent: update %s %s/%s: write: %w", table, pk, rk, err)
		}
		if try == tries {
			return storeadapter.Entity{}, fmt.Errorf("idempotent: update %s %s/%s: changed by another writer in each of %d tries: %w", table, pk, rk, tries, err)
		}
		d := time.Duration(float64(pause) * (0.5 + rand.Float64()))
		if serr := sleep(ctx, d); serr != nil {
			return storeadapter.Entity{}, fmt.Errorf("idempotent: update %s %s/%s: %w (after losing to another writer: %w)", table, pk, rk, serr, err)
		}
		pause *= 2
	}
}

// Lost reports whether a conditional write lost to another writer: the
// ETag changed, the entity (or blob) appeared before an insert, or it
// vanished before an update. A missing table is not a loss.
func Lost(err error) bool {
	return errors.Is(err, storeadapter.ErrPreconditionFailed) || errors.Is(err, storeadapter.ErrAlreadyExists) ||
		errors.Is(err, storeadapter.ErrNotFound) && !errors.Is(err, storeadapter.ErrTableNotFound)
}
