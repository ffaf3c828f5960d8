package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// policies holds one policy per algorithm, each admitting 3 requests at
// once and taking about an hour to be full again, so that nothing
// refills during a test and an expiry the scripts write is told apart
// from one a test sets.
var policies = []ratekeeper.Policy{
	ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour},
	ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 3},
	ratekeeper.FixedWindow{Limit: 3, Window: time.Hour},
	ratekeeper.SlidingWindowLog{Limit: 3, Window: time.Hour},
	ratekeeper.SlidingWindowCounter{Limit: 3, Window: time.Hour},
	ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 0.001},
}

// forEachAlgorithm runs f in a subtest per algorithm.
func forEachAlgorithm(t *testing.T, f func(t *testing.T, p ratekeeper.Policy)) {
	for _, p := range policies {
		t.Run(mustSpec(t, p).Algorithm(), func(t *testing.T) { f(t, p) })
	}
}

func mustSpec(t testing.TB, p ratekeeper.Policy) *driver.ValidSpec {
	t.Helper()
	spec, err := testutil.SpecOf(p)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// newLimiter returns a limiter over the test Redis, with keys under a
// prefix of its own.
func newLimiter(t testing.TB, p ratekeeper.Policy, opts ...redisstore.Option) (*ratekeeper.Limiter, *redisstore.Store, *redis.Client) {
	t.Helper()
	client := redistest.Client(t)
	opts = append([]redisstore.Option{redisstore.WithKeyPrefix(redistest.Prefix(t))}, opts...)
	store := redisstore.New(client, opts...)
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim, store, client
}

// stoppedClock makes every decision of a store happen at one instant, so
// that every Result is exact.
func stoppedClock() redisstore.Option {
	now := time.Now()
	return redisstore.WithClock(func() time.Time { return now })
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestNewDoesNotContactRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	for _, pipelining := range []bool{true, false} {
		lim, err := ratekeeper.New(redisstore.New(client, redisstore.WithAutoPipelining(pipelining)), policies[0])
		if err != nil {
			t.Fatalf("New with Redis down: %v", err)
		}
		// go-redis redials for longer than this: the context must cut it
		// short.
		const timeout = 300 * time.Millisecond
		calls := map[string]func(context.Context) error{
			"Allow": func(ctx context.Context) error { _, err := lim.Allow(ctx, "k"); return err },
			"Peek":  func(ctx context.Context) error { _, err := lim.Peek(ctx, "k"); return err },
			"Reset": func(ctx context.Context) error { return lim.Reset(ctx, "k") },
		}
		for name, call := range calls {
			start := time.Now()
			if err := call(ctxTimeout(t, timeout)); err == nil {
				t.Errorf("%s with Redis down (pipelining %t): no error", name, pipelining)
			}
			if elapsed := time.Since(start); elapsed > timeout+time.Second {
				t.Errorf("%s with Redis down (pipelining %t) took %v, beyond its context's %v", name, pipelining, elapsed, timeout)
			}
		}
	}
}

func TestScriptFlush(t *testing.T) {
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			client := redistest.Client(t)
			store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)),
				redisstore.WithAutoPipelining(pipelining), stoppedClock())
			var lims []*ratekeeper.Limiter
			for _, p := range policies {
				lim, err := ratekeeper.New(store, p)
				if err != nil {
					t.Fatal(err)
				}
				lims = append(lims, lim)
			}
			ctx := ctxTimeout(t, 10*time.Second)

			for i := range 3 {
				if err := client.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				for _, lim := range lims {
					alg := lim.Spec().Algorithm()
					res, err := lim.Allow(ctx, "k")
					testutil.WantResult(t, fmt.Sprintf("%s: Allow %d after SCRIPT FLUSH", alg, i+1), res, err, true, float64(2-i))
					// Loaded again, the script is found by its hash.
					res, err = lim.Peek(ctx, "k")
					testutil.WantResult(t, fmt.Sprintf("%s: Peek %d", alg, i+1), res, err, i < 2, float64(2-i))
				}
			}
		})
	}
}

