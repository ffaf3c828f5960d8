package conformance

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// clusterTimeout bounds each of the cluster tests below.
const clusterTimeout = 60 * time.Second

// pipelining names the two ways a Store sends its calls.
var pipelining = []struct {
	name string
	on   bool
}{{"pipelined", true}, {"unpipelined", false}}

// clusterLimiters returns a limiter per policy of the policies table, all
// on one store over client, on the server's clock.
func clusterLimiters(t *testing.T, client *redis.ClusterClient, prefix string, opts ...redisstore.Option) (*redisstore.Store, []*ratekeeper.Limiter) {
	t.Helper()
	store := redisstore.New(client, append([]redisstore.Option{redisstore.WithKeyPrefix(prefix)}, opts...)...)
	lims := make([]*ratekeeper.Limiter, len(policies))
	for i, pc := range policies {
		lims[i] = newLimiter(t, store, pc.policy)
	}
	return store, lims
}

// decideAll makes one request of cost 1 for every key with every limiter,
// from several goroutines so that calls share pipelines across masters,
// and returns the first 20 errors.
func decideAll(ctx context.Context, lims []*ratekeeper.Limiter, keys []string) []error {
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(lims)*len(keys) {
					return
				}
				if _, err := lims[i%len(lims)].Allow(ctx, keys[i/len(lims)]); err != nil {
					mu.Lock()
					if len(errs) < 20 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// deleteClusterKeys deletes every key that begins with prefix from every
// master when t ends.
func deleteClusterKeys(t *testing.T, client *redis.ClusterClient, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			keys, err := scanKeys(ctx, m, prefix)
			if err != nil {
				return err
			}
			// One key per command: keys of different slots cannot share one.
			_, err = m.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			})
			return err
		})
		if err != nil {
			t.Errorf("delete the test's keys: %v", err)
		}
	})
}

