package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulule "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// policy is the limit every library applies to each caller key: Rate
// requests per Period with bursts of Burst, expressed in each library's
// own terms.
type policy struct {
	Rate   int64
	Period time.Duration
	Burst  int64
}

// String names the policy as the reports do: "100/s burst 100".
func (p policy) String() string {
	unit := p.Period.String()
	switch p.Period {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "h"
	}
	return fmt.Sprintf("%d/%s burst %d", p.Rate, unit, p.Burst)
}

// interval is the time between two requests at the policy's rate: the
// token bucket's (and the seed's) refill interval, GCRA's emission
// interval.
func (p policy) interval() time.Duration { return p.Period / time.Duration(p.Rate) }

// tokenBucket is the policy as ratekeeper's token bucket: Burst tokens,
// one more every interval.
func (p policy) tokenBucket() ratekeeper.TokenBucket {
	if p.interval() < time.Microsecond {
		// Faster than one a microsecond: several tokens each.
		return ratekeeper.TokenBucket{Capacity: p.Burst, RefillRate: float64(p.Rate) * float64(time.Microsecond) / float64(p.Period),
			RefillInterval: time.Microsecond}
	}
	return ratekeeper.TokenBucket{Capacity: p.Burst, RefillRate: 1, RefillInterval: p.interval()}
}

// gcra is the policy as ratekeeper's GCRA.
func (p policy) gcra() ratekeeper.GCRA {
	return ratekeeper.GCRA{Rate: p.Rate, Period: p.Period, Burst: p.Burst}
}

// decideFunc makes one decision for key: whether the request may pass.
type decideFunc func(ctx context.Context, key string) (allowed bool, err error)

// lib is one rate limiter under test.
type lib struct {
	name  string
	about string
	// open connects to Redis at addr and returns the decision function
	// for the policy, and a function that releases what open acquired.
	open func(addr string, p policy) (decideFunc, func(), error)
	// cmds are the commands the library sends to Redis itself, whose
	// INFO commandstats usec add up to its server time. Commands that
	// scripts call are left out: a script's usec includes them.
	cmds []string
	// nested names, for a command in cmds, the script that also calls it
	// once per run, so that those calls can be taken out of its total.
	nested map[string]string
	// oneCall: each decision is one command, so the decisions Redis ran
	// can be told from the totals.
	oneCall bool
	// decisionCmd is a command the library's scripts call exactly once
	// per decision Redis runs, for a library that decides several in one
	// call (ratekeeper's batches): its count in commandstats is the
	// decisions Redis ran.
	decisionCmd string
}

var scriptCmds = []string{"fcall", "evalsha", "eval"}

