package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// tbFixture is a token bucket key under a fake clock, reachable through
// limiters of several policies: a token bucket's state is kept under one
// key whatever its parameters.
type tbFixture struct {
	client *redis.Client
	store  *redisstore.Store
	clock  *testutil.Clock
	key    string // the Redis key of caller "k"
}

func newTBFixture(t *testing.T, start time.Time) *tbFixture {
	client := redistest.Client(t)
	clock := testutil.NewClock(start)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock.Now))
	f := &tbFixture{client: client, store: store, clock: clock}
	f.key = store.Key("k", mustSpec(t, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Second}))
	t.Cleanup(func() { client.Del(context.Background(), f.key) })
	return f
}

func (f *tbFixture) limiter(t *testing.T, p ratekeeper.Policy) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(f.store, p)
	if err != nil {
		t.Fatal(err)
	}
	if k := f.store.Key("k", lim.Spec()); k != f.key {
		t.Fatalf("%+v keeps caller k at %q, not %q", p, k, f.key)
	}
	return lim
}

// value returns the stored value and its encoding.
func (f *tbFixture) value(t *testing.T) (string, string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	v, err := f.client.Get(ctx, f.key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", f.key, err)
	}
	return v, f.client.ObjectEncoding(ctx, f.key).Val()
}

var tbStart = time.Unix(1_900_000_000, 123_456_000)

// TestTokenBucketState checks the stored state: "<tokens in millionths>:<µs
// of the last refill step>", with an expiry at the moment the bucket is
// full again, for whole and fractional rates alike.
func TestTokenBucketState(t *testing.T) {
	for _, p := range []ratekeeper.TokenBucket{
		{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour},
		{Capacity: 100, RefillRate: 1, RefillInterval: 600 * time.Millisecond},
		{Capacity: 5, RefillRate: 0.5, RefillInterval: time.Second},
		{Capacity: ratekeeper.MaxLimit, RefillRate: 1_000_000, RefillInterval: time.Hour},
	} {
		t.Run(fmt.Sprintf("%d_%gper%v", p.Capacity, p.RefillRate, p.RefillInterval), func(t *testing.T) {
			f := newTBFixture(t, tbStart)
			lim := f.limiter(t, p)
			ctx := ctxTimeout(t, 10*time.Second)
			now := f.clock.Now().UnixMicro()
			res, err := lim.Allow(ctx, "k")
			testutil.WantResult(t, "Allow", res, err, true, float64(p.Capacity-1))
			v, enc := f.value(t)
			if want := fmt.Sprintf("%d:%d", (p.Capacity-1)*1_000_000, now); v != want {
				t.Fatalf("stored %q (%s), want %q", v, enc, want)
			}
			// Full again after one refill, plus the expiry's second of
			// slack for a supplied clock.
			refill := time.Duration(math.Ceil(1/p.RefillRate)) * p.RefillInterval
			if ttl := f.client.PTTL(ctx, f.key).Val(); ttl <= refill || ttl > refill+time.Second {
				t.Errorf("PTTL %v, want the time to full, %v, plus at most 1s", ttl, refill)
			}
			t.Logf("MEMORY USAGE of the idle key: %d B", f.client.MemoryUsage(ctx, f.key, 0).Val())
		})
	}
}

// TestTokenBucketClockJumps moves a supplied clock far either way while
// Redis keeps the key: however far, within the supported times, the
// script decides as the model. The state holds the time whole, so no
// distance between the writer's clock and the reader's misreads it.
func TestTokenBucketClockJumps(t *testing.T) {
	p := ratekeeper.TokenBucket{Capacity: 250_000, RefillRate: 25_000, RefillInterval: 100 * time.Millisecond}
	for _, jump := range []time.Duration{
		-8 * time.Hour, -time.Hour, time.Hour, 14 * time.Hour, -30 * 24 * time.Hour, 365 * 24 * time.Hour,
	} {
		t.Run(fmt.Sprint(jump), func(t *testing.T) {
			f := newTBFixture(t, tbStart)
			lim := f.limiter(t, p)
			spec := lim.Spec()
			ctx := ctxTimeout(t, 10*time.Second)
			var st driver.State
			for i, step := range []struct {
				after time.Duration
				n     int64
			}{{0, 200_000}, {150 * time.Millisecond, 60_000}, {jump, 0}, {0, 10}, {350 * time.Millisecond, 0}, {0, 200_000}} {
				f.clock.Advance(step.after)
				want := testutil.Step(spec, &st, f.clock.Now().UnixMicro(), step.n)
				got, err := lim.AllowN(ctx, "k", step.n)
				if err != nil || testutil.DiffResult(got, want) != "" {
					t.Fatalf("step %d: AllowN(%d) %v later = %+v, %v; the model gives %+v", i, step.n, step.after, got, err, want)
				}
				f.client.Persist(ctx, f.key) // Redis's clock did not jump
			}
		})
	}
}

