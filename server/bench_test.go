package server

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkDecide is the service's own cost per request of one
// descriptor, over the in-process store: configuration lookup, key,
// decision and response.
func BenchmarkDecide(b *testing.B) {
	svc := New(memstore.New(), Options{})
	if err := svc.SetConfig(loadConfig(b, testConfig)); err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("team", "t", "user", strconv.Itoa(i))}}
	}
	b.ReportAllocs()
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := svc.Decide(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
