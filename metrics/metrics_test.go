package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/metrics"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// series gathers m through a pedantic registry, which also checks that
// Collect sends only what Describe declares, and returns every series as
// `name{label=value,...}` (labels sorted) with its value: a counter's
// value, or a histogram's sample count (as name_count).
func series(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			name := f.GetName()
			v := s.GetCounter().GetValue()
			if h := s.GetHistogram(); h != nil {
				name, v = name+"_count", float64(h.GetSampleCount())
			}
			got[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return got
}

// only keeps the series whose names begin with prefix.
func only(all map[string]float64, prefix string) map[string]float64 {
	kept := make(map[string]float64)
	for k, v := range all {
		if strings.HasPrefix(k, prefix) {
			kept[k] = v
		}
	}
	return kept
}

func checkSeries(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", what, format(got), format(want))
	}
}

func format(m map[string]float64) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		lines = append(lines, fmt.Sprintf("%s %g", k, m[k]))
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}

func lint(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	problems, err := promtest.CollectAndLint(m)
	if err != nil {
		t.Fatalf("CollectAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func newMemstore(t *testing.T, opts ...memstore.Option) *memstore.Store {
	s := memstore.New(opts...)
	t.Cleanup(func() { s.Close() })
	return s
}

func newLimiter(t *testing.T, store ratekeeper.Store, p ratekeeper.Policy, opts ...ratekeeper.Option) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(store, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestDecisions(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	store := m.Wrap(newMemstore(t))
	hourly := ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Hour}
	api := newLimiter(t, store, hourly, ratekeeper.WithName("api"))
	login := newLimiter(t, store, ratekeeper.Named("login", hourly))
	gcra := newLimiter(t, store, ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 1})

	for range 5 {
		api.Allow(ctx, "user:1")
	}
	// Limiters keep their state apart only by key.
	login.Allow(ctx, "login:user:1")
	gcra.Allow(ctx, "gcra:user:1")
	gcra.Allow(ctx, "gcra:user:1")
	// Peeks and invalid input decide nothing.
	api.Peek(ctx, "user:1")
	if _, err := api.AllowN(ctx, "user:1", 3); !errors.Is(err, ratekeeper.ErrInvalidCost) {
		t.Fatalf("AllowN(3) = %v, want ErrInvalidCost", err)
	}
	if _, err := api.Allow(ctx, ""); !errors.Is(err, ratekeeper.ErrInvalidKey) {
		t.Fatalf(`Allow("") = %v, want ErrInvalidKey`, err)
	}
	if err := api.Reset(ctx, "user:1"); err != nil {
		t.Fatal(err)
	}

	got := series(t, m)
	checkSeries(t, "decisions", only(got, "ratekeeper_decisions_total"), map[string]float64{
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=api}":     2,
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=api}":      3,
		"ratekeeper_decisions_total{limiter=api,outcome=error,policy=api}":       0,
		"ratekeeper_decisions_total{limiter=login,outcome=allowed,policy=login}": 1,
		"ratekeeper_decisions_total{limiter=login,outcome=denied,policy=login}":  0,
		"ratekeeper_decisions_total{limiter=login,outcome=error,policy=login}":   0,
		"ratekeeper_decisions_total{limiter=gcra,outcome=allowed,policy=gcra}":   1,
		"ratekeeper_decisions_total{limiter=gcra,outcome=denied,policy=gcra}":    1,
		"ratekeeper_decisions_total{limiter=gcra,outcome=error,policy=gcra}":     0,
	})
	// Every call to the store is timed, the peek included.
	checkSeries(t, "durations", only(got, "ratekeeper_store_duration_seconds"), map[string]float64{
		"ratekeeper_store_duration_seconds_count{limiter=api,op=decide}":   6,
		"ratekeeper_store_duration_seconds_count{limiter=api,op=reset}":    1,
		"ratekeeper_store_duration_seconds_count{limiter=login,op=decide}": 1,
		"ratekeeper_store_duration_seconds_count{limiter=gcra,op=decide}":  2,
	})
	// Neither All limiters nor deny caches here.
	for k := range got {
		if strings.Contains(k, "policy_denials") || strings.Contains(k, "deny_cache") {
			t.Errorf("unexpected series %s", k)
		}
	}
	lint(t, m)
}

