package conformance

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestRedisAllOneCallOneSlot checks that an All decides in one script call,
// over keys that all carry the caller's hash tag.
func TestRedisAllOneCallOneSlot(t *testing.T) {
	client := redistest.Client(t)
	var calls redistest.Counter
	client.AddHook(&calls)
	prefix := redistest.Prefix(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithAutoPipelining(false))
	p := ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Second}),
		ratekeeper.Named("hour", ratekeeper.SlidingWindowLog{Limit: 100, Window: time.Hour}),
		ratekeeper.Named("day", ratekeeper.SlidingWindowCounter{Limit: 1000, Window: 24 * time.Hour}),
	)
	lim := newLimiter(t, store, p)
	forget(t, lim, "user:{1}")
	ctx := context.Background()
	// A first call loads the script, which a fresh Redis lacks: EVALSHA,
	// then EVAL. A peek takes nothing.
	if _, err := lim.Peek(ctx, "user:{1}"); err != nil {
		t.Fatal(err)
	}
	for i := range 7 { // 5 allowed, 2 denied by the burst
		before := calls.Sent()
		if _, err := lim.Allow(ctx, "user:{1}"); err != nil {
			t.Fatal(err)
		}
		if n := calls.Sent() - before; n != 1 {
			t.Fatalf("decision %d took %d commands, want 1 script call", i, n)
		}
	}
	keys := store.Keys("user:{1}", lim.Spec())
	want := []string{prefix + "{user:%7B1%7D}:tb:burst", prefix + "{user:%7B1%7D}:swl:hour", prefix + "{user:%7B1%7D}:swc:day"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("Keys = %q, want %q", keys, want)
	}
	for _, k := range keys {
		if n, err := client.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("%s: exists %d, %v", k, n, err)
		}
		if !strings.HasPrefix(k, prefix+"{user:%7B1%7D}:") {
			t.Fatalf("%s does not begin with the caller's hash tag", k)
		}
	}
	// The hour and the day kept 5 each: the two denials took nothing.
	res, err := lim.Peek(ctx, "user:{1}")
	if err != nil || res.Parts[1].Remaining != 95 || res.Parts[2].Remaining != 995 {
		t.Fatalf("Peek = %+v, %v; want 95 left in the hour and 995 in the day", res, err)
	}
}
