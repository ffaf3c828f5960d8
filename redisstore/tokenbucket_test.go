package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/results"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// tbFixture is a token bucket key under a fake clock, reachable through
// limiters of several policies: a token bucket's state is kept under one
// key whatever its parameters.
type tbFixture struct {
	client *redis.Client
	store  *redisstore.Store
	clock  *fakeClock
	key    string // the Redis key of caller "k"
}

func newTBFixture(t *testing.T, start time.Time) *tbFixture {
	client := redistest.Client(t)
	clock := &fakeClock{now: start}
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

var unpackedTB = regexp.MustCompile(`^\d+:\d+$`)

// The packed format keeps the time modulo W = 10^k µs, k from 11 to 16.
// 2·10^15 µs (2033) is a multiple of every W but 10^16, which no time
// below 2^53 µs reaches; tbNearWrap is just before it.
var (
	tbStart    = time.Unix(1_900_000_000, 123_456_000)
	tbWrap     = time.UnixMicro(2_000_000_000_000_000)
	tbNearWrap = tbWrap.Add(-10*time.Second + 123_457*time.Microsecond)
)

// TestTokenBucketPackedState checks which policies keep their state in
// one integer, int-encoded by Redis, and that the integer is smaller in
// memory than the "<tokens>:<µs>" string it replaces and decides the same.
func TestTokenBucketPackedState(t *testing.T) {
	cases := []struct {
		policy ratekeeper.TokenBucket
		// k is the number of digits of the time in the packed value: 0
		// for the "<tokens>:<µs>" string.
		k int
	}{
		{ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour}, 16},
		{ratekeeper.TokenBucket{Capacity: 8, RefillRate: 1, RefillInterval: time.Second}, 16},
		{ratekeeper.TokenBucket{Capacity: 9, RefillRate: 1, RefillInterval: time.Second}, 15},
		{ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: 600 * time.Millisecond}, 14},
		{ratekeeper.TokenBucket{Capacity: 999_998, RefillRate: 1000, RefillInterval: time.Second}, 11},
		// k would be 10: W = 10^10 µs, under three hours.
		{ratekeeper.TokenBucket{Capacity: 999_999, RefillRate: 1000, RefillInterval: time.Second}, 0},
		// k = 14, but it takes 300 days to fill, more than W/4 (289 days).
		{ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: 72 * time.Hour}, 0},
		// Just within W/4 = 2.5·10^13 µs.
		{ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: 250_000 * time.Second}, 14},
		// Fractional rates keep the string, whole tokens or not.
		{ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: time.Second}, 0},
		{ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1.5, RefillInterval: time.Second}, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d_%gper%v", c.policy.Capacity, c.policy.RefillRate, c.policy.RefillInterval), func(t *testing.T) {
			f := newTBFixture(t, tbStart)
			lim := f.limiter(t, c.policy)
			ctx := ctxTimeout(t, 10*time.Second)
			now := f.clock.Now().UnixMicro()

			res, err := lim.Allow(ctx, "k")
			wantResult(t, "Allow", res, err, true, float64(c.policy.Capacity-1))
			v, enc := f.value(t)
			// Capacity - 1 tokens, refilled last now.
			old := fmt.Sprintf("%d:%d", (c.policy.Capacity-1)*1_000_000, now)
			if c.k == 0 {
				if v != old {
					t.Fatalf("stored %q (%s), want %q", v, enc, old)
				}
				return
			}
			w := int64(1)
			for range c.k {
				w *= 10
			}
			want := fmt.Sprintf("%d%0*d%d", c.policy.Capacity, c.k, now%w, c.k-10)
			if v != want || enc != "int" {
				t.Fatalf("stored %q (OBJECT ENCODING %s), want %q (int)", v, enc, want)
			}
			packed := f.client.MemoryUsage(ctx, f.key, 0).Val()
			peek, err := lim.Peek(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}

			// The same state in the other format: more memory, the same
			// decision.
			ttl := f.client.PTTL(ctx, f.key).Val()
			if err := f.client.Set(ctx, f.key, old, ttl).Err(); err != nil {
				t.Fatal(err)
			}
			unpacked := f.client.MemoryUsage(ctx, f.key, 0).Val()
			t.Logf("MEMORY USAGE: %d B packed, %d B as %q", packed, unpacked, old)
			if packed <= 0 || packed >= unpacked {
				t.Errorf("MEMORY USAGE %d B packed, not below the %d B of %q", packed, unpacked, old)
			}
			if got, err := lim.Peek(ctx, "k"); err != nil || !reflect.DeepEqual(got, peek) {
				t.Errorf("Peek on %q = %+v, %v; on %q it was %+v", old, got, err, want, peek)
			}
		})
	}
}