// scanKeys returns the keys of one node that begin with prefix, which
// must hold no glob characters.
func scanKeys(ctx context.Context, node *redis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// clusterPrefix is a key prefix for t without glob characters, for SCAN.
func clusterPrefix(t *testing.T) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(`*?[]\`, r) {
			return '_'
		}
		return r
	}, redistest.Prefix(t))
}

// TestClusterNoCrossSlot decides with every policy for a thousand callers
// whose keys hold the characters that delimit or escape a hash tag: every
// script call's keys must share a slot, or the cluster refuses it.
func TestClusterNoCrossSlot(t *testing.T) {
	client := redistest.ClusterClient(t)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = [...]string{"user:%d", "{%d}", "}%d{", "{}%d", "%d}{x}", "%%7B%d%%7D", "a%%%d{", "{{%d}}"}[i%8]
		keys[i] = fmt.Sprintf(keys[i], i)
	}
	for _, pl := range pipelining {
		t.Run(pl.name, func(t *testing.T) {
			prefix := clusterPrefix(t)
			deleteClusterKeys(t, client, prefix)
			_, lims := clusterLimiters(t, client, prefix, redisstore.WithAutoPipelining(pl.on))
			ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
			defer cancel()
			for _, err := range decideAll(ctx, lims, keys) {
				t.Error(err)
			}
		})
	}
}

// TestClusterNoScript flushes the functions and the scripts of every
// master, then decides with every policy for callers on each master: each
// call must load its library and its script again on its own master,
// without an error, whether it goes alone or in a pipeline.
func TestClusterNoScript(t *testing.T) {
	redistest.ClusterAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for _, pl := range pipelining {
		t.Run(pl.name, func(t *testing.T) {
			// A client of its own, to count the NOSCRIPT replies in pipelines.
			client := redistest.ClusterClient(t)
			var piped noScriptHook
			client.AddHook(&piped)
			prefix := clusterPrefix(t)
			deleteClusterKeys(t, client, prefix)
			store, lims := clusterLimiters(t, client, prefix, redisstore.WithAutoPipelining(pl.on))
			callers := callersPerMaster(ctx, t, client, store, lims[0].Spec())
			var keys []string
			for _, k := range callers {
				keys = append(keys, k)
			}
			// One caller at a time, then all at once: a lone call runs
			// EVALSHA then EVAL; concurrent ones share pipelines, whose
			// NOSCRIPT replies are sent again as EVAL.
			for _, concurrent := range []bool{false, true} {
				before := noScriptCounts(ctx, t, client)
				flushScripts(ctx, t, client)
				if concurrent {
					for _, err := range decideAll(ctx, lims, keys) {
						t.Error(err)
					}
				} else {
					for _, lim := range lims {
						for _, k := range keys {
							if _, err := lim.Allow(ctx, k); err != nil {
								t.Error(err)
							}
						}
					}
				}
				after := noScriptCounts(ctx, t, client)
				for addr, k := range callers {
					if after[addr] <= before[addr] {
						t.Errorf("concurrent=%v: no NOSCRIPT reply on %s, which owns caller %q: the flush was not tested", concurrent, addr, k)
					}
				}
				err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					libs, err := m.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratekeeper_*"}).Result()
					if err == nil && len(libs) == 0 {
						err = fmt.Errorf("no library loaded again on %s", m.Options().Addr)
					}
					return err
				})
				if err != nil {
					t.Errorf("concurrent=%v: %v", concurrent, err)
				}
			}
			t.Logf("%d NOSCRIPT replies in pipelines", piped.n.Load())
			// 32 goroutines on 2 round trips in flight: most calls queue.
			if pl.on && piped.n.Load() == 0 {
				t.Error("no NOSCRIPT reply in a pipeline: the pipelined reload was not tested")
			}
		})
	}
}

// noScriptHook counts the NOSCRIPT replies to commands sent in pipelines.
type noScriptHook struct{ n atomic.Int64 }

func (*noScriptHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*noScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *noScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				h.n.Add(1)
			}
		}
		return err
	}
}

// callersPerMaster returns, for each master's address, a caller whose
// Redis key under spec that master owns. All the keys of a caller share
// its slot, whatever the policy.
func callersPerMaster(ctx context.Context, t *testing.T, client *redis.ClusterClient, store *redisstore.Store, spec *driver.ValidSpec) map[string]string {
	t.Helper()
	masters := masterAddrs(ctx, t, client)
	callers := make(map[string]string)
	for i := 0; len(callers) < len(masters); i++ {
		if i == 10_000 {
			t.Fatalf("no caller found on some of the masters %v: %v", masters, callers)
		}
		k := "caller:" + strconv.Itoa(i)
		m, err := client.MasterForKey(ctx, store.Key(k, spec))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := callers[m.Options().Addr]; !ok {
			callers[m.Options().Addr] = k
		}
	}
	return callers
}

// masterAddrs returns the address of every master.
func masterAddrs(ctx context.Context, t *testing.T, client *redis.ClusterClient) []string {
	t.Helper()
	var mu sync.Mutex
	var addrs []string
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// flushScripts empties the libraries of functions and the script cache of
// every master.
func flushScripts(ctx context.Context, t *testing.T, client *redis.ClusterClient) {
	t.Helper()
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if err := m.FunctionFlush(ctx).Err(); err != nil {
			return err
		}
		return m.ScriptFlush(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// noScriptCounts returns how many NOSCRIPT errors each master has replied
// since it started, by address.
func noScriptCounts(ctx context.Context, t *testing.T, client *redis.ClusterClient) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := make(map[string]int)
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "errorstats").Result()
		if err != nil {
			return err
		}
		n := 0
		for line := range strings.Lines(info) {
			// errorstat_NOSCRIPT:count=3
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
				if n, err = strconv.Atoi(rest); err != nil {
					return fmt.Errorf("INFO errorstats: %q", line)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		counts[m.Options().Addr] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// TestClusterDistribution checks that callers spread evenly over the
// masters: each owns between 25% and 42% of 10,000 callers' Redis keys,
// and holds exactly the keys it owns once each caller made a request.
func TestClusterDistribution(t *testing.T) {
	const callers = 10_000
	client := redistest.ClusterClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	prefix := clusterPrefix(t)
	deleteClusterKeys(t, client, prefix)
	store := redisstore.New(client, redisstore.WithKeyPrefix(prefix))
	lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 10, Window: time.Hour})

	keys := make([]string, callers)
	want := make(map[string]int) // keys per master, by address
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		m, err := client.MasterForKey(ctx, store.Key(keys[i], lim.Spec()))
		if err != nil {
			t.Fatal(err)
		}
		want[m.Options().Addr]++
	}
	masters := masterAddrs(ctx, t, client)
	for _, addr := range masters {
		share := float64(want[addr]) / callers
		t.Logf("%s owns %d of %d callers (%.1f%%)", addr, want[addr], callers, 100*share)
		if share < 0.25 || share > 0.42 {
			t.Errorf("%s owns %.1f%% of the callers, want 25%% to 42%%", addr, 100*share)
		}
	}

	for _, err := range decideAll(ctx, []*ratekeeper.Limiter{lim}, keys) {
		t.Fatal(err)
	}
	total := 0
	for _, addr := range masters {
		m := redis.NewClient(&redis.Options{Addr: addr})
		got, err := scanKeys(ctx, m, prefix)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += len(got)
		if len(got) != want[addr] {
			t.Errorf("%s holds %d of the keys, want the %d it owns", addr, len(got), want[addr])
		}
	}
	if total != callers {
		t.Errorf("the masters hold %d keys in all, want %d", total, callers)
	}
}

// TestClusterConcurrentDecisions races goroutines over several cluster
// clients on one key, as TestConcurrentDecisions does on one Redis: they
// admit exactly what the policy allows.
func TestClusterConcurrentDecisions(t *testing.T) {
	const goroutines = 200
	addrs := redistest.ClusterAddrs(t)
	newLimiters := func(t *testing.T, p ratekeeper.Policy) []*ratekeeper.Limiter {
		prefix := redistest.Prefix(t)
		var lims []*ratekeeper.Limiter
		for range 4 {
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { client.Close() })
			lims = append(lims, newLimiter(t, redisstore.New(client, redisstore.WithKeyPrefix(prefix)), p))
		}
		forget(t, lims[0], "k")
		return lims
	}
	for _, tc := range raceCases {
		t.Run(tc.name, func(t *testing.T) {
			lims := newLimiters(t, tc.policy)
			if allowed, denied := race(t, lims, goroutines, "k", tc.cost); allowed != tc.allowed || denied != goroutines-tc.allowed {
				t.Errorf("of %d requests, %d allowed and %d denied; want %d allowed", goroutines, allowed, denied, tc.allowed)
			}
			checkRemaining(t, lims[0], "k", tc.remaining)
		})
	}
	// The leaky bucket drains all along, so only the count is exact (see
	// TestLeakyBucketConcurrentDecisions): 0.001 per second drains far
	// less than one request during the race.
	t.Run("lb10_0.001ps_cost1", func(t *testing.T) {
		lims := newLimiters(t, ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 0.001})
		if allowed, denied := race(t, lims, goroutines, "k", 1); allowed != 10 || denied != goroutines-10 {
			t.Errorf("of %d requests, %d allowed and %d denied; want 10 allowed", goroutines, allowed, denied)
		}
	})
}
