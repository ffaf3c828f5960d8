package memstore_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver/drivertest"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestDriver runs the conformance suite of every store.
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
		// No background sweep: freeing expired keys never changes a
		// decision.
		s := memstore.New(memstore.WithClock(now), memstore.WithSweepInterval(0))
		t.Cleanup(func() { s.Close() })
		return s
	})
}
