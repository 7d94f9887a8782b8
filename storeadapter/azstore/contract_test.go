package azstore_test

import (
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter/storetest"
)

// TestContract runs the shared contract suite against Azurite. One store
// serves every case: cases never share resource names.
func TestContract(t *testing.T) {
	store := newStore(t)
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		return storetest.Harness{Store: store, Azurite: true}
	})
}
