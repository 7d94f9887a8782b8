package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/internal/text"
)

// PermanentError marks a failure that retrying cannot fix: a malformed
// message, invalid arguments, a missing target the operation cannot create.
// The runner moves a message that fails permanently to the poison queue at
// once instead of retrying it.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that IsPermanent reports true. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// IsPermanent reports whether err, or an error it wraps, is permanent.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

// ContinueError is what a handler returns when it has saved its progress
// (a checkpoint) and wants to continue later instead of running on: a
// long purge or export that has spent its time budget, as river's snooze.
// The runner re-sends the message with Envelope.Continued one higher,
// visible after After, and then deletes the delivered one, so the pause
// counts neither as a failed attempt nor as a delivery towards
// MaxDequeueCount. The handler must have saved everything the next
// delivery needs before it returns this; the next delivery resumes from
// its checkpoint.
type ContinueError struct {
	// After is how long the message stays invisible; 0 makes it visible
	// at once.
	After time.Duration
	// Progress says briefly what was done so far, for the log line
	// ("deleted 120000 of the table's entities"); it is cut at 200
	// characters.
	Progress string
}

func (e *ContinueError) Error() string {
	return fmt.Sprintf("continue in %v: %s", e.After, e.Progress)
}

// ContinueLater returns the error that asks the runner to continue the job
// after the given delay, its progress saved; see ContinueError.
func ContinueLater(after time.Duration, progress string) error {
	return &ContinueError{After: max(after, 0), Progress: text.Truncate(progress, 200)}
}

// AsContinue returns the ContinueError err is or wraps, and false when err
// asks for no continuation.
func AsContinue(err error) (*ContinueError, bool) {
	var ce *ContinueError
	ok := errors.As(err, &ce)
	return ce, ok
}

// Budget is a job's time budget: the handler checks Spent between units of
// work whose progress it has saved, and returns ContinueLater once it is.
// The zero Budget is never spent.
type Budget struct {
	deadline time.Time
	clock    clock.Clock
}

// NewBudget returns a budget of d from now on c (nil: the wall clock),
// which is read here and again at each Spent; d <= 0 is a budget never
// spent.
func NewBudget(d time.Duration, c clock.Clock) Budget {
	if d <= 0 {
		return Budget{}
	}
	c = clock.Or(c)
	return Budget{deadline: c.Now().Add(d), clock: c}
}

// Spent reports whether the budget's time is up.
func (b Budget) Spent() bool { return b.clock != nil && !b.clock.Now().Before(b.deadline) }
