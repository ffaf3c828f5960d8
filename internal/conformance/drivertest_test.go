package conformance

import (
	"strings"
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
			t.Parallel() // one server and the Cluster are apart
			drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
				// A Cluster runs the very scripts one server does, which
				// every seed checks: one seed of the random sequences
				// checks what a Cluster adds (keys' slots, routing).
				random := strings.Contains(t.Name(), "/RandomEquivalence/") || strings.Contains(t.Name(), "/LeaseEquivalence/")
				if sf.name == "redis-cluster" && random && !strings.HasSuffix(t.Name(), "/seed1") {
					t.Skip("the random sequences of one seed cover the Cluster; one server runs them all")
				}
				return sf.new(t, now)
			})
		})
	}
}
