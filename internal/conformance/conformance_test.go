package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/results"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// start is where every controlled clock begins: fixed, so that failures
// reproduce, and a realistic 16-digit count of microseconds, so that any
// loss of precision in a script shows.
var start = time.Unix(1_900_000_000, 0)

// newClock returns a controlled clock at start.
func newClock() *testutil.Clock { return testutil.NewClock(start) }

// A storeFactory makes a fresh, empty store that reads its time from clock.
type storeFactory struct {
	name string
	new  func(t *testing.T, clock *testutil.Clock) ratekeeper.Store
}

// stores are the stores every scenario runs against.
var stores = []storeFactory{
	{"memstore", newMemstore},
	{"redis", newRedisstore},
	{"redis-cluster", newRedisClusterStore},
}

func newMemstore(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
	// No background sweep: freeing expired keys never changes a decision,
	// and tests that check it call Sweep themselves.
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithSweepInterval(0))
	t.Cleanup(func() { s.Close() })
	return s
}

// newRedisstore skips t when there is no test Redis.
func newRedisstore(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
	client := redistest.Client(t)
	client.AddHook(persistHook{client})
	return redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock.Now))
}

// newRedisClusterStore skips t when there is no test Redis Cluster.
func newRedisClusterStore(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
	client := redistest.ClusterClient(t)
	client.AddHook(persistHook{client})
	return redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock.Now))
}

// persistHook keeps the keys of scripts from expiring. Redis expires them
// on its own clock, a second after the time at which the controlled clock
// will find them full; a slow or stalled test run lags real time by more
// than that, and its keys would vanish before they are full, which the
// library never promises. So every script call goes out in one round trip
// with a PERSIST of its keys. The scripts then meet stale state where a
// key would have expired, and must decide exactly as for a missing key.
// On a cluster, a key and its PERSIST share a slot, hence a node.
type persistHook struct{ client redis.UniversalClient }

func (persistHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (persistHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h persistHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		keys := scriptKeys(cmd)
		if len(keys) == 0 {
			return next(ctx, cmd)
		}
		// A pipeline goes through ProcessPipelineHook, not back here.
		h.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Process(ctx, cmd)
			for _, k := range keys {
				p.Persist(ctx, k)
			}
			return nil
		})
		return cmd.Err()
	}
}

// scriptKeys returns the keys of an EVAL or EVALSHA command: its args are
// the command, the script, the number of keys, and the keys.
func scriptKeys(cmd redis.Cmder) []string {
	if name := cmd.Name(); name != "eval" && name != "evalsha" {
		return nil
	}
	args := cmd.Args()
	if len(args) < 3 {
		return nil
	}
	n, ok := args[2].(int)
	if !ok || len(args) < 3+n {
		return nil
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(args[3+i])
	}
	return keys
}

// redisKeyFixture is a limiter on a redisstore with a controlled clock and
// no persistHook, for tests that look at the Redis key of caller "k".
type redisKeyFixture struct {
	client *redis.Client
	clock  *testutil.Clock
	prefix string
	lim    *ratekeeper.Limiter
	key    string // the Redis key holding caller "k"
}

func newRedisKeyFixture(t *testing.T, p ratekeeper.Policy) redisKeyFixture {
	f := redisKeyFixture{client: redistest.Client(t), clock: newClock(), prefix: redistest.Prefix(t)}
	store := redisstore.New(f.client, redisstore.WithKeyPrefix(f.prefix), redisstore.WithClock(f.clock.Now))
	f.lim = newLimiter(t, store, p)
	forget(t, f.lim, "k")
	f.key = store.Key("k", f.lim.Spec())
	return f
}

// forEachStore runs f as one subtest per store, each with its own store
// and a clock at start.
func forEachStore(t *testing.T, f func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store)) {
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			clock := newClock()
			f(t, clock, sf.new(t, clock))
		})
	}
}

func newLimiter(t testing.TB, store ratekeeper.Store, p ratekeeper.Policy) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		t.Fatalf("ratekeeper.New(%+v): %v", p, err)
	}
	return lim
}

// forget resets keys when t ends, so that Redis keys with long expiries
// do not outlive the test.
func forget(t *testing.T, lim *ratekeeper.Limiter, keys ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, k := range keys {
			if err := lim.Reset(ctx, k); err != nil {
				t.Errorf("reset %q: %v", k, err)
			}
		}
	})
}

// A policyCase is a policy that the randomized tests run on every store.
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
	// A window opens at a request: steps of a Window, ±1µs, from one
	// meet its end.
	{"fw5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * time.Millisecond}, 1500 * time.Millisecond},
	// Windows aligned to the epoch: the clock's start lies 1s into one of
	// 1.5s.
	{"fwa5per1500ms", ratekeeper.FixedWindow{Limit: 5, Window: 1500 * time.Millisecond, Aligned: true}, 500 * time.Millisecond},
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

func mustSpec(t testing.TB, p ratekeeper.Policy) *driver.ValidSpec {
	t.Helper()
	spec, err := results.SpecOf(p)
	if err != nil {
		t.Fatalf("%+v: %v", p, err)
	}
	return spec
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