// TestTokenBucketPackedAcrossWrap decides on packed states whose time and
// the clock lie on either side of a multiple of W, in both orders (the
// second with a clock that went back), as the model does.
func TestTokenBucketPackedAcrossWrap(t *testing.T) {
	for k, capacity := range map[int]int64{11: 250_000, 12: 50_000, 13: 5_000, 14: 500, 15: 60} {
		p := ratekeeper.TokenBucket{Capacity: capacity, RefillRate: float64(capacity / 20), RefillInterval: 300 * time.Millisecond}
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) {
			f := newTBFixture(t, tbWrap.Add(-2*time.Second))
			lim := f.limiter(t, p)
			spec := lim.Spec()
			ctx := ctxTimeout(t, 10*time.Second)
			var st driver.State
			for i, step := range []struct {
				at time.Duration // from the multiple of W
				n  int64
			}{
				{-2 * time.Second, capacity / 2},
				{500 * time.Millisecond, 0}, // 8 refills since
				{500 * time.Millisecond, capacity / 2},
				{-time.Second, 0}, // before the last refill step
				{-time.Second, 1},
				{time.Second, capacity},
				{time.Second, 1},
			} {
				f.clock.Advance(tbWrap.Add(step.at).Sub(f.clock.Now()))
				want := results.Step(spec, &st, f.clock.Now().UnixMicro(), step.n)
				got, err := lim.AllowN(ctx, "k", step.n)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: AllowN(%d) at W%+v = %+v, %v; the model gives %+v", i, step.n, step.at, got, err, want)
				}
				if v, enc := f.value(t); enc != "int" || v[len(v)-1]-'0' != byte(k-10) {
					t.Fatalf("step %d: stored %q (%s), want it packed with k = %d", i, v, enc, k)
				}
			}
		})
	}
}

// TestTokenBucketPackedClockJumps moves a supplied clock far while Redis
// keeps a packed key, as a test's clock may: up to W/2 ahead of the
// writer's (13.9 hours at k = 11, the least) and just under W/4 behind,
// the model's decisions stand.
func TestTokenBucketPackedClockJumps(t *testing.T) {
	// k = 11, full in 1 s.
	p := ratekeeper.TokenBucket{Capacity: 250_000, RefillRate: 25_000, RefillInterval: 100 * time.Millisecond}
	for _, jump := range []time.Duration{-6*time.Hour - 50*time.Minute, -time.Hour, time.Hour, 13 * time.Hour, 20 * time.Hour} {
		t.Run(fmt.Sprint(jump), func(t *testing.T) {
			f := newTBFixture(t, tbStart)
			lim := f.limiter(t, p)
			spec := lim.Spec()
			ctx := ctxTimeout(t, 10*time.Second)
			var st driver.State
			for i, step := range []struct {
				after time.Duration
				n     int64
			}{{0, 200_000}, {150 * time.Millisecond, 60_000}, {jump, 0}, {0, 10}, {350 * time.Millisecond, 0}} {
				f.clock.Advance(step.after)
				want := results.Step(spec, &st, f.clock.Now().UnixMicro(), step.n)
				got, err := lim.AllowN(ctx, "k", step.n)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: AllowN(%d) %v later = %+v, %v; the model gives %+v", i, step.n, step.after, got, err, want)
				}
				if _, enc := f.value(t); enc != "int" {
					t.Fatalf("step %d: the state is not packed", i)
				}
				f.client.Persist(ctx, f.key) // Redis's clock did not jump
			}
		})
	}
}

