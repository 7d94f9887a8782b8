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
	// Accounts returns the store of another storage account by its name
	// in the config's "accounts" section (see ValidateAccountName),
	// connected on first use, through the same credential code as the
	// worker's own account; an undeclared name is an error. nil: no other
	// account is declared. Kinds reach it through Account, where "" is
	// Store. The commands fill it; kinds never see a credential.
	Accounts func(name string) (storeadapter.Store, error)
}

// Plain returns the dependencies of a worker on store that knows of no
// index and no offload declaration.
func Plain(store storeadapter.Store) Deps { return Deps{Store: store} }
