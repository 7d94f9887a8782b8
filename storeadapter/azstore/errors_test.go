package azstore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func responseError(status int, code, body string) error {
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/acct/$batch?sig=SECRET", nil)
	h := http.Header{}
	if code != "" {
		h.Set("x-ms-error-code", code)
	}
	return runtime.NewResponseError(&http.Response{StatusCode: status, Status: http.StatusText(status), Header: h,
		Body: io.NopCloser(strings.NewReader(body)), Request: req})
}

// TestInterpretError checks the mapping from service codes and statuses to
// sentinels, and that no request URL (which may hold a SAS) leaks.
func TestInterpretError(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"entity exists", responseError(409, "EntityAlreadyExists", ""), storeadapter.ErrAlreadyExists},
		{"table missing", responseError(404, "TableNotFound", ""), storeadapter.ErrTableNotFound},
		{"queue missing", responseError(404, "QueueNotFound", ""), storeadapter.ErrQueueNotFound},
		{"container missing", responseError(404, "ContainerNotFound", ""), storeadapter.ErrContainerNotFound},
		{"entity missing", responseError(404, "ResourceNotFound", ""), storeadapter.ErrNotFound},
		{"message missing", responseError(404, "MessageNotFound", ""), storeadapter.ErrNotFound},
		{"blob missing", responseError(404, "BlobNotFound", ""), storeadapter.ErrNotFound},
		{"stale etag", responseError(412, "UpdateConditionNotSatisfied", ""), storeadapter.ErrPreconditionFailed},
		{"blob condition", responseError(412, "ConditionNotMet", ""), storeadapter.ErrPreconditionFailed},
		{"pop receipt", responseError(400, "PopReceiptMismatch", ""), storeadapter.ErrPopReceiptMismatch},
		{"being deleted", responseError(409, "TableBeingDeleted", ""), storeadapter.ErrTableBeingDeleted},
		{"too large", responseError(400, "EntityTooLarge", ""), storeadapter.ErrTooLarge},
		{"busy", responseError(503, "ServerBusy", ""), storeadapter.ErrUnavailable},
		{"internal error", responseError(500, "InternalError", ""), storeadapter.ErrServiceFailed},
		{"internal error, no code (Azurite)", responseError(500, "", ""), storeadapter.ErrServiceFailed},
		{"role missing", responseError(403, "AuthorizationPermissionMismatch", ""), storeadapter.ErrForbidden},
		{"forbidden, no code (HEAD)", responseError(403, "", ""), storeadapter.ErrForbidden},
		{"wrong key or expired SAS", responseError(403, "AuthenticationFailed", ""), storeadapter.ErrAuthentication},
		{"network rules", responseError(403, "AuthorizationFailure", ""), storeadapter.ErrAuthentication},
		{"SAS for other services", responseError(403, "AuthorizationServiceMismatch", ""), storeadapter.ErrAuthentication},
		{"SAS for https over http", responseError(403, "AuthorizationProtocolMismatch", ""), storeadapter.ErrAuthentication},
		{"token of another tenant", responseError(401, "InvalidAuthenticationInfo", ""), storeadapter.ErrAuthentication},
		{"unauthorized, no code", responseError(401, "", ""), storeadapter.ErrAuthentication},
		{"sign-in failed", &credentialError{errors.New("ClientSecretCredential: AADSTS7000215: invalid client secret")}, storeadapter.ErrAuthentication},
		{"gateway timeout, no code", responseError(504, "", ""), storeadapter.ErrUnavailable},
		{"bad request, no code", responseError(400, "", ""), storeadapter.ErrInvalidInput},
		{"code only in body", responseError(400, "", `{"odata.error":{"code":"InvalidResourceName","message":{"value":"bad"}}}`), storeadapter.ErrInvalidInput},
		{"no answer in time", &url.Error{Op: "Get", URL: "http://127.0.0.1/acct?sig=SECRET", Err: context.DeadlineExceeded}, storeadapter.ErrUnavailable},
		{"transport", &url.Error{Op: "Get", URL: "http://127.0.0.1/acct?sig=SECRET", Err: errors.New("connection refused")}, storeadapter.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := interpretError("get entity", c.err)
			if !errors.Is(got, c.want) {
				t.Fatalf("interpretError = %v, want it to wrap %v", got, c.want)
			}
			if strings.Contains(got.Error(), "SECRET") || strings.Contains(got.Error(), "sig=") {
				t.Fatalf("error leaks the request URL: %v", got)
			}
			if c.want == storeadapter.ErrNotFound && (errors.Is(got, storeadapter.ErrTableNotFound) ||
				errors.Is(got, storeadapter.ErrQueueNotFound) || errors.Is(got, storeadapter.ErrContainerNotFound)) {
				t.Fatalf("interpretError = %v: a missing item, not a missing table, queue or container", got)
			}
			if c.want == storeadapter.ErrForbidden && errors.Is(got, storeadapter.ErrAuthentication) {
				t.Fatalf("interpretError = %v: a permission missing, not the credential refused", got)
			}
			if c.want == storeadapter.ErrAuthentication && !errors.Is(got, storeadapter.ErrForbidden) {
				t.Fatalf("interpretError = %v: ErrAuthentication must still match ErrForbidden", got)
			}
			transient := c.want == storeadapter.ErrUnavailable || c.want == storeadapter.ErrServiceFailed || c.want == storeadapter.ErrTableBeingDeleted
			if transient != storeadapter.IsTransient(got) {
				t.Fatalf("IsTransient(%v) = %v", got, storeadapter.IsTransient(got))
			}
		})
	}
}

// TestInterpretTransactionError reads the inner code and the failing
// operation's index from a batch response, whose ErrorCode is empty.
func TestInterpretTransactionError(t *testing.T) {
	body := "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n" +
		"--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 409 Conflict\r\n\r\n" +
		`{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"7:The specified entity already exists.\nRequestId:x"}}}` +
		"\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n"
	err := interpretTransactionError("transact t", responseError(202, "", body))
	var txErr *storeadapter.TransactionError
	if !errors.As(err, &txErr) {
		t.Fatalf("got %T %v, want *TransactionError", err, err)
	}
	if txErr.Index != 7 || !errors.Is(err, storeadapter.ErrAlreadyExists) {
		t.Fatalf("got index %d, error %v; want index 7 wrapping ErrAlreadyExists", txErr.Index, err)
	}
	err = interpretTransactionError("transact t", responseError(400, "InvalidInput", `{"odata.error":{"code":"InvalidInput","message":{"value":"no index"}}}`))
	if !errors.As(err, &txErr) || txErr.Index != -1 || !errors.Is(err, storeadapter.ErrInvalidInput) {
		t.Fatalf("got %v (index %d), want index -1 wrapping ErrInvalidInput", err, txErr.Index)
	}
}

// TestWaitNoticeDefault: OnWait first hears of a try after 5 s, or a
// quarter of the call timeout when that is shorter, unless told.
func TestWaitNoticeDefault(t *testing.T) {
	for _, c := range []struct {
		o    *Options
		want time.Duration
	}{
		{nil, 5 * time.Second}, {&Options{}, 5 * time.Second}, {&Options{CallTimeout: 8 * time.Second}, 2 * time.Second},
		{&Options{CallTimeout: -1}, 5 * time.Second}, {&Options{CallTimeout: 8 * time.Second, WaitNotice: time.Second}, time.Second},
	} {
		if got := c.o.copy().WaitNotice; got != c.want {
			t.Errorf("%+v: WaitNotice %v, want %v", c.o, got, c.want)
		}
	}
}
