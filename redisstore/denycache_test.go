package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

func TestDenyCacheAnswersExactlyWhatRedisWould(t *testing.T) {
	client := redistest.Client(t)
	clock := testutil.NewClock(time.Unix(1_900_000_000, 0))
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

// TestDenyCacheResetRace races Reset against a denial on its way back from
// Redis, hundreds of times: a denial that Redis decided before the Reset
// must never be cached after it, so once both calls return, the cache
// answers exactly what Redis does.
func TestDenyCacheResetRace(t *testing.T) {
	const (
		trials = 600
		batch  = 50 // trials at once
	)
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	policy := ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 1}
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			cached := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithDenyCache(10_000),
				redisstore.WithAutoPipelining(pipelining))
			viaCache, _ := ratekeeper.New(cached, policy)
			viaRedis, _ := ratekeeper.New(redisstore.New(client, redisstore.WithKeyPrefix(prefix)), policy)
			ctx := context.Background()
			var wrong, deniedFirst atomic.Int64
			for start := 0; start < trials; start += batch {
				var wg sync.WaitGroup
				for i := start; i < start+batch; i++ {
					key := fmt.Sprintf("p%t:%d", pipelining, i)
					wg.Go(func() {
						if res, err := viaCache.Allow(ctx, key); err != nil || !res.Allowed {
							t.Errorf("%s: first request: %+v, %v", key, res, err)
							return
						}
						var pair sync.WaitGroup
						ready := make(chan struct{})
						pair.Go(func() {
							<-ready
							if res, err := viaCache.Allow(ctx, key); err != nil {
								t.Error(err)
							} else if !res.Allowed {
								deniedFirst.Add(1)
							}
						})
						pair.Go(func() {
							<-ready
							if err := viaCache.Reset(ctx, key); err != nil {
								t.Error(err)
							}
						})
						close(ready)
						pair.Wait()
						got, err1 := viaCache.Peek(ctx, key)
						want, err2 := viaRedis.Peek(ctx, key)
						if err1 != nil || err2 != nil {
							t.Errorf("%s: %v, %v", key, err1, err2)
							return
						}
						if got.Allowed != want.Allowed {
							if wrong.Add(1) <= 5 {
								t.Errorf("%s: after Reset and Allow, the cache answers allowed=%t, Redis %t",
									key, got.Allowed, want.Allowed)
							}
						}
					})
				}
				wg.Wait()
			}
			t.Logf("%d trials; %d denials raced a Reset; %d answers from the cache differed from Redis",
				trials, deniedFirst.Load(), wrong.Load())
			if deniedFirst.Load() == 0 {
				t.Error("no denial ever raced a Reset: the test proves nothing")
			}
		})
	}
}

// TestDenyCacheDifferentLimitsUnderOneName shows what the deny cache does
// when two servers apply different limits under one name, as during the
// rollout of a new limit: the other server's faster refill adds allowance
// that a cached denial does not see, so the key is denied here, though
// Redis would allow it, until that denial runs out, and never longer.
// Denials are cached per policy parameters: a limiter with other
// parameters on the same store is never answered by another's denial.
func TestDenyCacheDifferentLimitsUnderOneName(t *testing.T) {
	client := redistest.Client(t)
	clock := testutil.NewClock(time.Unix(1_900_000_000, 0))
	prefix := redistest.Prefix(t)
	oldLimit := ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Minute}
	newLimit := ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Second}
	cached := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now), redisstore.WithDenyCache(100))
	direct := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now))
	oldHere, _ := ratekeeper.New(cached, oldLimit)    // this server: the old limit, and the cache
	newHere, _ := ratekeeper.New(cached, newLimit)    // the new limit, through the same cache
	newThere, _ := ratekeeper.New(direct, newLimit)   // another server, already on the new limit
	oldInRedis, _ := ratekeeper.New(direct, oldLimit) // what Redis answers the old limit
	ctx := context.Background()

	for range 2 {
		oldHere.Allow(ctx, "k")
	}
	denied, err := oldHere.Allow(ctx, "k")
	if err != nil || denied.Allowed {
		t.Fatalf("third request within the minute: %+v, %v; want denied", denied, err)
	}
	// The other server refills the key at its own rate, and takes one.
	clock.Advance(10 * time.Second)
	if res, err := newThere.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("the new limit, 10 s later: %+v, %v; want allowed", res, err)
	}
	if res, err := oldInRedis.Peek(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("Redis under the old limit: %+v, %v; want allowed", res, err)
	}
	// The cached denial holds, aged, though Redis would allow.
	res, err := oldHere.Allow(ctx, "k")
	if err != nil || res.Allowed || res.RetryAfter != denied.RetryAfter-10*time.Second {
		t.Errorf("the old limit through the cache: %+v, %v; want the cached denial, RetryAfter %v",
			res, err, denied.RetryAfter-10*time.Second)
	}
	if cached.DenyCacheHits() != 1 {
		t.Errorf("DenyCacheHits = %d, want 1", cached.DenyCacheHits())
	}
	// The new limit on the same store is not answered by the old one's
	// denial: it asks Redis, which allows.
	if res, err := newHere.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Errorf("the new limit through the cache: %+v, %v; want allowed by Redis", res, err)
	}
	if cached.DenyCacheHits() != 1 {
		t.Errorf("DenyCacheHits = %d after the new limit's call, want still 1", cached.DenyCacheHits())
	}
	// Once the denial runs out, the old limit asks Redis again.
	clock.Advance(denied.RetryAfter - 10*time.Second)
	if _, err := oldHere.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if cached.DenyCacheHits() != 1 {
		t.Errorf("DenyCacheHits = %d once the denial ran out, want still 1", cached.DenyCacheHits())
	}
}

