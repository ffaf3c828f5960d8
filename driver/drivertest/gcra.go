package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// A scenario is a scripted scenario of any policy, written in the steps of
// tbScenarios; each expected Result takes its Limit from the policy.
type scenario struct {
	name   string
	policy ratekeeper.Policy
	steps  []tbStep
}

// runScenarios runs each scenario on a fresh store, then checks on its key
// that a cost above what the policy can ever admit is an error.
func (ts *suite) runScenarios(t *testing.T, scenarios []scenario) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				lim := newLimiter(t, store, sc.policy)
				runSteps(t, clock, lim, sc.steps)
				checkCostTooHigh(t, lim, "k")
			})
		})
	}
}

// runSteps makes the steps' requests through lim, advancing clock to the
// time of each, and fails t at the first Result that differs.
func runSteps(t *testing.T, clock *testutil.Clock, lim *ratekeeper.Limiter, steps []tbStep) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"k"}
	for _, st := range steps {
		if st.key != "" && !slices.Contains(keys, st.key) {
			keys = append(keys, st.key)
		}
	}
	forget(t, lim, keys...)
	var at time.Duration
	for i, st := range steps {
		if st.at < at {
			t.Fatalf("step %d goes back in time", i)
		}
		clock.Advance(st.at - at)
		at = st.at
		key := st.key
		if key == "" {
			key = "k"
		}
		if st.reset {
			if err := lim.Reset(ctx, key); err != nil {
				t.Fatalf("step %d: Reset(%q) at %v: %v", i, key, at, err)
			}
			continue
		}
		var got ratekeeper.Result
		var err error
		call := fmt.Sprintf("AllowN(%q, %d)", key, st.n)
		if st.peek {
			call = fmt.Sprintf("Peek(%q)", key)
			got, err = lim.Peek(ctx, key)
		} else {
			got, err = lim.AllowN(ctx, key, st.n)
		}
		if err != nil {
			t.Fatalf("step %d: %s at %v: %v", i, call, at, err)
		}
		want := st.want
		want.Limit, want.Policy = lim.Spec().Limit(), lim.Name()
		if testutil.DiffResult(got, want) != "" {
			t.Fatalf("step %d: %s at %v:\ngot  %+v\nwant %+v", i, call, at, got, want)
		}
	}
}