// TestTokenBucketFormatsAcrossPolicies decides random requests on one key
// through token bucket policies that change at random, as a policy's
// parameters may while its key lives, and requires the Results of the
// model, kept in one State. The policies write both formats, so each
// reads the other's, with other k.
func TestTokenBucketFormatsAcrossPolicies(t *testing.T) {
	buckets := []ratekeeper.TokenBucket{
		{Capacity: 3, RefillRate: 1, RefillInterval: time.Second},                       // packed, k = 16
		{Capacity: 250_000, RefillRate: 40_000, RefillInterval: 700 * time.Millisecond}, // packed, k = 11
		{Capacity: 120, RefillRate: 7, RefillInterval: 300 * time.Millisecond},          // packed, k = 14
		{Capacity: 5, RefillRate: 0.5, RefillInterval: 400 * time.Millisecond},          // fractional
		{Capacity: 4, RefillRate: 1.25, RefillInterval: 100 * time.Millisecond},         // fractional
		{Capacity: 999_999, RefillRate: 100_000, RefillInterval: time.Second},           // whole, k = 10
		{Capacity: 100, RefillRate: 1, RefillInterval: 72 * time.Hour},                  // whole, fills too slowly
	}
	f := newTBFixture(t, tbNearWrap)
	lims := make([]*ratekeeper.Limiter, len(buckets))
	for i, p := range buckets {
		lims[i] = f.limiter(t, p)
	}
	ctx := ctxTimeout(t, 60*time.Second)
	r := rand.New(rand.NewPCG(7, 0))
	var st driver.State
	// Reads of a value written by another policy, by format.
	var crossPacked, crossUnpacked, packedFractional int
	writer := -1
	const steps = 3000
	for i := range steps {
		// Steps of up to 30 s: the whole run, under two hours, stays
		// within the least W/4 (7 hours).
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
			packed := !strings.Contains(v, ":")
			switch {
			case packed && (p.RefillRate != float64(int64(p.RefillRate))):
				packedFractional++
			case packed:
				crossPacked++
			default:
				crossUnpacked++
			}
		}

		spec := lims[pi].Spec()
		want := results.Step(spec, &st, f.clock.Now().UnixMicro(), n)
		got, err := lims[pi].AllowN(ctx, "k", n)
		if err != nil {
			t.Fatalf("step %d: %+v AllowN(%d) on %q: %v", i, p, n, v, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: %+v AllowN(%d) on %q:\nredis %+v\nmodel %+v", i, p, n, v, got, want)
		}
		if got.Allowed && n > 0 {
			writer = pi
			// The first three policies pack whole tokens; a fractional
			// policy may have left a fraction.
			after, _ := f.value(t)
			wantPacked := pi < 3 && got.Remaining == math.Trunc(got.Remaining)
			if wantPacked == unpackedTB.MatchString(after) {
				t.Fatalf("step %d: %+v with %g tokens wrote %q", i, p, got.Remaining, after)
			}
		}
		// The fake clock runs ahead of Redis's: keep the key however long
		// its expiry, as the model does. A stale key must decide as a
		// missing one.
		f.client.Persist(ctx, f.key)
	}
	t.Logf("reads of another policy's value: %d packed, %d packed by a fractional policy, %d strings",
		crossPacked, packedFractional, crossUnpacked)
	if crossPacked < 50 || packedFractional < 50 || crossUnpacked < 50 {
		t.Errorf("too few reads across formats to count")
	}
}

