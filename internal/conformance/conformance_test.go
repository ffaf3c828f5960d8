package conformance

import (
	"context"
	"fmt"
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
	client := redistest.Client(t)
	client.AddHook(persistHook{client})
	return redisstore.New(client, redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithClock(now))
}

// newRedisClusterStore skips t when there is no test Redis Cluster.
func newRedisClusterStore(t *testing.T, now func() time.Time) ratekeeper.Store {
	client := redistest.ClusterClient(t)
	client.AddHook(persistHook{client})
	return redisstore.New(client, redisstore.WithKeyPrefix(testPrefix(t)), redisstore.WithClock(now))
}

// testPrefix is t's key prefix: unique to this run of t, or, in a child
// process that drivertest starts, the one its siblings share.
func testPrefix(t *testing.T) string {
	if shared := os.Getenv(drivertest.SharedEnv); shared != "" {
		return "test:shared:" + shared + ":"
	}
	return redistest.Prefix(t)
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

// scriptKeys returns the keys of an EVAL, EVALSHA or FCALL command: its args are
// the command, the script, the number of keys, and the keys.
func scriptKeys(cmd redis.Cmder) []string {
	if name := cmd.Name(); name != "eval" && name != "evalsha" && name != "fcall" {
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
			f(t, clock, sf.new(t, clock.Now))
		})
	}
}
