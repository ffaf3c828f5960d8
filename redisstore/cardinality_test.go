package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestCardinality decides for thousands of distinct keys under every
// algorithm, with policies that are full again within a second: every key
// the scripts write carries an expiry, and once the longest has passed,
// none is left.
func TestCardinality(t *testing.T) {
	const (
		keys    = 5000
		workers = 32
		limit   = 5
		period  = 2 * time.Second
	)
	// Each request takes the whole limit, so that each key lives until its
	// policy has refilled: about one period, two for the sliding window
	// counter, whose previous window still counts.
	cardinalityPolicies := []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: limit, RefillRate: limit, RefillInterval: period},
		ratekeeper.GCRA{Rate: limit, Period: period, Burst: limit},
		ratekeeper.FixedWindow{Limit: limit, Window: period},
		ratekeeper.SlidingWindowLog{Limit: limit, Window: period},
		ratekeeper.SlidingWindowCounter{Limit: limit, Window: period},
		ratekeeper.LeakyBucket{Capacity: limit, LeakRate: limit / period.Seconds()},
	}
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := ctxTimeout(t, 60*time.Second)

	var longest atomic.Int64 // the longest ResetAfter, in nanoseconds
	for _, p := range cardinalityPolicies {
		spec := mustSpec(t, p)
		// A prefix per algorithm, to count each one's keys.
		algPrefix := prefix + spec.Algorithm() + ":"
		lim, err := ratekeeper.New(redisstore.New(client, redisstore.WithKeyPrefix(algPrefix)), p)
		if err != nil {
			t.Fatal(err)
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < keys; i = next.Add(1) - 1 {
					res, err := lim.AllowN(ctx, "k"+strconv.FormatInt(i, 10), limit)
					if err != nil || !res.Allowed {
						t.Errorf("%s: AllowN(%d) on a new key: %+v, %v", spec.Algorithm(), limit, res, err)
						return
					}
					for old := longest.Load(); int64(res.ResetAfter) > old && !longest.CompareAndSwap(old, int64(res.ResetAfter)); {
						old = longest.Load()
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Keys decided first may have expired already; every key still
		// there must have an expiry.
		found, live := checkExpiries(ctx, t, client, algPrefix)
		t.Logf("%s: %d keys decided, %d found, %d of them still live", spec.Algorithm(), keys, found, live)
		if live == 0 || found > keys {
			t.Errorf("%s: %d Redis keys found right after deciding for %d, want one per key", spec.Algorithm(), found, keys)
		}
	}

	// Past the longest expiry, plus the store's millisecond of slack and
	// the rounding up to whole milliseconds, with a margin.
	wait := time.Duration(longest.Load()) + 100*time.Millisecond
	time.Sleep(wait)
	if left := scanKeys(ctx, t, client, prefix); len(left) > 0 {
		t.Errorf("%d keys left %v after the longest expiry, such as %q", len(left), wait, left[0])
	}
}

// checkExpiries finds every key under prefix and checks that it expires:
// found counts the keys SCAN returned, live those still there when their
// PTTL was read.
func checkExpiries(ctx context.Context, t *testing.T, client *redis.Client, prefix string) (found, live int) {
	t.Helper()
	keys := scanKeys(ctx, t, client, prefix)
	pipe := client.Pipeline()
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && len(keys) > 0 {
		t.Fatal(err)
	}
	reported := 0
	for i, cmd := range ttls {
		switch ttl := cmd.Val(); {
		case ttl >= 0: // 0: less than a millisecond left
			live++
		case ttl == -2: // expired since SCAN returned it
		default: // -1: no expiry
			if reported++; reported <= 5 {
				t.Errorf("key %s has PTTL %v, want an expiry", keys[i], ttl)
			}
		}
	}
	return len(keys), live
}
