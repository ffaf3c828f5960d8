package drivertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

// tbStep is one request of a scripted token bucket scenario, made when
// the clock is at the given time since the scenario began: n tokens for
// key (0 peeks), a Peek, or a Reset of key.
type tbStep struct {
	at    time.Duration
	key   string // "" is "k"
	n     int64
	peek  bool
	reset bool
	want  ratekeeper.Result // its Limit is filled in from the Capacity
}

func ok(remaining float64, resetAfter time.Duration) ratekeeper.Result {
	return ratekeeper.Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
}

func denied(remaining float64, retryAfter, resetAfter time.Duration) ratekeeper.Result {
	return ratekeeper.Result{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// The expected Results are worked out by hand in the comments. The phase
// of the refills starts at the request that finds the bucket full (or the
// key new); from there, each whole RefillInterval adds RefillRate tokens.
var tbScenarios = []scenario{
	{
		name:   "initial burst",
		policy: ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: sec},
		// The i-th request at 0 leaves 10-i tokens, full again after i refills.
		steps: append(burst(10, sec),
			// Empty: the next token comes with the first refill, at 1s;
			// full again after 10 refills.
			tbStep{n: 1, want: denied(0, 1*sec, 10*sec)},
			tbStep{n: 0, want: denied(0, 1*sec, 10*sec)},
		),
	},
	{
		name:   "refills are discrete steps of the phase",
		policy: ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: sec},
		steps: []tbStep{
			{at: 0, n: 1, want: ok(1, 1*sec)},
			// Still in the first interval: nothing refilled. Full at 2s:
			// 2s - 0.9s = 1.1s.
			{at: 900 * ms, n: 1, want: ok(0, 1100*ms)},
			{at: 900 * ms, n: 1, want: denied(0, 100*ms, 1100*ms)},
			{at: 999_999 * us, n: 1, want: denied(0, 1*us, 1_000_001*us)},
			// The refill at 1s brings back one token, although the last
			// was spent only 0.1s ago. Then empty from 1s: full at 3s.
			{at: 1 * sec, n: 1, want: ok(0, 2*sec)},
			{at: 1 * sec, n: 1, want: denied(0, 1*sec, 2*sec)},
		},
	},
	{
		name:   "ten refills of 0.1 make exactly one token",
		policy: ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.1, RefillInterval: sec},
		steps: []tbStep{
			// Empty: 5 / 0.1 = 50 refills to full.
			{at: 0, n: 5, want: ok(0, 50*sec)},
			// Nine refills: 0.9 since the refill at 9s; the tenth comes at
			// 10s. Full: 4.1 / 0.1 = 41 refills from 9s, at 50s.
			{at: 9_999_999 * us, n: 1, want: denied(0.9, 1*us, 40_000_001*us)},
			// Ten refills: exactly 1.0 (adding 0.1 ten times in float64
			// makes 0.9999999999999999). Full: 40 refills from 10s.
			{at: 10 * sec, n: 0, want: ok(1, 40*sec)},
			{at: 10 * sec, n: 1, want: ok(0, 50*sec)},
		},
	},
	{
		name:   "ten refills of 0.3 make exactly three tokens",
		policy: ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.3, RefillInterval: sec},
		steps: []tbStep{
			// Empty: ⌈5 / 0.3⌉ = ⌈16.67⌉ = 17 refills to full.
			{at: 0, n: 5, want: ok(0, 17*sec)},
			// Nine refills: 2.7, 0.3 short of 3: one more refill, at 10s.
			// Full: ⌈2.3 / 0.3⌉ = 8 refills from 9s, at 17s.
			{at: 9_999_999 * us, n: 3, want: denied(2.7, 1*us, 7_000_001*us)},
			// Ten refills: exactly 3.0 (adding 0.3 ten times in float64
			// makes 2.9999999999999996). Full: ⌈2 / 0.3⌉ = 7 refills.
			{at: 10 * sec, n: 0, want: ok(3, 7*sec)},
			{at: 10 * sec, n: 3, want: ok(0, 17*sec)},
		},
	},
	{
		name:   "a cost is taken whole or not at all",
		policy: ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: sec},
		steps: []tbStep{
			{at: 0, n: 5, want: ok(5, 5*sec)},
			// 2 tokens short: two refills.
			{at: 0, n: 7, want: denied(5, 2*sec, 5*sec)},
			// The denied request took nothing.
			{at: 0, n: 0, want: ok(5, 5*sec)},
			{at: 0, n: 5, want: ok(0, 10*sec)},
			// One refill at 1s: 1 token; the second at 2s. Full: 9 refills
			// from 1s, at 10s.
			{at: 1500 * ms, n: 2, want: denied(1, 500*ms, 8500*ms)},
			{at: 2 * sec, n: 2, want: ok(0, 10*sec)},
			{at: 2 * sec, n: 10, want: denied(0, 10*sec, 10*sec)},
			// Full at 12s: the whole capacity in one request.
			{at: 12 * sec, n: 10, want: ok(0, 10*sec)},
		},
	},
	{
		name:   "a peek consumes nothing",
		policy: ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: sec},
		steps: []tbStep{
			// A new key is full: nothing to wait for.
			{at: 0, n: 0, want: ok(2, 0)},
			{at: 0, peek: true, want: ok(2, 0)},
			{at: 0, n: 1, want: ok(1, 1*sec)},
			{at: 0, n: 0, want: ok(1, 1*sec)},
			{at: 0, peek: true, want: ok(1, 1*sec)},
			{at: 0, n: 1, want: ok(0, 2*sec)},
			// A peek answers for a request of cost 1: the token of the
			// refill at 1s; full at 2s.
			{at: 250 * ms, n: 0, want: denied(0, 750*ms, 1750*ms)},
			{at: 250 * ms, peek: true, want: denied(0, 750*ms, 1750*ms)},
			// Refill at 1s: the peeks took nothing of it. Then empty from
			// 1s: full at 3s.
			{at: 1 * sec, n: 1, want: ok(0, 2*sec)},
		},
	},
	{
		name:   "Reset refills the bucket and restarts its phase",
		policy: ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: sec},
		steps: []tbStep{
			{at: 0, n: 3, want: ok(0, 3*sec)},
			{at: 0, n: 1, want: denied(0, 1*sec, 3*sec)},
			{at: 500 * ms, reset: true},
			{at: 500 * ms, n: 0, want: ok(3, 0)},
			// The phase starts again at 0.5s: refills at 1.5s, 2.5s, ...
			{at: 500 * ms, n: 1, want: ok(2, 1*sec)},
			// No refill at 1s, which the old phase would have brought.
			{at: 1_499_999 * us, n: 3, want: denied(2, 1*us, 1*us)},
			// Refill at 1.5s: full, and the phase restarts there.
			{at: 1500 * ms, n: 3, want: ok(0, 3*sec)},
		},
	},
	{
		name:   "never more than Capacity",
		policy: ratekeeper.TokenBucket{Capacity: 3, RefillRate: 2, RefillInterval: sec},
		steps: []tbStep{
			// ⌈3 / 2⌉ = 2 refills to full.
			{at: 0, n: 3, want: ok(0, 2*sec)},
			// One refill: 2 tokens; the next one fills it.
			{at: 1 * sec, n: 0, want: ok(2, 1*sec)},
			// Two refills would make 4.
			{at: 2 * sec, n: 0, want: ok(3, 0)},
			{at: time.Hour, n: 0, want: ok(3, 0)},
			{at: time.Hour, n: 3, want: ok(0, 2*sec)},
			{at: time.Hour, n: 1, want: denied(0, 1*sec, 2*sec)},
		},
	},
	{
		name:   "a full bucket restarts its phase like a new key",
		policy: ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: sec},
		steps: []tbStep{
			{at: 0, n: 1, want: ok(1, 1*sec)},
			// Full again since the refill at 1s. The phase restarts at
			// 1.3s, as for the new key: the token comes back at 2.3s,
			// not 2s.
			{at: 1300 * ms, n: 1, want: ok(1, 1*sec)},
			{at: 1300 * ms, key: "new", n: 1, want: ok(1, 1*sec)},
			{at: 2_299_999 * us, n: 2, want: denied(1, 1*us, 1*us)},
			{at: 2_299_999 * us, key: "new", n: 2, want: denied(1, 1*us, 1*us)},
			{at: 2300 * ms, n: 2, want: ok(0, 2*sec)},
			{at: 2300 * ms, key: "new", n: 2, want: ok(0, 2*sec)},
		},
	},
	{
		name:   "the largest bucket counts exactly",
		policy: ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: 3.7, RefillInterval: us},
		steps: []tbStep{
			// ⌈10^9 / 3.7⌉ = ⌈270,270,270.3⌉ = 270,270,271 refills to full.
			{at: 0, n: ratekeeper.MaxLimit, want: ok(0, 270_270_271*us)},
			// 270,270,270 refills of 3.7 make 999,999,999 exactly: one
			// token short, which the next refill brings, and fills.
			{at: 270_270_270 * us, n: ratekeeper.MaxLimit, want: denied(999_999_999, 1*us, 1*us)},
			{at: 270_270_270 * us, peek: true, want: ok(999_999_999, 1*us)},
			{at: 270_270_271 * us, n: ratekeeper.MaxLimit, want: ok(0, 270_270_271*us)},
		},
	},
	{
		name:   "exact times with a fractional rate and an odd interval",
		policy: ratekeeper.TokenBucket{Capacity: 4, RefillRate: 1.5, RefillInterval: 300 * ms},
		steps: []tbStep{
			// ⌈4 / 1.5⌉ = 3 refills to full: 900ms.
			{at: 0, n: 4, want: ok(0, 900*ms)},
			// ⌈2 / 1.5⌉ = 2 refills: 600ms - 100ms.
			{at: 100 * ms, n: 2, want: denied(0, 500*ms, 800*ms)},
			// One refill at 300ms: 1.5, the second at 600ms. Full:
			// ⌈2.5 / 1.5⌉ = 2 refills from 300ms, at 900ms.
			{at: 599_999 * us, n: 2, want: denied(1.5, 1*us, 300_001*us)},
			// Two refills: 3, 1 left. Full: ⌈3 / 1.5⌉ = 2 refills from
			// 600ms.
			{at: 600 * ms, n: 2, want: ok(1, 600*ms)},
			{at: 600 * ms, n: 2, want: denied(1, 300*ms, 600*ms)},
		},
	},
}

