package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestFailedWritesUnderLoad makes Redis refuse every write, out of memory
// under noeviction (OOM) or as a replica (READONLY), under a mixed load
// on one store: takes on fresh keys, which must write; peeks on keys of
// known state; and calls on keys already drained. Redis answers each with
// a reply of its own, and a failed write must never shift one request's
// reply onto another: no drained key is ever allowed, every peek answers
// for its own key, and every take on a fresh key is an error naming the
// fault, unless its write was made (a script that wrote once may write
// again under OOM).
func TestFailedWritesUnderLoad(t *testing.T) {
	for _, fault := range []string{"OOM", "READONLY"} {
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelining=%t", fault, pipelining), func(t *testing.T) {
				failedWrites(t, fault, pipelining)
			})
		}
	}
}

// writePolicies are the policies of the load: one per algorithm, and an
// All, whose calls are never combined into a batch script. Nothing comes
// back during a test, so a key's state stays what the setup left.
func writePolicies(limit int64) []ratekeeper.Policy {
	return append(policies(limit), ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: limit}),
		ratekeeper.Named("hourly", ratekeeper.TokenBucket{Capacity: limit, RefillRate: 1, RefillInterval: time.Hour})))
}

func failedWrites(t *testing.T, fault string, pipelining bool) {
	const (
		limit   = 100
		perKind = 4  // drained and peeked keys per policy
		workers = 24 // goroutines of the load
		rounds  = 60 // calls per goroutine
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	primary := redistest.StartServerWith(t, "--maxmemory-policy", "noeviction")
	setupStore := redisstore.New(primary.Client())

	// Setup, while Redis takes writes: drain some keys, and take from
	// others a cost unique across the test, so that a peek's Remaining
	// tells its key from every other.
	type peekKey struct {
		key  string
		want ratekeeper.Result
	}
	type target struct {
		name    string
		drained []string
		peeked  []peekKey
		mu      sync.Mutex
		taken   []string // fresh keys whose take was allowed
	}
	pols := writePolicies(limit)
	targets := make([]target, len(pols))
	cost := int64(2) // never 1: a fresh key's take leaves limit - 1
	setupLims := make([]*ratekeeper.Limiter, len(pols))
	for i, p := range pols {
		lim := newLimiter(t, setupStore, p)
		setupLims[i] = lim
		tg := &targets[i]
		tg.name = lim.Spec().Algorithm()
		for k := range perKind {
			key := fmt.Sprintf("drained:%d:%d", i, k)
			for {
				res, err := lim.AllowN(ctx, key, lim.Spec().MaxCost())
				if err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					break
				}
			}
			if res, err := lim.Allow(ctx, key); err != nil || res.Allowed {
				t.Fatalf("%s: drained key %s: %+v, %v", tg.name, key, res, err)
			}
			tg.drained = append(tg.drained, key)

			key = fmt.Sprintf("peeked:%d:%d", i, k)
			if res, err := lim.AllowN(ctx, key, cost); err != nil || !res.Allowed {
				t.Fatalf("%s: AllowN(%s, %d): %+v, %v", tg.name, key, cost, res, err)
			}
			cost++
			want, err := lim.Peek(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tg.peeked = append(tg.peeked, peekKey{key, want})
		}
	}

	// The fault.
	var client *redis.Client
	switch fault {
	case "OOM":
		client = primary.Client()
		fillMemory(ctx, t, client)
	case "READONLY":
		client = redistest.StartReplica(t, primary).Client()
	}
	store := redisstore.New(client, redisstore.WithAutoPipelining(pipelining))
	lims := make([]*ratekeeper.Limiter, len(pols))
	for i, p := range pols {
		lims[i] = newLimiter(t, store, p)
	}

	var (
		wg                        sync.WaitGroup
		fresh                     atomic.Int64
		failed, peeks, denials    atomic.Int64
		faultErrs, wrong, unknown atomic.Int64
	)
	// report counts a wrong answer, and prints the first few.
	report := func(counter *atomic.Int64, format string, args ...any) {
		if counter.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				i := (w + r) % len(lims)
				lim, tg := lims[i], &targets[i]
				switch (w + r/len(lims)) % 3 {
				case 0: // a take on a fresh key: must write
					key := "fresh:" + strconv.FormatInt(fresh.Add(1), 10)
					res, err := lim.Allow(ctx, key)
					switch {
					case err == nil && res.Allowed && res.Remaining == limit-1:
						tg.mu.Lock() // checked below
						tg.taken = append(tg.taken, key)
						tg.mu.Unlock()
					case err == nil:
						report(&wrong, "%s: Allow(%s) = %+v under %s, want an error", tg.name, key, res, fault)
					case !redis.HasErrorPrefix(err, fault):
						report(&unknown, "%s: Allow(%s): %v, want a %s error", tg.name, key, err, fault)
					default:
						failed.Add(1)
					}
				case 1: // a peek on a key of known state
					pk := tg.peeked[r%perKind]
					res, err := lim.Peek(ctx, pk.key)
					switch {
					case err != nil && redis.HasErrorPrefix(err, fault):
						// A script that writes even to peek: a failure,
						// not another key's answer.
						faultErrs.Add(1)
					case err != nil:
						report(&unknown, "%s: Peek(%s): %v", tg.name, pk.key, err)
					case res.Allowed != pk.want.Allowed || math.Abs(res.Remaining-pk.want.Remaining) >= 0.5:
						report(&wrong, "%s: Peek(%s) = %+v, want Allowed %t and Remaining %g, its own",
							tg.name, pk.key, res, pk.want.Allowed, pk.want.Remaining)
					default:
						peeks.Add(1)
					}
				case 2: // a call on a drained key: must be denied
					key := tg.drained[r%perKind]
					res, err := lim.Allow(ctx, key)
					switch {
					case err != nil && redis.HasErrorPrefix(err, fault):
						faultErrs.Add(1)
					case err != nil:
						report(&unknown, "%s: Allow(%s): %v", tg.name, key, err)
					case res.Allowed:
						report(&wrong, "%s: drained key %s allowed: %+v", tg.name, key, res)
					default:
						denials.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	// A take allowed under the fault wrote its state: the primary holds it.
	var taken int
	for i := range targets {
		for _, key := range targets[i].taken {
			taken++
			res, err := setupLims[i].Peek(ctx, key)
			if err != nil || math.Abs(res.Remaining-(limit-1)) >= 0.5 { // a leaky bucket leaks meanwhile
				report(&wrong, "%s: Allow(%s) was allowed under %s, but the primary holds %+v, %v",
					targets[i].name, key, fault, res, err)
			}
		}
	}
	t.Logf("%d takes failed with %s, %d were allowed and written; %d peeks and %d denials answered right, %d other calls failed with %s",
		failed.Load(), fault, taken, peeks.Load(), denials.Load(), faultErrs.Load(), fault)
	if n := wrong.Load() + unknown.Load(); n > 0 {
		t.Errorf("%d calls answered wrong or failed with another error", n)
	}
	// Not vacuous: the fault hit, and the load was answered.
	if failed.Load() == 0 || peeks.Load() == 0 || denials.Load() == 0 {
		t.Errorf("the load did not run as meant")
	}
}

// fillMemory sets Redis's maxmemory a little above what it uses, then
// writes until a write fails with OOM.
func fillMemory(ctx context.Context, t *testing.T, client *redis.Client) {
	t.Helper()
	info, err := client.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 {
		t.Fatalf("no used_memory in INFO memory:\n%s", info)
	}
	if err := client.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+4<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 64<<10)
	rand.Read(value)
	for i := 0; ; i++ {
		err := client.Set(ctx, "fill:"+strconv.Itoa(i), value, 0).Err()
		if err == nil {
			continue
		}
		if !redis.HasErrorPrefix(err, "OOM") {
			t.Fatalf("filling Redis: %v", err)
		}
		return
	}
}
