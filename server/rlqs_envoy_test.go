package server

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	quotas "github.com/ratekeeper/ratekeeper/server/internal/quota"
	"github.com/ratekeeper/ratekeeper/server/internal/quotafilter"
)

// runQuotaEnvoy runs one Envoy's filter (quotafilter) from start to end
// (since the fleet's begin): demand requests per second, each admission
// recorded.
func runQuotaEnvoy(t *testing.T, client rlqsv3.RateLimitQuotaServiceClient, demand float64, begin time.Time, start, end time.Duration, record func(time.Time)) {
	time.Sleep(time.Until(begin.Add(start)))
	ctx, cancel := context.WithDeadline(context.Background(), begin.Add(end))
	defer cancel()
	f := quotafilter.New("api", map[string]string{"name": "global"}, time.Second)
	go f.Run(ctx, client)
	quotafilter.Offer(ctx, uint64(demand), func(time.Time) float64 { return demand }, func(now time.Time) {
		if f.Admit(now) {
			record(now)
		}
	})
	if errs := f.Invalid(); len(errs) > 0 {
		t.Errorf("%d messages of the service did not validate, the first: %v", len(errs), errs[0])
	}
}

// fleetEnvoy is one Envoy of a fleet: its share of the fleet's demand,
// and when it runs.
type fleetEnvoy struct {
	weight      float64
	start, stop time.Duration
}

// unevenFleet is 8 Envoys of demand 1:1:1:1:2:2:4:8, running for d.
func unevenFleet(d time.Duration) []fleetEnvoy {
	var es []fleetEnvoy
	for _, w := range []float64{1, 1, 1, 1, 2, 2, 4, 8} {
		es = append(es, fleetEnvoy{weight: w, stop: d})
	}
	return es
}

// TestQuotaFleetNeverPastTheBound runs 8 Envoys of uneven demand, twice a
// 10,000/s rule in all, over real gRPC: an oracle replays every admission
// through the rule's own token bucket, which never goes below zero.
func TestQuotaFleetNeverPastTheBound(t *testing.T) {
	t.Parallel()
	client := startQuota(t)
	share := quotaFleet(t, unevenFleet(5*time.Second), func(int) rlqsv3.RateLimitQuotaServiceClient { return client })
	t.Logf("8 Envoys admitted %.1f%% of the rate", 100*share)
}

// quotaReplica is a replica of the quota service on a fixed address, on
// one Redis, which can be stopped and started again.
type quotaReplica struct {
	t      *testing.T
	addr   string
	mu     sync.Mutex
	g      *grpc.Server
	redis  *redis.Client
	prefix string
}

func (r *quotaReplica) start() {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Error(err)
		return
	}
	r.addr = ln.Addr().String()
	svc := New(memstore.New(), Options{})
	if err := svc.SetConfig(loadConfig(r.t, rlqsConfig)); err != nil {
		r.t.Error(err)
	}
	g := grpc.NewServer()
	RegisterQuota(g, NewQuota(svc, &quotas.Redis{Client: r.redis, Prefix: r.prefix}, QuotaOptions{}))
	go g.Serve(ln)
	r.mu.Lock()
	r.g = g
	r.mu.Unlock()
}

func (r *quotaReplica) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.g.Stop()
}

// TestQuotaReplicasShareTheBound: 8 Envoys split between two replicas
// that keep the buckets in one Redis; one Envoy joins at 1 s, one leaves
// at 3 s, and replica 1 is stopped at 2 s and started again at 2.5 s, its
// Envoys reconnecting. The fleet never admits past the rule's bound.
func TestQuotaReplicasShareTheBound(t *testing.T) {
	t.Parallel()
	redisClient := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var replicas [2]*quotaReplica
	var clients [2]rlqsv3.RateLimitQuotaServiceClient
	for i := range replicas {
		r := &quotaReplica{t: t, addr: "127.0.0.1:0", redis: redisClient, prefix: prefix}
		r.start()
		t.Cleanup(r.stop)
		replicas[i] = r
		conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[i] = rlqsv3.NewRateLimitQuotaServiceClient(conn)
	}
	const d = 5 * time.Second
	fleet := unevenFleet(d)
	fleet[2].start = time.Second
	fleet[5].stop = 3 * time.Second
	go func() {
		time.Sleep(2 * time.Second)
		replicas[1].stop()
		time.Sleep(500 * time.Millisecond)
		replicas[1].start()
	}()
	share := quotaFleet(t, fleet, func(i int) rlqsv3.RateLimitQuotaServiceClient { return clients[i%2] })
	t.Logf("8 Envoys (one joining, one leaving, one replica restarted) admitted %.1f%% of the rate", 100*share)
}

// quotaFleet runs the fleet, Envoy i on client(i), checks the bound, and
// returns the share of the rate admitted.
func quotaFleet(t *testing.T, fleet []fleetEnvoy, client func(i int) rlqsv3.RateLimitQuotaServiceClient) float64 {
	var mu sync.Mutex
	var times []time.Time
	record := func(now time.Time) { mu.Lock(); times = append(times, now); mu.Unlock() }
	const rate = 10000.0
	var sum float64
	var d time.Duration
	for _, e := range fleet {
		sum += e.weight
		d = max(d, e.stop)
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for i, e := range fleet {
		wg.Go(func() { runQuotaEnvoy(t, client(i), 2*rate*e.weight/sum, begin, e.start, e.stop, record) })
	}
	wg.Wait()
	// The service counts holds on the wall clock (Redis's, or the
	// process's UnixMilli), the Envoys and the oracle on the monotonic
	// one: a step of the wall clock voids the run.
	if testutil.WallDrift(begin).Abs() > time.Millisecond {
		t.Skip("the wall clock moved against the monotonic one during the run")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(times, time.Time.Compare)
	if _, i := quotafilter.PastTheBound(times, rate, begin); i >= 0 {
		t.Fatalf("admission %d at %v: past the rule's bound (burst 10,000 + 10,000/s)", i, times[i].Sub(begin))
	}
	per := make([]int, int(d/time.Second))
	for _, at := range times {
		if s := int(at.Sub(begin) / time.Second); s < len(per) {
			per[s]++
		}
	}
	t.Logf("admitted per second: %v", per)
	if len(times) < int(0.3*rate*d.Seconds()) {
		t.Fatalf("the fleet admitted %d in %v: the bound holds only because the service assigns almost nothing", len(times), d)
	}
	return float64(len(times)) / (rate * d.Seconds())
}
