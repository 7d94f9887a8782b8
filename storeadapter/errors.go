package storeadapter

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Sentinel errors. Implementations wrap one of them (with %w) in every error
// they return for a service condition, so callers use errors.Is and never
// inspect SDK types or service codes.
var (
	// ErrNotFound: the table, entity, queue, message or blob does not exist.
	// When the container of the thing asked for is missing (the table, the
	// queue or the blob container), the error is the more precise
	// ErrTableNotFound, ErrQueueNotFound or ErrContainerNotFound, each of
	// which errors.Is(ErrNotFound) still matches.
	ErrNotFound = errors.New("not found")
	// ErrTableNotFound: the table does not exist (not only the entity).
	ErrTableNotFound = fmt.Errorf("table %w", ErrNotFound)
	// ErrQueueNotFound: the queue does not exist (not only the message).
	ErrQueueNotFound = fmt.Errorf("queue %w", ErrNotFound)
	// ErrContainerNotFound: the blob container does not exist (not only
	// the blob).
	ErrContainerNotFound = fmt.Errorf("container %w", ErrNotFound)
	// ErrAlreadyExists: an insert met an existing entity, a create met an
	// existing table or container, or If-None-Match "*" met an existing blob.
	ErrAlreadyExists = errors.New("already exists")
	// ErrPreconditionFailed: an If-Match ETag did not match the current one.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrTableBeingDeleted: a table (or container) of that name was deleted
	// recently and the name cannot be reused yet. Transient by nature.
	ErrTableBeingDeleted = errors.New("table is being deleted")
	// ErrInvalidInput: a name, key, property, filter, option or message was
	// rejected by validation (ours or the service's). Never retry it.
	ErrInvalidInput = errors.New("invalid input")
	// ErrTooLarge: an entity, property, batch, message or blob exceeds a
	// service size limit. Never retry it.
	ErrTooLarge = errors.New("too large")
	// ErrPopReceiptMismatch: a message update or delete used a pop receipt
	// that is no longer current: another receive or update happened since,
	// so the caller has lost its lease on the message.
	ErrPopReceiptMismatch = errors.New("pop receipt mismatch")
	// ErrForbidden: the credential was refused or lacks a permission (401,
	// 403): an expired SAS, or a role assignment not granted or not yet
	// propagated. Not the request's fault; fix the deployment. When the
	// credential itself was refused the error is the more precise
	// ErrAuthentication, which errors.Is(ErrForbidden) still matches.
	ErrForbidden = errors.New("forbidden")
	// ErrAuthentication: the credential itself cannot be had or was
	// refused, whatever the request: a sign-in that cannot succeed (no
	// identity found, a token the authority or the service rejects), a
	// wrong or rotated account key, a SAS that expired or does not cover
	// the service, resource type, protocol or address (401,
	// 403 AuthenticationFailed, AuthorizationFailure — also the account's
	// network rules refusing this client). Not transient: waiting does not
	// fix it, the configuration must change, so a command fails at once.
	// (A permission missing on an identity that signed in, possibly a role
	// assignment still propagating, is ErrForbidden only.)
	ErrAuthentication = fmt.Errorf("authentication failed: %w", ErrForbidden)
	// ErrUnavailable: the service timed out, was busy or failed (408, 500,
	// 503, 504, connection errors). Retry with backoff.
	ErrUnavailable = errors.New("service unavailable")
	// ErrServiceFailed: the service answered, with an internal error (HTTP
	// 500): it is up, but failed this request. It wraps ErrUnavailable, so
	// it is transient; but a request that fails this way every time does
	// not get better: Azurite answers 500 to every receive that would
	// return a message whose text it cannot write (a raw U+0001, which
	// Azure refuses at send), so such a message can never be received.
	ErrServiceFailed = fmt.Errorf("service failed the request: %w", ErrUnavailable)
)

// IsTransient reports whether err is worth retrying later: the service was
// unavailable, a network operation failed or timed out, or a deleted table
// name is not yet free. Invalid input, conflicts, missing resources and a
// cancelled context are not transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTableBeingDeleted) {
		return true
	}
	// A failed network operation (connection refused or reset, say) is
	// transient as the doc comment promises, not only a timed-out one.
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TransactionError reports which operation of an entity group transaction
// failed. The whole transaction was rolled back. Err wraps one of the
// sentinel errors, so errors.Is(txErr, ErrAlreadyExists) works.
type TransactionError struct {
	// Index is the zero-based position of the failing operation in the
	// slice passed to Transact, or -1 when the service did not say.
	Index int
	// Err is the cause.
	Err error
}

func (e *TransactionError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("transaction failed: %v", e.Err)
	}
	return fmt.Sprintf("transaction operation %d failed: %v", e.Index, e.Err)
}

func (e *TransactionError) Unwrap() error { return e.Err }

// invalid returns an ErrInvalidInput error whose message names the field and
// the rule it broke.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidInput, field, fmt.Sprintf(format, args...))
}

// tooLarge returns an ErrTooLarge error naming the field and the limit.
func tooLarge(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrTooLarge, field, fmt.Sprintf(format, args...))
}
