package integration_test

import (
	"os"
	"testing"

	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/fixture"
	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
)

// TestMain runs envoy's tests, then stops the Redis servers they started
// and removes the ratekeeper-server binary they built.
func TestMain(m *testing.M) {
	code := envoytest.Run(m)
	fixture.Stop()
	os.Exit(code)
}

// freePort returns a loopback port free a moment ago, for the listeners
// of a server under test, where envoy's tests name fixed ones.
func freePort() int {
	p, err := fixture.FreePort()
	if err != nil {
		panic(err)
	}
	return p
}
