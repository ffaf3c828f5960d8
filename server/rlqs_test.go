package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper/memstore"
	quotas "github.com/ratekeeper/ratekeeper/server/internal/quota"
)

const rlqsConfig = `domain: api
quota_buckets:
  - bucket: {name: global}
    rate_limit: {unit: second, requests_per_unit: 10000}
`

// quotaService starts a quota service of configuration yaml over gRPC,
// stepping with steps, its metrics in m, and returns it and a client.
func quotaService(t *testing.T, yaml string, steps Stepper, opts QuotaOptions, m *Metrics) (*Service, rlqsv3.RateLimitQuotaServiceClient) {
	t.Helper()
	svc := newService(t, memstore.New(), yaml, Options{Metrics: m})
	conn := startGRPCWith(t, svc, func(g *grpc.Server) { RegisterQuota(g, NewQuota(svc, steps, opts)) })
	return svc, rlqsv3.NewRateLimitQuotaServiceClient(conn)
}

// startQuota is a client of a quota service of rlqsConfig, in process.
func startQuota(t *testing.T) rlqsv3.RateLimitQuotaServiceClient {
	_, client := quotaService(t, rlqsConfig, &quotas.Memory{}, QuotaOptions{}, nil)
	return client
}

// openStream opens a stream on client, ended when t ends (or after 20 s).
func openStream(t *testing.T, client rlqsv3.RateLimitQuotaServiceClient) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func report(domain string, usages ...map[string]string) *rlqsv3.RateLimitQuotaUsageReports {
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: domain}
	for _, u := range usages {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: u}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0)})
	}
	return m
}

// TestQuotaFirstReport: a first report subscribes its buckets, answered
// at once: a token bucket of the start share for a configured one, an
// abandon action for one that matches nothing; every message validates.
func TestQuotaFirstReport(t *testing.T) {
	t.Parallel()
	stream := openStream(t, startQuota(t))
	if err := stream.Send(report("api", map[string]string{"name": "global", "path": "/x"}, map[string]string{"other": "y"})); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Validate(); err != nil {
		t.Fatalf("%v: %v", resp, err)
	}
	if len(resp.BucketAction) != 2 {
		t.Fatalf("%d actions: %v", len(resp.BucketAction), resp)
	}
	for _, a := range resp.BucketAction {
		switch a.GetBucketId().GetBucket()["name"] {
		case "global":
			tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			if tb.GetTokensPerFill().GetValue() != uint32(quotas.StartShare(10000)) || tb.GetFillInterval().AsDuration() != time.Second ||
				a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration() != time.Second {
				t.Errorf("global: %v", a)
			}
		default:
			if a.GetAbandonAction() == nil {
				t.Errorf("an unknown bucket: %v, want an abandon action", a)
			}
		}
	}
	if err := stream.Send(report("other", map[string]string{"name": "global"})); err != nil {
		t.Fatal(err)
	}
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a domain changed mid-stream: %v, want INVALID_ARGUMENT", err)
	}
}

// countingSteps counts the steps of the buckets it steps.
type countingSteps struct {
	quotas.Memory
	mu    sync.Mutex
	steps int
}

func (c *countingSteps) StepAll(ctx context.Context, steps []quotas.Step) ([]quotas.Grant, error) {
	c.mu.Lock()
	c.steps += len(steps)
	c.mu.Unlock()
	return c.Memory.StepAll(ctx, steps)
}

func (c *countingSteps) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}

// openQuota opens a stream to a quota service of config yaml, its steps
// counted, its metrics in m.
func openQuota(t *testing.T, yaml string, m *Metrics) (*Service, *countingSteps, rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	t.Helper()
	steps := &countingSteps{}
	svc, client := quotaService(t, yaml, steps, QuotaOptions{}, m)
	return svc, steps, openStream(t, client)
}