func TestAll(t *testing.T) {
	ctx := context.Background()
	clk := testutil.NewClock(time.Unix(1_700_000_000, 0))
	m := metrics.New()
	store := m.Wrap(newMemstore(t, memstore.WithClock(clk.Now)))
	lim := newLimiter(t, store, ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 2, RefillRate: 2, RefillInterval: time.Second}),
		ratekeeper.Named("hourly", ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}),
	), ratekeeper.WithName("api"))

	steps := []struct {
		advance time.Duration
		cost    int64
		allowed bool
		policy  string // the binding one
	}{
		{0, 1, true, "burst"},            // burst 1 left, hourly 2: the least is burst's
		{0, 1, true, "burst"},            // burst 0, hourly 1
		{0, 1, false, "burst"},           // burst denies; hourly would allow
		{time.Second, 1, true, "hourly"}, // burst 1, hourly 0
		{0, 1, false, "hourly"},          // burst would allow; hourly denies
		{0, 2, false, "hourly"},          // both deny; hourly for longer
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		res, err := lim.AllowN(ctx, "user:1", s.cost)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != s.allowed || res.Policy != s.policy {
			t.Fatalf("step %d: allowed %v by %q, want %v by %q", i, res.Allowed, res.Policy, s.allowed, s.policy)
		}
	}

	got := series(t, m)
	checkSeries(t, "decisions", only(got, "ratekeeper_decisions_total"), map[string]float64{
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=burst}":  2,
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=burst}":   1,
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=hourly}": 1,
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=hourly}":  2,
		"ratekeeper_decisions_total{limiter=api,outcome=error,policy=api}":      0,
	})
	checkSeries(t, "policy denials", only(got, "ratekeeper_policy_denials_total"), map[string]float64{
		"ratekeeper_policy_denials_total{limiter=api,policy=burst}":  2,
		"ratekeeper_policy_denials_total{limiter=api,policy=hourly}": 2,
	})
	lint(t, m)
}

// TestSharedName: limiters of one name share their series, whatever their
// policies.
func TestSharedName(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	store := m.Wrap(newMemstore(t))
	one := ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}
	single := newLimiter(t, store, one, ratekeeper.WithName("api"))
	two := ratekeeper.FixedWindow{Limit: 2, Window: time.Hour}
	all := newLimiter(t, store, ratekeeper.All(ratekeeper.Named("a", two), ratekeeper.Named("api", one)),
		ratekeeper.WithName("api"))
	for range 2 {
		single.Allow(ctx, "single")
		all.Allow(ctx, "all")
	}
	got := series(t, m)
	checkSeries(t, "decisions", only(got, "ratekeeper_decisions_total"), map[string]float64{
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=api}": 2, // one of each limiter
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=api}":  2, // the All's bound by its part "api"
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=a}":   0,
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=a}":    0,
		"ratekeeper_decisions_total{limiter=api,outcome=error,policy=api}":   0,
	})
	checkSeries(t, "policy denials", only(got, "ratekeeper_policy_denials_total"), map[string]float64{
		"ratekeeper_policy_denials_total{limiter=api,policy=a}":   0,
		"ratekeeper_policy_denials_total{limiter=api,policy=api}": 1,
	})
}

