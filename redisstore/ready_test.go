package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestReadyEndsUnreachable: once Redis is back and the readiness probe
// has seen it, callers that start together all succeed, the first ones
// included: none is failed by the state left from the outage.
func TestReadyEndsUnreachable(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	store := redisstore.New(client)
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
	if _, err := lim.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	untilUnreachable(t, func(ctx context.Context) error { _, err := lim.Allow(ctx, "k"); return err })
	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := store.Ready(ctx); err != nil {
		t.Fatalf("Ready once Redis is back: %v", err)
	}
	const callers = 32
	errs := make([]error, callers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range callers {
		done.Go(func() {
			start.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, errs[i] = lim.Allow(ctx, "k")
		})
	}
	start.Done()
	done.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			t.Log(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d callers failed after Redis came back and Ready succeeded", failed, callers)
	}
}

// TestReadyWhileRedisRefusesWrites: a Redis out of memory under
// noeviction answers PING but refuses every decision; Ready says so.
func TestReadyWhileRedisRefusesWrites(t *testing.T) {
	srv := redistest.StartServerWith(t, "--maxmemory-policy", "noeviction")
	client := srv.Client()
	store := redisstore.New(client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.Ready(ctx); err != nil {
		t.Fatalf("Ready before Redis is full: %v", err)
	}
	redistest.FillMemory(t, ctx, client)
	err := store.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("Ready while Redis refuses writes: %v, want its OOM error", err)
	}
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
	if _, err := lim.Allow(ctx, "k"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("a decision while Redis refuses writes: %v, want its OOM error", err)
	}
}

// TestReadyOverCluster: over a Cluster, Ready asks every master.
func TestReadyOverCluster(t *testing.T) {
	client := redistest.ClusterClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := redisstore.New(client).Ready(ctx); err != nil {
		t.Errorf("Ready over a healthy Cluster: %v", err)
	}
}
