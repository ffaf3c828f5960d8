package conformance

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver/drivertest"
)

// TestDriver runs the conformance suite of every store on redisstore,
// over one server and over a Cluster (memstore runs it in its own
// tests), each store's Redis calls made with persistHook.
func TestDriver(t *testing.T) {
	for _, sf := range stores[1:] {
		t.Run(sf.name, func(t *testing.T) {
			drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
				return sf.new(t, now)
			})
		})
	}
}
