package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// A plain *redis.Client pointed at a Redis Cluster node that owns every
// slot works under load: the node refuses a batch script whose keys lie
// in different slots (CROSSSLOT), and the store then sends each decision
// in a call of its own. No decision fails, and each key admits exactly
// its limit, for every algorithm.
func TestPlainClientOfClusterNode(t *testing.T) {
	const (
		goroutines = 64
		keys       = 16
		calls      = 20 // per goroutine, per policy
	)
	node := redistest.StartOneNodeCluster(t)
	client := node.Client()
	store := redisstore.New(client)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, p := range policies {
		lim, err := ratekeeper.New(store, p)
		if err != nil {
			t.Fatal(err)
		}
		name := lim.Spec().Algorithm()
		var allowed [keys]atomic.Int64
		var failed atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range calls {
					k := (g + i) % keys
					res, err := lim.Allow(ctx, fmt.Sprintf("%s:%d", name, k))
					if err != nil {
						if failed.Add(1) <= 3 {
							t.Errorf("%s: %v", name, err)
						}
						continue
					}
					if res.Allowed {
						allowed[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%s: %d of %d decisions failed", name, n, goroutines*calls)
		}
		for k := range allowed {
			if got := allowed[k].Load(); got != lim.Spec().Limit() {
				t.Errorf("%s, key %d: %d allowed, want %d", name, k, got, lim.Spec().Limit())
			}
		}
	}
	// Not vacuous: the store did try a batch script across slots.
	info, err := client.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "errorstat_CROSSSLOT:count=") {
		t.Errorf("the node never answered CROSSSLOT:\n%s", info)
	}
}
