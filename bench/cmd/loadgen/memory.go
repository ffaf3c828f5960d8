package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// memCallers are the caller keys whose Redis keys the memory probe
// measures: realistic keys, so that the names weigh as they would.
var memCallers = func() []string {
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", 1_000_000+i)
	}
	return keys
}()

// memKey is the average MEMORY USAGE of one caller's key after one
// request, for one limiter.
type memKey struct {
	what    string
	example string // the Redis key of memCallers[0]
	bytes   float64
}

// memory holds the probe's results; tb and seed feed the target.
type memory struct {
	tb, seed float64
	rows     []memKey
}

// measureMemory makes one request for each of memCallers with
// ratekeeper's default store (token bucket and GCRA) and with the seed,
// and reads MEMORY USAGE of the keys each wrote. The policy allows 100
// per minute, so the keys are still there when measured. It deletes the
// keys before and after.
func measureMemory(ctx context.Context, c *redis.Client) (memory, error) {
	store := redisstore.New(c)
	tb := ratekeeper.TokenBucket{Capacity: 100, RefillRate: 100, RefillInterval: time.Minute}
	gcra := ratekeeper.GCRA{Rate: 100, Period: time.Minute, Burst: 100}
	seed := newSeedLimiter(c, 100, 100, time.Minute)

	type probe struct {
		what  string
		key   func(caller string) string
		write func(caller string) error
	}
	var probes []probe
	for _, p := range []struct {
		what string
		pol  ratekeeper.Policy
	}{{"ratekeeper token bucket (default store)", tb}, {"ratekeeper GCRA (default store)", gcra}} {
		lim, err := ratekeeper.New(store, p.pol)
		if err != nil {
			return memory{}, err
		}
		probes = append(probes, probe{
			what: p.what,
			key:  func(caller string) string { return store.Key(caller, lim.Spec()) },
			write: func(caller string) error {
				_, err := lim.Allow(ctx, caller)
				return err
			},
		})
	}
	probes = append(probes, probe{
		what: "seed hash (no expiry)",
		key:  func(caller string) string { return caller },
		write: func(caller string) error {
			_, err := seed.allow(ctx, caller)
			return err
		},
	})

	var all []string
	for _, p := range probes {
		for _, caller := range memCallers {
			all = append(all, p.key(caller))
		}
	}
	if err := c.Del(ctx, all...).Err(); err != nil {
		return memory{}, err
	}
	defer c.Del(context.Background(), all...)

	var m memory
	for _, p := range probes {
		var total int64
		for _, caller := range memCallers {
			if err := p.write(caller); err != nil {
				return memory{}, err
			}
			n, err := c.MemoryUsage(ctx, p.key(caller), 0).Result()
			if err != nil {
				return memory{}, fmt.Errorf("%s: MEMORY USAGE %s: %w", p.what, p.key(caller), err)
			}
			total += n
		}
		m.rows = append(m.rows, memKey{what: p.what, example: p.key(memCallers[0]), bytes: float64(total) / float64(len(memCallers))})
	}
	m.tb, m.seed = m.rows[0].bytes, m.rows[len(m.rows)-1].bytes
	return m, nil
}
