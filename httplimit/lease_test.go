package httplimit

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestMiddlewareWithLeases: the middleware takes a Limiter with leases
// unchanged, and admits exactly what the policy does.
func TestMiddlewareWithLeases(t *testing.T) {
	s := memstore.New(memstore.WithSweepInterval(0))
	t.Cleanup(func() { s.Close() })
	lim := newLimiter(t, s, ratekeeper.FixedWindow{Limit: 100, Window: time.Hour},
		ratekeeper.WithLeases(ratekeeper.Leases{TTL: 50 * time.Millisecond}))
	t.Cleanup(func() { lim.Close() })
	h := Middleware(lim)(okHandler)
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				switch serve(h, "192.0.2.1:1234", nil).Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || denied.Load() != 100 {
		t.Errorf("200 requests on a window of 100: %d allowed, %d denied", ok.Load(), denied.Load())
	}
}