// TestDenyCacheKeepsOptionalInterfaces: a store with a deny cache still
// decides several keys at once, from Redis and never from the cache,
// which cannot answer for a batch; and, if it charges and refunds, a
// refund, which adds allowance, is never hidden by a cached denial.
func TestDenyCacheKeepsOptionalInterfaces(t *testing.T) {
	client := redistest.Client(t)
	var store ratekeeper.Store = redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithDenyCache(100))
	lim, _ := ratekeeper.New(store, ratekeeper.FixedWindow{Limit: 2, Window: time.Hour})
	spec := lim.Spec()
	ctx := context.Background()
	for range 3 { // the third is denied, and cached
		lim.Allow(ctx, "k")
	}
	multi, ok := store.(driver.MultiDecider)
	if !ok {
		t.Fatal("a store with a deny cache is no driver.MultiDecider")
	}
	ds, err := multi.DecideAll(ctx, []driver.Request{{Key: "k", Spec: spec, N: 1}, {Key: "other", Spec: spec, N: 1}})
	if err != nil || len(ds) != 2 || ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("DecideAll = %+v, %v; want k denied, the batch denied", ds, err)
	}
	if hits := store.(*redisstore.Store).DenyCacheHits(); hits != 0 {
		t.Errorf("DenyCacheHits = %d after a DecideAll, want 0", hits)
	}
	charger, ok := store.(driver.Charger)
	if !ok {
		t.Log("redisstore does not charge nor refund: nothing more to check")
		return
	}
	if _, err := lim.Allow(ctx, "k"); err != nil { // denied from the cache
		t.Fatal(err)
	}
	if _, err := charger.Refund(ctx, "k", spec, 1); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Errorf("Allow after a refund of 1 = %+v, %v; want allowed", res, err)
	}
}

// TestDenyCacheForgetsDecideAllRefunds: a refund or a charge made by a
// DecideAll drops the key's cached denial, which the refund made wrong
// and the charge too short.
func TestDenyCacheForgetsDecideAllRefunds(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithDenyCache(100))
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 2, Period: time.Hour, Burst: 2})
	spec := lim.Spec()
	ctx := context.Background()
	for range 3 { // the third is denied, and cached
		lim.Allow(ctx, "k")
	}
	if _, err := store.DecideAll(ctx, []driver.Request{{Key: "k", Spec: spec, N: 1, Mode: driver.Refund}, {Key: "other", Spec: spec, N: 1}}); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("Allow after a DecideAll's refund of 1 = %+v, %v; want allowed", res, err)
	}
	lim.Allow(ctx, "k") // denied, and cached until 30 minutes from now
	if _, err := store.DecideAll(ctx, []driver.Request{{Key: "k", Spec: spec, N: 2, Mode: driver.Charge}}); err != nil {
		t.Fatal(err)
	}
	res, err := lim.Allow(ctx, "k")
	if err != nil || res.Allowed || res.RetryAfter <= time.Hour {
		t.Errorf("Allow after a DecideAll's charge of 2 = %+v, %v; want denied for over an hour", res, err)
	}
}