// checkCostTooHigh checks that a cost above the policy's largest is an
// error rather than a denial, and leaves key as it was.
func checkCostTooHigh(t *testing.T, lim *ratekeeper.Limiter, key string) {
	t.Helper()
	ctx := context.Background()
	before, err := lim.Peek(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	n := lim.Spec().MaxCost() + 1
	if res, err := lim.AllowN(ctx, key, n); !errors.Is(err, ratekeeper.ErrCostTooHigh) || testutil.DiffResult(res, ratekeeper.Result{}) != "" {
		t.Errorf("AllowN(%q, %d): %+v, %v; want the zero Result and an error matching %v", key, n, res, err, ratekeeper.ErrCostTooHigh)
	}
	if after, err := lim.Peek(ctx, key); err != nil || testutil.DiffResult(after, before) != "" {
		t.Errorf("Peek(%q) went from %+v to %+v (%v) on a cost too high", key, before, after, err)
	}
}

// third is the emission interval of 3 requests per second: 1s/3 rounded up
// to a whole microsecond, so that the rate is never exceeded.
const third = 333_334 * us

// The expected Results are worked out by hand in the comments, with
// tat the theoretical arrival time (at most now on a fresh key) and τ the
// tolerance Burst·third. A request of cost n passes when
// tat + n·third - now <= τ, and moves tat there; RetryAfter is the time
// until that holds, ResetAfter is tat - now, and Remaining is
// ⌊(τ - (tat - now)) / third⌋ whole requests.
var gcraScenarios = []scenario{
	{
		name:   "initial burst, then one request per emission interval",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 3},
		steps: []tbStep{
			{n: 1, want: ok(2, third)},
			{n: 1, want: ok(1, 2*third)},
			{n: 1, want: ok(0, 3*third)},
			// tat 3·third: the next request's share of the Period ends at
			// third from now.
			{n: 1, want: denied(0, third, 3*third)},
			{n: 0, want: denied(0, third, 3*third)},
			{at: third - us, n: 1, want: denied(0, 1*us, 2*third+1*us)},
			// No refill step to wait for: it passes the moment its share
			// has elapsed, and tat moves to 4·third.
			{at: third, n: 1, want: ok(0, 3*third)},
			{at: third, n: 1, want: denied(0, third, 3*third)},
		},
	},
	{
		name:   "the emission interval is rounded up, never exceeding the rate",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 1},
		steps: []tbStep{
			{n: 1, want: ok(0, third)},
			{at: third - us, n: 1, want: denied(0, 1*us, 1*us)},
			{at: third, n: 1, want: ok(0, third)},
			{at: 2 * third, n: 1, want: ok(0, third)},
			// A fourth request within the first second would make four:
			// tat is 3·third = 1,000,002µs, 2µs after 1s.
			{at: sec, n: 1, want: denied(0, 2*us, 2*us)},
			{at: 3 * third, n: 1, want: ok(0, third)},
		},
	},
	{
		name:   "Remaining counts whole requests; a cost is taken whole or not at all",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 3},
		steps: []tbStep{
			{n: 3, want: ok(0, 3*third)},
			// Room τ - (3·third - 500ms) = 500,000µs: one and a half
			// requests, so 1; tat is 500,002µs away.
			{at: 500 * ms, n: 0, want: ok(1, 500_002*us)},
			// Two need tat + 2·third - τ = 1,666,670 - 1,000,002µs:
			// 166,668µs from 500ms.
			{at: 500 * ms, n: 2, want: denied(1, 166_668*us, 500_002*us)},
			// The denied request moved nothing.
			{at: 500 * ms, peek: true, want: ok(1, 500_002*us)},
			// Room 666,667µs: still one request, for 1µs.
			{at: 666_667 * us, n: 2, want: denied(1, 1*us, 333_335*us)},
			// At 2·third, two shares have elapsed: tat moves to 5·third.
			{at: 2 * third, n: 2, want: ok(0, 3*third)},
		},
	},
	{
		name:   "a peek consumes nothing and answers for cost 1",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 3},
		steps: []tbStep{
			// A new key: tat is now, room for the whole burst.
			{peek: true, want: ok(3, 0)},
			{n: 0, want: ok(3, 0)},
			{n: 2, want: ok(1, 2*third)},
			{n: 0, want: ok(1, 2*third)},
			{peek: true, want: ok(1, 2*third)},
			{n: 1, want: ok(0, 3*third)},
			// One request needs 4·third - τ = third: 233,334µs from 100ms;
			// room τ - (3·third - 100ms) = 100,000µs, under one request.
			{at: 100 * ms, n: 0, want: denied(0, 233_334*us, 900_002*us)},
			{at: 100 * ms, peek: true, want: denied(0, 233_334*us, 900_002*us)},
			// The peeks moved nothing: the request passes at third.
			{at: third, n: 1, want: ok(0, 3*third)},
		},
	},
	{
		name:   "Reset forgets the key",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 3},
		steps: []tbStep{
			{n: 3, want: ok(0, 3*third)},
			{n: 1, want: denied(0, third, 3*third)},
			{at: 100 * ms, reset: true},
			{at: 100 * ms, n: 0, want: ok(3, 0)},
			{at: 100 * ms, n: 1, want: ok(2, third)},
		},
	},
	{
		name:   "the key is fresh again exactly at ResetAfter",
		policy: ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 3},
		steps: []tbStep{
			{n: 2, want: ok(1, 2*third)},
			// 1µs before tat: room 3·third - 1µs, two whole requests;
			// three pass 1µs later.
			{at: 2*third - us, n: 3, want: denied(2, 1*us, 1*us)},
			{at: 2*third - us, key: "new", n: 0, want: ok(3, 0)},
			{at: 2 * third, n: 3, want: ok(0, 3*third)},
			{at: 2 * third, key: "new", n: 3, want: ok(0, 3*third)},
		},
	},
}

func (ts *suite) testGCRAScenarios(t *testing.T) { ts.runScenarios(t, gcraScenarios) }
