package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// scriptCalls returns how many EVAL and EVALSHA commands the server ran.
func scriptCalls(ctx context.Context, t *testing.T, client *redis.Client) int {
	t.Helper()
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range regexp.MustCompile(`cmdstat_(?:eval|evalsha|fcall):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// multiRequests are requests on four keys, one of them under an All.
func multiRequests(t *testing.T) []driver.Request {
	one := mustSpec(t, ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 100})
	all := mustSpec(t, ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Hour}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 100, Window: time.Minute, Aligned: true})))
	return []driver.Request{
		{Key: "user:1", Spec: one, N: 1},
		{Key: "user:2", Spec: one, N: 2},
		{Key: "user:3", Spec: all, N: 1},
		{Key: "user:4", Spec: one, N: 0},
	}
}

// A DecideAll over a client of one server is one script call, whatever
// the number of keys and of their slots: EVAL and EVALSHA calls grow by
// exactly one per DecideAll, with pipelining and without.
func TestDecideAllOneScriptCall(t *testing.T) {
	server := redistest.StartServer(t)
	for _, pipelining := range []bool{false, true} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			client := server.Client()
			ctx := ctxTimeout(t, 10*time.Second)
			store := redisstore.New(client, redisstore.WithAutoPipelining(pipelining), redisstore.WithKeyPrefix(redistest.Prefix(t)))
			reqs := multiRequests(t)
			if _, err := store.DecideAll(ctx, reqs); err != nil { // loads the script
				t.Fatal(err)
			}
			before := scriptCalls(ctx, t, client)
			const calls = 10
			for i := range calls {
				res, err := store.DecideAll(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if !res[0].Allowed || res[1].Remaining != int64(100-2*(i+2))*driver.Unit || len(res[2].Parts) != 2 {
					t.Fatalf("call %d: %+v", i, res)
				}
			}
			if got := scriptCalls(ctx, t, client) - before; got != calls {
				t.Errorf("%d DecideAlls made %d script calls, want %d", calls, got, calls)
			}
		})
	}
}

// Over a Redis Cluster, a DecideAll is one script call per hash slot,
// sent at once: one round trip per master, a pipeline for a master of
// several of its slots. Within a slot it is all or nothing; across slots,
// a slot that denies takes nothing but does not undo another's takes.
func TestDecideAllClusterSlots(t *testing.T) {
	client := redistest.ClusterClient(t)
	ctx := ctxTimeout(t, 20*time.Second)
	var count redistest.Counter
	client.AddHook(&count)
	prefix := redistest.Prefix(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(prefix))
	big := mustSpec(t, ratekeeper.FixedWindow{Limit: 100, Window: time.Hour})
	small := mustSpec(t, ratekeeper.Named("small", ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}))
	// Keys in slots of their own, and two keys of one slot.
	other, same := "apart", ""
	for i := 0; same == ""; i++ {
		k := fmt.Sprint("k", i)
		if redisstore.HashSlot(k) == redisstore.HashSlot("with") {
			same = k
		}
	}
	if redisstore.HashSlot(other) == redisstore.HashSlot("with") {
		t.Fatal("pick another key")
	}
	t.Cleanup(func() {
		for _, k := range []string{other, same, "with"} {
			store.Reset(context.Background(), k, big)
			store.Reset(context.Background(), k, small)
		}
	})
	if _, err := store.Decide(ctx, "with", small, 1); err != nil { // exhausts "with"
		t.Fatal(err)
	}
	peek := func(key string) int64 {
		res, err := store.Decide(ctx, key, big, 0)
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining / driver.Unit
	}

	// Peeks first, so that every node has the script.
	if _, err := store.DecideAll(ctx, []driver.Request{{Key: other, Spec: big}, {Key: same, Spec: big}, {Key: "with", Spec: small}}); err != nil {
		t.Fatal(err)
	}
	count.Commands.Store(0)
	count.Pipelines.Store(0)
	res, err := store.DecideAll(ctx, []driver.Request{
		{Key: other, Spec: big, N: 1}, {Key: same, Spec: big, N: 1}, {Key: "with", Spec: small, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	masters := map[string]bool{}
	for _, k := range []string{other, "with"} {
		m, err := client.MasterForKey(ctx, "{"+k+"}")
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if c, p := count.Commands.Load(), count.Pipelines.Load(); c+p != int64(len(masters)) || count.Sent() != 2 {
		t.Errorf("one DecideAll over two slots of %d masters sent %d commands alone and %d in %d pipelines, want 2 script calls in one round trip per master",
			len(masters), c, count.Pipelined.Load(), p)
	}
	if !res[0].Allowed || !res[1].Allowed || res[2].Allowed {
		t.Fatalf("results %+v: want the small key denied, the others allowed", res)
	}
	// The same slot as the denial: nothing taken. Another slot: taken.
	if got := peek(same); got != 100 {
		t.Errorf("the key in the denied key's slot has %v remaining, want 100: nothing taken", got)
	}
	if got := peek(other); got != 99 {
		t.Errorf("the key in another slot has %v remaining, want 99: its slot allowed and took", got)
	}
}

// A plain client of a cluster node that owns every slot refuses a
// DecideAll across slots with CROSSSLOT once; the store then sends a call
// per slot, that time and from then on, and decides as over one server.
func TestDecideAllPlainClientOfClusterNode(t *testing.T) {
	node := redistest.StartOneNodeCluster(t)
	client := node.Client()
	store := redisstore.New(client)
	ctx := ctxTimeout(t, 20*time.Second)
	reqs := multiRequests(t)
	for i := range 5 {
		res, err := store.DecideAll(ctx, reqs)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if res[1].Remaining != int64(100-2*(i+1))*driver.Unit || !res[2].Allowed {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	info, err := client.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`errorstat_CROSSSLOT:count=1\b`).MatchString(info) {
		t.Errorf("want exactly one CROSSSLOT:\n%s", info)
	}
}

// Concurrent DecideAlls and Decides share the pipeliner's round trips, and
// each decides exactly: the keys admit their limits, no more.
func TestDecideAllPipelined(t *testing.T) {
	client := redistest.Client(t)
	var count redistest.Counter
	client.AddHook(&count)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	ctx := ctxTimeout(t, 30*time.Second)
	spec := mustSpec(t, ratekeeper.FixedWindow{Limit: 50, Window: time.Hour})
	const goroutines, calls = 32, 10
	var allowedAll, allowedOne atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range calls {
				if g%2 == 0 {
					res, err := store.DecideAll(ctx, []driver.Request{{Key: "a", Spec: spec, N: 1}, {Key: "b", Spec: spec, N: 1}})
					if err != nil {
						t.Error(err)
						return
					}
					if res[0].Allowed && res[1].Allowed {
						allowedAll.Add(1)
					}
					continue
				}
				res, err := store.Decide(ctx, "a", spec, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowedOne.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := allowedAll.Load() + allowedOne.Load(); got != 50 {
		t.Errorf("key a admitted %d, want 50", got)
	}
	if res, err := store.Decide(ctx, "b", spec, 0); err != nil || res.Remaining != (50-allowedAll.Load())*driver.Unit {
		t.Errorf("key b: %+v, %v; want %d taken, one per allowed DecideAll", res, err, allowedAll.Load())
	}
	if count.Pipelines.Load() == 0 {
		t.Errorf("%d calls in %d commands and no pipeline: nothing was coalesced", goroutines*calls, count.Commands.Load())
	}
	t.Logf("%d calls in %d commands and %d pipelines", goroutines*calls, count.Commands.Load(), count.Pipelines.Load())
}

// An invalid spec or an unknown algorithm fails a DecideAll before any
// round trip, as it fails Decide.
func TestDecideAllNoScript(t *testing.T) {
	store := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if _, err := store.DecideAll(context.Background(), []driver.Request{{Key: "k", N: 1}}); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
		t.Errorf("a nil spec: %v, want ErrInvalidPolicy", err)
	}
}