// libs are all the libraries loadgen knows, in the order it reports them.
var libs = []lib{
	{
		name:  "ratekeeper",
		about: "redisstore.New(client), the default, over a go-redis client with go-redis's default options: token bucket script, auto-pipelining on; a lone call whose context can end is handed to a goroutine of its own, so that it ends with its context",
		open:  openRatekeeper(tokenBucketOf),
		cmds:  scriptCmds,
		// Its token bucket and GCRA GET their key once per decision.
		decisionCmd: "get",
	},
	{
		name:        "ratekeeper-gcra",
		about:       "redisstore.New(client) with ratekeeper.GCRA, its one-integer policy, over the same client",
		open:        openRatekeeper(gcraOf),
		cmds:        scriptCmds,
		decisionCmd: "get",
	},
	{
		name:  "ratekeeper+leases",
		about: "ratekeeper.WithLeases(Leases{TTL: 50ms}) on 8 Limiters, each over its own client, the goroutines spread over them: a hot key decided in process from leases, the token bucket",
		open:  openLeasing(tokenBucketOf),
		cmds:  scriptCmds,
		// Its token bucket scripts GET their key once per call.
		decisionCmd: "get",
	},
	{
		name:        "ratekeeper-gcra+leases",
		about:       "ratekeeper+leases with ratekeeper.GCRA",
		open:        openLeasing(gcraOf),
		cmds:        scriptCmds,
		decisionCmd: "get",
	},
	{
		name:        "ratekeeper-cte",
		about:       "ratekeeper over a go-redis client with ContextTimeoutEnabled, which bounds each call by its context's deadline: no hand-off for a context with a deadline",
		open:        openRatekeeperCTE(tokenBucketOf),
		cmds:        scriptCmds,
		decisionCmd: "get",
	},
	{
		name:        "ratekeeper-gcra-cte",
		about:       "ratekeeper-gcra over a go-redis client with ContextTimeoutEnabled",
		open:        openRatekeeperCTE(gcraOf),
		cmds:        scriptCmds,
		decisionCmd: "get",
	},
	{
		name:  "ratekeeper-nopipe",
		about: "redisstore.WithAutoPipelining(false): one pooled connection per decision",
		open:  openRatekeeper(tokenBucketOf, redisstore.WithAutoPipelining(false)),
		cmds:  scriptCmds,
		// Its token bucket and GCRA GET their key once per decision.
		decisionCmd: "get",
	},
	{
		name:  "ratekeeper+denycache",
		about: "redisstore.WithDenyCache(100000): denials answered in process until they run out",
		open:  openRatekeeper(tokenBucketOf, redisstore.WithDenyCache(100_000)),
		cmds:  scriptCmds,
		// Its token bucket and GCRA GET their key once per decision.
		decisionCmd: "get",
	},
	{
		name:  "ratekeeper-rueidis",
		about: "ratekeeper's token bucket script and ARGV sent by rueidis, whose auto-pipelining is on by default",
		open:  openRueidis,
		cmds:  scriptCmds,
		// Its token bucket and GCRA GET their key once per decision.
		decisionCmd: "get",
	},
	{
		name:    "redis_rate",
		about:   "github.com/go-redis/redis_rate/v10: GCRA script",
		open:    openRedisRate(newClient),
		cmds:    scriptCmds,
		oneCall: true,
	},
	{
		name:    "redis_rate-cte",
		about:   "redis_rate over a go-redis client with ContextTimeoutEnabled",
		open:    openRedisRate(newClientCTE),
		cmds:    scriptCmds,
		oneCall: true,
	},
	{
		name:    "ulule",
		about:   "github.com/ulule/limiter/v3 with drivers/store/redis: fixed window, INCRBY script",
		open:    openUlule,
		cmds:    scriptCmds,
		oneCall: true,
	},
	{
		name:  "throttled",
		about: "github.com/throttled/throttled/v2 with store/goredisstore.v9: GCRA in Go, TIME+GET pipeline then SETNX+EXPIRE or a compare-and-swap EVAL",
		open:  openThrottled,
		cmds:  []string{"time", "get", "setnx", "expire", "eval"},
		// The compare-and-swap script GETs the key once per run.
		nested: map[string]string{"get": "eval"},
	},
	{
		name:    "seed",
		about:   "the guide's token bucket: client time, HMGET/HMSET hash, no expiry (written for this benchmark)",
		open:    openSeed,
		cmds:    scriptCmds,
		oneCall: true,
	},
}

// newClient returns the go-redis client every library runs over, but the
// -cte variants: go-redis's default options.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// newClientCTE returns a client with ContextTimeoutEnabled, which bounds
// each call by its context's deadline (docs/deploying.md advises it).
func newClientCTE(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

func tokenBucketOf(p policy) ratekeeper.Policy { return p.tokenBucket() }
func gcraOf(p policy) ratekeeper.Policy        { return p.gcra() }

// openRatekeeper opens redisstore.New(client, opts...) over a client with
// default options, deciding under the policy that pol makes of p.
func openRatekeeper(pol func(policy) ratekeeper.Policy, opts ...redisstore.Option) func(string, policy) (decideFunc, func(), error) {
	return func(addr string, p policy) (decideFunc, func(), error) {
		client := newClient(addr)
		return openLimiter(client, redisstore.New(client, opts...), pol(p))
	}
}

// leasingLimiters is how many Limiters with leases ratekeeper+leases
// spreads its callers over, each with a client of its own, as servers of
// a fleet would be.
const leasingLimiters = 8

// openLeasing opens leasingLimiters Limiters with leases of 50ms over
// clients of their own, deciding under the policy that pol makes of p;
// each decision goes to the next Limiter in turn.
func openLeasing(pol func(policy) ratekeeper.Policy) func(string, policy) (decideFunc, func(), error) {
	return func(addr string, p policy) (decideFunc, func(), error) {
		var lims []*ratekeeper.Limiter
		var clients []*redis.Client
		closeAll := func() {
			for _, l := range lims {
				l.Close()
			}
			for _, c := range clients {
				c.Close()
			}
		}
		for range leasingLimiters {
			client := newClient(addr)
			clients = append(clients, client)
			lim, err := ratekeeper.New(redisstore.New(client), pol(p), ratekeeper.WithLeases(ratekeeper.Leases{TTL: 50 * time.Millisecond}))
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			lims = append(lims, lim)
		}
		var next atomic.Uint32
		decide := func(ctx context.Context, key string) (bool, error) {
			res, err := lims[next.Add(1)%leasingLimiters].Allow(ctx, key)
			return res.Allowed, err
		}
		return decide, closeAll, nil
	}
}

// openRatekeeperCTE is openRatekeeper over a client with
// ContextTimeoutEnabled.
func openRatekeeperCTE(pol func(policy) ratekeeper.Policy) func(string, policy) (decideFunc, func(), error) {
	return func(addr string, p policy) (decideFunc, func(), error) {
		client := newClientCTE(addr)
		return openLimiter(client, redisstore.New(client), pol(p))
	}
}

func openLimiter(client *redis.Client, store ratekeeper.Store, pol ratekeeper.Policy) (decideFunc, func(), error) {
	lim, err := ratekeeper.New(store, pol)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	decide := func(ctx context.Context, key string) (bool, error) {
		res, err := lim.Allow(ctx, key)
		return res.Allowed, err
	}
	return decide, func() { client.Close() }, nil
}

// openRueidis sends ratekeeper's token bucket script, read from the
// library's source tree, with the keys and ARGV that redisstore.Store
// sends: cost, "" for the server's clock, the expiry slack of 1 ms, and the
// Spec's parameters.
func openRueidis(addr string, p policy) (decideFunc, func(), error) {
	src, err := tokenBucketSource()
	if err != nil {
		return nil, nil, err
	}
	// The limiter is only for its spec: it decides nothing.
	lim, err := ratekeeper.New(memstore.New(memstore.WithSweepInterval(0)), p.tokenBucket())
	if err != nil {
		return nil, nil, err
	}
	spec := lim.Spec()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	script := rueidis.NewLuaScript(src)
	// Store.Key only names keys; it never touches the (nil) client.
	keys := redisstore.New(nil)
	sp := spec.Params()
	params := make([]string, 4)
	for i, v := range []int64{sp.Capacity, sp.Rate, sp.Interval, sp.Cost} {
		params[i] = strconv.FormatInt(v, 10)
	}
	decide := func(ctx context.Context, key string) (bool, error) {
		args := []string{"1", "", "1", params[0], params[1], params[2], params[3]}
		v, err := script.Exec(ctx, client, []string{keys.Key(key, spec)}, args).ToArray()
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, errors.New("ratekeeper-rueidis: unexpected reply")
		}
		var f [4]int64
		for i := range v {
			if f[i], err = v[i].AsInt64(); err != nil {
				return false, err
			}
		}
		return f[0] == 1, nil
	}
	return decide, client.Close, nil
}