// TestConcurrent runs decisions of several limiters at once while their
// series are first created and gathered, for the race detector.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	store := m.Wrap(newMemstore(t))
	const limiters, perLimiter = 4, 200
	var wg sync.WaitGroup
	for i := range limiters {
		lim := newLimiter(t, store, ratekeeper.All(
			ratekeeper.Named("small", ratekeeper.FixedWindow{Limit: 50, Window: time.Hour}),
			ratekeeper.Named("large", ratekeeper.FixedWindow{Limit: 100, Window: time.Hour}),
		), ratekeeper.WithName(fmt.Sprint("lim", i)))
		for g := range 2 {
			wg.Go(func() {
				for j := range perLimiter / 2 {
					if _, err := lim.Allow(ctx, fmt.Sprint(i, ":", g, ":", j%2)); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Go(func() {
		for range 20 {
			series(t, m)
		}
	})
	wg.Wait()
	got := series(t, m)
	for i := range limiters {
		allowed := got[fmt.Sprintf("ratekeeper_decisions_total{limiter=lim%d,outcome=allowed,policy=small}", i)]
		denied := got[fmt.Sprintf("ratekeeper_decisions_total{limiter=lim%d,outcome=denied,policy=small}", i)]
		// 4 keys of 50 requests each, 50 allowed per key.
		if allowed != 4*50 || denied != 0 {
			t.Errorf("lim%d: %v allowed, %v denied; want 200, 0", i, allowed, denied)
		}
	}
}

// closedAddr returns a loopback address that refuses connections.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// logBuffer collects log records at every level.
func logBuffer() (*slog.Logger, *testutil.SyncBuffer) {
	buf := new(testutil.SyncBuffer)
	h := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h), buf
}

func TestStoreFailure(t *testing.T) {
	client := redis.NewClient(&redis.Options{
		Addr:               closedAddr(t),
		DialTimeout:        200 * time.Millisecond,
		ReadTimeout:        200 * time.Millisecond,
		WriteTimeout:       200 * time.Millisecond,
		MaxRetries:         -1,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
	})
	defer client.Close()
	logger, logs := logBuffer()
	m := metrics.New(metrics.WithLogger(logger))
	lim := newLimiter(t, m.Wrap(redisstore.New(client)),
		ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 5}, ratekeeper.WithName("api"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if _, err := lim.Allow(ctx, "user:1"); err == nil {
		t.Fatal("Allow succeeded against a closed port")
	}
	if _, err := lim.Peek(ctx, "user:1"); err == nil {
		t.Fatal("Peek succeeded against a closed port")
	}
	if err := lim.Reset(ctx, "user:1"); err == nil {
		t.Fatal("Reset succeeded against a closed port")
	}

	got := series(t, m)
	checkSeries(t, "decisions", only(got, "ratekeeper_decisions_total"), map[string]float64{
		"ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=api}": 0,
		"ratekeeper_decisions_total{limiter=api,outcome=denied,policy=api}":  0,
		// A failed peek is a store failure too; a failed Reset is no decision.
		"ratekeeper_decisions_total{limiter=api,outcome=error,policy=api}": 2,
	})
	checkSeries(t, "durations", only(got, "ratekeeper_store_duration_seconds"), map[string]float64{
		"ratekeeper_store_duration_seconds_count{limiter=api,op=decide}": 2,
		"ratekeeper_store_duration_seconds_count{limiter=api,op=reset}":  1,
	})

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("logged %d lines, want 3:\n%s", len(lines), logs)
	}
	for i, op := range []string{"decide", "decide", "reset"} {
		for _, want := range []string{
			"level=ERROR", `msg="ratekeeper: store failed"`, "limiter=api", "algorithm=gcra",
			"op=" + op, "key=user:1", "err=", "connection refused",
		} {
			if !strings.Contains(lines[i], want) {
				t.Errorf("log line %d lacks %s: %s", i, want, lines[i])
			}
		}
	}
	lint(t, m)
}

func TestCanceled(t *testing.T) {
	// A store that would take a while to fail: the context ends first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepts into the backlog, never answers
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer client.Close()
	logger, logs := logBuffer()
	m := metrics.New(metrics.WithLogger(logger))
	lim := newLimiter(t, m.Wrap(redisstore.New(client)),
		ratekeeper.FixedWindow{Limit: 10, Window: time.Minute}, ratekeeper.WithName("api"))

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := lim.Allow(ctx, "user:1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Allow = %v, want context.Canceled", err)
	}

	got := series(t, m)
	if n := got["ratekeeper_decisions_total{limiter=api,outcome=error,policy=api}"]; n != 0 {
		t.Errorf("a canceled call counted as %v errors", n)
	}
	if n := got["ratekeeper_store_duration_seconds_count{limiter=api,op=decide}"]; n != 1 {
		t.Errorf("%v decide calls timed, want 1", n)
	}
	log := logs.String()
	if strings.Count(log, "\n") != 1 || !strings.Contains(log, "level=DEBUG") ||
		!strings.Contains(log, "op=decide") || !strings.Contains(log, "context canceled") {
		t.Errorf("want one Debug line for the canceled call, got:\n%s", log)
	}
}

// TestDefaultLogger: without WithLogger, failures go to the default
// logger of the time.
func TestDefaultLogger(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	m := metrics.New()
	lim := newLimiter(t, m.Wrap(redisstore.New(client)), ratekeeper.FixedWindow{Limit: 1, Window: time.Second})
	logger, logs := logBuffer()
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(logger)
	lim.Allow(context.Background(), "k")
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "limiter=fixed_window") {
		t.Errorf("default logger got:\n%s", logs)
	}
}

func TestDenyCacheHits(t *testing.T) {
	client := redistest.Client(t)
	ctx := context.Background()
	store := redisstore.New(client, redisstore.WithDenyCache(100), redisstore.WithKeyPrefix(redistest.Prefix(t)))
	m := metrics.New()
	// Wrapped twice, and once more through another wrapper: counted once.
	wrapped := m.Wrap(store)
	m.Wrap(store)
	m.Wrap(metrics.New().Wrap(store))
	if _, ok := series(t, m)["ratekeeper_deny_cache_hits_total{}"]; !ok {
		t.Error("no deny_cache_hits_total for a store with a deny cache")
	}

	lim := newLimiter(t, wrapped, ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}, ratekeeper.WithName("api"))
	for range 6 {
		if _, err := lim.Allow(ctx, "user:1"); err != nil {
			t.Fatal(err)
		}
	}
	hits := store.DenyCacheHits()
	if hits != 4 { // the first denial asks Redis, the next four do not
		t.Errorf("DenyCacheHits = %d, want 4", hits)
	}
	got := series(t, m)
	if v := got["ratekeeper_deny_cache_hits_total{}"]; v != float64(hits) {
		t.Errorf("deny_cache_hits_total = %v, want %d", v, hits)
	}
	// Answered from the cache or not, a denial is a denial.
	if v := got["ratekeeper_decisions_total{limiter=api,outcome=denied,policy=api}"]; v != 5 {
		t.Errorf("denied = %v, want 5", v)
	}
	lint(t, m)
}

