package ratekeeper_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/leasetest"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestLeasesHolderClockOff: holders whose clocks read 20ms ahead of
// Redis's, and 20ms behind, still stop spending each lease before Redis
// stops counting it, since a holder measures a lease's time on its own
// clock from when it sent the step: the fleet keeps the bound.
func TestLeasesHolderClockOff(t *testing.T) {
	skew := func(i int, lim *ratekeeper.Limiter) {
		if i == len(leasetest.Weights)-1 {
			return // the Limiter without leases
		}
		off := 20 * time.Millisecond
		if i%2 == 1 {
			off = -off
		}
		ratekeeper.SetLeaseClock(lim, func() time.Time { return time.Now().Add(off) })
	}
	for _, c := range leasetest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			open := func() ratekeeper.Store { return redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(prefix)) }
			// The bound is what a clock off would break; the share of the
			// rate is TestLeasesKeepTheBound's.
			leasetest.Run(t, c, "hot", open, leasetest.Options{TTL: 50 * time.Millisecond, Setup: skew, MinShare: -1})
		})
	}
}