// TestDenyCacheTakeOfAnotherCost: a take of another cost on a key whose
// denial is cached makes Redis's wait longer; the next request of the
// denied cost gets Redis's answer, not the cached one. Through Decide and
// DecideAll alike.
func TestDenyCacheTakeOfAnotherCost(t *testing.T) {
	for _, viaDecideAll := range []bool{false, true} {
		t.Run(fmt.Sprint("DecideAll=", viaDecideAll), func(t *testing.T) {
			client := redistest.Client(t)
			clock := testutil.NewClock(time.Unix(1_900_000_000, 0))
			prefix := redistest.Prefix(t)
			cached := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now), redisstore.WithDenyCache(100))
			direct := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithClock(clock.Now))
			policy := ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Second}
			viaCache, _ := ratekeeper.New(cached, policy)
			viaRedis, _ := ratekeeper.New(direct, policy)
			ctx := context.Background()
			if res, err := viaCache.AllowN(ctx, "k", 3); err != nil || !res.Allowed {
				t.Fatalf("AllowN(3) = %+v, %v", res, err)
			}
			if res, err := viaCache.AllowN(ctx, "k", 5); err != nil || res.Allowed || res.RetryAfter != 3*time.Second {
				t.Fatalf("AllowN(5) = %+v, %v; want denied for 3s, and cached", res, err)
			}
			if viaDecideAll {
				if _, err := cached.DecideAll(ctx, []driver.Request{{Key: "k", Spec: viaCache.Spec(), N: 1}}); err != nil {
					t.Fatal(err)
				}
			} else if res, err := viaCache.Allow(ctx, "k"); err != nil || !res.Allowed {
				t.Fatalf("Allow = %+v, %v", res, err)
			}
			want, err := viaRedis.AllowN(ctx, "k", 5) // denied: takes nothing
			if err != nil || want.RetryAfter != 4*time.Second {
				t.Fatalf("Redis: AllowN(5) = %+v, %v; want denied for 4s", want, err)
			}
			got, err := viaCache.AllowN(ctx, "k", 5)
			if err != nil || got.Allowed || got.RetryAfter != want.RetryAfter {
				t.Errorf("AllowN(5) after a take of 1 = %+v, %v; Redis answers %+v", got, err, want)
			}
		})
	}
}

// replyLost is a go-redis hook that, while armed, runs every command and
// then reports it failed, as a reply lost to a timeout would be: Redis
// made the call, the client does not know.
type replyLost struct{ armed atomic.Bool }

func (h *replyLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed.Load() {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h *replyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed.Load() {
			for _, c := range cmds {
				c.SetErr(errReplyLost)
			}
			return errReplyLost
		}
		return err
	}
}

var errReplyLost = errors.New("injected: the reply was lost")

// TestDenyCacheForgetsOnFailedRefund: a refund or a charge that Redis made
// but whose reply was lost still drops the key's cached denial, as a
// Reset does.
func TestDenyCacheForgetsOnFailedRefund(t *testing.T) {
	for _, mode := range []driver.Mode{driver.Refund, driver.Charge} {
		t.Run(mode.String(), func(t *testing.T) {
			client := redistest.Client(t)
			lost := &replyLost{}
			client.AddHook(lost)
			store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithDenyCache(100))
			lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 2, Period: time.Hour, Burst: 2})
			ctx := context.Background()
			for range 3 { // the third is denied, and cached
				lim.Allow(ctx, "k")
			}
			call := lim.Refund
			if mode == driver.Charge {
				call = lim.Charge
			}
			lost.armed.Store(true)
			_, err := call(ctx, "k", 1)
			lost.armed.Store(false)
			if !errors.Is(err, errReplyLost) {
				t.Fatalf("%v with its reply lost: %v, want the injected error", mode, err)
			}
			res, err := lim.Allow(ctx, "k")
			switch {
			case err != nil:
				t.Fatal(err)
			case mode == driver.Refund && !res.Allowed:
				t.Errorf("Allow after a refund of 1 that Redis made = %+v; want allowed, not the cached denial", res)
			case mode == driver.Charge && (res.Allowed || res.RetryAfter <= 45*time.Minute):
				t.Errorf("Allow after a charge of 1 that Redis made = %+v; want denied for about an hour, not the cached 30 minutes", res)
			}
		})
	}
}
