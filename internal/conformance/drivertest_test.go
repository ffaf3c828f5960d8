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
// tests), each store keeping its keys an hour longer than their state
// needs (keySkew), as drivertest.ExpiresOnBackendClock describes.
func TestDriver(t *testing.T) {
	for _, sf := range stores[1:] {
		t.Run(sf.name, func(t *testing.T) {
			// The two deployments at once: each store opened has keys of
			// its own, and most of the time goes waiting for Redis.
			t.Parallel()
			drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
				// A Cluster runs the very scripts one server does, which
				// every seed checks: one seed of the random sequences
				// checks what a Cluster adds (keys' slots, routing).
				if sf.name == "redis-cluster" && strings.Contains(t.Name(), "/RandomEquivalence/") && !strings.HasSuffix(t.Name(), "/seed1") {
					t.Skip("the random sequences of one seed cover the Cluster; one server runs them all")
				}
				return sf.new(t, now)
			}, drivertest.ExpiresOnBackendClock(keySkew))
		})
	}
}
