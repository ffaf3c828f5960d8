package main

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// quotaRoundTrip opens a rate limit quota stream on conn, reports a
// bucket of domain web, and waits for the first answer.
func quotaRoundTrip(ctx context.Context, conn *grpc.ClientConn) error {
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "any"}}}}}); err != nil && !errors.Is(err, io.EOF) {
		return err // on io.EOF, the stream ended: Recv has its status
	}
	_, err = stream.Recv()
	return err
}

// askQuota is quotaRoundTrip over a new plaintext connection to addr.
func askQuota(t *testing.T, addr string) error {
	t.Helper()
	conn, ctx, done := dial(t, addr, insecure.NewCredentials())
	defer done()
	return quotaRoundTrip(ctx, conn)
}

// TestQuotaServiceFlag: the quota service is served by default and
// refused (UNIMPLEMENTED) under -rlqs=false.
func TestQuotaServiceFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := start(t, "-config", tlsConfigFile(t), "-rlqs="+strconv.FormatBool(on))
		if err := askQuota(t, s.grpc); on && err != nil || !on && status.Code(err) != codes.Unimplemented {
			t.Errorf("-rlqs=%v: %v", on, err)
		}
	}
}
