package faults

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestNoResendAfterReadTimeout stalls Redis (DEBUG SLEEP, as a slow
// command or a paused machine would) for 1.5 and 10 times the client's
// ReadTimeout while calls are out, on a client with go-redis's default
// retries. go-redis would send each script again after the timeout, on a
// new connection, and Redis would run every copy it received once the
// stall ends: the key would then hold more takes than there were calls.
// Each call must reach Redis at most once: the key holds at least the
// calls that succeeded, and at most all the calls made.
func TestNoResendAfterReadTimeout(t *testing.T) {
	const (
		capacity    = 1000
		callers     = 8
		readTimeout = 100 * time.Millisecond
	)
	srv := redistest.StartServerWith(t, "--enable-debug-command", "yes")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { admin.Close() })
	for _, v := range []struct {
		stall      time.Duration
		pipelining bool
	}{{150 * time.Millisecond, true}, {150 * time.Millisecond, false}, {time.Second, true}, {time.Second, false}} {
		stall, pipelining := v.stall, v.pipelining
		t.Run(fmt.Sprintf("stall=%v/pipelining=%t", stall, pipelining), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: readTimeout, PoolSize: 2 * callers})
			t.Cleanup(func() { client.Close() })
			lim := newLimiter(t, redisstore.New(client, redisstore.WithAutoPipelining(pipelining)),
				ratekeeper.TokenBucket{Capacity: capacity, RefillRate: 1, RefillInterval: time.Hour})
			key := fmt.Sprintf("k:%v:%t", stall, pipelining)
			// The scripts loaded and connections open: only the stall is
			// new.
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					if _, err := lim.Peek(ctx, key); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()

			stalled := make(chan error, 1)
			go func() { stalled <- admin.Do(ctx, "DEBUG", "SLEEP", stall.Seconds()).Err() }()
			time.Sleep(20 * time.Millisecond) // for DEBUG SLEEP to reach Redis
			var succeeded, failed atomic.Int64
			for range callers {
				wg.Go(func() {
					// No deadline: go-redis's ReadTimeout bounds the call.
					if _, err := lim.Allow(context.Background(), key); err != nil {
						failed.Add(1)
					} else {
						succeeded.Add(1)
					}
				})
			}
			wg.Wait()
			if err := <-stalled; err != nil {
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
			// Whatever Redis received has run once it answers again.
			var res ratekeeper.Result
			if !pollUntil(time.Now().Add(5*time.Second), func() bool {
				var err error
				res, err = lim.Peek(ctx, key)
				return err == nil
			}) {
				t.Fatal("no peek after the pause")
			}
			taken := capacity - int64(math.Ceil(res.Remaining))
			t.Logf("%d calls, %d succeeded, %d failed; Redis took %d", callers, succeeded.Load(), failed.Load(), taken)
			if taken > callers || taken < succeeded.Load() {
				t.Errorf("Redis took %d for %d calls, of which %d succeeded: a call ran more than once, or not at all",
					taken, callers, succeeded.Load())
			}
		})
	}
}
