package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestDenyCacheAnswersExactlyWhatRedisWould(t *testing.T) {
	client := redistest.Client(t)
	clock := &fakeClock{now: time.Unix(1_900_000_000, 0)}
	prefix := redistest.Prefix(t)
	cached := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now), redisstore.WithDenyCache(100))
	direct := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now))
	policy := ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Minute}
	viaCache, _ := ratekeeper.New(cached, policy)
	viaRedis, _ := ratekeeper.New(direct, policy)
	ctx := context.Background()

	for i := 0; i < 2; i++ {
		if res, err := viaCache.Allow(ctx, "abuser"); err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
	}
	// The first denial asks Redis; the repeats until the refill do not.
	for step := 0; step < 6; step++ {
		got, err := viaCache.Allow(ctx, "abuser")
		if err != nil {
			t.Fatal(err)
		}
		want, err := viaRedis.Allow(ctx, "abuser") // denied too: consumes nothing
		if err != nil {
			t.Fatal(err)
		}
		if got.Allowed || got.RetryAfter != want.RetryAfter || got.Limit != want.Limit {
			t.Errorf("step %d: cache answered %+v, Redis %+v", step, got, want)
		}
		clock.Advance(7 * time.Second)
	}
	if hits := cached.DenyCacheHits(); hits != 5 {
		t.Errorf("DenyCacheHits = %d, want 5 (6 denials, the first from Redis)", hits)
	}
	// At the refill the cache steps aside and Redis allows.
	clock.Advance(time.Minute - 42*time.Second)
	if res, err := viaCache.Allow(ctx, "abuser"); err != nil || !res.Allowed {
		t.Errorf("after the refill: %+v, %v; want allowed", res, err)
	}
}

func TestDenyCacheAnswersOnlyTheDeniedCost(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithDenyCache(100))
	lim, _ := ratekeeper.New(store, ratekeeper.FixedWindow{Limit: 5, Window: time.Hour})
	ctx := context.Background()
	if _, err := lim.AllowN(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if res, _ := lim.AllowN(ctx, "k", 3); res.Allowed {
		t.Fatal("cost 3 with 2 left was allowed")
	}
	// A smaller cost may pass before a larger one: it goes to Redis.
	if res, err := lim.AllowN(ctx, "k", 2); err != nil || !res.Allowed {
		t.Errorf("cost 2 with 2 left: %+v, %v; want allowed", res, err)
	}
	if store.DenyCacheHits() != 0 {
		t.Errorf("DenyCacheHits = %d, want 0", store.DenyCacheHits())
	}
}

func TestDenyCacheForgetsOnReset(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithDenyCache(100))
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 1})
	ctx := context.Background()
	lim.Allow(ctx, "k")
	if res, _ := lim.Allow(ctx, "k"); res.Allowed {
		t.Fatal("second request within the hour was allowed")
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Errorf("after Reset: %+v, %v; want allowed", res, err)
	}
}
