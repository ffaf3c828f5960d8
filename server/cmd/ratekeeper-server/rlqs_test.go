package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestQuotaServiceFlag: the quota service is served by default and
// refused (UNIMPLEMENTED) under -rlqs=false.
func TestQuotaServiceFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := start(t, "-config", tlsConfigFile(t), "-rlqs="+strconv.FormatBool(on))
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err == nil {
			err = stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "any"}}}}})
		}
		if err == nil {
			_, err = stream.Recv()
		}
		if got := status.Code(err); on && err != nil || !on && got != codes.Unimplemented {
			t.Errorf("-rlqs=%v: %v", on, err)
		}
		cancel()
		conn.Close()
	}
}
