package conformance

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

// start is where every controlled clock begins: fixed, so that failures
// reproduce, and a realistic 16-digit count of microseconds, so that any
// loss of precision in a script shows.
var start = time.Unix(1_900_000_000, 0)

// newClock returns a controlled clock at start.
func newClock() *testutil.Clock { return testutil.NewClock(start) }

// Fixed seeds keep failures reproducible.
var seeds = []uint64{1, 2, 3}

// A policyCase is a policy the tests of many keys run.
type policyCase struct {
	name   string
	policy ratekeeper.Policy
}

// policies are one of each algorithm, with small limits, an aligned
// window and two Alls among them; drivertest runs many more on every
// store.
var policies = []policyCase{
	{"tb5_0.1per100ms", ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.1, RefillInterval: 100 * ms}},
	{"gcra3per1s_b5", ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 5}},
	{"fw5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * ms}},
	{"fwa5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * ms, Aligned: true}},
	{"swl5per1s", ratekeeper.SlidingWindowLog{Limit: 5, Window: sec}},
	{"swc7per700ms", ratekeeper.SlidingWindowCounter{Limit: 7, Window: 700 * ms}},
	{"lb5_0.7ps", ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 0.7}},
	{"all_gcra3per1s_b5_fw8per3s", ratekeeper.All(
		ratekeeper.GCRA{Rate: 3, Period: sec, Burst: 5},
		ratekeeper.FixedWindow{Limit: 8, Window: 3 * sec})},
	{"all_tb3_fw5per2s", ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: 200 * ms}),
		ratekeeper.FixedWindow{Limit: 5, Window: 2 * sec})},
}

// newLimiter is ratekeeper.New, which must succeed.
var newLimiter = testutil.NewLimiter

// forget resets keys when t ends.
var forget = testutil.Forget

func ok(remaining float64, resetAfter time.Duration) ratekeeper.Result {
	return ratekeeper.Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
}

func denied(remaining float64, retryAfter, resetAfter time.Duration) ratekeeper.Result {
	return ratekeeper.Result{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// mustSpec is p's ValidSpec, as a Limiter gives it to its store.
func mustSpec(t testing.TB, p ratekeeper.Policy) *driver.ValidSpec {
	t.Helper()
	spec, err := testutil.SpecOf(p)
	if err != nil {
		t.Fatalf("%+v: %v", p, err)
	}
	return spec
}