func TestUniversalClient(t *testing.T) {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{redistest.Addr(t)}})
	defer client.Close()
	if _, ok := client.(*redis.Client); !ok {
		t.Fatalf("NewUniversalClient with one address made a %T, want a *redis.Client", client)
	}
	lim, err := ratekeeper.New(redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t))),
		ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)

	res, err := lim.AllowN(ctx, "k", 2)
	testutil.WantResult(t, "AllowN(2)", res, err, true, 1)
	res, err = lim.Allow(ctx, "k")
	testutil.WantResult(t, "Allow", res, err, true, 0)
	res, err = lim.Allow(ctx, "k")
	testutil.WantResult(t, "Allow on an empty bucket", res, err, false, 0)
	if res.RetryAfter <= 0 || res.RetryAfter > time.Hour {
		t.Errorf("RetryAfter = %v, want in (0, 1h]", res.RetryAfter)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	res, err = lim.Peek(ctx, "k")
	testutil.WantResult(t, "Peek after Reset", res, err, true, 3)
}

func TestKeyLayout(t *testing.T) {
	spec := mustSpec(t, policies[0])
	// Key never contacts Redis.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	store := redisstore.New(client)

	k := store.Key("user:1", spec)
	if !strings.HasPrefix(k, redisstore.DefaultKeyPrefix) {
		t.Errorf("Key = %q, want the prefix %q", k, redisstore.DefaultKeyPrefix)
	}
	if tag, _ := hashTag(k); tag != "user:1" {
		t.Errorf("Key = %q has hash tag %q, want the caller key %q", k, tag, "user:1")
	}

	// A tag cut short, or empty, would send distinct callers to one tag;
	// so would an escape that is not one-to-one.
	callers := []string{
		"{", "}", "{}", "}{", "{{", "}}", "a}b", "a}c", "a{b", "a{c", "{a}", "a",
		"%", "%%", "%7B", "%7D", "%25", "%7B%7D", "a%b", "{%}", "}%7D", "x}:tb",
	}
	byTag := map[string]string{}
	for _, caller := range callers {
		k := store.Key(caller, spec)
		tag, ok := hashTag(k)
		switch {
		case !ok:
			t.Errorf("Key(%q) = %q has no hash tag", caller, k)
		case byTag[tag] != "":
			t.Errorf("Key(%q) = %q has the hash tag %q of Key(%q)", caller, k, tag, byTag[tag])
		case !strings.HasPrefix(k, redisstore.DefaultKeyPrefix+"{"+tag+"}"):
			t.Errorf("Key(%q) = %q: the hash tag %q is not the whole caller key", caller, k, tag)
		}
		byTag[tag] = caller
	}

	for _, prefix := range []string{"{", "}", "app{1}:", "{}", "a%7B", "a{"} {
		k := redisstore.New(client, redisstore.WithKeyPrefix(prefix)).Key("user:1", spec)
		if tag, _ := hashTag(k); tag != "user:1" {
			t.Errorf("with prefix %q, Key = %q has hash tag %q, want %q", prefix, k, tag, "user:1")
		}
	}
	a := redisstore.New(client, redisstore.WithKeyPrefix("a{")).Key("k", spec)
	b := redisstore.New(client, redisstore.WithKeyPrefix("a%7B")).Key("k", spec)
	if a == b {
		t.Errorf("prefixes %q and %q both give the key %q", "a{", "a%7B", a)
	}

	// Every algorithm keeps its own key, in the caller's slot.
	seen := map[string]string{}
	for _, p := range policies {
		spec := mustSpec(t, p)
		k := store.Key("user:1", spec)
		if tag, _ := hashTag(k); tag != "user:1" {
			t.Errorf("%s: Key = %q has hash tag %q, want %q", spec.Algorithm(), k, tag, "user:1")
		}
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share the key %q", spec.Algorithm(), other, k)
		}
		seen[k] = spec.Algorithm()
	}
}

func TestKeySlots(t *testing.T) {
	spec := mustSpec(t, policies[0])
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	stores := []*redisstore.Store{
		redisstore.New(client),
		redisstore.New(client, redisstore.WithKeyPrefix("other:")),
		redisstore.New(client, redisstore.WithKeyPrefix("{braced}:")),
	}

	const callers = 10_000
	slots := map[int]bool{}
	for i := range callers {
		caller := fmt.Sprintf("user:%d", i)
		slot := keySlot(stores[0].Key(caller, spec))
		for _, s := range stores[1:] {
			if k := s.Key(caller, spec); keySlot(k) != slot {
				t.Fatalf("%q is in slot %d, but %q in slot %d", k, keySlot(k), stores[0].Key(caller, spec), slot)
			}
		}
		slots[slot] = true
	}
	// 10,000 keys hashed uniformly fill about 7,500 of the 16,384 slots.
	if len(slots) <= 5000 {
		t.Errorf("%d callers use only %d slots, want more than 5000", callers, len(slots))
	}
}