// TestRedisAll: with redisstore, an All's policies are decided by one
// script; the metrics see the same Results as with memstore.
func TestRedisAll(t *testing.T) {
	client := redistest.Client(t)
	ctx := context.Background()
	m := metrics.New()
	store := m.Wrap(redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t))))
	lim := newLimiter(t, store, ratekeeper.All(
		ratekeeper.Named("short", ratekeeper.FixedWindow{Limit: 2, Window: time.Hour}),
		ratekeeper.Named("long", ratekeeper.FixedWindow{Limit: 2, Window: 2 * time.Hour}),
	))
	for range 3 {
		if _, err := lim.Allow(ctx, "user:1"); err != nil {
			t.Fatal(err)
		}
	}
	got := series(t, m)
	checkSeries(t, "policy denials", only(got, "ratekeeper_policy_denials_total"), map[string]float64{
		"ratekeeper_policy_denials_total{limiter=all,policy=short}": 1,
		"ratekeeper_policy_denials_total{limiter=all,policy=long}":  1,
	})
	// Both deny; the binding policy is the one denying for longer.
	if v := got["ratekeeper_decisions_total{limiter=all,outcome=denied,policy=long}"]; v != 1 {
		t.Errorf("denied by long = %v, want 1", v)
	}
}

func TestOptions(t *testing.T) {
	m := metrics.New(metrics.WithNamespace("app"), metrics.WithBuckets(0.001, 0.01))
	lim := newLimiter(t, m.Wrap(newMemstore(t)), ratekeeper.FixedWindow{Limit: 1, Window: time.Second})
	lim.Allow(context.Background(), "k")

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if h := f.GetMetric()[0].GetHistogram(); h != nil && len(h.GetBucket()) != 2 {
			t.Errorf("%s has %d buckets, want 2", f.GetName(), len(h.GetBucket()))
		}
	}
	if want := []string{"app_decisions_total", "app_store_duration_seconds"}; !slices.Equal(names, want) {
		t.Errorf("metrics %v, want %v", names, want)
	}

	bare := metrics.New(metrics.WithNamespace(""))
	if n := promtest.CollectAndCount(bare); n != 0 {
		t.Errorf("a fresh Metrics collected %d series", n)
	}
	spec, err := driver.Validate(driver.Spec{Algorithm: driver.AlgorithmFixedWindow, Name: "x", Limit: 1, MaxCost: 1,
		Params: driver.Params{Capacity: 1, Interval: 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	bare.Wrap(newMemstore(t)).Decide(context.Background(), "k", spec, 1)
	if n := promtest.CollectAndCount(bare, "decisions_total"); n != 3 {
		t.Errorf("bare decisions_total has %d series, want 3", n)
	}
	if m.Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}

	defer func() {
		if recover() == nil {
			t.Error("New accepted buckets that do not increase")
		}
	}()
	metrics.New(metrics.WithBuckets(0.1, 0.01))
}

// TestAllocs: in steady state, a wrapped decision allocates no more than
// the store's own. Measured against the unwrapped store, so that it holds
// under the race detector too.
func TestAllocs(t *testing.T) {
	ctx := context.Background()
	store := newMemstore(t)
	m := metrics.New()
	for _, p := range []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: 1_000_000, RefillRate: 1_000_000, RefillInterval: time.Hour},
		ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}, // denied after the first
		ratekeeper.All( // denied, by both policies
			ratekeeper.Named("a", ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}),
			ratekeeper.Named("b", ratekeeper.SlidingWindowLog{Limit: 1, Window: time.Hour})),
	} {
		plain := newLimiter(t, store, p, ratekeeper.WithName("plain"))
		metered := newLimiter(t, m.Wrap(store), p, ratekeeper.WithName("metered"))
		plain.Allow(ctx, "plain")
		metered.Allow(ctx, "metered")
		base := testing.AllocsPerRun(100, func() { plain.Allow(ctx, "plain") })
		got := testing.AllocsPerRun(100, func() { metered.Allow(ctx, "metered") })
		if got > base {
			t.Errorf("%T: %v allocations per wrapped decision, %v unwrapped", p, got, base)
		}
	}
}

func BenchmarkWrappedDecide(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()
	bucket := ratekeeper.TokenBucket{Capacity: 1_000_000_000, RefillRate: 1_000_000_000, RefillInterval: time.Second}
	all := ratekeeper.All(
		ratekeeper.Named("burst", bucket),
		ratekeeper.Named("daily", ratekeeper.FixedWindow{Limit: 1, Window: 24 * time.Hour}),
	)
	for _, bc := range []struct {
		name   string
		policy ratekeeper.Policy
		wrap   bool
	}{
		{"unwrapped", bucket, false},
		{"wrapped", bucket, true},
		{"all/unwrapped", all, false},
		{"all/wrapped", all, true}, // denied: counts policy denials too
	} {
		b.Run(bc.name, func(b *testing.B) {
			var s ratekeeper.Store = store
			if bc.wrap {
				s = metrics.New().Wrap(store)
			}
			lim, err := ratekeeper.New(s, bc.policy, ratekeeper.WithName(bc.name))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				lim.Allow(ctx, "user:1")
			}
		})
	}
}
