package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/server"
)

// TestDeniedHitsSettings: started with no flags, the service counts a
// denied request's hits as envoy does, as STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// says; with flags, a denied request takes nothing, unless -denied-hits
// says otherwise.
func TestDeniedHitsSettings(t *testing.T) {
	stop := map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}
	for _, tc := range []struct {
		env   map[string]string
		args  []string
		want  server.DeniedHits
		count bool
	}{
		{nil, nil, server.DeniedCountAll, false},
		{stop, nil, server.DeniedCountOver, false},
		{nil, []string{"-config", "x"}, server.DeniedTakeNothing, false},
		{stop, []string{"-config", "x"}, server.DeniedTakeNothing, false},
		{nil, []string{"-denied-hits", "none"}, server.DeniedTakeNothing, false},
		{stop, []string{"-denied-hits", "all"}, server.DeniedCountAll, false},
		{nil, []string{"-denied-hits", "over", "-count-over-limit"}, server.DeniedCountOver, true},
	} {
		s, err := parseSettings(tc.args, envOf(tc.env), os.Stderr)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		if got := s.deniedHits(); got != tc.want || s.countOverLimit != tc.count {
			t.Errorf("%v %v: denied hits %s, count over limit %t; want %s, %t", tc.env, tc.args, got, s.countOverLimit, tc.want, tc.count)
		}
	}
	if _, err := parseSettings([]string{"-denied-hits", "some"}, noEnv, os.Stderr); err == nil || !strings.Contains(err.Error(), `denied-hits must be none, all or over, not "some"`) {
		t.Errorf("-denied-hits some: %v", err)
	}
}

// TestResponseCostsByStart runs the response-cost pattern (1000 an hour;
// a check of hits_addend 0, then a charge of 900, twice, then a check)
// through the command as each user starts it: in envoy's environment the
// second charge counts, and the check after it is OVER_LIMIT; with flags,
// it takes nothing, and the check is OK with 100 left.
func TestResponseCostsByStart(t *testing.T) {
	const rules = "domain: ai\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config", "ai.yaml"), rules)
	envoys := &instance{grpc: freeAddr(t), http: freeAddr(t)}
	grpcHost, grpcPort, _ := net.SplitHostPort(envoys.grpc)
	httpHost, httpPort, _ := net.SplitHostPort(envoys.http)
	envoys.run(t, envOf(map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"GRPC_HOST": grpcHost, "GRPC_PORT": grpcPort, "HOST": httpHost, "PORT": httpPort,
	}), nil)
	flags := start(t, "-config", filepath.Join(root, "ratelimit", "config"))
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 3*time.Second {
		time.Sleep(left + 100*time.Millisecond) // one window for the whole pattern
	}
	for _, tc := range []struct {
		name string
		s    *instance
		last rlsv3.RateLimitResponse_Code
		left uint32
	}{
		{"envoy's environment", envoys, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
		{"flags", flags, rlsv3.RateLimitResponse_OK, 100},
	} {
		var codes []rlsv3.RateLimitResponse_Code
		var resp *rlsv3.RateLimitResponse
		for _, hits := range []uint64{0, 900, 0, 900, 0} {
			d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(hits),
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tokens", Value: "user"}}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			resp, err = rlsv3.NewRateLimitServiceClient(tc.s.conn).ShouldRateLimit(ctx,
				&rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
			cancel()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			codes = append(codes, resp.OverallCode)
		}
		if codes[3] != rlsv3.RateLimitResponse_OVER_LIMIT || codes[4] != tc.last || resp.Statuses[0].LimitRemaining != tc.left {
			t.Errorf("%s: codes %v, last %v; want the second charge OVER_LIMIT, then %v with %d left", tc.name, codes, resp, tc.last, tc.left)
		}
	}
}