// TestTokenBucketAcrossPolicies decides random requests on one key through
// token bucket policies that change at random, as a policy's parameters
// may while its key lives, and requires the Results of the model, kept in
// one State: each reads the state another wrote.
func TestTokenBucketAcrossPolicies(t *testing.T) {
	buckets := []ratekeeper.TokenBucket{
		{Capacity: 3, RefillRate: 1, RefillInterval: time.Second},
		{Capacity: 250_000, RefillRate: 40_000, RefillInterval: 700 * time.Millisecond},
		{Capacity: 120, RefillRate: 7, RefillInterval: 300 * time.Millisecond},
		{Capacity: 5, RefillRate: 0.5, RefillInterval: 400 * time.Millisecond},
		{Capacity: 4, RefillRate: 1.25, RefillInterval: 100 * time.Millisecond},
		{Capacity: 999_999, RefillRate: 100_000, RefillInterval: time.Second},
		{Capacity: 100, RefillRate: 1, RefillInterval: 72 * time.Hour},
	}
	f := newTBFixture(t, tbStart)
	lims := make([]*ratekeeper.Limiter, len(buckets))
	for i, p := range buckets {
		lims[i] = f.limiter(t, p)
	}
	ctx := ctxTimeout(t, 60*time.Second)
	r := rand.New(rand.NewPCG(7, 0))
	var st driver.State
	crossReads := 0 // reads of a state another policy wrote
	writer := -1
	const steps = 3000
	for i := range steps {
		switch x := r.IntN(10); {
		case x < 2:
		case x < 5:
			f.clock.Advance(time.Duration(1+r.IntN(1000)) * time.Microsecond)
		case x < 9:
			f.clock.Advance(time.Duration(r.Int64N(int64(2*time.Second/time.Microsecond))) * time.Microsecond)
		default:
			f.clock.Advance(time.Duration(r.Int64N(int64(30*time.Second/time.Microsecond))) * time.Microsecond)
		}
		pi := r.IntN(len(buckets))
		if r.IntN(4) > 0 && writer >= 0 {
			pi = writer // runs of one policy, to use up and refill
		}
		p := buckets[pi]
		var n int64
		switch x := r.IntN(10); {
		case x < 2:
		case x < 7:
			n = 1 + r.Int64N(min(p.Capacity, 3))
		default:
			n = r.Int64N(p.Capacity + 1)
		}
		v, err := f.client.Get(ctx, f.key).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if err == nil && writer != pi {
			crossReads++
		}
		spec := lims[pi].Spec()
		want := testutil.Step(spec, &st, f.clock.Now().UnixMicro(), n)
		got, err := lims[pi].AllowN(ctx, "k", n)
		if err != nil {
			t.Fatalf("step %d: %+v AllowN(%d) on %q: %v", i, p, n, v, err)
		}
		if testutil.DiffResult(got, want) != "" {
			t.Fatalf("step %d: %+v AllowN(%d) on %q:\nredis %+v\nmodel %+v", i, p, n, v, got, want)
		}
		if got.Allowed && n > 0 {
			writer = pi
		}
		// The fake clock runs ahead of Redis's: keep the key however long
		// its expiry, as the model does. A stale key must decide as a
		// missing one.
		f.client.Persist(ctx, f.key)
	}
	if crossReads < 100 {
		t.Errorf("%d reads of a state another policy wrote: too few to count", crossReads)
	}
}

// TestTokenBucketMalformedValues: values that are not a state count as a
// fresh key, without an error.
func TestTokenBucketMalformedValues(t *testing.T) {
	f := newTBFixture(t, tbStart)
	lim := f.limiter(t, ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour})
	ctx := ctxTimeout(t, 10*time.Second)
	now := fmt.Sprint(f.clock.Now().UnixMicro())
	set := func(value string) {
		t.Helper()
		if err := f.client.Set(ctx, f.key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A valid value: no tokens, refilled last now.
	set("0:" + now)
	res, err := lim.Peek(ctx, "k")
	testutil.WantResult(t, "Peek on an empty bucket", res, err, false, 0)

	for _, value := range []string{
		"abc", "", "0", "1000000", ":" + now, "1000000:", "--1000000:" + now, "1000000:-" + now,
		"1000000:" + now + ":1", " 1000000:" + now, "1e6:" + now, "1000000:1.9e15",
		"9007199254740992:" + now, "1000000:9007199254740992", // not below 2^53
	} {
		set(value)
		res, err := lim.Peek(ctx, "k")
		testutil.WantResult(t, fmt.Sprintf("Peek on %q", value), res, err, true, 3)
		res, err = lim.Allow(ctx, "k")
		testutil.WantResult(t, fmt.Sprintf("Allow on %q", value), res, err, true, 2)
		if v, _ := f.value(t); v != "2000000:"+now {
			t.Errorf("Allow on %q stored %q", value, v)
		}
	}
}
