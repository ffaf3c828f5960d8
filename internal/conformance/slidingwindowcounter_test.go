package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// TestRedisSlidingWindowCounterOneKey checks that a caller's state is one
// Redis key, whatever the windows it spans, and that the key expires.
func TestRedisSlidingWindowCounterOneKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A minute, so that Redis's real clock cannot expire the key first.
	f := newRedisKeyFixture(t, ratekeeper.SlidingWindowCounter{Limit: 4, Window: time.Minute})
	client, clock, prefix, lim, redisKey := f.client, f.clock, f.prefix, f.lim, f.key

	// Two windows, both counted in the last decision.
	for _, d := range []time.Duration{0, 0, time.Minute, 30 * sec} {
		clock.Advance(d)
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow at start+%v: %+v, %v", clock.Elapsed(), res, err)
		}
	}
	var keys []string
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != redisKey {
		t.Fatalf("keys under %q: %q, want only %q", prefix, keys, redisKey)
	}
	if n, err := client.Exists(ctx, redisKey).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s: %d, %v", redisKey, n, err)
	}
	if d, err := client.PTTL(ctx, redisKey).Result(); err != nil || d <= 0 {
		t.Fatalf("PTTL of %s: %v, %v; want an expiry", redisKey, d, err)
	}
}
