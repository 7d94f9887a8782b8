package azstore

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
)

// batchKeyQuotes is a per-call policy of the table client that doubles the
// single quotes inside the key literals of a transaction's operation URLs.
// OData writes a quote inside a string literal as two. aztables does so for
// single-entity calls but not inside SubmitTransaction, where it copies the
// keys into the URLs as they are: Azure then refuses the whole transaction
// (400 InvalidInput, "character ”' is not valid"), and Azurite reads a
// key of two quotes as one and updates or deletes another entity. Every
// update, merge, upsert and delete of a key such as "O'Brien" in a
// transaction needs it; an insert carries its keys only in the body.
type batchKeyQuotes struct{}

func (batchKeyQuotes) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	if raw.Method != http.MethodPost || !strings.HasSuffix(raw.URL.Path, "/$batch") || req.Body() == nil {
		return req.Next()
	}
	body, err := io.ReadAll(req.Body())
	if err != nil {
		return nil, err
	}
	if err := req.SetBody(streaming.NopCloser(bytes.NewReader(quoteBatchKeys(body))), raw.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	return req.Next()
}

// The request line of one operation inside a batch body, and the key
// literals in its URL. The SDK path-escapes keys, so a quote inside one is
// %27 and the raw quotes are the literal's delimiters.
var (
	batchRequestLine = regexp.MustCompile(`(?m)^(?:DELETE|PUT|PATCH|MERGE|POST|GET) [^ \r\n]+ HTTP/1\.1\r?$`)
	batchKeyLiteral  = regexp.MustCompile(`(PartitionKey|RowKey)='[^'\r\n]*'`)
)

// quoteBatchKeys doubles every escaped quote (%27) inside the key literals
// of the request lines of a batch body; everything else is kept byte for
// byte (entity bodies are never request lines: they are JSON objects). A
// key holding the text "%27" reaches the URL as %2527, which is left alone.
func quoteBatchKeys(body []byte) []byte {
	return batchRequestLine.ReplaceAllFunc(body, func(line []byte) []byte {
		return batchKeyLiteral.ReplaceAllFunc(line, func(lit []byte) []byte {
			return bytes.ReplaceAll(lit, []byte("%27"), []byte("%27%27"))
		})
	})
}