// TestQuotaHostileStream: one stream reporting 100,000 buckets, then
// reporting one of them a thousand times in a second. The stream is
// answered for its first 1,000 buckets only; the service steps each bucket
// once at its first report and then once per tick, however fast reports
// come; and it keeps state for those 1,000 only.
func TestQuotaHostileStream(t *testing.T) {
	t.Parallel()
	_, steps, stream := openQuota(t, "domain: api\nquota_buckets:\n  - bucket: {tenant: \"*\"}\n    rate_limit: {unit: second, requests_per_unit: 100}\n", nil)
	const n = 100_000
	var ids []map[string]string
	for i := range n {
		ids = append(ids, map[string]string{"tenant": fmt.Sprint(i)})
	}
	if err := stream.Send(report("api", ids...)); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BucketAction) != 1000 {
		t.Fatalf("%d actions for %d buckets, want 1,000, the stream's bound", len(resp.BucketAction), n)
	}
	if err := resp.Validate(); err != nil {
		t.Fatal(err)
	}
	first := steps.count() // 1,000, and those of any tick since
	if first < 1000 {
		t.Fatalf("%d steps for the first report, want 1,000", first)
	}
	if got := steps.Memory.Len(); got != 1000 {
		t.Fatalf("state for %d buckets, want 1,000", got)
	}
	go func() { // drain
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	for range 1000 {
		if err := stream.Send(report("api", ids[0])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	ticks := int(elapsed/(250*time.Millisecond)) + 2
	// Each tick steps the 1,000 buckets; the fast reports may add one
	// step per measurement of their bucket's demand, one per tick too.
	if got, most := steps.count()-first, ticks*1000+ticks; got > most {
		t.Errorf("%d steps in %v of reports every millisecond, want at most %d: a tick's", got, elapsed, most)
	}
}

// TestQuotaBucketRemoved: a reload that removes a quota bucket abandons it
// in the Envoys that hold it, at the next tick.
func TestQuotaBucketRemoved(t *testing.T) {
	t.Parallel()
	svc, _, stream := openQuota(t, rlqsConfig, nil)
	if err := stream.Send(report("api", map[string]string{"name": "global"})); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.BucketAction[0].GetQuotaAssignmentAction() == nil {
		t.Fatalf("%v, %v: want an assignment", resp, err)
	}
	if err := svc.SetConfig(loadConfig(t, "domain: api\nquota_buckets:\n  - bucket: {name: other}\n    rate_limit: {unit: second, requests_per_unit: 10}\n")); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := resp.BucketAction[0]; a.GetAbandonAction() != nil {
			return
		}
	}
}

// TestQuotaMetrics: a stream's buckets, reports, assignments, shares and
// the time its share took to follow its demand, and its series retired
// with its domain.
func TestQuotaMetrics(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	svc, _, stream := openQuota(t, rlqsConfig, m)
	bucket := map[string]string{"name": "global"}
	if err := stream.Send(report("api", bucket, map[string]string{"name": "unknown"})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// Its demand, 3,000/s, known from its second report on: its share
	// moves from the start share to the whole, then settles.
	for range 6 {
		time.Sleep(300 * time.Millisecond)
		u := report("api", bucket)
		u.BucketQuotaUsages[0].NumRequestsAllowed = 900
		if err := stream.Send(u); err != nil {
			t.Fatal(err)
		}
	}
	q := m.quota
	for deadline := time.Now().Add(2 * time.Second); testutil.ToFloat64(q.reports.WithLabelValues("api")) < 7 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if v := testutil.ToFloat64(q.reports.WithLabelValues("api")); v != 7 {
		t.Errorf("reports %v, want 7", v)
	}
	if v := testutil.ToFloat64(q.streams); v != 1 {
		t.Errorf("streams %v, want 1", v)
	}
	if v := testutil.ToFloat64(q.buckets); v != 1 {
		t.Errorf("buckets %v, want 1 (the unknown one abandoned)", v)
	}
	for action, least := range map[string]float64{actionNew: 2, actionRefresh: 1, actionAbandon: 1} {
		if v := testutil.ToFloat64(q.assignments.WithLabelValues("api", action)); v < least {
			t.Errorf("%s assignments %v, want at least %v", action, v, least)
		}
	}
	if h := histogram(t, q.share, "api"); h.GetSampleCount() < 3 || h.GetSampleSum() < 1 {
		t.Errorf("shares: %v, want at least 3, one of them above 0.9 of the rate", h)
	}
	if h := histogram(t, q.converge, "api"); h.GetSampleCount() != 1 || h.GetSampleSum() > 1.5 {
		t.Errorf("converge: %v, want once, within 1.5 s", h)
	}
	stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	if s, b := testutil.ToFloat64(q.streams), testutil.ToFloat64(q.buckets); s != 0 || b != 0 {
		t.Errorf("after the stream ended: %v streams, %v buckets, want 0", s, b)
	}
	if err := svc.SetConfig(loadConfig(t, "domain: other\n")); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(q.reports) + testutil.CollectAndCount(q.share); n != 0 {
		t.Errorf("%d series of the removed domain stay", n)
	}
}

// histogram is hv's histogram of domain.
func histogram(t *testing.T, hv *prometheus.HistogramVec, domain string) *dto.Histogram {
	t.Helper()
	var out dto.Metric
	if err := hv.WithLabelValues(domain).(prometheus.Metric).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram()
}

// TestQuotaMaxStreams: a stream past MaxStreams ends at once with
// RESOURCE_EXHAUSTED; one closing makes room.
func TestQuotaMaxStreams(t *testing.T) {
	t.Parallel()
	_, client := quotaService(t, rlqsConfig, &quotas.Memory{}, QuotaOptions{MaxStreams: 2}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	subscribe := func() (rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, error) {
		s, err := client.StreamRateLimitQuotas(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.Send(report("api", map[string]string{"name": "global"})); err != nil && !errors.Is(err, io.EOF) {
			return nil, err // on io.EOF, the stream ended: Recv has its status
		}
		_, err = s.Recv()
		return s, err
	}
	first, err := subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(); err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	first.CloseSend()
	for {
		if _, err := first.Recv(); err != nil {
			break
		}
	}
	if _, err := subscribe(); err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
}

// TestQuotaUnmatched: under Unmatched DenyAll or AllowAll, a bucket id
// that matches nothing is assigned that blanket rule, and kept.
func TestQuotaUnmatched(t *testing.T) {
	t.Parallel()
	for u, want := range map[Unmatched]typev3.RateLimitStrategy_BlanketRule{DenyAll: typev3.RateLimitStrategy_DENY_ALL, AllowAll: typev3.RateLimitStrategy_ALLOW_ALL} {
		_, client := quotaService(t, rlqsConfig, &quotas.Memory{}, QuotaOptions{Unmatched: u}, nil)
		stream := openStream(t, client)
		if err := stream.Send(report("api", map[string]string{"other": "y"})); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the first answer, then a tick's
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if err := resp.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != want || len(resp.BucketAction) != 1 {
				t.Fatalf("%s: %v, want %v", u, resp, want)
			}
		}
	}
	if _, err := ParseUnmatched("allow"); err == nil {
		t.Error("ParseUnmatched(allow): no error")
	}
}

// TestQuotaInvalidReports: a report without a domain, a bucket id of no
// entries or of more than 32, or an entry over 256 bytes, ends the stream
// with INVALID_ARGUMENT.
func TestQuotaInvalidReports(t *testing.T) {
	t.Parallel()
	client := startQuota(t)
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for name, m := range map[string]*rlqsv3.RateLimitQuotaUsageReports{
		"no domain":        report("", map[string]string{"name": "global"}),
		"an empty id":      report("api", map[string]string{}),
		"33 entries":       report("api", many),
		"a 257-byte key":   report("api", map[string]string{strings.Repeat("k", 257): "v"}),
		"a 257-byte value": report("api", map[string]string{"name": strings.Repeat("v", 257)}),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := client.StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
		cancel()
	}
}

// TestQuotaShareReturns: when one of two Envoys of equal demand
// disconnects, its share returns to the other once the TTL and the slack
// of its last assignment (sent at most 250 ms before it left) have
// passed, and not before.
func TestQuotaShareReturns(t *testing.T) {
	client := startQuota(t)
	bucket := map[string]string{"name": "global"}
	var last [2]atomic.Uint32 // each Envoy's latest tokens_per_fill
	var streams [2]rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := range streams {
		s := openStream(t, client)
		streams[i] = s
		go func() {
			for {
				resp, err := s.Recv()
				if err != nil {
					return
				}
				last[i].Store(resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
			}
		}()
	}
	demand := func(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
		u := report("api", bucket)
		u.BucketQuotaUsages[0].NumRequestsAllowed = 6000 // 20,000/s over 300 ms
		if err := s.Send(u); err != nil {
			t.Fatal(err)
		}
	}
	assignable := uint32(10000 - quotas.Reserve(10000))
	for range 8 { // 2.4 s: both at half
		for _, s := range streams {
			demand(s)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if a, b := last[0].Load(), last[1].Load(); a < assignable*4/10 || b < assignable*4/10 {
		t.Fatalf("equal demands: shares %d and %d of %d", a, b, assignable)
	}
	streams[1].CloseSend()
	left := time.Now()
	var returned time.Duration
	for time.Since(left) < 3*time.Second {
		demand(streams[0])
		time.Sleep(100 * time.Millisecond)
		if last[0].Load() >= assignable*9/10 {
			returned = time.Since(left)
			break
		}
	}
	if returned < time.Second || returned > 2500*time.Millisecond {
		t.Fatalf("the share returned %v after the other Envoy left (now %d of %d), want after its TTL and slack (1.25 s), within 2.5 s", returned, last[0].Load(), assignable)
	}
	t.Logf("the share returned %v after the other Envoy left", returned)
}

// TestQuotaRedisDown: a step that fails, as on a Redis that refuses
// connections, ends the stream with UNAVAILABLE; Envoy then keeps its
// assignments until their TTL and opens a new stream at its next report.
func TestQuotaRedisDown(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { down.Close() })
	_, client := quotaService(t, rlqsConfig, &quotas.Redis{Client: down, Prefix: "rk:"}, QuotaOptions{}, nil)
	stream := openStream(t, client)
	if err := stream.Send(report("api", map[string]string{"name": "global"})); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a step on a Redis that is down: %v, want UNAVAILABLE", err)
	}
}
