package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/leasetest"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/server/config"
)

const leaseConfig = `domain: test
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 2000, algorithm: gcra, burst: 50, lease: {ttl: 50ms}}
`

// TestLeasesAcrossReplicas: four replicas, each over its own Redis client,
// serve one hot descriptor whose rule takes leases. At twice the rule's
// rate, no window admits more than its bound; at 80% of it, Redis sees a
// fraction of the script calls the requests would make without leases.
func TestLeasesAcrossReplicas(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "svc-lease-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	var counter redistest.Counter
	var replicas []*Service
	for range 4 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		c.AddHook(&counter)
		t.Cleanup(func() { c.Close() })
		svc := newService(t, redisstore.New(c, redisstore.WithKeyPrefix(prefix)), leaseConfig, Options{})
		t.Cleanup(func() { svc.Close() })
		replicas = append(replicas, svc)
	}
	c := leasetest.Case{Name: "gcra2000ps_b50", Rate: 2000,
		Bound: leasetest.SpanBound(func(d int64) int64 { return 50 + d/500 })}

	adm, asked := drive(t, replicas, 2*c.Rate, time.Second)
	leasetest.Check(t, leasetest.Case{Name: c.Name, Bound: c.Bound}, adm)
	t.Logf("at twice the rate: %d of %d allowed", len(adm), asked)

	before := counter.Sent()
	adm, asked = drive(t, replicas, 0.8*c.Rate, time.Second)
	sent := counter.Sent() - before
	leasetest.Check(t, leasetest.Case{Name: c.Name, Bound: c.Bound}, adm)
	t.Logf("at 80%% of the rate: %d of %d allowed, %d Redis commands", len(adm), asked, sent)
	if sent > int64(asked)/4 {
		t.Errorf("%d Redis commands for %d requests: leases saved too little", sent, asked)
	}
	if len(adm) < asked*9/10 {
		t.Errorf("at 80%% of the rate, %d of %d allowed", len(adm), asked)
	}
}

// drive asks the replicas for the hot descriptor at rate per second in
// all, in Poisson arrivals from 4 callers each, for d, and returns when
// each OK was answered, and how many requests were made.
func drive(t *testing.T, replicas []*Service, rate float64, d time.Duration) ([]leasetest.Admission, int) {
	var mu sync.Mutex
	var adm []leasetest.Admission
	var asked atomic.Int64
	var wg sync.WaitGroup
	callers := 4 * len(replicas)
	pace := float64(time.Second) * float64(callers) / rate
	begin := time.Now()
	for i := range callers {
		svc := replicas[i%len(replicas)]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 11))
			req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "x")}}
			var mine []leasetest.Admission
			for next := begin; time.Since(begin) < d; next = next.Add(time.Duration(r.ExpFloat64() * pace)) {
				time.Sleep(time.Until(next))
				lo := time.Now()
				resp, err := svc.Decide(context.Background(), req)
				hi := time.Now()
				asked.Add(1)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					mine = append(mine, leasetest.Admission{Lo: lo.UnixMicro(), Hi: hi.UnixMicro()})
				}
			}
			mu.Lock()
			adm = append(adm, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return adm, int(asked.Load())
}

// TestLeaseConfig: a rule's lease is read, and refused where it cannot be.
func TestLeaseConfig(t *testing.T) {
	cfg := loadConfig(t, leaseConfig)
	if r := cfg.Rules("test")[0]; r.Lease != 50*time.Millisecond {
		t.Errorf("lease = %v, want 50ms", r.Lease)
	}
	for _, tc := range []struct{ rl, want string }{
		{"{unit: second, requests_per_unit: 10, lease: {ttl: 1h}}", "outside 1ms to 1m0s"},
		{"{unit: second, requests_per_unit: 10, lease: {ttl: soon}}", "not a duration"},
		{"{unit: second, requests_per_unit: 10, lease: {}}", "ttl: is missing"},
		{"{unit: second, requests_per_unit: 10, lease: {ttl: 50ms, size: 3}}", "size"},
		{"{unit: second, requests_per_unit: 10, algorithm: sliding_window_log, lease: {ttl: 50ms}}", "takes no leases"},
		{"{unlimited: true, lease: {ttl: 50ms}}", "an unlimited rule takes no lease"},
		{"{unit: second, requests_per_unit: 0, lease: {ttl: 50ms}}", "a limit of 0 takes no lease"},
	} {
		yaml := fmt.Sprintf("domain: test\ndescriptors:\n  - key: api\n    rate_limit: %s\n", tc.rl)
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rate_limit.lease") {
			t.Errorf("%s: %v; want an error naming rate_limit.lease, with %q", tc.rl, err, tc.want)
		}
	}
}

