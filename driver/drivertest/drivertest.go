// Package drivertest checks that a ratekeeper Store decides as the Go
// models do, in the manner of testing/fstest: a store's own tests call
// Run with a function that opens a fresh store on a given clock.
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
//			return mystore.New(mystore.WithClock(now))
//		})
//	}
//
// Run checks, for every built-in algorithm and for All:
//
//   - scripted scenarios, whose exact Results (Remaining, RetryAfter and
//     ResetAfter to the microsecond) are worked out by hand;
//   - long random sequences of costs and time steps, the clock now and
//     then stepping back, against the Go models (driver.ValidSpec.Decide),
//     each of which must both allow and deny, so that none passes
//     vacuously;
//   - that forgetting a key once its ResetAfter has passed, as expiry
//     does, never changes a later decision;
//   - that a clock that steps back admits no more than the policy's bound,
//     and that a time outside the supported range is an error;
//   - that input which can never succeed is an error, and takes nothing;
//   - that Result.Remaining is the most that would pass now;
//   - that a decision which consumes nothing forgets nothing, even at or
//     after a key's expiry, so that a clock that then steps back finds
//     what was taken before it;
//   - Charge and Refund, if the store is a driver.Charger: a debt, its
//     repayment and its bound, refunds never beyond full, and concurrent
//     charges that all count, at the edges too (costs of MaxLimit over
//     intervals of a day, at a window's boundary, under All). The random
//     sequences draw charges and refunds among their requests, up to
//     MaxLimit, and every Result must keep the documented bounds;
//   - in-flight slots, if the store is a driver.Slots: never more than
//     the limit held at once by goroutines over several Semaphores, a
//     lease that ends exactly TTL after its last renewal, releases that
//     give back their own slot once, and (for a store whose state child
//     processes share: see SharedEnv) a holder in a child process that,
//     killed, gives its slot back within a TTL, and not before its lease
//     ends.
//
// The random sequences run three seeds each, and one under go test
// -short.
//
// Every store Run opens reads its time only from now, which Run moves;
// its keys may persist between the stores of one Run (Run resets the keys
// it uses), but a store must not share state with another one opened for
// another subtest running at the same time: open a fresh store, with its
// own keys, each time.
package drivertest

import (
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// Run runs the conformance suite against the stores that open returns, as
// subtests of t. open is called once per subtest, with that subtest, and
// returns a fresh store that reads its time from now: a clock Run moves
// as its scenarios require, which begins at a fixed time in 2030. open may
// skip the subtest (t.Skip) when its store is unavailable.
//
// A store whose keys expire on its backend's own clock, as Redis's do,
// rather than on now, needs ExpiresOnBackendClock.
func Run(t *testing.T, open func(t *testing.T, now func() time.Time) ratekeeper.Store, opts ...Option) {
	ts := &suite{open: open}
	for _, o := range opts {
		o(ts)
	}
	if ts.margin > 0 {
		ts.open = func(t *testing.T, now func() time.Time) ratekeeper.Store {
			return open(t, expiryGuard(t.Errorf, now, ts.margin))
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(ts, t) })
	}
}

// suite is a run of the suite over the stores of one open function.
type suite struct {
	open   func(t *testing.T, now func() time.Time) ratekeeper.Store
	margin time.Duration // ExpiresOnBackendClock's; 0 without it
}

// An Option changes how Run checks a store.
type Option func(*suite)

// ExpiresOnBackendClock declares a store whose keys expire on its
// backend's own clock (as Redis's do), which Run does not move, while its
// decisions read now; the store keeps every key margin longer than its
// state needs (redisstore's WithClockSkew). Run's clock jumps ahead and
// steps back as its scenarios require, but a key written at one call
// cannot then expire on the backend before its time on now unless more
// than margin of real time passes before a later call. With this option,
// a subtest fails once more than margin of real time has passed since
// its store first read now, rather than lose state without a word; with
// a margin of an hour, none does. Keys also outlive their state by
// margin, so the store meets stale state where a key would have expired,
// and must decide exactly as for a missing key.
func ExpiresOnBackendClock(margin time.Duration) Option {
	return func(ts *suite) { ts.margin = margin }
}

