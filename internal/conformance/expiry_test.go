package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestRedisKeyExpiresWhenFull checks, on the Redis server's own clock,
// that a key is written with an expiry at the moment it is full again,
// and that a peek at a new key writes none.
func TestRedisKeyExpiresWhenFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	lim := newLimiter(t, store, ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: 200 * time.Millisecond})
	forget(t, lim, "k")
	redisKey := store.Key("k", lim.Spec())
	exists := func() bool {
		t.Helper()
		n, err := client.Exists(ctx, redisKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	if res, err := lim.Peek(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("peek on a fresh key: %+v, %v", res, err)
	}
	if exists() {
		t.Fatalf("a peek on a fresh key created %s", redisKey)
	}

	var res ratekeeper.Result
	for range 2 {
		var err error
		if res, err = lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	// Empty, full again after two refills from the first request: 400 ms,
	// less the time between the two requests (under one refill, or the
	// second would have found a token more).
	if res.Remaining != 0 || res.ResetAfter <= 200*time.Millisecond || res.ResetAfter > 400*time.Millisecond {
		t.Fatalf("after two requests: %+v, want Remaining 0 and ResetAfter just under 400ms", res)
	}
	pttl, err := client.PTTL(ctx, redisKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl < res.ResetAfter-100*time.Millisecond || pttl > res.ResetAfter+5*time.Millisecond {
		t.Fatalf("PTTL of %s is %v, want ResetAfter %v (-100ms, +5ms)", redisKey, pttl, res.ResetAfter)
	}

	time.Sleep(res.ResetAfter + 100*time.Millisecond)
	if exists() {
		t.Fatalf("%s still exists %v after it was full again", redisKey, 100*time.Millisecond)
	}
	// Its expiry lost nothing: the key starts as a fresh one, phase and all.
	want := ratekeeper.Result{Policy: lim.Name(), Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 200 * time.Millisecond}
	if res, err := lim.Allow(ctx, "k"); err != nil || testutil.DiffResult(res, want) != "" {
		t.Fatalf("Allow after expiry: %+v, %v; want %+v", res, err, want)
	}
}

// TestRedisDeniedRequestWritesNothing checks that requests which take
// nothing leave the key as it was. A rewrite would restore the same state
// and deadline, so the test marks the key with an expiry of its own.
func TestRedisDeniedRequestWritesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	// No refill can come during the test.
	lim := newLimiter(t, store, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Hour})
	forget(t, lim, "k")
	redisKey := store.Key("k", lim.Spec())

	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("first Allow: %+v, %v", res, err)
	}
	state, err := client.Get(ctx, redisKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	const mark = 2 * time.Hour // the script would set 1h and 1ms
	if err := client.PExpire(ctx, redisKey, mark).Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{1, 0} {
		if res, err := lim.AllowN(ctx, "k", n); err != nil || res.Allowed {
			t.Fatalf("AllowN(%d) on an empty bucket: %+v, %v; want denied", n, res, err)
		}
	}
	if after, err := client.Get(ctx, redisKey).Result(); err != nil || after != state {
		t.Fatalf("state of %s went from %q to %q (%v) on denied requests", redisKey, state, after, err)
	}
	if pttl, err := client.PTTL(ctx, redisKey).Result(); err != nil || pttl < mark-time.Minute {
		t.Fatalf("PTTL of %s went from %v to %v (%v) on denied requests: the key was rewritten", redisKey, mark, pttl, err)
	}
}

// TestMemstoreSweepsWhenFull checks that memstore holds a key exactly
// until it is full again, and never for a peek.
func TestMemstoreSweepsWhenFull(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0))
	defer store.Close()
	lim := newLimiter(t, store, ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: 200 * time.Millisecond})
	sweptLen := func() int { store.Sweep(); return store.Len() }

	if _, err := lim.Peek(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := sweptLen(); n != 0 {
		t.Fatalf("a peek on a fresh key left %d keys", n)
	}
	var res ratekeeper.Result
	for range 2 {
		var err error
		if res, err = lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	// Both tokens taken at once: full again after two refills.
	if res.ResetAfter != 400*time.Millisecond {
		t.Fatalf("ResetAfter %v, want 400ms", res.ResetAfter)
	}
	clock.Advance(res.ResetAfter - time.Microsecond)
	if n := sweptLen(); n != 1 {
		t.Fatalf("%d keys 1µs before the key is full, want 1", n)
	}
	clock.Advance(time.Microsecond)
	if n := sweptLen(); n != 0 {
		t.Fatalf("%d keys once the key is full, want 0", n)
	}
}