// BenchmarkHotDescriptor is one hot descriptor of a rule the callers
// cannot exhaust (a token bucket of 100,000,000/s), decided by four
// replicas with leases, each over its own Redis client, or by one without
// them; the callers spread over the replicas. It reports decisions/s
// and the Redis commands per decision (run with make's Redis:
// scripts/with-redis.sh go test -run '^$' -bench HotDescriptor ./server/).
func BenchmarkHotDescriptor(b *testing.B) {
	const cfg = `domain: test
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 100000000, algorithm: token_bucket, burst: 10000000%s}
`
	for _, bc := range []struct {
		name     string
		replicas int
		lease    string
	}{{"1-replica", 1, ""}, {"4-replicas-leases", 4, ", lease: {ttl: 50ms}"}} {
		b.Run(bc.name, func(b *testing.B) {
			addr := redistest.Addr(b)
			prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			var counter redistest.Counter
			var replicas []*Service
			for range bc.replicas {
				c := redis.NewClient(&redis.Options{Addr: addr})
				c.AddHook(&counter)
				b.Cleanup(func() { c.Close() })
				svc := New(redisstore.New(c, redisstore.WithKeyPrefix(prefix)), Options{})
				if err := svc.SetConfig(loadConfig(b, fmt.Sprintf(cfg, bc.lease))); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { svc.Close() })
				replicas = append(replicas, svc)
			}
			req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "x")}}
			var next atomic.Uint32
			before := counter.Sent()
			// 8 goroutines on 2 cores: a closed loop of many more, none
			// of them waiting on a network, would starve the clients'
			// own goroutines of the CPU past the service's store budget.
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				svc := replicas[next.Add(1)%uint32(len(replicas))]
				for pb.Next() {
					if resp, err := svc.Decide(context.Background(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("Decide = %v, %v", resp.GetOverallCode(), err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(counter.Sent()-before)/float64(b.N), "commands/decision")
		})
	}
}

// TestLeasesWithOtherDescriptors: a request whose hot descriptor takes
// from its rule's lease and whose other descriptor is decided in the
// store is all or nothing: once the other denies, the lease's take is
// given back, so the hot key keeps what the denied requests asked for;
// and the hot descriptor still costs the store a call per lease, not per
// request, while the other allows.
func TestLeasesWithOtherDescriptors(t *testing.T) {
	const cfg = `domain: test
descriptors:
  - key: api
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: token_bucket, lease: {ttl: 1s}}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	counting := &leaseCounter{Store: store}
	svc := newService(t, counting, cfg, Options{})
	user := unique(t)
	for i := range 8 {
		resp := ask(t, svc, 1, desc("api", "all"), desc("user", user))
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v; want %v, the hot descriptor OK", i, resp, want)
		}
	}
	// 5 admitted, 3 denied by user: the hot key took 5, whatever its
	// lease held. A request through a rule of the same policy without
	// leases, once the lease is given back, takes the sixth.
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	plain := newService(t, store, strings.ReplaceAll(cfg, ", lease: {ttl: 1s}", ""), Options{})
	resp := ask(t, plain, 1, desc("api", "all"))
	if got := resp.Statuses[0].LimitRemaining; got != 994 {
		t.Errorf("the hot key has %d left after 5 admitted, 3 denied and 1 more; want 994", got)
	}
	if n := counting.leases.Load(); n == 0 || n >= 8 {
		t.Errorf("%d lease steps for 8 requests of the hot descriptor; want fewer, and some", n)
	}
}

// leaseCounter counts a store's lease steps that take a lease, and its
// charges.
type leaseCounter struct {
	*memstore.Store
	leases, charges atomic.Int64
}

func (s *leaseCounter) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.charges.Add(1)
	return s.Store.Charge(ctx, key, spec, n)
}

func (s *leaseCounter) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	if req.Want > 0 {
		s.leases.Add(1)
	}
	return s.Store.Lease(ctx, key, spec, req)
}

// TestLeasesUnderEnvoysCounting: with envoy's counting, where every hit
// counts, denied or not (-denied-hits all), a charge that fits takes from
// the rule's lease, and one that does not is charged in the store, into
// debt: the hot key has taken every hit.
func TestLeasesUnderEnvoysCounting(t *testing.T) {
	const cfg = `domain: test
descriptors:
  - key: api
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket, lease: {ttl: 1s}}
`
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	counting := &leaseCounter{Store: store}
	svc := newService(t, counting, cfg, Options{DeniedHits: DeniedCountAll})
	var over int
	for range 14 {
		if resp := ask(t, svc, 1, desc("api", "all")); resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over != 4 {
		t.Errorf("%d of 14 requests over a limit of 10; want 4", over)
	}
	if n := counting.leases.Load(); n == 0 || n >= 10 {
		t.Errorf("%d lease steps for 10 requests that fit; want fewer, and some", n)
	}
	if n := counting.charges.Load(); n != 4 {
		t.Errorf("%d charges in the store; want the 4 hits that did not fit", n)
	}
	// 14 hits counted: 4 in debt. A request of a rule without leases, once
	// the lease is given back, finds none left.
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	plain := newService(t, store, strings.ReplaceAll(cfg, ", lease: {ttl: 1s}", ""), Options{})
	if resp := ask(t, plain, 1, desc("api", "all")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after 14 hits on a limit of 10: %v; want OVER_LIMIT, the key in debt", resp)
	}
}
