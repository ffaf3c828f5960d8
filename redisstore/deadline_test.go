package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// While Redis hangs, a call (Decide or DecideAll) ends at its context's
// deadline with context.DeadlineExceeded, and a call whose context is
// cancelled ends at the cancellation with context.Canceled: over clients
// with and without ContextTimeoutEnabled, with pipelining and without,
// for deadlines of different lengths.
func TestDeadlineWhileRedisHangs(t *testing.T) {
	server := redistest.StartServer(t)
	for _, v := range []struct{ contextTimeouts, pipelining bool }{{false, true}, {false, false}, {true, true}, {true, false}} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%t,pipelining=%t", v.contextTimeouts, v.pipelining), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: v.contextTimeouts})
			t.Cleanup(func() { client.Close() })
			store := redisstore.New(client, redisstore.WithAutoPipelining(v.pipelining))
			lim, err := ratekeeper.New(store, ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := lim.Allow(ctx, "k"); err != nil { // loads the script
				t.Fatal(err)
			}
			if err := server.Client().Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			for _, timeout := range []time.Duration{100 * time.Millisecond, 30 * time.Millisecond, 300 * time.Millisecond} {
				start := time.Now()
				callCtx, cancel := context.WithTimeout(context.Background(), timeout)
				_, err := lim.Allow(callCtx, "k")
				elapsed := time.Since(start)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%v deadline while Redis is paused: %v, want context.DeadlineExceeded", timeout, err)
				}
				if elapsed < timeout || elapsed > timeout+250*time.Millisecond {
					t.Errorf("%v deadline: returned after %v", timeout, elapsed)
				}
				start = time.Now()
				callCtx, cancel = context.WithTimeout(context.Background(), timeout)
				_, err = store.DecideAll(callCtx, []driver.Request{{Key: "k", Spec: lim.Spec(), N: 1}, {Key: "j", Spec: lim.Spec(), N: 1}})
				elapsed = time.Since(start)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || elapsed < timeout || elapsed > timeout+250*time.Millisecond {
					t.Errorf("DecideAll with a %v deadline while Redis is paused: %v after %v, want context.DeadlineExceeded then", timeout, err, elapsed)
				}
			}
			callCtx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			_, err = lim.Allow(callCtx, "k")
			if elapsed := time.Since(start); !errors.Is(err, context.Canceled) || elapsed > 300*time.Millisecond {
				t.Errorf("cancelled after 50 ms: %v after %v, want context.Canceled", err, elapsed)
			}
			// Decisions resume once Redis does.
			time.Sleep(1600 * time.Millisecond)
			callCtx, cancel = context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := lim.Allow(callCtx, "k"); err != nil {
				t.Errorf("after the pause: %v", err)
			}
		})
	}
}
