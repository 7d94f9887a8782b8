package azstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// codeSentinels maps the service's error codes (tables, queues, blobs) to
// storeadapter's sentinels, by the codes each SDK exports.
var codeSentinels = map[string]error{
	string(aztables.ResourceNotFound):   storeadapter.ErrNotFound,
	string(aztables.TableNotFound):      storeadapter.ErrTableNotFound,
	string(queueerror.QueueNotFound):    storeadapter.ErrQueueNotFound,
	string(queueerror.MessageNotFound):  storeadapter.ErrNotFound,
	string(bloberror.BlobNotFound):      storeadapter.ErrNotFound,
	string(bloberror.ContainerNotFound): storeadapter.ErrContainerNotFound,

	string(aztables.EntityAlreadyExists):     storeadapter.ErrAlreadyExists,
	string(aztables.TableAlreadyExists):      storeadapter.ErrAlreadyExists,
	string(queueerror.QueueAlreadyExists):    storeadapter.ErrAlreadyExists,
	string(bloberror.BlobAlreadyExists):      storeadapter.ErrAlreadyExists,
	string(bloberror.ContainerAlreadyExists): storeadapter.ErrAlreadyExists,

	string(aztables.UpdateConditionNotSatisfied): storeadapter.ErrPreconditionFailed,
	string(bloberror.ConditionNotMet):            storeadapter.ErrPreconditionFailed,

	string(aztables.TableBeingDeleted):      storeadapter.ErrTableBeingDeleted,
	string(bloberror.ContainerBeingDeleted): storeadapter.ErrTableBeingDeleted,
	string(queueerror.QueueBeingDeleted):    storeadapter.ErrTableBeingDeleted,

	string(queueerror.PopReceiptMismatch): storeadapter.ErrPopReceiptMismatch,

	string(aztables.EntityTooLarge):        storeadapter.ErrTooLarge,
	string(aztables.PropertyValueTooLarge): storeadapter.ErrTooLarge,
	string(queueerror.RequestBodyTooLarge): storeadapter.ErrTooLarge,
	string(aztables.TooManyProperties):     storeadapter.ErrTooLarge,

	// The credential itself (see ErrAuthentication) ...
	string(queueerror.AuthenticationFailed):              storeadapter.ErrAuthentication,
	string(queueerror.InvalidAuthenticationInfo):         storeadapter.ErrAuthentication,
	string(queueerror.AuthorizationFailure):              storeadapter.ErrAuthentication,
	string(queueerror.AuthorizationProtocolMismatch):     storeadapter.ErrAuthentication,
	string(queueerror.AuthorizationResourceTypeMismatch): storeadapter.ErrAuthentication,
	string(queueerror.AuthorizationServiceMismatch):      storeadapter.ErrAuthentication,
	string(queueerror.AuthorizationSourceIPMismatch):     storeadapter.ErrAuthentication,
	// ... or a permission it lacks, perhaps only for the moment.
	string(bloberror.AuthorizationPermissionMismatch): storeadapter.ErrForbidden,
	string(queueerror.InsufficientAccountPermissions): storeadapter.ErrForbidden,

	string(queueerror.OperationTimedOut): storeadapter.ErrUnavailable,
	string(queueerror.ServerBusy):        storeadapter.ErrUnavailable,
	string(queueerror.InternalError):     storeadapter.ErrServiceFailed,
}

// statusSentinels is the fallback when the code is unknown or empty.
var statusSentinels = map[int]error{
	http.StatusBadRequest:            storeadapter.ErrInvalidInput,
	http.StatusUnauthorized:          storeadapter.ErrAuthentication,
	http.StatusForbidden:             storeadapter.ErrForbidden,
	http.StatusNotFound:              storeadapter.ErrNotFound,
	http.StatusConflict:              storeadapter.ErrAlreadyExists,
	http.StatusPreconditionFailed:    storeadapter.ErrPreconditionFailed,
	http.StatusRequestEntityTooLarge: storeadapter.ErrTooLarge,
	http.StatusRequestTimeout:        storeadapter.ErrUnavailable,
	http.StatusTooManyRequests:       storeadapter.ErrUnavailable,
	http.StatusInternalServerError:   storeadapter.ErrServiceFailed,
	http.StatusBadGateway:            storeadapter.ErrUnavailable,
	http.StatusServiceUnavailable:    storeadapter.ErrUnavailable,
	http.StatusGatewayTimeout:        storeadapter.ErrUnavailable,
}

// Inside a failed batch the code and the failing operation's index are only
// in the response body: {"odata.error":{"code":"EntityAlreadyExists",
// "message":{"lang":"en-US","value":"1:The specified entity already exists..."}}}.
var (
	bodyCodeRE  = regexp.MustCompile(`"code"\s*:\s*"([A-Za-z]+)"`)
	bodyIndexRE = regexp.MustCompile(`"value"\s*:\s*"(\d+):`)
)

