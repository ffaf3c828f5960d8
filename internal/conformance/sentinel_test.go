package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestSentinel decides through a failover client, which finds the master
// by asking a Sentinel: the state lands on that master.
func TestSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := redisstore.New(s.FailoverClient(t))
	lim := newLimiter(t, store, ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Hour})
	for i, want := range []bool{true, true, false} {
		res, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want {
			t.Errorf("request %d: allowed %v, want %v", i+1, res.Allowed, want)
		}
	}
	key := store.Key("k", lim.Spec())
	if n, err := s.Master.Client().Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Errorf("EXISTS %s on the master: %d, %v; want 1", key, n, err)
	}
}