// burst returns the steps that empty a new bucket refilled by 1 token per
// interval, one request at a time at 0.
func burst(capacity int64, interval time.Duration) []tbStep {
	steps := make([]tbStep, capacity)
	for i := range steps {
		taken := int64(i + 1)
		steps[i] = tbStep{n: 1, want: ok(float64(capacity-taken), time.Duration(taken)*interval)}
	}
	return steps
}

func (ts *suite) testTokenBucketScenarios(t *testing.T) {
	ts.runScenarios(t, tbScenarios)
}

// testTokenBucketInvalidInput checks that input which can never succeed
// is an error, takes nothing, and that the longest key works.
func (ts *suite) testTokenBucketInvalidInput(t *testing.T) {
	policy := ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: sec}
	tooLong := strings.Repeat("k", ratekeeper.MaxKeyLen+1)
	longest := strings.Repeat("k", ratekeeper.MaxKeyLen)
	tests := []struct {
		name   string
		key    string
		n      int64
		is     []error
		isNot  []error
		resets bool // Reset(key) fails too
	}{
		{name: "cost above capacity", key: "k", n: 11, is: []error{ratekeeper.ErrCostTooHigh, ratekeeper.ErrInvalidCost}},
		{name: "negative cost", key: "k", n: -1, is: []error{ratekeeper.ErrInvalidCost}, isNot: []error{ratekeeper.ErrCostTooHigh}},
		{name: "empty key", key: "", n: 1, is: []error{ratekeeper.ErrInvalidKey}, resets: true},
		{name: "peek with an empty key", key: "", n: 0, is: []error{ratekeeper.ErrInvalidKey}},
		{name: "key too long", key: tooLong, n: 1, is: []error{ratekeeper.ErrInvalidKey}, resets: true},
	}
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, policy)
		forget(t, lim, "k", longest)
		for _, tc := range tests {
			res, err := lim.AllowN(ctx, tc.key, tc.n)
			if testutil.DiffResult(res, ratekeeper.Result{}) != "" {
				t.Errorf("%s: Result %+v, want the zero Result", tc.name, res)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("%s: error %v, want one matching %v", tc.name, err, target)
				}
			}
			for _, target := range tc.isNot {
				if errors.Is(err, target) {
					t.Errorf("%s: error %v matches %v", tc.name, err, target)
				}
			}
			if tc.resets {
				if err := lim.Reset(ctx, tc.key); !errors.Is(err, ratekeeper.ErrInvalidKey) {
					t.Errorf("%s: Reset: %v, want an error matching %v", tc.name, err, ratekeeper.ErrInvalidKey)
				}
			}
		}
		// Nothing was taken.
		if res, err := lim.Peek(ctx, "k"); err != nil || testutil.DiffResult(res, ratekeeper.Result{Policy: lim.Name(), Allowed: true, Limit: 10, Remaining: 10}) != "" {
			t.Errorf("Peek after the errors: %+v, %v; want a full bucket", res, err)
		}

		steps := []struct {
			n    int64
			want ratekeeper.Result
		}{
			{1, ok(9, 1*sec)},
			{1, ok(8, 2*sec)},
			{0, ok(8, 2*sec)},
		}
		for _, st := range steps {
			st.want.Limit, st.want.Policy = 10, lim.Name()
			if res, err := lim.AllowN(ctx, longest, st.n); err != nil || testutil.DiffResult(res, st.want) != "" {
				t.Fatalf("AllowN(key of %d bytes, %d): %+v, %v; want %+v", len(longest), st.n, res, err, st.want)
			}
		}
		if err := lim.Reset(ctx, longest); err != nil {
			t.Fatalf("Reset(key of %d bytes): %v", len(longest), err)
		}
		if res, err := lim.Peek(ctx, longest); err != nil || res.Remaining != 10 {
			t.Fatalf("Peek after Reset(key of %d bytes): %+v, %v; want a full bucket", len(longest), res, err)
		}
	})
}