// interpretError translates an SDK error into an error that wraps one of
// storeadapter's sentinels, prefixed with op ("azstore: get entity pk/rk").
// It is the one place that looks inside SDK errors. The SDK's own text is
// not kept: it quotes request URLs, which may carry a SAS token.
func interpretError(op string, err error) error {
	return interpretErrorOn(op, err, storeadapter.ErrNotFound)
}

// interpretErrorOn is interpretError for a call whose 404 says which thing
// is missing whatever code comes with it: DeleteTable on a missing table
// answers ResourceNotFound, but the table is what is missing, so notFound
// is ErrTableNotFound there.
func interpretErrorOn(op string, err, notFound error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("azstore: %s: %w", op, err)
	}
	var ce *credentialError
	if errors.As(err, &ce) {
		// The credential's own error says why it could not sign in; it
		// quotes the token authority's URL, never a storage URL.
		return fmt.Errorf("azstore: %s: %w: the credential could not get a token: %v", op, storeadapter.ErrAuthentication, ce.err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The per-try timeout (on the last try), the call timeout or the
		// caller's deadline ran out before the service answered: transient,
		// like a 503, and still a DeadlineExceeded for callers who ask.
		return fmt.Errorf("azstore: %s: %w: no answer in time: %w", op, storeadapter.ErrUnavailable, context.DeadlineExceeded)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		// A transport failure: connection refused or reset, DNS, TLS, a
		// response cut short. Keep the cause but not a URL that may hold a SAS.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("azstore: %s: %w: %v", op, storeadapter.ErrUnavailable, err)
	}
	code, status := re.ErrorCode, re.StatusCode
	if code == "" {
		code = codeFromBody(re)
	}
	sentinel := codeSentinels[code]
	if sentinel == nil {
		sentinel = statusSentinels[status]
	}
	if sentinel == storeadapter.ErrNotFound {
		sentinel = notFound
	}
	if sentinel == nil {
		if status >= 500 {
			sentinel = storeadapter.ErrUnavailable
		} else {
			sentinel = storeadapter.ErrInvalidInput
		}
	}
	return fmt.Errorf("azstore: %s: %w (HTTP %d %s)", op, sentinel, status, code)
}

// codeFromBody reads the error code from the body of a response whose
// ErrorCode is empty (a batch failure, or Azurite's invalid-name answer).
func codeFromBody(re *azcore.ResponseError) string {
	if m := bodyCodeRE.FindSubmatch(responseBody(re)); m != nil {
		return string(m[1])
	}
	return ""
}

// responseBody returns the error response's body (azcore caches it).
func responseBody(re *azcore.ResponseError) []byte {
	if re.RawResponse == nil {
		return nil
	}
	b, _ := runtime.Payload(re.RawResponse)
	return b
}

// interpretTransactionError translates a failed SubmitTransaction into a
// *storeadapter.TransactionError with the failing operation's index.
func interpretTransactionError(op string, err error) error {
	index := -1
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if m := bodyIndexRE.FindSubmatch(responseBody(re)); m != nil {
			index, _ = strconv.Atoi(string(m[1]))
		}
	}
	return &storeadapter.TransactionError{Index: index, Err: interpretError(op, err)}
}

// signIn is the token credential a Store built by NewWithCredential uses:
// the caller's, whose failures to get a token are marked credentialError
// unless waiting may cure them, so that interpretError reports them as
// ErrAuthentication. Without it, a sign-in that cannot succeed (no identity
// found, a rejected client secret or federated token) would arrive as an
// error of no known type and be taken for storage not answering: retried
// until the worker's receive outage ends.
//
// While a token is awaited, onWait (Options.OnWait) hears of it as the
// tries of the clients do, its Service SignIn: a token authority that does
// not answer is said, not only a storage endpoint.
type signIn struct {
	cred   azcore.TokenCredential
	onWait func(Wait)
	notice time.Duration
}

func (s signIn) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if s.onWait != nil {
		defer watchWait(Wait{Service: SignIn}, s.notice, s.onWait)()
	}
	if si, ok := ctx.Value(signingInKey{}).(*signingIn); ok {
		si.n.Add(1) // the try's own notices wait (see waitWatch)
		defer si.n.Add(-1)
	}
	tk, err := s.cred.GetToken(ctx, opts)
	if err != nil && !signInMayRecover(ctx, err) {
		err = &credentialError{err}
	}
	return tk, err
}

// signInMayRecover reports whether a failure to get a token may go away by
// itself: the caller's context ended (no answer in time), or the token
// authority answered 408, 429 or 5xx (busy or failing). Everything else —
// no identity available (azidentity's CredentialUnavailableError), the
// authority refusing the identity, a token endpoint that cannot be reached
// or resolved — needs the configuration changed.
func signInMayRecover(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) && af.RawResponse != nil {
		code := af.RawResponse.StatusCode
		return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
	}
	return false
}

// credentialError is a failure to get a token that retrying will not fix
// (see signIn). It is NonRetriable, as azidentity's own errors are, so the
// SDK does not retry the call either.
type credentialError struct{ err error }

func (e *credentialError) Error() string { return e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// NonRetriable marks the error as one the SDK's retry policy gives up on.
func (*credentialError) NonRetriable() {}