// expiryGuard is now, reporting to errorf, once, when more than margin of
// real time has passed since its first read.
func expiryGuard(errorf func(format string, args ...any), now func() time.Time, margin time.Duration) func() time.Time {
	var mu sync.Mutex
	var first time.Time
	failed := false
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		} else if age := time.Since(first); age > margin && !failed {
			failed = true
			errorf("drivertest: %v of real time since the store's first call, past the margin of %v by which its keys outlive their state on the backend's clock (ExpiresOnBackendClock): a key may have expired early", age, margin)
		}
		return now()
	}
}

// cases are the suite's subtests.
var cases = []struct {
	name string
	run  func(*suite, *testing.T)
}{
	{"TokenBucketScenarios", (*suite).testTokenBucketScenarios},
	{"GCRAScenarios", (*suite).testGCRAScenarios},
	{"FixedWindowScenarios", (*suite).testFixedWindowScenarios},
	{"AlignedFixedWindowScenarios", (*suite).testAlignedFixedWindowScenarios},
	{"AlignedFixedWindowOwnState", (*suite).testAlignedFixedWindowOwnState},
	{"SlidingWindowLogScenarios", (*suite).testSlidingWindowLogScenarios},
	{"SlidingWindowCounterScenarios", (*suite).testSlidingWindowCounterScenarios},
	{"SlidingWindowCounterBoundaryBurst", (*suite).testSlidingWindowCounterBoundaryBurst},
	{"LeakyBucketScenarios", (*suite).testLeakyBucketScenarios},
	{"LeakyBucketSlowRates", (*suite).testLeakyBucketSlowRates},
	{"AllScenario", (*suite).testAllScenario},
	{"AllSharesStateByName", (*suite).testAllSharesStateByName},
	{"InvalidInput", (*suite).testTokenBucketInvalidInput},
	{"StoreChecksInput", (*suite).testStoreChecksInput},
	{"SlidingWindowLogClockStepBack", (*suite).testSlidingWindowLogClockStepBack},
	{"ClockStepBack", (*suite).testClockStepBack},
	{"TimeOutOfRange", (*suite).testTimeOutOfRange},
	{"RemainingIsWhatPasses", (*suite).testRemainingIsWhatPasses},
	{"ExpiryNeverChangesDecisions", (*suite).testExpiryNeverChangesDecisions},
	{"RandomEquivalence", (*suite).testRandomEquivalence},
	{"ChargeIntoDebt", (*suite).testChargeIntoDebt},
	{"FixedWindowForgetsDebt", (*suite).testFixedWindowForgetsDebt},
	{"SlidingLogRefundsNewest", (*suite).testSlidingLogRefundsNewest},
	{"ConcurrentCharges", (*suite).testConcurrentCharges},
	{"DebtBounds", (*suite).testDebtBounds},
	{"RefundOfMaxLimit", (*suite).testRefundOfMaxLimit},
	{"SlidingCounterDebtBound", (*suite).testSlidingCounterDebtBound},
	{"AllChargeRetryAfter", (*suite).testAllChargeRetryAfter},
	{"PeekForgetsNothing", (*suite).testPeekForgetsNothing},
	{"LeaseEquivalence", (*suite).testLeaseEquivalence},
	{"LeaseRetryAfter", (*suite).testLeaseRetryAfter},
	{"SlotsNeverMoreThanLimit", (*suite).testSlotsNeverMoreThanLimit},
	{"SlotsExpire", (*suite).testSlotsExpire},
	{"SlotsReleaseIdempotent", (*suite).testSlotsReleaseIdempotent},
	{"SlotsInput", (*suite).testSlotsInput},
	{"SlotsKilledHolder", (*suite).testSlotsKilledHolder},
}

// forEachStore runs f on a fresh store, and a clock at start that it
// reads.
func (ts *suite) forEachStore(t *testing.T, f func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store)) {
	clock := newClock()
	f(t, clock, ts.open(t, clock.Now))
}

// forEachCharger is forEachStore for the tests of Charge and Refund, an
// optional interface: it skips t when the store is no driver.Charger.
func (ts *suite) forEachCharger(t *testing.T, f func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store)) {
	clock := newClock()
	store := ts.open(t, clock.Now)
	if _, ok := store.(driver.Charger); !ok {
		t.Skip("the store is no driver.Charger: it takes no charges or refunds")
	}
	f(t, clock, store)
}

// newLimiter is ratekeeper.New, which must succeed.
var newLimiter = testutil.NewLimiter

// forget resets keys when t ends.
var forget = testutil.Forget
