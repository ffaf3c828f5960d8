package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// benchBucket never runs dry, so the benchmarks measure allowed requests,
// and its keys are full again, and expire, within a second.
var benchBucket = ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: ratekeeper.MaxLimit, RefillInterval: time.Second}

func BenchmarkAllow(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCharge is BenchmarkAllow with a Charge of 1: a cost known
// afterwards takes the same path through the client as a decision, so a
// lone call allocates as much as one of BenchmarkAllow.
func BenchmarkCharge(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Charge(ctx, "k", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRefund refunds 1 at a time to a bucket drained beforehand that
// refills 10 tokens a second, so that every refund has something to give
// back.
func BenchmarkRefund(b *testing.B) {
	lim, _, _ := newLimiter(b, ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: 10, RefillInterval: time.Second})
	ctx := context.Background()
	if _, err := lim.Charge(ctx, "k", ratekeeper.MaxLimit); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lim.Reset(ctx, "k") })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Refund(ctx, "k", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowDeadline is BenchmarkAllow with a deadline on every call's
// context, as a server's request has: over a client with go-redis's
// default options, a lone call is then handed to a goroutine of its own,
// so that it ends with its context.
func BenchmarkAllowDeadline(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := lim.Allow(ctx, "k")
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			if _, err := lim.Allow(ctx, keys[i]); err != nil {
				b.Error(err)
				return
			}
			i = (i + 1) % len(keys)
		}
	})
}

// BenchmarkSlidingWindowLog measures the sliding window log's script on
// the Redis server, in µs per call from INFO commandstats, and its key in
// bytes from MEMORY USAGE, for a Limit of 10,000 per hour:
//   - cost1: requests of cost 1, 1µs apart, filling keys to 10,000 entries;
//   - cost10000: one request of cost 10,000 in each fresh key;
//   - drop10000: the call that finds all 10,000 entries of a key (of cost
//     1 each, 1µs apart) out of the window and drops them, the most that
//     one call drops.
//
// Run it alone on its Redis: scripts/with-redis.sh go test -run '^$'
// -bench SlidingWindowLog ./redisstore/
func BenchmarkSlidingWindowLog(b *testing.B) {
	policy := ratekeeper.SlidingWindowLog{Limit: ratekeeper.MaxLogLimit, Window: time.Hour}
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Now().UnixMicro())
	clock := redisstore.WithClock(func() time.Time { return time.UnixMicro(now.Load()) })
	lim, store, client := newLimiter(b, policy, clock)
	serverMicros := func() float64 {
		info, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_fcall:") {
				continue
			}
			for field := range strings.SplitSeq(strings.TrimSpace(line[strings.Index(line, ":")+1:]), ",") {
				if v, ok := strings.CutPrefix(field, "usec="); ok {
					us, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					total += us
				}
			}
		}
		return total
	}
	keyBytes := func(key string) float64 {
		n, err := client.MemoryUsage(ctx, store.Key(key, lim.Spec()), 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	allow := func(key string, n int64) {
		if res, err := lim.AllowN(ctx, key, n); err != nil || !res.Allowed {
			b.Fatalf("AllowN(%q, %d): %+v, %v", key, n, res, err)
		}
	}
	var keys []string
	b.Cleanup(func() {
		for _, k := range keys {
			lim.Reset(ctx, k)
		}
	})
	newKey := func() string {
		keys = append(keys, fmt.Sprint("swl:", len(keys)))
		return keys[len(keys)-1]
	}

	b.Run("cost1", func(b *testing.B) {
		var key string
		i := 0
		begin := serverMicros()
		for b.Loop() {
			if i%int(policy.Limit) == 0 {
				key = newKey()
			}
			now.Add(1)
			allow(key, 1)
			i++
		}
		b.ReportMetric((serverMicros()-begin)/float64(i), "server-µs/op")
	})
	b.Run("cost10000", func(b *testing.B) {
		i := 0
		var key string
		begin := serverMicros()
		for b.Loop() {
			key = newKey()
			allow(key, policy.Limit)
			i++
		}
		b.ReportMetric((serverMicros()-begin)/float64(i), "server-µs/op")
		b.ReportMetric(keyBytes(key), "key-bytes")
	})
	b.Run("drop10000", func(b *testing.B) {
		var spent float64
		var bytes float64
		i := 0
		for b.Loop() {
			b.StopTimer()
			// As 10,000 requests of cost 1, 1µs apart, would leave it.
			key := newKey()
			entries := make([]redis.Z, policy.Limit)
			for j := range entries {
				entries[j] = redis.Z{Score: float64(now.Add(1)), Member: fmt.Sprintf("%d+1", j)}
			}
			if err := client.ZAdd(ctx, store.Key(key, lim.Spec()), entries...).Err(); err != nil {
				b.Fatal(err)
			}
			bytes = keyBytes(key)
			now.Add(int64(time.Hour / time.Microsecond))
			begin := serverMicros()
			b.StartTimer()
			allow(key, 1)
			b.StopTimer()
			spent += serverMicros() - begin
			i++
			b.StartTimer()
		}
		b.ReportMetric(spent/float64(i), "server-µs/op")
		b.ReportMetric(bytes, "key-bytes-before")
	})
}
