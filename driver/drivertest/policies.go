package drivertest

import (
	"math/rand/v2"
	"time"
	_ "time/tzdata" // the calendar cases' zones, on a system without them

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// start is where every controlled clock begins: fixed, so that failures
// reproduce, and a realistic 16-digit count of microseconds, so that any
// loss of precision in a script shows.
var start = time.Unix(1_900_000_000, 0)

// newClock returns a controlled clock at start.
func newClock() *testutil.Clock { return testutil.NewClock(start) }

// A policyCase is a policy that the randomized tests run.
// A new algorithm joins them by adding its policies here.
type policyCase struct {
	name   string
	policy ratekeeper.Policy
	// quantum is the policy's own time step, such as a token bucket's
	// RefillInterval: random time steps cluster around its multiples,
	// where off-by-one errors hide.
	quantum time.Duration
}

var policies = []policyCase{
	// Fractional rates whose float64 sums are not exact.
	{"tb5_0.1per100ms", ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.1, RefillInterval: 100 * time.Millisecond}, 100 * time.Millisecond},
	{"tb7_0.3per1m", ratekeeper.TokenBucket{Capacity: 7, RefillRate: 0.3, RefillInterval: time.Minute}, time.Minute},
	{"tb3_0.333333per10ms", ratekeeper.TokenBucket{Capacity: 3, RefillRate: 0.333333, RefillInterval: 10 * time.Millisecond}, 10 * time.Millisecond},
	// The smallest bucket, which any refill more than fills.
	{"tb1_2.5per100ms", ratekeeper.TokenBucket{Capacity: 1, RefillRate: 2.5, RefillInterval: 100 * time.Millisecond}, 100 * time.Millisecond},
	// Token counts of 10^12, refilled every microsecond.
	{"tb1e6_1.5per1us", ratekeeper.TokenBucket{Capacity: 1_000_000, RefillRate: 1.5, RefillInterval: time.Microsecond}, time.Microsecond},
	// Whole tokens, small and large buckets.
	{"tb4_1per250ms", ratekeeper.TokenBucket{Capacity: 4, RefillRate: 1, RefillInterval: 250 * time.Millisecond}, 250 * time.Millisecond},
	{"tb250000_3000per1ms", ratekeeper.TokenBucket{Capacity: 250_000, RefillRate: 3000, RefillInterval: time.Millisecond}, time.Millisecond},
	// An emission interval of 1s/3, rounded up to 333,334µs.
	{"gcra3per1s_b5", ratekeeper.GCRA{Rate: 3, Period: time.Second, Burst: 5}, 333_334 * time.Microsecond},
	// One a day: MaxLimit emission intervals pass 2^63µs.
	{"gcra1per24h_b1", ratekeeper.GCRA{Rate: 1, Period: 24 * time.Hour, Burst: 1}, 24 * time.Hour},
	// A window opens at a request: steps of a Window, ±1µs, from one
	// meet its end.
	{"fw5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * time.Millisecond}, 1500 * time.Millisecond},
	// Windows aligned to the epoch: the clock's start lies 1s into one of
	// 1.5s.
	{"fwa5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * time.Millisecond, Aligned: true}, 500 * time.Millisecond},
	// Calendar periods: days in Berlin (23 and 25 hours across its offset
	// changes), months on Lord Howe Island, whose offset moves by 30
	// minutes.
	{"fwcd5Berlin", ratekeeper.FixedWindow{Limit: 5, Calendar: ratekeeper.Day, Location: mustZone("Europe/Berlin")}, time.Hour},
	{"fwcm5LordHowe", ratekeeper.FixedWindow{Limit: 5, Calendar: ratekeeper.Month, Location: mustZone("Australia/Lord_Howe")}, 24 * time.Hour},
	{"swl5per1s", ratekeeper.SlidingWindowLog{Limit: 5, Window: time.Second}, 200 * time.Millisecond},
	// Up to 300 entries of mixed costs, where a RetryAfter searches them.
	{"swl300per1s", ratekeeper.SlidingWindowLog{Limit: 300, Window: time.Second}, 3 * time.Millisecond},
	// Windows aligned to the epoch: 1.9·10^15µs is 200,000µs past a
	// multiple of 700,000µs, on the quantum's grid. Offsets weigh the
	// previous window's count by fractions of 700,000.
	{"swc7per700ms", ratekeeper.SlidingWindowCounter{Limit: 7, Window: 700 * time.Millisecond}, 100 * time.Millisecond},
	// One request drains in 1,428,571.43µs, held in ticks of 1/78,812,993µs.
	{"lb5_0.7ps", ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 0.7}, 1_428_572 * time.Microsecond},
	// One per hour, in ticks of 1/15,637µs; and 30 per µs, where one
	// request drains in a fraction of a microsecond.
	{"lb10_1per3600s", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 1.0 / 3600}, time.Hour},
	{"lb1000_3e7ps", ratekeeper.LeakyBucket{Capacity: 1000, LeakRate: 3e7}, time.Microsecond},
	// Several policies, decided at once: each binds in turn.
	{"all_gcra3per1s_b5_fw8per3s", ratekeeper.All(
		ratekeeper.GCRA{Rate: 3, Period: time.Second, Burst: 5},
		ratekeeper.FixedWindow{Limit: 8, Window: 3 * time.Second}), 333_334 * time.Microsecond},
	{"all_tb_swl_swc_lb", ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 4, RefillRate: 0.5, RefillInterval: 100 * time.Millisecond}),
		ratekeeper.Named("window", ratekeeper.SlidingWindowLog{Limit: 6, Window: time.Second}),
		ratekeeper.Named("smooth", ratekeeper.SlidingWindowCounter{Limit: 9, Window: 700 * time.Millisecond}),
		ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 3}), 100 * time.Millisecond},
	{"all_tb3_fw5per2s", ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: 200 * time.Millisecond}),
		ratekeeper.FixedWindow{Limit: 5, Window: 2 * time.Second}), 200 * time.Millisecond},
	// An aligned window and one opened by a request, side by side.
	{"all_fw4per1s_fwa6per2s", ratekeeper.All(
		ratekeeper.Named("opened", ratekeeper.FixedWindow{Limit: 4, Window: time.Second}),
		ratekeeper.Named("aligned", ratekeeper.FixedWindow{Limit: 6, Window: 2 * time.Second, Aligned: true})), 250 * time.Millisecond},
}

