package main

import (
	"context"
	"fmt"
	"io"
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

// TestRefundsSettings: refunds are off unless -refunds or
// RATEKEEPER_REFUNDS=true turns them on, the flag winning; the variable
// is true or false, and anything else stops the command, naming it.
func TestRefundsSettings(t *testing.T) {
	on := map[string]string{"RATEKEEPER_REFUNDS": "true"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want bool
	}{
		{nil, nil, false},
		{nil, []string{"-config", "x"}, false},
		{on, nil, true},
		{on, []string{"-config", "x"}, true},
		{map[string]string{"RATEKEEPER_REFUNDS": "false"}, nil, false},
		{nil, []string{"-refunds"}, true},
		{on, []string{"-refunds=false"}, false},
	} {
		s, err := parseSettings(tc.args, envOf(tc.env), io.Discard)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		if s.refunds != tc.want {
			t.Errorf("%v %v: refunds %t, want %t", tc.env, tc.args, s.refunds, tc.want)
		}
	}
	for _, v := range []string{"yes", "1", "TRUE", " true", ""} {
		var log syncBuffer
		code := run(t.Context(), nil, envOf(map[string]string{"RATEKEEPER_REFUNDS": v}), &log, &log)
		if want := fmt.Sprintf("RATEKEEPER_REFUNDS=%q: want true or false", v); code != 2 || !strings.Contains(log.String(), want) {
			t.Errorf("RATEKEEPER_REFUNDS=%q: exit %d, %q; want 2 and %q", v, code, log.String(), want)
		}
	}
}

// TestRefundsByStart: the command started without -refunds ignores
// is_negative_hits, as envoyproxy/ratelimit does, and refuses /v1/decide's
// mode refund; with -refunds, or RATEKEEPER_REFUNDS=true alone (as Envoy
// Gateway would set it), or a rule's refunds: true, a refund gives the
// key back.
func TestRefundsByStart(t *testing.T) {
	const rules = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: reserved\n    rate_limit: {unit: hour, requests_per_unit: 5, refunds: true}\n"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d.yaml"), rules)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 3*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	off := start(t, "-config", dir)
	flag := start(t, "-config", dir, "-refunds")
	env := startEnv(t, envOf(map[string]string{"RATEKEEPER_REFUNDS": "true"}), "-config", dir)
	if !strings.Contains(flag.log.String(), "refunds are on for every rule") || strings.Contains(off.log.String(), "refunds are on") {
		t.Errorf("the log does not say when refunds are on:\n%s", flag.log.String())
	}
	for _, tc := range []struct {
		name string
		s    *instance
		key  string
		on   bool
	}{
		{"no flag", off, "user", false},
		{"no flag, refunds: true", off, "reserved", true},
		{"-refunds", flag, "user", true},
		{"RATEKEEPER_REFUNDS=true", env, "user", true},
	} {
		call := func(hits uint64, refund bool) *rlsv3.RateLimitResponse {
			t.Helper()
			d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: refund,
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: tc.key, Value: "victim"}}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := rlsv3.NewRateLimitServiceClient(tc.s.conn).ShouldRateLimit(ctx,
				&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			return resp
		}
		call(5, false)
		call(5, true)
		left := call(0, false).Statuses[0].LimitRemaining
		code, body, _ := tc.s.post(t, "/v1/decide", fmt.Sprintf(`{"domain":"d","descriptors":[{"entries":[{"key":%q,"value":"other"}],"mode":"refund"}]}`, tc.key))
		if tc.on {
			if left != 5 || code != 200 {
				t.Errorf("%s: %d left after a take of 5 and a refund of 5, /v1/decide's refund %d %s; want 5 and 200", tc.name, left, code, body)
			}
			continue
		}
		if left != 0 || code != 400 || !strings.Contains(body, "refunds are off") {
			t.Errorf("%s: %d left after a take of 5 and a refund of 5, /v1/decide's refund %d %s; want 0 and 400", tc.name, left, code, body)
		}
	}
}
