package drivertest

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The expected Results are worked out by hand in the comments, with the
// level in requests: a LeakRate of 0.7 per second drains one request in
// τ = 10^6/0.7 = 1,428,571.43µs (the float64 0.7 is a hair under 0.7, so
// the drain is a hair slower, by 6·10^-9µs per request). A request of cost
// n passes when level + n <= Capacity; RetryAfter is the time to drain
// the excess, ResetAfter the time to drain the level, both rounded up to a
// whole µs; Remaining is Capacity − level, rounded down to a millionth.
var lbScenarios = []scenario{
	{
		name:   "initial burst; an overflowing request is rejected with the exact wait",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 1, want: ok(2, 1_428_572*us)},
			// ⌈2τ⌉ = ⌈2,857,142.86⌉.
			{n: 1, want: ok(1, 2_857_143*us)},
			// ⌈3τ⌉ = ⌈4,285,714.29⌉.
			{n: 1, want: ok(0, 4_285_715*us)},
			{n: 1, want: denied(0, 1_428_572*us, 4_285_715*us)},
			{n: 0, want: denied(0, 1_428_572*us, 4_285_715*us)},
			// Drained 1,428,571µs/τ = 0.9999997: level 2.0000003, 3·10^-7
			// too many for one more, 0.43µs of drain.
			{at: 1_428_571 * us, n: 1, want: denied(0.999999, 1*us, 2_857_144*us)},
			// Drained 1.0000004: level 1.9999996, then 2.9999996; the
			// 4·10^-7 left are under a millionth.
			{at: 1_428_572 * us, n: 1, want: ok(0, 4_285_714*us)},
		},
	},
	{
		name:   "the level drains continuously; a cost is taken whole or not at all",
		policy: ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.7},
		steps: []tbStep{
			{n: 3, want: ok(0, 4_285_715*us)},
			// Level 3 − 0.7 = 2.3, a hair more, so Remaining rounds down to
			// 0.699999: one request is 0.3 too many, ⌈428,571.43⌉µs of
			// drain; empty in ⌈3,285,714.29⌉µs.
			{at: 1 * sec, n: 0, want: denied(0.699999, 428_572*us, 3_285_715*us)},
			// Level 1.6: two are 0.6 too many, ⌈857,142.86⌉µs; empty in
			// ⌈2,285,714.29⌉µs.
			{at: 2 * sec, n: 2, want: denied(1.399999, 857_143*us, 2_285_715*us)},
			{at: 2 * sec, peek: true, want: ok(1.399999, 2_285_715*us)},
			// Level 2.6: empty in ⌈3,714,285.71⌉µs.
			{at: 2 * sec, n: 1, want: ok(0.399999, 3_714_286*us)},
			// Drained 857,142µs/τ = 0.5999994: level 2.0000006.
			{at: 2_857_142 * us, n: 1, want: denied(0.999999, 1*us, 2_857_144*us)},
			// Level 1.9999999 + 1: empty in ⌈4,285,714.14⌉µs.
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
			// Level 3 − 0.35 = 2.65, a hair more: one request is 0.65 too
			// many, ⌈928,571.43⌉µs; empty in ⌈3,785,714.29⌉µs.
			{at: 500 * ms, n: 0, want: denied(0.349999, 928_572*us, 3_785_715*us)},
			{at: 500 * ms, peek: true, want: denied(0.349999, 928_572*us, 3_785_715*us)},
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
			// Drained 2,857,142µs/τ = 1.9999994: 6·10^-7 left, which the
			// next microsecond drains.
			{at: 2_857_142 * us, n: 3, want: denied(2.999999, 1*us, 1*us)},
			{at: 2_857_142 * us, key: "new", n: 0, want: ok(3, 0)},
			{at: 2_857_143 * us, n: 3, want: ok(0, 4_285_715*us)},
			{at: 2_857_143 * us, key: "new", n: 3, want: ok(0, 4_285_715*us)},
		},
	},
}

func (ts *suite) testLeakyBucketScenarios(t *testing.T) { ts.runScenarios(t, lbScenarios) }

// testLeakyBucketSlowRates runs rates slower than one request a second,
// such as one per hour, and checks every wait against the exact rate: no
// earlier (the rounding only ever makes the limit stricter) and later by
// at most a microsecond per request in the bucket, plus one for rounding
// the wait up to a whole microsecond.
func (ts *suite) testLeakyBucketSlowRates(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		policy ratekeeper.LeakyBucket
	}{
		{"1_per_hour", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 1.0 / 3600}},
		{"10_per_hour", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 10.0 / 3600}},
		{"1_per_1800s", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 1.0 / 1800}},
		{"0.0014_per_s", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 0.0014}},
		{"1_per_MaxPeriod", ratekeeper.LeakyBucket{Capacity: 1, LeakRate: 1 / ratekeeper.MaxPeriod.Seconds()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				lim := newLimiter(t, store, tc.policy)
				forget(t, lim, "k")
				// One request drains in tau µs; the bucket holds level.
				tau := 1e6 / tc.policy.LeakRate
				var level float64
				check := func(what string, got time.Duration, requests float64) {
					t.Helper()
					exact := requests * tau
					us := float64(got / time.Microsecond)
					if us < exact-1e-3 || us > exact+math.Ceil(level)+1 {
						t.Errorf("%s at start+%v: %v, want %.3fµs to %.0fµs more", what, clock.Elapsed(), got, exact, math.Ceil(level)+1)
					}
				}
				allow := func(n int64, want bool) ratekeeper.Result {
					t.Helper()
					res, err := lim.AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed != want {
						t.Fatalf("AllowN(%d) at start+%v: %+v, want Allowed %v", n, clock.Elapsed(), res, want)
					}
					if want {
						level += float64(n)
					}
					return res
				}
				capacity := tc.policy.Capacity
				res := allow(capacity, true)
				check("ResetAfter of a full bucket", res.ResetAfter, level)
				res = allow(1, false)
				check("RetryAfter of one more", res.RetryAfter, 1)
				check("its ResetAfter", res.ResetAfter, level)

				// A quarter of the bucket drains, plus half a request, and
				// the microseconds the rounding may add.
				drain := float64(capacity)/4 + 0.5
				d := time.Duration(math.Ceil(drain*tau)+float64(capacity)+1) * time.Microsecond
				clock.Advance(d)
				level -= float64(d/time.Microsecond) / tau
				res, err := lim.Peek(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if room := float64(capacity) - level; res.Remaining > room || res.Remaining < room-2e-6 {
					t.Errorf("Remaining after %v: %v, want %.7f or up to 2·10^-6 less", d, res.Remaining, room)
				}
				free := int64(float64(capacity) - level)
				res = allow(free+1, false)
				check(fmt.Sprintf("RetryAfter of cost %d", free+1), res.RetryAfter, level+float64(free+1)-float64(capacity))
				if free > 0 {
					res = allow(free, true)
					check(fmt.Sprintf("ResetAfter after cost %d", free), res.ResetAfter, level)
				}
			})
		})
	}
}