// tokenBucketSource reads the token bucket script as redisstore builds
// it: lib.lua, a newline, token_bucket.lua. loadgen runs from bench/, so
// the library's sources are one level up.
func tokenBucketSource() (string, error) {
	// The script exactly as redisstore sends it, kept as a golden file.
	src, err := os.ReadFile(filepath.Join("..", "redisstore", "testdata", "token_bucket.lua"))
	if err != nil {
		return "", fmt.Errorf("ratekeeper-rueidis needs the library's scripts (run loadgen from bench/): %w", err)
	}
	return string(src), nil
}

// openRedisRate opens redis_rate over the client that newClient makes.
func openRedisRate(newClient func(string) *redis.Client) func(string, policy) (decideFunc, func(), error) {
	return func(addr string, p policy) (decideFunc, func(), error) {
		client := newClient(addr)
		lim := redis_rate.NewLimiter(client)
		limit := redis_rate.Limit{Rate: int(p.Rate), Burst: int(p.Burst), Period: p.Period}
		decide := func(ctx context.Context, key string) (bool, error) {
			res, err := lim.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}
		return decide, func() { client.Close() }, nil
	}
}

// openUlule runs a fixed window of Rate requests per Period: ulule/limiter
// has no token bucket, and this is the same average rate.
func openUlule(addr string, p policy) (decideFunc, func(), error) {
	client := newClient(addr)
	store, err := ulule.NewStore(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	lim := limiter.New(store, limiter.Rate{Period: p.Period, Limit: p.Rate})
	decide := func(ctx context.Context, key string) (bool, error) {
		res, err := lim.Get(ctx, key)
		return !res.Reached, err
	}
	return decide, func() { client.Close() }, nil
}

func openThrottled(addr string, p policy) (decideFunc, func(), error) {
	client := newClient(addr)
	store, err := goredisstore.NewCtx(client, "throttled:")
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	// MaxBurst counts the requests beyond the first.
	lim, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(int(p.Rate), p.Period), MaxBurst: int(p.Burst - 1)})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	decide := func(ctx context.Context, key string) (bool, error) {
		limited, _, err := lim.RateLimitCtx(ctx, key, 1)
		return !limited, err
	}
	return decide, func() { client.Close() }, nil
}

func openSeed(addr string, p policy) (decideFunc, func(), error) {
	client := newClient(addr)
	s := newSeedLimiter(client, p.Burst, 1, p.interval())
	return s.allow, func() { client.Close() }, nil
}

// findLibs returns the libraries named in a comma-separated list, or all
// of them for "all".
func findLibs(names []string) ([]lib, error) {
	if len(names) == 1 && names[0] == "all" {
		return libs, nil
	}
	var out []lib
	for _, name := range names {
		i := slices.IndexFunc(libs, func(l lib) bool { return l.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown library %q", name)
		}
		out = append(out, libs[i])
	}
	return out, nil
}
