package server

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
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

func startQuota(t *testing.T) rlqsv3.RateLimitQuotaServiceClient {
	svc := newService(t, memstore.New(), rlqsConfig, Options{})
	conn := startGRPCWith(t, svc, func(g *grpc.Server) { RegisterQuota(g, NewQuota(svc, &quotas.Memory{}, QuotaOptions{})) })
	return rlqsv3.NewRateLimitQuotaServiceClient(conn)
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
	client := startQuota(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
