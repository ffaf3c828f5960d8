package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/results"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// Fixed seeds keep failures reproducible.
var seeds = []uint64{1, 2, 3}

const equivalenceSteps = 10_000

// TestRandomEquivalence requires the Lua script, memstore and the Go
// model to return identical Results for every request of long random
// sequences, on a clock that now and then steps back.
func TestRandomEquivalence(t *testing.T) {
	useRedis := os.Getenv(redistest.EnvAddr) != ""
	if !useRedis {
		t.Logf("no test Redis (%s unset): comparing memstore with the model only", redistest.EnvAddr)
	}
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			// The seeds run at once too: each run spends most of its time
			// waiting for Redis.
			var wg sync.WaitGroup
			for _, seed := range seeds {
				wg.Go(func() {
					t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
						checkEquivalence(t, pc, seed, useRedis)
					})
				})
			}
			wg.Wait()
		})
	}
}

func checkEquivalence(t *testing.T, pc policyCase, seed uint64, useRedis bool) {
	ctx := context.Background()
	const key = "k"
	clock := newClock()
	mem := newLimiter(t, newMemstore(t, clock), pc.policy)
	spec := mem.Spec()
	var red *ratekeeper.Limiter
	if useRedis {
		red = newLimiter(t, newRedisstore(t, clock), pc.policy)
		forget(t, red, key)
	}
	var st driver.State
	g := newStepGen(seed, pc, spec)
	// Now and then the clock steps back, up to two windows, as far as
	// memstore's expiries allow (see expiryFloor).
	back := rand.New(rand.NewPCG(seed, 1))
	var floor expiryFloor
	var allowed, denied int
	for i := range equivalenceSteps {
		d, n := g.next()
		if back.IntN(30) == 0 {
			d = floor.back(clock.Now().UnixMicro(), -g.fraction(2*g.window))
		}
		clock.Advance(d)
		now := clock.Now().UnixMicro()
		floor.before(now)
		want := results.Step(spec, &st, now, n)
		got, err := mem.AllowN(ctx, key, n)
		if err != nil {
			t.Fatalf("seed %d, step %d: memstore AllowN(%d): %v", seed, i, n, err)
		}
		redisLine := "redis    (no test Redis)"
		var gotRedis ratekeeper.Result
		if red != nil {
			if gotRedis, err = red.AllowN(ctx, key, n); err != nil {
				t.Fatalf("seed %d, step %d: redis AllowN(%d): %v", seed, i, n, err)
			}
			redisLine = fmt.Sprintf("redis    %+v", gotRedis)
		}
		if testutil.DiffResult(got, want) != "" || (red != nil && testutil.DiffResult(gotRedis, want) != "") {
			t.Fatalf("seed %d, step %d, %+v: cost %d at start+%v (after a step of %v):\n"+
				"model    %+v\nmemstore %+v\n%s",
				seed, i, pc.policy, n, clock.Elapsed(), d, want, got, redisLine)
		}
		floor.after(now, n, want)
		if want.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	// A sequence that never denies (or never allows) compares little.
	if allowed == 0 || denied == 0 {
		t.Fatalf("seed %d: %d allowed and %d denied: the random steps do not exercise %+v",
			seed, allowed, denied, pc.policy)
	}
}
