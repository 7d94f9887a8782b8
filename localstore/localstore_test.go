package localstore_test

import (
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter/storetest"
)

// TestContract runs the shared contract suite against localstore. Every
// case gets its own store on its own fake clock, so cases that move time
// cannot disturb each other.
func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		clock := localstore.NewFakeClock(time.Date(2026, 11, 21, 9, 30, 0, 123456789, time.UTC))
		return storetest.Harness{
			Store:   localstore.New(localstore.Options{Now: clock.Now}),
			Advance: clock.Advance,
			Now:     clock.Now,
		}
	})
}
