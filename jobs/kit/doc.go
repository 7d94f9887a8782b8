// Package kit is what the catalog hands every job kind's worker besides
// its own section of the config file: the store, the clock and the
// libraries the kinds share, opened once from the whole config — the
// declared indexes (tablepatterns/indexes) and the offload layout
// (tablepatterns/largeentity) — and the other storage accounts of the
// config's "accounts" section by name (Deps.Account), which the commands
// connect, so that a kind reaches another account without a credential
// or the SDK. Through it a kind that moves or deletes an
// application's entities keeps what other kinds hold for them consistent
// (their index entries, their offloaded blobs) without importing those
// kinds. Base is the skeleton every worker embeds.
//
// It must not import a job kind, the runner or the Azure SDK.
package kit
