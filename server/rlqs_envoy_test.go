package server

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	quotas "github.com/ratekeeper/ratekeeper/server/internal/quota"
)

// quotaEnvoy is one Envoy's rate limit quota filter, as its source
// (global_client_impl.cc) behaves, for one bucket: the first request
// subscribes (an immediate report) and is decided by
// no_assignment_behavior, here deny_all; reports go every interval; a
// token bucket assignment starts a new full bucket unless max_tokens and
// tokens_per_fill are those of the bucket held, which is carried over; an
// assignment lasts its TTL's whole seconds from receipt, then the bucket
// reverts to no_assignment_behavior.
type quotaEnvoy struct {
	id              map[string]string
	mu              sync.Mutex
	has             bool
	max             float64
	rate            float64 // per second
	tokens          float64
	last            time.Time
	ends            time.Time
	allowed, denied uint64
	subscribed      bool
}

func (e *quotaEnvoy) admit(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.has && !now.Before(e.ends) {
		e.has = false
	}
	ok := false
	if e.has {
		e.tokens = min(e.max, e.tokens+e.rate*now.Sub(e.last).Seconds())
		e.last = now
		if e.tokens >= 1 {
			e.tokens--
			ok = true
		}
	}
	if ok {
		e.allowed++
	} else {
		e.denied++
	}
	return ok
}

func (e *quotaEnvoy) receive(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		e.has = false
		return
	}
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		e.has = false
		return
	}
	m, r := float64(tb.GetMaxTokens()), float64(tb.GetTokensPerFill().GetValue())/float64(int64(tb.GetFillInterval().AsDuration().Seconds()))
	if !e.has || m != e.max || r != e.rate {
		e.max, e.rate, e.tokens, e.last = m, r, m, now
	}
	e.has = true
	e.ends = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
}

func (e *quotaEnvoy) report(domain string, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports {
	e.mu.Lock()
	defer e.mu.Unlock()
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: e.id},
		NumRequestsAllowed: e.allowed, NumRequestsDenied: e.denied,
		TimeElapsed: durationpb.New(elapsed.Truncate(time.Second))}
	e.allowed, e.denied = 0, 0
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
}

// runQuotaEnvoy runs one Envoy for d: demand requests per second, each
// admission recorded in admitted.
func runQuotaEnvoy(t *testing.T, client rlqsv3.RateLimitQuotaServiceClient, demand float64, d, interval time.Duration, record func(time.Time)) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	e := &quotaEnvoy{id: map[string]string{"name": "global"}}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			now := time.Now()
			for _, a := range resp.GetBucketAction() {
				e.receive(a, now)
			}
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(demand), 3))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	var carry float64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			carry += demand / 1000 * (0.5 + rng.Float64())
			for ; carry >= 1; carry-- {
				if e.admit(now) {
					record(now)
				}
			}
			if !e.subscribed || now.Sub(lastReport) >= interval {
				e.subscribed = true
				if err := stream.Send(e.report("api", now.Sub(lastReport))); err != nil {
					return
				}
				lastReport = now
			}
		}
	}
}

// TestQuotaFleetNeverPastTheBound runs 8 Envoys of uneven demand, twice a
// 10,000/s rule in all, over real gRPC: an oracle replays every admission
// through the rule's own token bucket, which never goes below zero.
func TestQuotaFleetNeverPastTheBound(t *testing.T) {
	svc := newService(t, memstore.New(), rlqsConfig, Options{})
	conn := startGRPCWith(t, svc, func(g *grpc.Server) {
		RegisterQuota(g, NewQuota(svc, &quotas.Memory{}, QuotaOptions{}))
	})
	client := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	quotaFleet(t, func(int) rlqsv3.RateLimitQuotaServiceClient { return client })
}

// TestQuotaReplicasShareTheBound: the same fleet, its Envoys split
// between two replicas that keep the buckets in one Redis.
func TestQuotaReplicasShareTheBound(t *testing.T) {
	redisClient := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var clients [2]rlqsv3.RateLimitQuotaServiceClient
	for i := range clients {
		svc := newService(t, memstore.New(), rlqsConfig, Options{})
		conn := startGRPCWith(t, svc, func(g *grpc.Server) {
			RegisterQuota(g, NewQuota(svc, &quotas.Redis{Client: redisClient, Prefix: prefix}, QuotaOptions{}))
		})
		clients[i] = rlqsv3.NewRateLimitQuotaServiceClient(conn)
	}
	quotaFleet(t, func(i int) rlqsv3.RateLimitQuotaServiceClient { return clients[i%2] })
}

// quotaFleet runs the fleet, Envoy i on client(i), and checks the bound.
func quotaFleet(t *testing.T, client func(i int) rlqsv3.RateLimitQuotaServiceClient) {
	var mu sync.Mutex
	var times []time.Time
	record := func(now time.Time) { mu.Lock(); times = append(times, now); mu.Unlock() }
	const rate, d = 10000.0, 5 * time.Second
	var wg sync.WaitGroup
	for i, w := range []float64{1, 1, 1, 1, 2, 2, 4, 8} {
		wg.Go(func() { runQuotaEnvoy(t, client(i), 2*rate*w/20, d, time.Second, record) })
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(times, time.Time.Compare)
	level, last := rate, times[0]
	for i, at := range times {
		level = min(rate, level+rate*at.Sub(last).Seconds())
		last = at
		if level--; level < -1e-6 {
			t.Fatalf("admission %d at %v: past the rule's bound (burst 10,000 + 10,000/s)", i, at.Sub(times[0]))
		}
	}
	t.Logf("8 Envoys admitted %d in %v: %.1f%% of the rate", len(times), d, 100*float64(len(times))/(rate*d.Seconds()))
}
