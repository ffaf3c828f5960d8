package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// TestRedisSlidingWindowLogEntries checks the sorted set itself: it holds
// one entry per admitted request, whatever its cost, and one per
// microsecond for requests that share it, each "<start>+<cost>", where
// start is the cost admitted before it.
func TestRedisSlidingWindowLogEntries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A minute, so that Redis's real clock cannot expire the key first.
	f := newRedisKeyFixture(t, ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Minute})
	client, clock, lim, redisKey := f.client, f.clock, f.lim, f.key

	steps := []struct {
		advance time.Duration
		n       int64
		allowed bool
		entries []string
	}{
		{0, 2, true, []string{"0+2"}},
		// The same microsecond: one entry.
		{0, 2, true, []string{"0+4"}},
		{us, 3, true, []string{"0+4", "4+3"}},
		{us, 4, false, []string{"0+4", "4+3"}},
		{0, 3, true, []string{"0+4", "4+3", "7+3"}},
		{us, 1, false, []string{"0+4", "4+3", "7+3"}},
		// The first entry leaves a Window after it came, with its cost.
		{time.Minute - 3*us, 4, true, []string{"4+3", "7+3", "10+4"}},
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		res, err := lim.AllowN(ctx, "k", st.n)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != st.allowed {
			t.Fatalf("step %d: AllowN(%d) at start+%v: %+v, want Allowed %v", i, st.n, clock.Elapsed(), res, st.allowed)
		}
		members, err := client.ZRange(ctx, redisKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(members, st.entries) {
			t.Fatalf("step %d: AllowN(%d) at start+%v: entries %q, want %q", i, st.n, clock.Elapsed(), members, st.entries)
		}
	}
}

// TestRedisSlidingWindowLogLargeCost admits a request of the largest cost
// and checks that it takes one entry, in a few hundred bytes, and that the
// decisions that follow are as exact as for cost 1.
func TestRedisSlidingWindowLogLargeCost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	policy := ratekeeper.SlidingWindowLog{Limit: ratekeeper.MaxLogLimit, Window: time.Minute}
	f := newRedisKeyFixture(t, policy)
	client, clock, lim, redisKey := f.client, f.clock, f.lim, f.key

	res, err := lim.AllowN(ctx, "k", policy.Limit-1)
	if err != nil || !res.Allowed {
		t.Fatalf("AllowN(%d): %+v, %v", policy.Limit-1, res, err)
	}
	clock.Advance(time.Second)
	if res, err = lim.AllowN(ctx, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("AllowN(1) a second later: %+v, %v", res, err)
	}
	if n, err := client.ZCard(ctx, redisKey).Result(); err != nil || n != 2 {
		t.Fatalf("%d entries (%v), want 2", n, err)
	}
	if bytes, err := client.MemoryUsage(ctx, redisKey, 0).Result(); err != nil || bytes > 200 {
		t.Errorf("MEMORY USAGE of a key holding %d units in two entries: %d bytes (%v), want at most 200", policy.Limit, bytes, err)
	}
	// One unit waits for the entry of 9,999 to leave; 2 units too.
	clock.Advance(time.Second)
	for _, n := range []int64{1, 2, policy.Limit} {
		want := 58 * time.Second
		if n == policy.Limit {
			want = 59 * time.Second
		}
		if res, err = lim.AllowN(ctx, "k", n); err != nil || res.Allowed || res.RetryAfter != want || res.ResetAfter != 59*time.Second {
			t.Errorf("AllowN(%d): %+v, %v; want denied, RetryAfter %v, ResetAfter 59s", n, res, err, want)
		}
	}
	clock.Advance(58 * time.Second)
	if res, err = lim.AllowN(ctx, "k", policy.Limit-1); err != nil || !res.Allowed {
		t.Fatalf("AllowN(%d) once the first entry left: %+v, %v", policy.Limit-1, res, err)
	}
}

// TestRedisSlidingWindowLogOldFormat gives the script a log written one
// member per unit, "<µs>:<i>", as earlier versions did: it starts the log
// over rather than misread it.
func TestRedisSlidingWindowLogOldFormat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := newRedisKeyFixture(t, ratekeeper.SlidingWindowLog{Limit: 3, Window: time.Minute})
	at := float64(f.clock.Now().UnixMicro())
	for i := 1; i <= 3; i++ {
		m := redis.Z{Score: at, Member: fmt.Sprintf("%d:%d", int64(at), i)}
		if err := f.client.ZAdd(ctx, f.key, m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := f.lim.AllowN(ctx, "k", 2); err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("AllowN(2) on a log of the old format: %+v, %v; want allowed, 1 remaining", res, err)
	}
	if members, err := f.client.ZRange(ctx, f.key, 0, -1).Result(); err != nil || !slices.Equal(members, []string{"0+2"}) {
		t.Fatalf("entries %q (%v), want [0+2]", members, err)
	}
}

// TestRedisSlidingWindowLogDropBound lets 2,500 entries leave the window at
// once: each call drops at most 1,000 of them, so that no call does much
// more work than another, and decides exactly meanwhile.
func TestRedisSlidingWindowLogDropBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	policy := ratekeeper.SlidingWindowLog{Limit: ratekeeper.MaxLogLimit, Window: time.Minute}
	f := newRedisKeyFixture(t, policy)
	const entries = 2500
	for range entries {
		f.clock.Advance(us)
		if res, err := f.lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	f.clock.Advance(time.Minute)
	// Three calls in one microsecond share one entry.
	for i, want := range []int64{entries - 1000 + 1, entries - 2000 + 1, 1} {
		res, err := f.lim.Allow(ctx, "k")
		if left := policy.Limit - int64(i) - 1; err != nil || !res.Allowed || res.Remaining != float64(left) || res.ResetAfter != time.Minute {
			t.Fatalf("call %d after the window: %+v, %v; want allowed, %d remaining, ResetAfter 1m", i, res, err, left)
		}
		if n, err := f.client.ZCard(ctx, f.key).Result(); err != nil || n != want {
			t.Fatalf("call %d after the window: %d entries (%v), want %d", i, n, err, want)
		}
	}
}
