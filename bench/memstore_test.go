package bench_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// The limit is so high that every request is allowed: the benchmarks
// measure the cost of a decision and of finding the key's state, not of
// denying.
const (
	perSecond = ratekeeper.MaxLimit
	burst     = ratekeeper.MaxLimit
)

// allowFunc decides one request for key.
type allowFunc func(key string) bool

// inProcess are the limiters compared; each new returns a fresh one.
var inProcess = []struct {
	name string
	new  func(b *testing.B) allowFunc
}{
	{"memstore", newMemstore},
	{"x-time-rate-syncmap", newRateSyncMap},
	{"x-time-rate-mutexmap", newRateMutexMap},
	{"go-limiter-memorystore", newMemorystore},
}

func newMemstore(b *testing.B) allowFunc {
	store := memstore.New()
	b.Cleanup(func() { store.Close() })
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{Capacity: burst, RefillRate: perSecond, RefillInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) bool {
		res, err := lim.Allow(ctx, key)
		return err == nil && res.Allowed
	}
}

// newRateSyncMap keeps one *rate.Limiter per key in a sync.Map, the
// usual way to limit per key with golang.org/x/time/rate.
func newRateSyncMap(*testing.B) allowFunc {
	var m sync.Map
	return func(key string) bool {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(perSecond, burst))
		}
		return v.(*rate.Limiter).Allow()
	}
}

// newRateMutexMap keeps one *rate.Limiter per key in a map under a mutex.
func newRateMutexMap(*testing.B) allowFunc {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return func(key string) bool {
		mu.Lock()
		lim, ok := m[key]
		if !ok {
			lim = rate.NewLimiter(perSecond, burst)
			m[key] = lim
		}
		mu.Unlock()
		return lim.Allow()
	}
}

// newMemorystore's bucket starts with burst tokens and, at each Interval,
// refills Interval/Tokens (in nanoseconds) of them: an hour keeps it from
// refilling, and from running dry, within a benchmark.
func newMemorystore(b *testing.B) allowFunc {
	store, err := memorystore.New(&memorystore.Config{Tokens: burst, Interval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Cleanup(func() { store.Close(ctx) })
	return func(key string) bool {
		_, _, _, ok, err := store.Take(ctx, key)
		return err == nil && ok
	}
}

// BenchmarkInProcess decides requests from all of GOMAXPROCS goroutines
// at once, over 1 key (all goroutines contend for it) and over 100,000
// keys (each request finds its key among many; every key exists before
// the timing starts). Beside ns/op, the wall time, it reports cpu-ns/op,
// the CPU time the process spent per decision, which a host shared with
// other jobs changes less: time spent waiting for a core does not count.
func BenchmarkInProcess(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprint("user:", i)
		}
		for _, l := range inProcess {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, l.name), func(b *testing.B) {
				allow := l.new(b)
				for _, k := range names {
					if !allow(k) {
						b.Fatalf("%s denied the first request for %s", l.name, k)
					}
				}
				b.ReportAllocs()
				cpu := cpuTime(b)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := rand.IntN(len(names))
					for pb.Next() {
						if !allow(names[i]) {
							b.Errorf("%s denied a request", l.name)
							return
						}
						if i++; i == len(names) {
							i = 0
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
