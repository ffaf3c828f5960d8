package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// Concurrent decisions share pipelines; SCRIPT FLUSH between and during
// them must never surface as an error, and each caller gets its own reply.
func TestPipelinedScriptFlushUnderLoad(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	lim, err := ratekeeper.New(store, ratekeeper.FixedWindow{Limit: 50, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const workers, perWorker, keys = 64, 100, 20
	var allowed [keys]atomic.Int64
	var failures atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				k := (w + i) % keys
				res, err := lim.Allow(ctx, fmt.Sprintf("k%d", k))
				if err != nil {
					if failures.Add(1) == 1 {
						t.Errorf("Allow: %v", err)
					}
					continue
				}
				if res.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for i := 0; i < 20; i++ {
			client.ScriptFlush(ctx)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-flushed
	// 64×100 requests over 20 keys: 320 each, of which exactly 50 pass.
	for k := range allowed {
		if got := allowed[k].Load(); got != 50 {
			t.Errorf("key k%d: %d allowed, want exactly 50", k, got)
		}
	}
}

// A caller whose context ends while its call waits for a batch returns at
// once with the context's error.
func TestPipelinedCallerDeadline(t *testing.T) {
	server := redistest.StartServer(t)
	client := server.Client()
	lim, err := ratekeeper.New(redisstore.New(client), ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := lim.Allow(ctx, "slow"); err != nil { // loads the script
		t.Fatal(err)
	}
	// Redis holds every command for 300 ms: one decision is in flight,
	// the others wait for the next batch.
	if err := client.Do(ctx, "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := lim.Allow(ctx, "slow"); err == nil && time.Since(paused) < 250*time.Millisecond {
				t.Errorf("Allow succeeded while Redis was paused")
			}
			if elapsed := time.Since(start); elapsed > 200*time.Millisecond {
				t.Errorf("Allow returned after %v, past its 50 ms deadline", elapsed)
			}
		}()
	}
	wg.Wait()
	// Once Redis is back, decisions resume.
	for time.Since(paused) < 400*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := lim.Allow(ctx, "slow"); err != nil {
		t.Errorf("Allow after the pause: %v", err)
	}
}

func TestWithoutAutoPipelining(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithAutoPipelining(false))
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client.ScriptFlush(ctx)
	for i, want := range []bool{true, true, true, false} {
		res, err := lim.Allow(ctx, "k")
		if err != nil || res.Allowed != want {
			t.Fatalf("request %d: %+v, %v; want allowed=%v", i, res, err, want)
		}
	}
}