// stepGen draws the random requests of one run: how far the clock moves
// before each request, and its cost.
type stepGen struct {
	r       *rand.Rand
	quantum time.Duration
	window  time.Duration // time to fill up from empty
	maxCost int64
}

func newStepGen(seed uint64, pc policyCase, spec *driver.ValidSpec) *stepGen {
	var window time.Duration
	for _, p := range spec.Policies() { // an All fills up with its slowest policy
		window = max(window, p.Window())
	}
	return &stepGen{
		r:       rand.New(rand.NewPCG(seed, 0)),
		quantum: pc.quantum,
		window:  window,
		maxCost: spec.MaxCost(),
	}
}

// next returns how far to advance the clock, and the cost of the request
// to make then (0 peeks).
func (g *stepGen) next() (time.Duration, int64) { return g.advance(), g.cost() }

func (g *stepGen) advance() time.Duration {
	k := time.Duration(1 + g.r.IntN(3))
	switch p := g.r.IntN(100); {
	case p < 10:
		return 0
	case p < 25:
		return time.Duration(1+g.r.IntN(10)) * time.Microsecond
	case p < 40:
		return g.fraction(g.quantum)
	case p < 47:
		// Large buckets refill over many quanta.
		return g.fraction(g.window)
	case p < 62:
		return k * g.quantum
	case p < 76:
		return k*g.quantum - time.Microsecond
	case p < 90:
		return k*g.quantum + time.Microsecond
	case p < 97:
		// Just short of full, for a bucket emptied at the start of its phase.
		return g.window - time.Microsecond
	default:
		// Idle past full: where state must be as good as forgotten.
		return g.window + g.fraction(g.window)
	}
}

// fraction returns a random whole number of microseconds in [0, d].
func (g *stepGen) fraction(d time.Duration) time.Duration {
	return time.Duration(g.r.Int64N(int64(d/time.Microsecond)+1)) * time.Microsecond
}

func (g *stepGen) cost() int64 {
	switch p := g.r.IntN(100); {
	case p < 10:
		return 0
	case p < 50:
		return 1
	case p < 75:
		return 1 + g.r.Int64N(min(g.maxCost, 5))
	case p < 92:
		return g.r.Int64N(g.maxCost + 1)
	default:
		return g.maxCost
	}
}

// mustZone loads a time zone, from the tzdata embedded in the binary
// where the system has none.
func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}
