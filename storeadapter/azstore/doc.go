// Package azstore implements the storeadapter ports over the Azure SDK for
// Go: aztables for Tables, azqueue for Queue and azblob for Blobs.
//
// It validates every call with storeadapter's shared rules before it reaches
// the service (Azurite is looser than Azure in several places, and some SDK
// calls panic or silently change data on bad input), encodes entities with
// explicit EDM type annotations so every type survives a round trip, and
// translates every SDK and service error once, in interpretError, into
// storeadapter's sentinels. Connection strings, account keys and SAS tokens
// never appear in its errors.
//
// Every call is bounded in time (Options.TryTimeout per HTTP try,
// Options.CallTimeout per method call; see DefaultTryTimeout and
// DefaultCallTimeout): a service that never answers gives a transient
// error wrapping storeadapter.ErrUnavailable, never a hang.
//
// No SDK type crosses its API except the client options and the token
// credential its constructors accept. It is the one package outside cmd/
// and test/ that links the SDK, and must not import anything of the module
// but storeadapter.
package azstore