// The slot function is checked against the examples of the Redis Cluster
// specification.
func TestKeySlotFunc(t *testing.T) {
	if got := redisstore.HashSlot("123456789"); got != 0x31C3 {
		t.Errorf("HashSlot(123456789) = %#x, want 0x31c3, CRC-16/XMODEM's", got)
	}
	for key, want := range map[string]int{
		"foo":                   12182,
		"{foo}.bar":             12182,
		"{}foo":                 keySlotOf("{}foo"),
		"foo{}{bar}":            keySlotOf("foo{}{bar}"),
		"foo{{bar}}zap":         keySlotOf("{bar"),
		"foo{bar}{zap}":         keySlotOf("bar"),
		"{user1000}.following":  keySlotOf("user1000"),
		"{user1000}.followers}": keySlotOf("user1000"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// hashTag returns what Redis Cluster hashes of key when it has a hash tag:
// the content between its first '{' and the next '}', if not empty.
func hashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// keySlot is Redis Cluster's HASH_SLOT(key).
func keySlot(key string) int {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return keySlotOf(key)
}

// keySlotOf hashes all of s, braces included, as the store does.
func keySlotOf(s string) int { return int(redisstore.HashSlot(s)) }

// scanKeys returns every key under prefix.
func scanKeys(ctx context.Context, t *testing.T, client *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	iter := client.Scan(ctx, 0, redisPattern(prefix)+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// redisPattern escapes the glob characters of s for SCAN MATCH.
func redisPattern(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

func TestKeysExpire(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, p ratekeeper.Policy) {
		prefix := redistest.Prefix(t)
		lim, _, client := newLimiter(t, p, redisstore.WithKeyPrefix(prefix))
		ctx := ctxTimeout(t, 10*time.Second)

		res, err := lim.Peek(ctx, "k")
		testutil.WantResult(t, "Peek on a fresh key", res, err, true, 3)
		if keys := scanKeys(ctx, t, client, prefix); len(keys) != 0 {
			t.Fatalf("a peek on a fresh key wrote %q", keys)
		}

		for n := int64(1); n <= 2; n++ {
			res, err = lim.AllowN(ctx, "k", n)
			if err != nil || !res.Allowed {
				t.Fatalf("AllowN(%d) = %+v, %v", n, res, err)
			}
			keys := scanKeys(ctx, t, client, prefix)
			if len(keys) == 0 {
				t.Fatalf("AllowN(%d) wrote no key", n)
			}
			// The key expires when its state is full again, plus the
			// store's millisecond of slack and a millisecond of rounding.
			for _, k := range keys {
				ttl, err := client.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= 0 || ttl > res.ResetAfter+2*time.Millisecond {
					t.Errorf("after AllowN(%d), PTTL %s = %v, want in (0, %v]", n, k, ttl, res.ResetAfter+2*time.Millisecond)
				}
			}
		}

		if err := lim.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if keys := scanKeys(ctx, t, client, prefix); len(keys) != 0 {
			t.Errorf("Reset left %q", keys)
		}
		res, err = lim.Peek(ctx, "k")
		testutil.WantResult(t, "Peek after Reset", res, err, true, 3)
	})
}

func TestDeniedWritesNothing(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, p ratekeeper.Policy) {
		lim, store, client := newLimiter(t, p, stoppedClock())
		ctx := ctxTimeout(t, 10*time.Second)
		key := store.Key("k", lim.Spec())

		res, err := lim.AllowN(ctx, "k", 2)
		testutil.WantResult(t, "AllowN(2)", res, err, true, 1)
		state, err := client.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// A write would set an expiry of at most two hours.
		const mark = 10 * time.Hour
		if err := client.PExpire(ctx, key, mark).Err(); err != nil {
			t.Fatal(err)
		}

		res, err = lim.AllowN(ctx, "k", 2)
		testutil.WantResult(t, "AllowN(2) with 1 left", res, err, false, 1)
		res, err = lim.AllowN(ctx, "k", 3)
		testutil.WantResult(t, "AllowN(3) with 1 left", res, err, false, 1)
		res, err = lim.Peek(ctx, "k")
		testutil.WantResult(t, "Peek with 1 left", res, err, true, 1)
		if got := client.Dump(ctx, key).Val(); got != state {
			t.Errorf("denied requests and a peek changed the state")
		}
		if got := client.PTTL(ctx, key).Val(); got < mark-time.Minute {
			t.Errorf("denied requests and a peek set the expiry to %v", got)
		}
		res, err = lim.Allow(ctx, "k")
		testutil.WantResult(t, "Allow with 1 left", res, err, true, 0)
	})
}

func TestMalformedState(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, p ratekeeper.Policy) {
		lim, store, client := newLimiter(t, p, stoppedClock())
		if lim.Spec().Algorithm() == driver.AlgorithmSlidingWindowLog {
			t.Skip("keeps a sorted set: a string there is of the wrong type")
		}
		ctx := ctxTimeout(t, 10*time.Second)

		for i, value := range []string{"garbage", "", ":", "1:", ":1", "a:b", "1:2:3:4", "1.5:2.5", "0x10:0x10",
			"nan", "inf", "1e400", "-5:3", "99999999999999999999", "0:99999999999999999999", "1:2:99999999999999999999"} {
			caller := fmt.Sprint("k", i)
			key := store.Key(caller, lim.Spec())
			if err := client.Set(ctx, key, value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := lim.Peek(ctx, caller)
			testutil.WantResult(t, fmt.Sprintf("Peek on %q", value), res, err, true, 3)
			res, err = lim.Allow(ctx, caller)
			testutil.WantResult(t, fmt.Sprintf("Allow on %q", value), res, err, true, 2)
			// The state was rewritten, so the next decision counts on it.
			res, err = lim.Allow(ctx, caller)
			testutil.WantResult(t, fmt.Sprintf("second Allow on %q", value), res, err, true, 1)
		}
	})
}

func TestWrongType(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, p ratekeeper.Policy) {
		lim, store, client := newLimiter(t, p)
		ctx := ctxTimeout(t, 10*time.Second)
		key := store.Key("k", lim.Spec())
		wrong := []func() error{
			func() error { return client.HSet(ctx, key, "tokens", 5).Err() },
			func() error { return client.RPush(ctx, key, "x").Err() },
		}
		if lim.Spec().Algorithm() == driver.AlgorithmSlidingWindowLog {
			wrong = append(wrong, func() error { return client.Set(ctx, key, "1:1", 0).Err() })
		}
		t.Cleanup(func() { client.Del(context.Background(), key) })

		for _, write := range wrong {
			if err := write(); err != nil {
				t.Fatal(err)
			}
			typ := client.Type(ctx, key).Val()
			if res, err := lim.Allow(ctx, "k"); err == nil {
				t.Errorf("Allow on a %s = %+v, want an error", typ, res)
			}
			if res, err := lim.Peek(ctx, "k"); err == nil {
				t.Errorf("Peek on a %s = %+v, want an error", typ, res)
			}
			// Reset clears the damage.
			if err := lim.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			res, err := lim.Allow(ctx, "k")
			testutil.WantResult(t, fmt.Sprintf("Allow after Reset of a %s", typ), res, err, true, 2)
			if err := lim.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// An algorithm registered without a script, and a spec not made by
// driver.Validate, are refused before the store contacts Redis.
func TestUnknownAlgorithm(t *testing.T) {
	driver.Register("no_script", driver.Algorithm{
		Check: func(s *driver.Spec) (int64, error) { return 1, nil },
		Step:  func(driver.Params, *driver.State, int64, int64, driver.Mode) driver.Outcome { return driver.Outcome{} },
		Short: "ns",
	})
	spec, err := driver.Validate(driver.Spec{Algorithm: "no_script", Limit: 1, MaxCost: 1})
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	store := redisstore.New(client)
	ctx := ctxTimeout(t, 5*time.Second)

	for _, spec := range []*driver.ValidSpec{spec, {}, nil} {
		if _, err := store.Decide(ctx, "k", spec, 1); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("Decide with %v: %v, want ErrInvalidPolicy", spec, err)
		}
		if err := store.Reset(ctx, "k", spec); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("Reset with %v: %v, want ErrInvalidPolicy", spec, err)
		}
		if k := store.Key("k", spec); k != "" {
			t.Errorf("Key with %v = %q, want none", spec, k)
		}
	}
}
