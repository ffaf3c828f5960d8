package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestLeakyBucketConcurrentDecisions races goroutines on one key, as
// TestConcurrentDecisions does. A leaky bucket drains from its first
// request on, and Remaining shows the drain to the millionth, so the race
// cannot join raceCases, which expect an exact Remaining: here it is
// bounded by the drain over the time the race took.
func TestLeakyBucketConcurrentDecisions(t *testing.T) {
	// 0.001 per second: the race drains far less than one request.
	policy := ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 0.001}
	for _, tc := range []struct {
		cost    int64
		allowed int
	}{
		{1, 10},
		// 3 requests pour 9; the 10th unit is never enough.
		{3, 3},
	} {
		check := func(t *testing.T, lims []*ratekeeper.Limiter, goroutines int) {
			began := time.Now()
			if allowed, denied := race(t, lims, goroutines, "k", tc.cost); allowed != tc.allowed || denied != goroutines-tc.allowed {
				t.Errorf("of %d requests, %d allowed and %d denied; want %d allowed", goroutines, allowed, denied, tc.allowed)
			}
			res, err := lims[0].Peek(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			least := float64(10 - int64(tc.allowed)*tc.cost)
			most := least + policy.LeakRate*time.Since(began).Seconds()
			if res.Remaining < least || res.Remaining > most {
				t.Errorf("%v remaining after the race, want %v to %.6f", res.Remaining, least, most)
			}
		}
		t.Run(fmt.Sprint("cost", tc.cost), func(t *testing.T) {
			t.Run("memstore", func(t *testing.T) {
				store := memstore.New()
				defer store.Close()
				check(t, []*ratekeeper.Limiter{newLimiter(t, store, policy)}, 1000)
			})
			t.Run("redis", func(t *testing.T) {
				addr, prefix := redistest.Addr(t), redistest.Prefix(t)
				var lims []*ratekeeper.Limiter
				for range 4 {
					client := redis.NewClient(&redis.Options{Addr: addr})
					t.Cleanup(func() { client.Close() })
					lims = append(lims, newLimiter(t, redisstore.New(client, redisstore.WithKeyPrefix(prefix)), policy))
				}
				forget(t, lims[0], "k")
				check(t, lims, 200)
			})
		})
	}
}