// TestTokenBucketWholePolicyKeepsFractionalTokens: a whole-token policy
// that reads fractional tokens, left by a fractional policy, keeps them as
// "<tokens>:<µs>" until they are whole again.
func TestTokenBucketWholePolicyKeepsFractionalTokens(t *testing.T) {
	f := newTBFixture(t, tbStart)
	fractional := f.limiter(t, ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: time.Second})
	whole := f.limiter(t, ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	start := f.clock.Now().UnixMicro()

	res, err := fractional.AllowN(ctx, "k", 2)
	wantResult(t, "fractional AllowN(2)", res, err, true, 3)
	f.clock.Advance(time.Second) // a refill of 0.5
	res, err = fractional.Allow(ctx, "k")
	wantResult(t, "fractional Allow", res, err, true, 2.5)
	res, err = whole.Allow(ctx, "k")
	wantResult(t, "whole Allow", res, err, true, 1.5)
	if v, _ := f.value(t); v != fmt.Sprintf("1500000:%d", start+1_000_000) {
		t.Errorf("whole policy with 1.5 tokens stored %q", v)
	}
	f.clock.Advance(time.Second) // a refill of 1
	res, err = whole.Allow(ctx, "k")
	wantResult(t, "whole Allow", res, err, true, 1.5)
	if v, _ := f.value(t); v != fmt.Sprintf("1500000:%d", start+2_000_000) {
		t.Errorf("whole policy with 1.5 tokens stored %q", v)
	}
	f.clock.Advance(time.Second) // a refill of 0.5
	res, err = fractional.Allow(ctx, "k")
	wantResult(t, "fractional Allow", res, err, true, 1)
	if v, _ := f.value(t); v != fmt.Sprintf("1000000:%d", start+3_000_000) {
		t.Errorf("fractional policy with 1 token stored %q", v)
	}
	// Whole tokens again, and a whole policy packs them.
	res, err = whole.Allow(ctx, "k")
	wantResult(t, "whole Allow", res, err, true, 0)
	if v, enc := f.value(t); enc != "int" || v != fmt.Sprintf("1%016d6", start+3_000_000) {
		t.Errorf("whole policy with no tokens stored %q (%s), want it packed", v, enc)
	}
}

// TestTokenBucketMalformedValues: integers that are not a packed state
// count as a fresh key, without an error, for a packing policy and for one
// that does not pack.
func TestTokenBucketMalformedValues(t *testing.T) {
	f := newTBFixture(t, tbStart)
	lim := f.limiter(t, ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour})
	big := f.limiter(t, ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: 1_000_000, RefillInterval: time.Hour})
	ctx := ctxTimeout(t, 10*time.Second)
	now := fmt.Sprintf("%016d", f.clock.Now().UnixMicro())
	set := func(value string) {
		t.Helper()
		if err := f.client.Set(ctx, f.key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A valid value: no tokens, refilled last now.
	empty := "1" + now + "6"
	for _, l := range []*ratekeeper.Limiter{lim, big} {
		set(empty)
		res, err := l.Peek(ctx, "k")
		wantResult(t, fmt.Sprintf("Peek on %q", empty), res, err, false, 0)
	}

	for _, value := range []string{
		"abc", "", "0", "9", "0123", "-1" + now + "6", "+1" + now + "6", " 1" + now + "6", "1" + now + "6 ",
		"99999999999999999999", "1.5", "1e17", "1" + now[:15] + "x6",
		"1" + now + "0", "1" + now + "7", "1" + now + "8", "1" + now + "9", // no such k
		"0" + now + "6", "01" + now + "6", // a leading zero
		now + "6", "1" + now[1:] + "6", // too short for k = 16
		"1" + now[5:] + "6", "1" + now[5:] + "5", // too short for k = 16 and 15
		"1000" + now + "6", "1000000" + now[5:] + "1", // over 18 digits
		"1" + "9999999999999999" + "6", // the time is not below 2^53
		"1" + "8000000000000000" + "6", // the time is negative
	} {
		set(value)
		res, err := big.Peek(ctx, "k")
		wantResult(t, fmt.Sprintf("Peek of %d on %q", ratekeeper.MaxLimit, value), res, err, true, ratekeeper.MaxLimit)
		res, err = lim.Peek(ctx, "k")
		wantResult(t, fmt.Sprintf("Peek on %q", value), res, err, true, 3)
		res, err = lim.Allow(ctx, "k")
		wantResult(t, fmt.Sprintf("Allow on %q", value), res, err, true, 2)
		if v, enc := f.value(t); enc != "int" || v != "3"+now+"6" {
			t.Errorf("Allow on %q stored %q (%s)", value, v, enc)
		}
	}
}
