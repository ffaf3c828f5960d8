package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestDenyCacheAfterRefund: a refund makes a cached denial wrong, so the
// next request goes to Redis, which allows it; a charge makes one too
// short, so the next is answered with the charge's debt.
func TestDenyCacheAfterRefund(t *testing.T) {
	client := redistest.Client(t)
	clock := testutil.NewClock(time.Unix(1_900_000_000, 0))
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)),
		redisstore.WithClock(clock.Now), redisstore.WithDenyCache(100))
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim.AllowN(ctx, "k", 2)
	for range 2 { // the second denial from the cache
		if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
			t.Fatalf("Allow on an empty bucket = %+v, %v", res, err)
		}
	}
	if store.DenyCacheHits() != 1 {
		t.Fatalf("DenyCacheHits = %d, want 1", store.DenyCacheHits())
	}
	res, err := lim.Refund(ctx, "k", 1)
	testutil.WantResult(t, "Refund(1)", res, err, true, 1)
	res, err = lim.Allow(ctx, "k")
	testutil.WantResult(t, "Allow after the refund", res, err, true, 0)

	lim.Allow(ctx, "k") // denied, and cached until the next refill
	res, err = lim.Charge(ctx, "k", 5)
	testutil.WantResult(t, "Charge(5)", res, err, false, -5)
	got, err := lim.Allow(ctx, "k")
	if err != nil || got.Allowed || got.Remaining != -5 || got.RetryAfter != res.RetryAfter {
		t.Fatalf("Allow after the charge = %+v, %v; want the charge's debt, %+v", got, err, res)
	}
}

// TestChargeAllocatesAsDecide: a lone Charge or Refund allocates no more
// on the client than a lone decision of the same algorithm.
func TestChargeAllocatesAsDecide(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	lim, err := ratekeeper.New(store, ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allocs := func(call func(context.Context, string, int64) (ratekeeper.Result, error)) float64 {
		return testing.AllocsPerRun(200, func() {
			if _, err := call(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
		})
	}
	decide := allocs(lim.AllowN)
	for name, call := range map[string]func(context.Context, string, int64) (ratekeeper.Result, error){
		"Charge": lim.Charge, "Refund": lim.Refund,
	} {
		if got := allocs(call); got > decide {
			t.Errorf("%s: %v allocations, a decision %v", name, got, decide)
		}
	}
	t.Logf("a lone decision allocates %v times", decide)
}
