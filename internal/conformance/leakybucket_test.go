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

// The expected Results are worked out by hand in the comments, with the
// level in billionths of a request: a LeakRate of 0.7 per second drains
// 700 per microsecond, one request in ⌈10^9/700⌉ = 1,428,572µs. A request
// of cost n passes when level + n·10^9 <= Capacity·10^9; RetryAfter is
// the time to drain the excess, ResetAfter the time to drain the level,
// both rounded up to a whole µs; Remaining is Capacity − level, rounded
// down to a millionth.
var lbScenarios = []scenario{
	{
		name:   "initial burst; an overflowing request is rejected with the exact wait",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 1, want: ok(2, 1_428_572*us)},
			// ⌈2·10^9/700⌉ = ⌈2,857,142.86⌉.
			{n: 1, want: ok(1, 2_857_143*us)},
			// ⌈3·10^9/700⌉ = ⌈4,285,714.29⌉.
			{n: 1, want: ok(0, 4_285_715*us)},
			{n: 1, want: denied(0, 1_428_572*us, 4_285_715*us)},
			{n: 0, want: denied(0, 1_428_572*us, 4_285_715*us)},
			// Drained 1,428,571·700 = 999,999,700: level 2,000,000,300,
			// 300 too many for one more.
			{at: 1_428_571 * us, n: 1, want: denied(0.999999, 1*us, 2_857_144*us)},
			// Drained 1,000,000,400: level 1,999,999,600, then
			// 2,999,999,600; the 400 left are under a millionth.
			{at: 1_428_572 * us, n: 1, want: ok(0, 4_285_714*us)},
		},
	},
	{
		name:   "the level drains continuously; a cost is taken whole or not at all",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 3, want: ok(0, 4_285_715*us)},
			// Level 3·10^9 − 7·10^8 = 2.3·10^9: one request is 3·10^8 too
			// many, ⌈428,571.43⌉µs of drain; empty in ⌈3,285,714.29⌉µs.
			{at: 1 * sec, n: 0, want: denied(0.7, 428_572*us, 3_285_715*us)},
			// Level 1.6·10^9: two are 6·10^8 too many, ⌈857,142.86⌉µs;
			// empty in ⌈2,285,714.29⌉µs.
			{at: 2 * sec, n: 2, want: denied(1.4, 857_143*us, 2_285_715*us)},
			{at: 2 * sec, peek: true, want: ok(1.4, 2_285_715*us)},
			// Level 2.6·10^9: empty in ⌈3,714,285.71⌉µs.
			{at: 2 * sec, n: 1, want: ok(0.4, 3_714_286*us)},
			// Drained 857,142·700 = 599,999,400: level 2,000,000,600.
			{at: 2_857_142 * us, n: 1, want: denied(0.999999, 1*us, 2_857_144*us)},
			// Level 1,999,999,900 + 10^9: empty in ⌈4,285,714.14⌉µs.
			{at: 2_857_143 * us, n: 1, want: ok(0, 4_285_715*us)},
		},
	},
	{
		name:   "a peek consumes nothing and answers for cost 1",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{peek: true, want: ok(3, 0)},
			{n: 0, want: ok(3, 0)},
			{n: 2, want: ok(1, 2_857_143*us)},
			{n: 0, want: ok(1, 2_857_143*us)},
			{peek: true, want: ok(1, 2_857_143*us)},
			{n: 1, want: ok(0, 4_285_715*us)},
			// Level 3·10^9 − 3.5·10^8 = 2.65·10^9: one request is 6.5·10^8
			// too many, ⌈928,571.43⌉µs; empty in ⌈3,785,714.29⌉µs.
			{at: 500 * ms, n: 0, want: denied(0.35, 928_572*us, 3_785_715*us)},
			{at: 500 * ms, peek: true, want: denied(0.35, 928_572*us, 3_785_715*us)},
			// The peeks poured nothing: as in the initial burst.
			{at: 1_428_572 * us, n: 1, want: ok(0, 4_285_714*us)},
		},
	},
	{
		name:   "Reset empties the bucket",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 3, want: ok(0, 4_285_715*us)},
			{n: 1, want: denied(0, 1_428_572*us, 4_285_715*us)},
			{at: 1 * sec, reset: true},
			{at: 1 * sec, n: 0, want: ok(3, 0)},
			{at: 1 * sec, n: 3, want: ok(0, 4_285_715*us)},
		},
	},
	{
		name:   "the key is fresh again exactly at ResetAfter",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 2, want: ok(1, 2_857_143*us)},
			// Drained 2,857,142·700 = 1,999,999,400: 600 left, which the
			// next microsecond drains.
			{at: 2_857_142 * us, n: 3, want: denied(2.999999, 1*us, 1*us)},
			{at: 2_857_142 * us, key: "new", n: 0, want: ok(3, 0)},
			{at: 2_857_143 * us, n: 3, want: ok(0, 4_285_715*us)},
			{at: 2_857_143 * us, key: "new", n: 3, want: ok(0, 4_285_715*us)},
		},
	},
}

func TestLeakyBucketScenarios(t *testing.T) { runScenarios(t, lbScenarios) }

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
