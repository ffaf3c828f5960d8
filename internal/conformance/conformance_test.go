package conformance

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver/drivertest"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// A storeFactory makes a fresh, empty store that reads its time from clock.
type storeFactory struct {
	name string
	new  func(t *testing.T, now func() time.Time) ratekeeper.Store
}

// stores are the stores every scenario runs against.
var stores = []storeFactory{
	{"memstore", newMemstore},
	{"redis", newRedisstore},
	{"redis-cluster", newRedisClusterStore},
}

func newMemstore(t *testing.T, now func() time.Time) ratekeeper.Store {
	// No background sweep: freeing expired keys never changes a decision,
	// and tests that check it call Sweep themselves.
	s := memstore.New(memstore.WithClock(now), memstore.WithSweepInterval(0))
	t.Cleanup(func() { s.Close() })
	return s
}

// newRedisstore skips t when there is no test Redis.
func newRedisstore(t *testing.T, now func() time.Time) ratekeeper.Store {
	return redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithClock(now), redisstore.WithClockSkew(keySkew))
}

// newRedisClusterStore skips t when there is no test Redis Cluster.
func newRedisClusterStore(t *testing.T, now func() time.Time) ratekeeper.Store {
	return redisstore.New(redistest.ClusterClient(t), redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithClock(now), redisstore.WithClockSkew(keySkew))
}

// testPrefix is t's key prefix: unique to this run of t, or, in a child
// process that drivertest starts, the one its siblings share.
func testPrefix(t *testing.T) string {
	if shared := os.Getenv(drivertest.SharedEnv); shared != "" {
		return "test:shared:" + shared + ":"
	}
	return redistest.Prefix(t)
}

// keySkew is how much longer than their state needs the Redis stores keep
// keys (redisstore.WithClockSkew): Redis expires them on its own clock,
// and a slow or stalled run lags real time on the controlled clock, so
// its keys would otherwise vanish before they are full, which the library
// never promises. Stale state then stays where a key would have expired,
// and the scripts must decide exactly as for a missing key.
const keySkew = time.Hour

// redisKeyFixture is a limiter on a redisstore with a controlled clock and
// the default skew, for tests that look at the Redis key of caller "k".
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
			f(t, clock, sf.new(t, clock.Now))
		})
	}
}
