// Package kit is what the catalog hands every job kind's worker besides
// its own section of the config file: the store, the clock and the
// libraries the kinds share, opened once from the whole config — the
// declared indexes (tablepatterns/indexes) and the offload layout
// (tablepatterns/largeentity). Through it a kind that moves or deletes an
// application's entities keeps what other kinds hold for them consistent
// (their index entries, their offloaded blobs) without importing those
// kinds. Base is the skeleton every worker embeds.
//
// It must not import a job kind, the runner or the Azure SDK.
package kit

import (
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/indexes"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// Deps are a worker's dependencies.
type Deps struct {
	// Store is the storage the worker runs on.
	Store storeadapter.Store
	// Clock is the worker's time (cut-offs, time budgets, folder
	// minutes); nil is the wall clock. The catalog passes the runner's.
	Clock clock.Clock
	// Indexes are the indexes declared in the config's "index" section,
	// opened on Store. nil means no table has indexes (a kind built alone
	// in a test); the catalog always opens it.
	Indexes *indexes.Set
	// Layout is where each table's offloaded properties live: the
	// "blobsync" section's table declarations.
	Layout largeentity.Layout
}

// Plain returns the dependencies of a worker on store that knows of no
// index and no offload declaration.
func Plain(store storeadapter.Store) Deps { return Deps{Store: store} }
