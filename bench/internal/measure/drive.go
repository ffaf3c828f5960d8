package measure

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Drive runs conc callers until dur has passed or ctx ends, and returns
// how long they ran. Caller g calls call(g, rng) in a loop, rng its own
// random source; a call that returns false stops its caller.
func Drive(ctx context.Context, conc int, dur time.Duration, call func(g int, rng *rand.Rand) bool) time.Duration {
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(g)))
		wg.Go(func() {
			for !stop.Load() && call(g, rng) {
			}
		})
	}
	timer := time.NewTimer(dur)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stop.Store(true)
	wg.Wait()
	return time.Since(start)
}
